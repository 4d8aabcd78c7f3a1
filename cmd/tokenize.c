/* attnres tokenize: text -> an llm.c token file of GPT-2 BPE ids, or
 * llm.c's numbered shards in a directory, and back (--decode).  The
 * tokenizer is formats/bpe.h, the token files formats/tokens.h's; the
 * encoding on several threads is tokenize_encode.c's, the shards
 * tokenize_shards.c's. */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "../core/atomic.h"
#include "../formats/bpe.h"
#include "../formats/tokens.h"
#include "cmds.h"
#include "options.h"
#include "tokenize.h"

static const char *usage =
    "attnres tokenize [--vocab encoder.json --merges vocab.bpe] [--threads N] [--eot] [--read-mb N] "
    "(IN... -o OUT.bin | IN... -o DIR/ [--shard-tokens N] [--val-tokens N] | --decode IN.bin [-o OUT.txt])";

#define LLMC_SHARD_TOKENS 100000000 /* llm.c's fineweb.py: 10^8 tokens a shard */
#define READ_MB 64                   /* text read and encoded at a time (--read-mb) */
#define READ_MB_MAX 65536            /* 64 GiB */

/* What to encode and where, from the command line. */
typedef struct {
    const char *const *in;
    int nin;
    const char *out;
    size_t shard_tokens, val_tokens; /* shards: -o names a directory */
    int threads;                     /* >= 1 */
    int eot;                         /* --eot: <|endoftext|> before each input */
    size_t block;                    /* --read-mb: bytes of text read at a time */
} encode_job;

/* One input, gzip-compressed or not (zlib reads plain files as they are),
 * encoded as it is read: block bytes at a time, each block encoded up to
 * its last safe cut (tok_last_cut: the ids are those of the whole text)
 * and the rest carried into the next, so memory holds about a block of
 * text, not the file.  A block without a safe cut grows until one comes
 * (a line longer than the block is read whole).  0, or -1 with e set. */
static int encode_input(const ar_bpe *b, const char *path, const encode_job *j, tok_put_fn put, void *ud,
                        tok_progress *p, ar_err *e)
{
    errno = 0;
    gzFile g = gzopen(path, "rb");
    if (!g)
        return ar_fail(e, "cannot read '%s': %s", path, errno ? ar_strerror(errno) : "cannot open");
    size_t cap = j->block, n = 0, base = 0;
    char *buf = ar_xmalloc(cap);
    int rc = 0, k = 1;
    while (rc == 0) {
        while (n < cap && (k = gzread(g, buf + n, (unsigned)(cap - n < (1u << 30) ? cap - n : 1u << 30))) > 0)
            n += (size_t)k;
        int code;
        const char *msg = gzerror(g, &code);
        if (k < 0 || (code != Z_OK && code != Z_STREAM_END)) {
            if (code == Z_ERRNO)
                rc = ar_fail(e, "cannot read '%s': %s", path, ar_strerror(errno));
            else
                rc = ar_fail(e, "'%s': corrupt gzip data: %s", path, msg);
            break;
        }
        if (k == 0) { /* the end: the rest, whatever it holds */
            rc = tok_encode(b, path, base, buf, n, j->threads, put, ud, p, e);
            break;
        }
        size_t cut = tok_last_cut(buf, n);
        if (cut == 0) { /* no safe cut yet: a longer block */
            char *t = realloc(buf, cap * 2);
            if (!t)
                ar_xmalloc((size_t)-1); /* aborts with the out-of-memory message */
            buf = t, cap *= 2;
            continue;
        }
        rc = tok_encode(b, path, base, buf, cut, j->threads, put, ud, p, e);
        memmove(buf, buf + cut, n - cut);
        n -= cut, base += cut;
    }
    gzclose(g);
    free(buf);
    return rc;
}

/* The id of "<|endoftext|>" (GPT-2's 50256), or -1 where the vocabulary
 * has no such token. */
static int32_t eot_id(const ar_bpe *b)
{
    for (int32_t id = ar_bpe_vocab_size(b) - 1; id >= 0; id--) {
        char s[16];
        if (ar_bpe_token_bytes(b, id, s, sizeof s) == 13 && memcmp(s, "<|endoftext|>", 13) == 0)
            return id;
    }
    return -1;
}

/* Each input in turn, read, encoded and handed to put (each after
 * <|endoftext|> with --eot, as llm.c's scripts do).  A piece never spans
 * two inputs.  An input without text is an error only when all are (the
 * ids of --eot not counting as text). */
static int encode_inputs(const ar_bpe *b, const encode_job *j, tok_put_fn put, void *ud, tok_progress *p,
                         ar_err *e)
{
    int32_t eot = -1;
    if (j->eot && (eot = eot_id(b)) < 0)
        return ar_fail(e, "'--eot': the vocabulary has no '<|endoftext|>' token to put between the documents");
    size_t text_ids = 0;
    for (int i = 0; i < j->nin; i++) {
        int rc = 0;
        if (j->eot && (rc = put(ud, &eot, 1, e)) == 0)
            p->tokens++;
        size_t before = p->tokens;
        if (rc == 0)
            rc = encode_input(b, j->in[i], j, put, ud, p, e);
        if (rc != 0)
            return -1;
        text_ids += p->tokens - before;
    }
    if (text_ids == 0 && j->nin == 1)
        return ar_fail(e, "'%s' holds no text: a token file needs at least one token", j->in[0]);
    if (text_ids == 0)
        return ar_fail(e, "the %d inputs hold no text: a token file needs at least one token", j->nin);
    return 0;
}

/* "123,456 tokens from 2 files (4.0 MB) <where> in 0.210 s (19.1 MB/s,
 * 4.7 M tokens/s) on 2 threads", the run's summary line. */
static void summary(const tok_progress *p, const encode_job *j, const char *where, char *out, size_t cap)
{
    char c[32];
    size_t v = p->tokens;
    int n = snprintf(c, sizeof c, "%zu", v), k = 0;
    char t[40];
    for (int i = 0; i < n; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            t[k++] = ',';
        t[k++] = c[i];
    }
    t[k] = 0;
    double s = ar_now_s() - p->start;
    if (s <= 0)
        s = 1e-9;
    snprintf(out, cap, "%s tokens from %d file%s (%.1f MB) %s in %.3f s (%.1f MB/s, %.2f M tokens/s) on %d thread%s", t,
             j->nin, j->nin == 1 ? "" : "s", 1e-6 * (double)p->bytes, where, s, 1e-6 * (double)p->bytes / s,
             1e-6 * (double)p->tokens / s, j->threads, j->threads == 1 ? "" : "s");
}

/* ------------------------------------------------------------ one file */

typedef struct {
    int32_t *ids;
    size_t n, cap;
} id_list;

static int list_put(void *ud, const int32_t *ids, size_t n, ar_err *e)
{
    (void)e;
    id_list *l = ud;
    if (l->n + n > l->cap) {
        size_t cap = l->cap ? l->cap : 1 << 16;
        while (cap < l->n + n)
            cap *= 2;
        int32_t *t = realloc(l->ids, cap * sizeof *t);
        if (!t)
            ar_xmalloc((size_t)-1);
        l->ids = t;
        l->cap = cap;
    }
    memcpy(l->ids + l->n, ids, n * sizeof *ids);
    l->n += n;
    return 0;
}

/* All the ids in one token file.  The time on standard output is that of
 * encoding alone (not reading, loading or writing). */
static int write_file(const ar_bpe *b, const encode_job *j, ar_err *e)
{
    id_list l = {0};
    tok_progress p;
    tok_progress_start(&p);
    /* uint16 ids where the vocabulary fits them, as llm.c writes GPT-2's */
    int u32 = ar_bpe_vocab_size(b) > 65536;
    int rc = encode_inputs(b, j, list_put, &l, &p, e);
    if (rc == 0)
        rc = ar_tokens_write_llmc(j->out, l.ids, l.n, u32, e);
    if (rc == 0) {
        double secs = p.encode_s;
        printf("%s: %zu tokens (uint%d) from %zu bytes, %.3f bytes/token, encoded in %.3f s (%.1f MB/s)\n", j->out,
               l.n, u32 ? 32 : 16, p.bytes, (double)p.bytes / (double)l.n, secs,
               secs > 0 ? 1e-6 * (double)p.bytes / secs : 0.0);
        fflush(stdout);
        char where[4200], line[4600];
        snprintf(where, sizeof where, "into '%s'", j->out);
        summary(&p, j, where, line, sizeof line);
        tok_progress_end(&p, line);
    } else {
        tok_progress_end(&p, NULL);
    }
    free(l.ids);
    return rc;
}

/* ------------------------------------------------------------ shards */

/* The ids in llm.c's shards in the directory j->out (made if missing).
 * On a failure the shards already written stay, complete, and the message
 * says which they are; a directory this run made and left empty goes. */
static int write_shards(const ar_bpe *b, const encode_job *j, ar_err *e)
{
    int made = -1;
    if (ar_mkdir_p_new(j->out, &made, e) != 0)
        return -1;
    tok_shards s;
    tok_shards_init(&s, j->out, j->val_tokens, j->shard_tokens, ar_bpe_vocab_size(b) > 65536);
    tok_progress p;
    tok_progress_start(&p);
    int rc = encode_inputs(b, j, tok_shards_put, &s, &p, e);
    if (rc == 0)
        rc = tok_shards_finish(&s, e);
    if (rc != 0) {
        tok_progress_end(&p, NULL);
        char msg[sizeof e->msg], done[4096 + 4200];
        memcpy(msg, e->msg, sizeof msg);
        tok_shards_done(&s, done, sizeof done);
        ar_fail(e, "%s; %s", msg, done);
        if (s.written == 0)
            ar_rmdir_new(j->out, made);
    } else {
        int stale = tok_shards_remove_stale(&s);
        char where[4200], line[4600];
        int train = s.written - (s.first == 0);
        snprintf(where, sizeof where, "in %d shard%s (%s%d train) in '%s'", s.written, s.written == 1 ? "" : "s",
                 s.first == 0 ? "1 val, " : "", train, j->out);
        summary(&p, j, where, line, sizeof line);
        if (stale > 0)
            snprintf(line + strlen(line), sizeof line - strlen(line),
                     "; removed %d older shard%s there that this run did not replace", stale, stale == 1 ? "" : "s");
        tok_progress_end(&p, line);
    }
    tok_shards_free(&s);
    return rc;
}
typedef struct {
    const char *s;
    size_t n;
} text_body;

static int fill_text(FILE *f, void *ud)
{
    const text_body *t = ud;
    return fwrite(t->s, 1, t->n, f) == t->n ? 0 : -1;
}

/* A token file back to its bytes, to out (NULL: standard output).  Every
 * id is checked before anything is written. */
static int decode_file(const ar_bpe *b, const char *in, const char *out, ar_err *e)
{
    ar_tokens t;
    if (ar_tokens_load(&t, in, e) != 0)
        return -1;
    int rc = 0;
    char *text = NULL;
    size_t n = 0, cap = 0;
    if (t.is_bytes)
        rc = ar_fail(e, "'%s' is not a token file (it has no llm.c header, magic %d or %d)", in, AR_LLMC_MAGIC_U16,
                     AR_LLMC_MAGIC_U32);
    for (size_t i = 0; i < t.n && rc == 0; i++) {
        char piece[256];
        int k = ar_bpe_token_bytes(b, t.tok[i], piece, sizeof piece);
        if (k < 0) {
            rc = ar_fail(e, "'%s': token %zu is %ld, outside the vocabulary (ids 0..%d)", in, i, (long)t.tok[i],
                         ar_bpe_vocab_size(b) - 1);
            break;
        }
        if (n + (size_t)k > cap) {
            cap = cap ? 2 * cap : 1 << 20;
            while (n + (size_t)k > cap)
                cap *= 2;
            char *s = realloc(text, cap);
            if (!s)
                ar_xmalloc((size_t)-1);
            text = s;
        }
        if ((size_t)k <= sizeof piece)
            memcpy(text + n, piece, (size_t)k);
        else /* longer than any GPT-2 token: ask again with room */
            ar_bpe_token_bytes(b, t.tok[i], text + n, (size_t)k);
        n += (size_t)k;
    }
    if (rc == 0 && out) {
        text_body body = {text, n};
        rc = ar_write_atomic(out, fill_text, &body, e);
    } else if (rc == 0 && (fwrite(text, 1, n, stdout) != n || fflush(stdout) != 0)) {
        rc = ar_fail(e, "cannot write the standard output: %s", ar_strerror(errno));
    }
    free(text);
    ar_tokens_free(&t);
    return rc;
}

/* -o names a directory: an existing one, or a path ending in '/'. */
static int names_dir(const char *out)
{
    struct stat st;
    size_t n = strlen(out);
    return (n > 0 && out[n - 1] == '/') || (stat(out, &st) == 0 && S_ISDIR(st.st_mode));
}

/* The options that make sense with shards alone or with encoding alone,
 * against the rest of the command line: 0, or a usage error (-1). */
static int check_modes(const encode_job *j, int decode, const char *shard_opt, const char *val_opt)
{
    const char *only = shard_opt ? "--shard-tokens" : val_opt ? "--val-tokens" : NULL;
    if (decode && (only || j->eot)) {
        cli_usage_error(usage, "'%s' is for encoding, not '--decode'", only ? only : "--eot");
        return -1;
    }
    if (!decode && only && !names_dir(j->out)) {
        cli_usage_error(usage,
                        "'%s' needs '-o DIR/' (a directory for the shards: an existing one, or a path ending in "
                        "'/'), but '%s' is a file",
                        only, j->out);
        return -1;
    }
    return 0;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *vocab = NULL, *merges = NULL, *shard_opt = NULL, *val_opt = NULL, *read_opt = NULL;
    const char **in = ar_xcalloc((size_t)argc + 1, sizeof *in);
    int decode = 0, rc = AR_EXIT_USAGE, shard = LLMC_SHARD_TOKENS, val = 0, read_mb = READ_MB;
    encode_job j = {.in = in};
    ar_err e = {{0}};
    ar_bpe *b = NULL;
    static const char *const own[] = {"--vocab", "--merges", "-o", "--shard-tokens", "--val-tokens", "--read-mb", NULL};
    cli_opts so;
    cli_opts_init(&so, usage, CLI_OUT | CLI_THREADS, own, argc, argv);
    for (const char *a, *v; (a = cli_opts_next(&so, &v));) {
        if (!strcmp(a, "--vocab"))
            vocab = v;
        else if (!strcmp(a, "--merges"))
            merges = v;
        else if (!strcmp(a, "-o"))
            so.out = v;
        else if (!strcmp(a, "--decode"))
            decode = 1;
        else if (!strcmp(a, "--eot"))
            j.eot = 1;
        else if (!strcmp(a, "--shard-tokens")) {
            if (cli_parse_int(a, v, 1, &shard) != 0)
                goto done;
            shard_opt = v;
        } else if (!strcmp(a, "--val-tokens")) {
            if (cli_parse_int(a, v, 0, &val) != 0)
                goto done;
            val_opt = v;
        } else if (!strcmp(a, "--read-mb")) {
            if (cli_parse_int(a, v, 1, &read_mb) != 0)
                goto done;
            if (read_mb > READ_MB_MAX) {
                cli_usage_error(usage, "'--read-mb' is at most %d (MiB of text read at a time), got %d",
                                READ_MB_MAX, read_mb);
                goto done;
            }
            read_opt = v;
        } else if (cli_opts_argument(&so, a, &in[j.nin]) != 0)
            goto done;
        else
            j.nin++;
    }
    j.out = so.out;
    if (so.bad)
        goto done;
    if (!vocab != !merges) {
        cli_usage_error(usage, "'%s' needs '%s' too (an encoder.json and its vocab.bpe go together)",
                        vocab ? "--vocab" : "--merges", vocab ? "--merges" : "--vocab");
        goto done;
    }
    if (j.nin == 0) {
        cli_usage_error(usage, "missing the input file%s", decode ? " (a token file)" : "s (text)");
        goto done;
    }
    if (decode && j.nin > 1) {
        cli_usage_error(usage, "'--decode' takes one token file, got %d files", j.nin);
        goto done;
    }
    if (!decode && !j.out) {
        cli_usage_error(usage, "missing '-o OUT.bin' (the token file to write) or '-o DIR/' (shards)");
        goto done;
    }
    if (check_modes(&j, decode, shard_opt, val_opt) != 0)
        goto done;
    if (decode && read_opt) {
        cli_usage_error(usage, "'--read-mb' is for encoding, not '--decode'");
        goto done;
    }
    j.shard_tokens = (size_t)shard;
    j.val_tokens = (size_t)val;
    j.block = (size_t)read_mb << 20;
    /* 0, or none given: every processor (OMP_NUM_THREADS where it is set) */
    j.threads = so.threads > 0 ? so.threads : omp_get_max_threads();
    rc = AR_EXIT_FAIL;
    if (!(b = ar_bpe_load(vocab, merges, &e)))
        goto fail;
    if (decode ? decode_file(b, in[0], j.out, &e) : names_dir(j.out) ? write_shards(b, &j, &e) : write_file(b, &j, &e))
        goto fail;
    rc = AR_EXIT_OK;
    goto done;
fail:
    cli_error("%s", e.msg);
done:
    ar_bpe_free(b);
    free(in);
    cli_opts_free(&so);
    return rc;
}
