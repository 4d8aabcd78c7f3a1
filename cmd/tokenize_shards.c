/* Encoded ids -> llm.c's numbered shards (tokenize.h): val_000000.bin,
 * then train_000001.bin, train_000002.bin, ..., each an llm.c token file
 * written atomically (formats/tokens.h), so a run that fails leaves whole
 * shards and no part of one. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../formats/tokens.h"
#include "tokenize.h"

void tok_shards_init(tok_shards *s, const char *dir, size_t val_tokens, size_t shard_tokens, int u32)
{
    int first = val_tokens > 0 ? 0 : 1;
    *s = (tok_shards){.dir = dir, .val_tokens = val_tokens, .shard_tokens = shard_tokens, .u32 = u32,
                      .shard = first, .first = first};
}

void tok_shards_free(tok_shards *s)
{
    free(s->buf);
    s->buf = NULL;
}

/* Shard k's file name: val_000000.bin for 0, else train_<k>.bin. */
static void shard_name(int k, char *out, size_t cap)
{
    snprintf(out, cap, "%s_%06d.bin", k == 0 ? "val" : "train", k);
}

static void shard_path(const tok_shards *s, int k, char *out, size_t cap)
{
    char name[32];
    shard_name(k, name, sizeof name);
    size_t n = strlen(s->dir);
    snprintf(out, cap, "%s%s%s", s->dir, n && s->dir[n - 1] == '/' ? "" : "/", name);
}

static size_t room_of(const tok_shards *s)
{
    return s->shard == 0 ? s->val_tokens : s->shard_tokens;
}

/* The shard being filled, to its file; then the next one is empty. */
static int flush(tok_shards *s, ar_err *e)
{
    char path[4096];
    shard_path(s, s->shard, path, sizeof path);
    if (ar_tokens_write_llmc(path, s->buf, s->n, s->u32, e) != 0)
        return -1;
    printf("%s: %zu tokens (uint%d)\n", path, s->n, s->u32 ? 32 : 16);
    fflush(stdout);
    s->written++;
    s->shard++;
    s->n = 0;
    return 0;
}

int tok_shards_put(void *ud, const int32_t *ids, size_t n, ar_err *e)
{
    tok_shards *s = ud;
    while (n > 0) {
        size_t room = room_of(s);
        /* full, and an id for the next one has come: the shard is done */
        if (s->n == room && flush(s, e) != 0)
            return -1;
        room = room_of(s);
        size_t k = room - s->n < n ? room - s->n : n;
        if (s->n + k > s->cap) {
            /* grown as ids come, so that a small run never holds a whole
             * --shard-tokens buffer */
            size_t cap = s->cap ? s->cap : 1 << 16;
            while (cap < s->n + k)
                cap *= 2;
            if (cap > room)
                cap = room;
            int32_t *t = realloc(s->buf, cap * sizeof *t);
            if (!t)
                ar_xmalloc((size_t)-1);
            s->buf = t;
            s->cap = cap;
        }
        memcpy(s->buf + s->n, ids, k * sizeof *ids);
        s->n += k;
        s->total += k;
        ids += k;
        n -= k;
    }
    return 0;
}

int tok_shards_finish(tok_shards *s, ar_err *e)
{
    if (s->shard == 0)
        return ar_fail(e, "'--val-tokens %zu' takes all %zu tokens of the inputs, leaving none for a train shard: "
                          "give fewer", s->val_tokens, s->total);
    return s->n > 0 ? flush(s, e) : 0;
}

/* A file name of ours: val_000000.bin or train_<6+ digits>.bin; its
 * number, or -1. */
static int shard_number(const char *name)
{
    if (strcmp(name, "val_000000.bin") == 0)
        return 0;
    if (strncmp(name, "train_", 6) != 0)
        return -1;
    const char *d = name + 6;
    size_t k = strspn(d, "0123456789");
    if (k < 6 || k > 9 || strcmp(d + k, ".bin") != 0)
        return -1;
    int v = atoi(d);
    return v > 0 ? v : -1;
}

int tok_shards_remove_stale(const tok_shards *s)
{
    DIR *d = opendir(s->dir);
    if (!d)
        return 0;
    int last = s->first + s->written - 1, removed = 0;
    char path[4096];
    for (struct dirent *de; (de = readdir(d));) {
        int k = shard_number(de->d_name);
        if (k < 0 || (k >= s->first && k <= last))
            continue;
        /* only the exact names this command writes (not train_0000001.bin) */
        char mine[32];
        shard_name(k, mine, sizeof mine);
        if (strcmp(mine, de->d_name) != 0)
            continue;
        shard_path(s, k, path, sizeof path);
        removed += unlink(path) == 0;
    }
    closedir(d);
    return removed;
}

void tok_shards_done(const tok_shards *s, char *out, size_t cap)
{
    char a[4096], b[4096];
    if (s->written == 0) {
        snprintf(out, cap, "no shard was written");
        return;
    }
    shard_path(s, s->first, a, sizeof a);
    if (s->written == 1) {
        snprintf(out, cap, "'%s' was written and is complete", a);
        return;
    }
    shard_path(s, s->first + s->written - 1, b, sizeof b);
    snprintf(out, cap, "the %d shards '%s' to '%s' were written and are complete", s->written, a, b);
}
