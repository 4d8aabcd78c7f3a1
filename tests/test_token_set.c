/* Token sets (formats/token_set.c): a file, a directory and a glob of
 * shards read as one stream equal to the shards' tokens concatenated (each
 * loaded by formats/tokens.h's ar_tokens_load), in every format; the
 * fingerprint; every malformed input refused with its kind and a message
 * naming the shard and the offset; the memory a set costs (none for
 * opening, none kept by reading windows); and `attnres data check`. */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "formats/token_set.h"
#include "formats/tokens.h"
#include "testutil.h"

/* ---- helpers ---- */

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* n ids drawn by an LCG from [0, vocab). */
static int32_t *random_ids(size_t n, int32_t vocab, unsigned seed)
{
    int32_t *t = malloc((n ? n : 1) * sizeof *t);
    uint64_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
    }
    return t;
}

static void write_llmc(const char *path, const int32_t *tok, size_t n, int u32)
{
    ar_err e = {{0}};
    cr_assert_eq(ar_tokens_write_llmc(path, tok, n, u32, &e), 0, "%s", e.msg);
}

/* A raw llm.c header: magic, version, count. */
static void header(unsigned char *h, uint32_t magic, uint32_t version, uint32_t count)
{
    memset(h, 0, 1024);
    uint32_t v[3] = {magic, version, count};
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 4; b++)
            h[4 * k + b] = (unsigned char)(v[k] >> (8 * b));
}

static void write_gz(const char *path, const void *data, size_t n)
{
    gzFile g = gzopen(path, "wb");
    cr_assert(g != NULL);
    cr_assert_eq(gzwrite(g, data, (unsigned)n), (int)n);
    cr_assert_eq(gzclose(g), Z_OK);
}

static ar_token_set *open_ok(const char *spec)
{
    ar_err e = {{0}};
    ar_token_set *ts = ar_token_set_open(spec, &e);
    cr_assert(ts != NULL, "'%s': %s", spec, e.msg);
    return ts;
}

/* The shards' tokens concatenated, through ar_tokens_load. */
static int32_t *load_all(const char *const *paths, int n, size_t *count)
{
    int32_t *all = NULL;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        ar_tokens t;
        ar_err e = {{0}};
        cr_assert_eq(ar_tokens_load(&t, paths[i], &e), 0, "%s", e.msg);
        all = realloc(all, (total + t.n) * sizeof *all);
        memcpy(all + total, t.tok, t.n * sizeof *all);
        total += t.n;
        ar_tokens_free(&t);
    }
    *count = total;
    return all;
}

/* The whole set, and windows at every shard boundary (and one token either
 * side), equal to want. */
static void expect_stream(const ar_token_set *ts, const int32_t *want, size_t n)
{
    ar_err e = {{0}};
    cr_assert_eq(ar_token_set_count(ts), n);
    int32_t *got = malloc((n ? n : 1) * sizeof *got);
    cr_assert_eq(ar_token_set_read(ts, 0, n, 0, got, &e), 0, "%s", e.msg);
    cr_assert(memcmp(got, want, n * sizeof *got) == 0, "the stream differs from the shards concatenated");
    for (int s = 0; s <= ar_token_set_shards(ts); s++) {
        size_t b = ar_token_set_shard_first(ts, s);
        for (size_t lo = b > 5 ? b - 5 : 0; lo <= b + 1 && lo < n; lo++)
            for (size_t len = 1; len <= 12 && lo + len <= n; len += 3) {
                memset(got, 0xff, len * sizeof *got);
                cr_assert_eq(ar_token_set_read(ts, lo, len, 0, got, &e), 0, "%s", e.msg);
                cr_assert(memcmp(got, want + lo, len * sizeof *got) == 0, "window [%zu, %zu) differs", lo, lo + len);
            }
    }
    free(got);
}

/* Opening spec fails with kind and a message holding each of the needles
 * (NULL-terminated). */
static void expect_open_error(const char *spec, ar_err_kind kind, ...)
{
    ar_err e = {{0}};
    ar_token_set *ts = ar_token_set_open(spec, &e);
    cr_assert(ts == NULL, "'%s' opened", spec);
    cr_assert_eq(e.kind, kind, "'%s': kind %d, expected %d: %s", spec, e.kind, kind, e.msg);
    va_list ap;
    va_start(ap, kind);
    for (const char *s; (s = va_arg(ap, const char *));)
        cr_assert(strstr(e.msg, s) != NULL, "expected '%s' in: %s", s, e.msg);
    va_end(ap);
    cr_assert(strchr(e.msg, '\n') == NULL);
}

/* ---- sets of files ---- */

Test(token_set, one_file_of_each_format)
{
    const char *d = tu_tmpdir();
    char *u16 = join(d, "u16.bin"), *u32 = join(d, "u32.bin"), *txt = join(d, "t.txt"), *gz = join(d, "t.txt.gz");
    int32_t *a = random_ids(5000, 50257, 1), *b = random_ids(3000, 200000, 2);
    write_llmc(u16, a, 5000, 0);
    write_llmc(u32, b, 3000, 1);
    const char *text = "In the beginning God created the heaven and the earth.\n\xff\x01";
    tu_write_file(txt, text, strlen(text));
    write_gz(gz, text, strlen(text));
    struct {
        const char *path;
        ar_token_format fmt;
    } cases[] = {{u16, AR_TOKENS_U16}, {u32, AR_TOKENS_U32}, {txt, AR_TOKENS_TEXT}, {gz, AR_TOKENS_TEXT}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        ar_token_set *ts = open_ok(cases[c].path);
        size_t n;
        int32_t *want = load_all(&cases[c].path, 1, &n);
        cr_assert_eq(ar_token_set_format(ts), cases[c].fmt, "%s", cases[c].path);
        cr_assert_eq(ar_token_set_shards(ts), 1);
        cr_assert_str_eq(ar_token_set_shard_path(ts, 0), cases[c].path);
        cr_assert_eq(ar_token_set_shard_first(ts, 0), 0);
        cr_assert_eq(ar_token_set_shard_first(ts, 1), n);
        expect_stream(ts, want, n);
        free(want);
        ar_token_set_free(ts);
    }
    cr_assert_str_eq(ar_token_format_name(AR_TOKENS_U16), "uint16");
    cr_assert_str_eq(ar_token_format_name(AR_TOKENS_U32), "uint32");
    cr_assert_str_eq(ar_token_format_name(AR_TOKENS_TEXT), "text");
    free(a), free(b), free(u16), free(u32), free(txt), free(gz);
}

/* A directory's shards come in strcmp order, whatever order they were
 * written in; hidden files and subdirectories are no shards. */
Test(token_set, directory_in_name_order)
{
    const char *d = tu_tmpdir();
    const char *names[] = {"b.bin", "a2.bin", "B.bin", "a10.bin", "a.bin"}; /* strcmp: B a a10 a2 b */
    const char *sorted[] = {"B.bin", "a.bin", "a10.bin", "a2.bin", "b.bin"};
    for (int i = 0; i < 5; i++) {
        char *p = join(d, names[i]);
        size_t n = 100 + 37 * (size_t)i;
        int32_t *t = random_ids(n, 65536, 10 + (unsigned)i);
        write_llmc(p, t, n, 0);
        free(t);
        free(p);
    }
    char *hidden = join(d, ".partial.bin"), *sub = join(d, "sub");
    tu_write_file(hidden, "not a shard", 11);
    cr_assert_eq(mkdir(sub, 0755), 0);
    char *paths[5];
    for (int i = 0; i < 5; i++)
        paths[i] = join(d, sorted[i]);
    size_t n;
    int32_t *want = load_all((const char *const *)paths, 5, &n);
    ar_token_set *ts = open_ok(d);
    cr_assert_eq(ar_token_set_shards(ts), 5);
    size_t first = 0;
    for (int i = 0; i < 5; i++) {
        cr_assert_str_eq(ar_token_set_shard_path(ts, i), paths[i]);
        cr_assert_eq(ar_token_set_shard_first(ts, i), first);
        int j = 0; /* the order it was written in: its size */
        while (strcmp(names[j], sorted[i]) != 0)
            j++;
        first += 100 + 37 * (size_t)j;
    }
    cr_assert_eq(ar_token_set_shard_first(ts, 5), first);
    cr_assert_eq(ar_token_set_shard_path(ts, 5), NULL);
    expect_stream(ts, want, n);
    ar_token_set_free(ts);
    /* a trailing slash names the same shards */
    char slash[4096];
    snprintf(slash, sizeof slash, "%s/", d);
    ts = open_ok(slash);
    cr_assert_eq(ar_token_set_count(ts), n);
    cr_assert_str_eq(ar_token_set_shard_path(ts, 0), paths[0]);
    ar_token_set_free(ts);
    for (int i = 0; i < 5; i++)
        free(paths[i]);
    free(want), free(hidden), free(sub);
}

Test(token_set, glob_of_shards)
{
    const char *d = tu_tmpdir();
    const char *names[] = {"train_002.bin", "val_000.bin", "train_000.bin", "train_001.bin"};
    for (int i = 0; i < 4; i++) {
        char *p = join(d, names[i]);
        int32_t *t = random_ids(2000 + (size_t)i, 200000, 20 + (unsigned)i);
        write_llmc(p, t, 2000 + (size_t)i, 1);
        free(t);
        free(p);
    }
    char *pattern = join(d, "train_*.bin");
    char *paths[3] = {join(d, "train_000.bin"), join(d, "train_001.bin"), join(d, "train_002.bin")};
    size_t n;
    int32_t *want = load_all((const char *const *)paths, 3, &n);
    ar_token_set *ts = open_ok(pattern);
    cr_assert_eq(ar_token_set_shards(ts), 3);
    cr_assert_eq(ar_token_set_format(ts), AR_TOKENS_U32);
    for (int i = 0; i < 3; i++)
        cr_assert_str_eq(ar_token_set_shard_path(ts, i), paths[i]);
    expect_stream(ts, want, n);
    ar_token_set_free(ts);
    free(pattern);
    char *q = join(d, "train_00[01].bin");
    ts = open_ok(q);
    cr_assert_eq(ar_token_set_shards(ts), 2);
    ar_token_set_free(ts);
    free(q), free(want);
    for (int i = 0; i < 3; i++)
        free(paths[i]);
}

/* Text shards: plain and gzip in one set; reads span both. */
Test(token_set, text_and_gzip_text_shards)
{
    const char *d = tu_tmpdir();
    char *a = join(d, "a.txt"), *b = join(d, "b.txt.gz"), *c = join(d, "c.txt");
    char big[20000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (char)("abcdefgh \n"[i % 10] + (i % 7 == 0));
    tu_write_file(a, "first shard\n", 12);
    write_gz(b, big, sizeof big);
    tu_write_file(c, "\x80\xfe last", 7);
    const char *paths[] = {a, b, c};
    size_t n;
    int32_t *want = load_all(paths, 3, &n);
    cr_assert_eq(n, 12 + sizeof big + 7);
    ar_token_set *ts = open_ok(d);
    cr_assert_eq(ar_token_set_format(ts), AR_TOKENS_TEXT);
    expect_stream(ts, want, n);
    int32_t mx;
    ar_err e = {{0}};
    cr_assert_eq(ar_token_set_check(ts, 256, &mx, NULL, NULL, &e), 0, "%s", e.msg);
    cr_assert_eq(mx, 0xfe);
    ar_token_set_free(ts);
    free(want), free(a), free(b), free(c);
}

/* A gzip-compressed llm.c file is a token file like the plain one. */
Test(token_set, gzip_token_file)
{
    const char *d = tu_tmpdir();
    char *p = join(d, "u16.bin"), *gz = join(d, "u16.bin.gz");
    int32_t *t = random_ids(3000, 50257, 4);
    write_llmc(p, t, 3000, 0);
    size_t len;
    char *raw = tu_read_file(p, &len);
    write_gz(gz, raw, len);
    ar_token_set *ts = open_ok(gz);
    cr_assert_eq(ar_token_set_format(ts), AR_TOKENS_U16);
    expect_stream(ts, t, 3000);
    ar_token_set_free(ts);
    free(raw), free(t), free(p), free(gz);
}

Test(token_set, wrap)
{
    int32_t tok[] = {5, 0, 70000, 3, 9};
    ar_token_set *ts = ar_token_set_wrap(tok, 5, "the tokens");
    cr_assert_eq(ar_token_set_format(ts), AR_TOKENS_U32);
    cr_assert_eq(ar_token_set_shards(ts), 1);
    cr_assert_str_eq(ar_token_set_shard_path(ts, 0), "the tokens");
    expect_stream(ts, tok, 5);
    ar_err e = {{0}};
    int32_t mx;
    cr_assert_eq(ar_token_set_check(ts, 0, &mx, NULL, NULL, &e), 0, "%s", e.msg);
    cr_assert_eq(mx, 70000);
    int32_t out[5];
    cr_assert_eq(ar_token_set_read(ts, 1, 3, 50257, out, &e), -1);
    cr_assert_eq(e.kind, AR_ERR_FORMAT);
    cr_assert(strstr(e.msg, "'the tokens': token 2 has id 70000 but the vocabulary holds 50257 ids"), "%s", e.msg);
    /* the same ids in a uint32 file fingerprint the same */
    const char *d = tu_tmpdir();
    char *p = join(d, "w.bin");
    write_llmc(p, tok, 5, 1);
    ar_token_set *f = open_ok(p);
    cr_assert_eq(ar_token_set_fingerprint(f), ar_token_set_fingerprint(ts));
    ar_token_set_free(f);
    ar_token_set_free(ts);
    free(p);
}

typedef struct {
    int calls;
    size_t last, total;
    int monotone;
} progress_log;

static void on_progress(void *ud, size_t done, size_t total)
{
    progress_log *l = ud;
    if (l->calls > 0 && done < l->last)
        l->monotone = 0;
    l->calls++;
    l->last = done;
    l->total = total;
}

/* check: the largest id over several chunks and shards, progress reported
 * as it goes, and the first bad id as read reports it. */
Test(token_set, check_max_and_progress)
{
    const char *d = tu_tmpdir();
    size_t n1 = 1500000, n2 = 1200000;
    int32_t *a = random_ids(n1, 50000, 5), *b = random_ids(n2, 50000, 6);
    b[n2 - 3] = 50256; /* the largest, near the end of the last chunk */
    char *p1 = join(d, "a.bin"), *p2 = join(d, "b.bin");
    write_llmc(p1, a, n1, 0);
    write_llmc(p2, b, n2, 0);
    ar_token_set *ts = open_ok(d);
    progress_log l = {.monotone = 1};
    int32_t mx = -1;
    ar_err e = {{0}};
    cr_assert_eq(ar_token_set_check(ts, 50257, &mx, on_progress, &l, &e), 0, "%s", e.msg);
    cr_assert_eq(mx, 50256);
    cr_assert_geq(l.calls, 3, "%d progress calls for %zu tokens", l.calls, n1 + n2);
    cr_assert(l.monotone);
    cr_assert_eq(l.last, n1 + n2);
    cr_assert_eq(l.total, n1 + n2);
    /* a limit of 50256: the first id not below it, in shard b at n2 - 3 */
    cr_assert_eq(ar_token_set_check(ts, 50256, &mx, NULL, NULL, &e), -1);
    cr_assert_eq(e.kind, AR_ERR_FORMAT);
    char want[8192];
    snprintf(want, sizeof want, "'%s': token %zu has id 50256 but the vocabulary holds 50256 ids", p2, n2 - 3);
    cr_assert(strstr(e.msg, want), "expected '%s' in: %s", want, e.msg);
    ar_token_set_free(ts);
    free(a), free(b), free(p1), free(p2);
}

/* ---- fingerprint ---- */

static uint32_t fingerprint_of(const char *path, const int32_t *t, size_t n)
{
    write_llmc(path, t, n, 0);
    ar_token_set *ts = open_ok(path);
    uint32_t f = ar_token_set_fingerprint(ts);
    ar_token_set_free(ts);
    return f;
}

Test(token_set, fingerprint_sees_ends_not_middle)
{
    const char *d = tu_tmpdir();
    char *p = join(d, "f.bin");
    size_t n = 100000;
    int32_t *t = random_ids(n, 50257, 7);
    uint32_t f0 = fingerprint_of(p, t, n);
    cr_assert_eq(fingerprint_of(p, t, n), f0, "the same tokens, another fingerprint");
    t[100]++; /* in the first 4096 tokens (the first 8 KiB of a uint16 shard) */
    cr_assert_neq(fingerprint_of(p, t, n), f0);
    t[100]--;
    t[n / 2]++; /* in the middle: not looked at */
    cr_assert_eq(fingerprint_of(p, t, n), f0);
    t[n - 10]++; /* in the last 4096 tokens */
    uint32_t f1 = fingerprint_of(p, t, n);
    cr_assert_neq(f1, f0);
    t[n - 10]--;
    cr_assert_neq(fingerprint_of(p, t, n - 1), f0, "another count, the same fingerprint");
    /* a short shard: all of it */
    cr_assert_neq(fingerprint_of(p, t, 5000), fingerprint_of(p, t + 1, 5000));
    /* the definition: CRC-32 of the count (8 bytes LE) and the ids (4 bytes LE each) */
    unsigned char bytes[8 + 4 * 5000];
    memset(bytes, 0, 8);
    bytes[0] = 5000 & 0xff, bytes[1] = 5000 >> 8;
    for (int i = 0; i < 5000; i++)
        for (int k = 0; k < 4; k++)
            bytes[8 + 4 * i + k] = (unsigned char)((uint32_t)t[i] >> (8 * k));
    cr_assert_eq(fingerprint_of(p, t, 5000), (uint32_t)crc32(crc32(0, NULL, 0), bytes, sizeof bytes));
    free(t), free(p);
}

/* ---- bad input ---- */

Test(token_set, nothing_to_open)
{
    const char *d = tu_tmpdir();
    char *pattern = join(d, "shard_*.bin"), *missing = join(d, "missing.bin");
    expect_open_error(pattern, AR_ERR_NOT_FOUND, pattern, "matches no file", NULL);
    expect_open_error(d, AR_ERR_NOT_FOUND, d, "holds no shards", NULL);
    expect_open_error(missing, AR_ERR_NOT_FOUND, missing, "no such file", NULL);
    /* hidden files only: still empty */
    char *hidden = join(d, ".x.bin");
    tu_write_file(hidden, "abc", 3);
    expect_open_error(d, AR_ERR_NOT_FOUND, d, NULL);
    free(pattern), free(missing), free(hidden);
}

Test(token_set, malformed_shards)
{
    const char *d = tu_tmpdir();
    unsigned char buf[1024 + 4 * 12];
    char *p = join(d, "s.bin");

    tu_write_file(p, "", 0);
    expect_open_error(p, AR_ERR_FORMAT, p, "is empty", NULL);

    header(buf, AR_LLMC_MAGIC_U16, 1, 10); /* 10 tokens: 20 bytes; 18 there */
    tu_write_file(p, buf, 1024 + 18);
    expect_open_error(p, AR_ERR_FORMAT, p, "header says 10 tokens (20 bytes", "holds 18 bytes", "truncated", NULL);
    tu_write_file(p, buf, 1024 + 22);
    expect_open_error(p, AR_ERR_FORMAT, p, "header says 10 tokens (20 bytes", "holds 22 bytes", "too long", NULL);
    header(buf, AR_LLMC_MAGIC_U32, 7, 10); /* 40 bytes: 44 there */
    tu_write_file(p, buf, 1024 + 44);
    expect_open_error(p, AR_ERR_FORMAT, p, "header says 10 tokens (40 bytes", "holds 44 bytes", NULL);

    header(buf, AR_LLMC_MAGIC_U16, 7, 10);
    tu_write_file(p, buf, 1024 + 20);
    expect_open_error(p, AR_ERR_FORMAT, p, "byte 4", "needs version 1, found version 7", NULL);
    header(buf, AR_LLMC_MAGIC_U32, 1, 10);
    tu_write_file(p, buf, 1024 + 40);
    expect_open_error(p, AR_ERR_FORMAT, p, "byte 4", "needs version 7, found version 1", NULL);

    header(buf, AR_LLMC_MAGIC_U16, 1, 0);
    tu_write_file(p, buf, 1024);
    expect_open_error(p, AR_ERR_FORMAT, p, "byte 8", "count is 0", NULL);
    header(buf, AR_LLMC_MAGIC_U16, 1, 0xffffffffu);
    tu_write_file(p, buf, 1024 + 20);
    expect_open_error(p, AR_ERR_FORMAT, p, "byte 8", "count is -1", NULL);

    header(buf, AR_LLMC_MAGIC_U16, 1, 10);
    tu_write_file(p, buf, 100);
    expect_open_error(p, AR_ERR_FORMAT, p, "header is truncated", "holds 100 bytes", NULL);
    free(p);
}

/* A bad shard among good ones: the message names it. */
Test(token_set, bad_shard_in_a_directory)
{
    const char *d = tu_tmpdir();
    char *a = join(d, "a.bin"), *b = join(d, "b.bin");
    int32_t t[10] = {1, 2, 3};
    write_llmc(a, t, 10, 0);
    unsigned char buf[1024 + 20];
    header(buf, AR_LLMC_MAGIC_U16, 1, 11);
    memset(buf + 1024, 0, 20);
    tu_write_file(b, buf, sizeof buf);
    expect_open_error(d, AR_ERR_FORMAT, b, "header says 11 tokens", NULL);
    free(a), free(b);
}

Test(token_set, mixed_formats)
{
    int32_t t[10] = {1, 2, 3};
    const char *d1 = tu_tmpdir();
    char *a = join(d1, "a.bin"), *b = join(d1, "b.txt");
    write_llmc(a, t, 10, 0);
    tu_write_file(b, "text", 4);
    expect_open_error(d1, AR_ERR_FORMAT, b, "holds text tokens", a, "uint16", "share one format", NULL);
    const char *d2 = tu_tmpdir();
    char *c = join(d2, "a.bin"), *f = join(d2, "b.bin");
    write_llmc(c, t, 10, 0);
    write_llmc(f, t, 10, 1);
    expect_open_error(d2, AR_ERR_FORMAT, f, "holds uint32 tokens", c, "holds uint16 tokens", NULL);
    free(a), free(b), free(c), free(f);
}

/* An id not below the limit: read names the shard and the token's offset
 * in it, in a window that starts in the shard before. */
Test(token_set, id_not_below_the_limit)
{
    const char *d = tu_tmpdir();
    char *a = join(d, "a.bin"), *b = join(d, "b.bin");
    int32_t t[20] = {0};
    write_llmc(a, t, 20, 0);
    t[7] = 50257;
    write_llmc(b, t, 20, 0);
    ar_token_set *ts = open_ok(d);
    int32_t out[40];
    ar_err e = {{0}};
    cr_assert_eq(ar_token_set_read(ts, 0, 27, 50257, out, &e), 0, "%s", e.msg);
    cr_assert_eq(ar_token_set_read(ts, 0, 28, 0, out, &e), 0, "%s", e.msg); /* no limit */
    cr_assert_eq(out[27], 50257);
    cr_assert_eq(ar_token_set_read(ts, 15, 20, 50257, out, &e), -1);
    cr_assert_eq(e.kind, AR_ERR_FORMAT);
    char want[4200];
    snprintf(want, sizeof want, "'%s': token 7 has id 50257 but the vocabulary holds 50257 ids", b);
    cr_assert(strstr(e.msg, want), "expected '%s' in: %s", want, e.msg);
    /* beyond the end: the caller's error */
    e = (ar_err){{0}};
    cr_assert_eq(ar_token_set_read(ts, 30, 11, 0, out, &e), -1);
    cr_assert_eq(e.kind, AR_ERR_OTHER);
    cr_assert(strstr(e.msg, "40 tokens"), "%s", e.msg);
    cr_assert_eq(ar_token_set_read(ts, (size_t)-1, 2, 0, out, &e), -1);
    cr_assert_eq(ar_token_set_read(ts, 40, 0, 0, out, &e), 0, "%s", e.msg);
    ar_token_set_free(ts);
    free(a), free(b);
}

Test(token_set, uint32_id_above_int32_max)
{
    const char *d = tu_tmpdir();
    char *p = join(d, "big.bin");
    unsigned char buf[1024 + 4 * 6];
    header(buf, AR_LLMC_MAGIC_U32, 7, 6);
    memset(buf + 1024, 0, 24);
    memset(buf + 1024 + 4 * 4, 0xff, 4); /* token 4: 4294967295 */
    buf[1024 + 4 * 2 + 3] = 0x80;        /* token 2: 2147483648 */
    tu_write_file(p, buf, sizeof buf);
    ar_token_set *ts = open_ok(p); /* opening reads no token */
    int32_t out[6], mx;
    ar_err e = {{0}};
    cr_assert_eq(ar_token_set_read(ts, 0, 2, 0, out, &e), 0, "%s", e.msg);
    cr_assert_eq(ar_token_set_read(ts, 0, 6, 0, out, &e), -1);
    cr_assert_eq(e.kind, AR_ERR_FORMAT);
    cr_assert(strstr(e.msg, p) && strstr(e.msg, "token 2 has id 2147483648"), "%s", e.msg);
    cr_assert_eq(ar_token_set_check(ts, 0, &mx, NULL, NULL, &e), -1);
    cr_assert(strstr(e.msg, "token 2 has id 2147483648"), "%s", e.msg);
    ar_token_set_free(ts);
    free(p);
}

/* ---- memory ---- */

/* This process's resident set in KiB (/proc/self/status VmRSS). */
static long vm_rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    cr_assert(f != NULL);
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    cr_assert_geq(kib, 0, "no VmRSS in /proc/self/status");
    return kib;
}

/* 256 MB of uint16 shards (4 of 64 MB): opening maps them without touching
 * a token page, and reading windows all over them releases what each read
 * touched. */
Test(token_set, memory_stays_flat, .timeout = 300)
{
    const char *d = tu_tmpdir();
    const size_t per = (size_t)32 << 20; /* tokens a shard: 64 MB */
    uint16_t *chunk = malloc(per / 16 * sizeof *chunk);
    for (int s = 0; s < 4; s++) {
        char name[32];
        snprintf(name, sizeof name, "shard_%d.bin", s);
        char *p = join(d, name);
        FILE *f = fopen(p, "wb");
        cr_assert(f != NULL);
        unsigned char h[1024];
        header(h, AR_LLMC_MAGIC_U16, 1, (uint32_t)per);
        cr_assert_eq(fwrite(h, 1, sizeof h, f), sizeof h);
        for (size_t k = 0; k < 16; k++) {
            for (size_t i = 0; i < per / 16; i++)
                chunk[i] = (uint16_t)((k * (per / 16) + i) * 2654435761u >> 16);
            cr_assert_eq(fwrite(chunk, sizeof *chunk, per / 16, f), per / 16);
        }
        cr_assert_eq(fclose(f), 0);
        free(p);
    }
    free(chunk);

    long page_kib = sysconf(_SC_PAGESIZE) / 1024;
    long before = vm_rss_kib();
    ar_token_set *ts = open_ok(d);
    long opened = vm_rss_kib();
    cr_assert_eq(ar_token_set_count(ts), 4 * per);
    /* a few pages of bookkeeping at most, nothing of the 256 MB */
    cr_assert_lt(opened - before, 2048, "opening 256 MB of shards grew RSS by %ld KiB", opened - before);

    /* 1000 windows of 257 tokens (514 bytes: one or two pages each).
     * Kept mapped, they would add at least 1000 pages (4 MB with 4 KiB
     * pages; more with the kernel's fault-around); released, RSS grows by
     * no more than what one window maps, so the bound is a quarter of the
     * kept pages, far above the one window and far below what keeping
     * them costs. */
    int32_t out[257];
    ar_err e = {{0}};
    uint64_t s = 12345;
    for (int w = 0; w < 1000; w++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        size_t off = (size_t)(s >> 20) % (4 * per - 257);
        cr_assert_eq(ar_token_set_read(ts, off, 257, 65536, out, &e), 0, "%s", e.msg);
        size_t in = off % per;
        cr_assert_eq(out[0], (int32_t)(uint16_t)(in * 2654435761u >> 16), "window %d at %zu", w, off);
    }
    long after = vm_rss_kib();
    long bound = 1000 * page_kib / 4;
    cr_log_info("RSS: opening +%ld KiB, 1000 windows +%ld KiB (bound %ld KiB)", opened - before, after - opened, bound);
    cr_assert_lt(after - opened, bound, "1000 windows grew RSS by %ld KiB (bound %ld KiB)", after - opened, bound);

    /* a full check: the same */
    int32_t mx;
    cr_assert_eq(ar_token_set_check(ts, 0, &mx, NULL, NULL, &e), 0, "%s", e.msg);
    cr_assert_eq(mx, 65535);
    long checked = vm_rss_kib();
    /* the 4 MB chunk buffer is freed again; the shards' pages are released */
    cr_assert_lt(checked - opened, 8192, "a full check grew RSS by %ld KiB", checked - opened);
    ar_token_set_free(ts);
}

/* ---- attnres data check ---- */


static void expect_run(char *out, int st, int want_st, const char *needle)
{
    cr_assert_eq(st, want_st, "exit status %d, expected %d; output:\n%s", st, want_st, out);
    if (needle)
        cr_assert(strstr(out, needle) != NULL, "expected '%s' in:\n%s", needle, out);
}

Test(data_cli, reports_shards_and_ids)
{
    const char *d = tu_tmpdir();
    char *a = join(d, "a.bin"), *b = join(d, "b.bin");
    int32_t t[300] = {0};
    t[50] = 1000;
    write_llmc(a, t, 300, 0);
    t[50] = 0;
    t[123] = 50300;
    write_llmc(b, t, 200, 0);
    int st;
    char *out = tu_run_bin(&st, "data check '%s'", d);
    expect_run(out, st, 0, "2 shards of uint16 tokens");
    char line[8200];
    snprintf(line, sizeof line, "%s", a);
    cr_assert(strstr(out, line), "no shard '%s' in:\n%s", a, out);
    cr_assert(strstr(out, "300 tokens"), "%s", out);
    cr_assert(strstr(out, "200 tokens"), "%s", out);
    cr_assert(strstr(out, "500"), "%s", out);
    cr_assert(strstr(out, "largest id") && strstr(out, "50300"), "%s", out);
    cr_assert(strstr(out, "checked 500 tokens"), "no final progress line in:\n%s", out);
    free(out);

    out = tu_run_bin(&st, "data check '%s' --vocab 60000", d);
    expect_run(out, st, 0, "50300");
    free(out);

    out = tu_run_bin(&st, "data check --vocab 50257 '%s'", d);
    snprintf(line, sizeof line, "attnres: error: '%s': token 123 has id 50300 but the vocabulary holds 50257 ids", b);
    expect_run(out, st, 1, line);
    free(out);

    /* a glob, quoted so that attnres expands it */
    out = tu_run_bin(&st, "data check '%s/*.bin'", d);
    expect_run(out, st, 0, "500");
    free(out);
    out = tu_run_bin(&st, "data check '%s/*.none'", d);
    expect_run(out, st, 1, "matches no file");
    free(out);
    free(a), free(b);
}

Test(data_cli, usage_errors)
{
    const char *bad[] = {"data",
                         "data frob",
                         "data check",
                         "data check x --bogus",
                         "data check x y",
                         "data check x --vocab",
                         "data check x --vocab 0",
                         "data check x --vocab many"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int st;
        char *out = tu_run_bin(&st, "%s", bad[i]);
        cr_assert_eq(st, 2, "'attnres %s' exited %d, expected 2:\n%s", bad[i], st, out);
        cr_assert(strstr(out, "attnres: error: "), "'attnres %s':\n%s", bad[i], out);
        free(out);
    }
    int st;
    char *out = tu_run_bin(&st, "data check x --bogus");
    expect_run(out, st, 2, "usage: attnres data check SET [--vocab N]");
    free(out);
    out = tu_run_bin(&st, "help data");
    expect_run(out, st, 0, "check");
    free(out);
}
