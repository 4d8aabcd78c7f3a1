/* Token files, data splits, batch sampling, evaluation windows, metrics.jsonl. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "formats/metrics.h"
#include "formats/tokens.h"
#include "run/data.h"
#include "testutil.h"

static const char *dir;

static void setup(void)
{
    dir = tu_tmpdir();
}

TestSuite(tokens, .init = setup);
TestSuite(dataset, .init = setup);
TestSuite(batches);
TestSuite(metrics, .init = setup);

/* ------------------------------------------------------------ helpers */

static void write_gz(const char *path, const void *data, size_t n)
{
    gzFile g = gzopen(path, "wb");
    cr_assert(g != NULL);
    cr_assert_eq(gzwrite(g, data, (unsigned)n), (int)n);
    cr_assert_eq(gzclose(g), Z_OK);
}

/* An llm.c header with arbitrary fields, followed by nbytes of payload. */
static void write_raw_llmc(const char *path, int32_t magic, int32_t version, int32_t count, size_t nbytes)
{
    size_t total = 1024 + nbytes;
    unsigned char *b = calloc(total, 1);
    int32_t h[3] = {magic, version, count};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++)
            b[4 * i + k] = (unsigned char)((uint32_t)h[i] >> (8 * k));
    for (size_t i = 0; i < nbytes; i++)
        b[1024 + i] = (unsigned char)(i % 7);
    tu_write_file(path, b, total);
    free(b);
}

static void expect_load_error(const char *path, const char *needle)
{
    ar_tokens t;
    ar_err e = {{0}};
    cr_assert_eq(ar_tokens_load(&t, path, &e), -1, "loading %s should fail", path);
    cr_assert(strstr(e.msg, needle) != NULL, "message '%s' lacks '%s'", e.msg, needle);
}

static int count_entries(const char *d)
{
    DIR *dp = opendir(d);
    cr_assert(dp != NULL);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dp)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(dp);
    return n;
}

/* ------------------------------------------------------------ tokens */

Test(tokens, text_and_gzip_text_give_the_same_bytes)
{
    const char *text = "In the beginning God created the heaven and the earth.\n\xc3\xa9\xff";
    size_t n = strlen(text);
    const char *plain = tu_path(dir, "a.txt"), *gz = tu_path(dir, "a.txt.gz");
    tu_write_file(plain, text, n);
    write_gz(gz, text, n);
    ar_tokens a, b;
    ar_err e = {{0}};
    cr_assert_eq(ar_tokens_load(&a, plain, &e), 0, "%s", e.msg);
    cr_assert_eq(ar_tokens_load(&b, gz, &e), 0, "%s", e.msg);
    cr_assert_eq(a.n, n);
    cr_assert_eq(b.n, n);
    cr_assert(a.is_bytes && b.is_bytes);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(a.tok[i], (unsigned char)text[i], "byte %zu", i);
        cr_assert_eq(b.tok[i], a.tok[i]);
    }
    cr_assert_eq(a.max_token, 255);
    ar_tokens_free(&a);
    ar_tokens_free(&b);
}

Test(tokens, large_gzip_text_crosses_read_chunks)
{
    size_t n = 300000;
    char *text = malloc(n);
    for (size_t i = 0; i < n; i++)
        text[i] = (char)('a' + (i * 7919) % 26);
    const char *gz = tu_path(dir, "big.gz");
    write_gz(gz, text, n);
    ar_tokens t;
    ar_err e = {{0}};
    cr_assert_eq(ar_tokens_load(&t, gz, &e), 0, "%s", e.msg);
    cr_assert_eq(t.n, n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(t.tok[i], text[i]);
    ar_tokens_free(&t);
    free(text);
}

Test(tokens, short_text_is_text)
{
    const char *p = tu_path(dir, "short.txt");
    tu_write_file(p, "ab", 2);
    ar_tokens t;
    ar_err e = {{0}};
    cr_assert_eq(ar_tokens_load(&t, p, &e), 0, "%s", e.msg);
    cr_assert_eq(t.n, 2);
    cr_assert_eq(t.tok[1], 'b');
    ar_tokens_free(&t);
}

Test(tokens, corrupt_gzip_is_reported)
{
    size_t n = 20000;
    char *text = malloc(n);
    for (size_t i = 0; i < n; i++)
        text[i] = (char)('a' + (i * i) % 26);
    const char *gz = tu_path(dir, "bad.gz");
    write_gz(gz, text, n);
    size_t len;
    unsigned char *raw = (unsigned char *)tu_read_file(gz, &len);
    for (size_t i = len / 3; i < len / 3 + 40; i++)
        raw[i] ^= 0x5a;
    tu_write_file(gz, raw, len);
    expect_load_error(gz, "corrupt gzip");
    /* cut short: zlib only tells through gzerror */
    const char *cut = tu_path(dir, "cut.gz");
    tu_write_file(cut, raw, 30);
    expect_load_error(cut, "corrupt gzip");
    free(raw);
    free(text);
}

static void round_trip(int u32)
{
    enum { N = 1000 };
    int32_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = u32 ? (int32_t)((i * 2654435761u) % 2000000000u) : (int32_t)((i * 977) % 65536);
    tok[7] = 0;
    tok[8] = u32 ? INT32_MAX : 65535;
    const char *p = tu_path(dir, u32 ? "t32.bin" : "t16.bin");
    ar_err e = {{0}};
    cr_assert_eq(ar_tokens_write_llmc(p, tok, N, u32, &e), 0, "%s", e.msg);
    size_t len;
    unsigned char *raw = (unsigned char *)tu_read_file(p, &len);
    cr_assert_eq(len, 1024 + (size_t)N * (u32 ? 4 : 2));
    int32_t magic = raw[0] | raw[1] << 8 | raw[2] << 16 | raw[3] << 24;
    cr_assert_eq(magic, u32 ? AR_LLMC_MAGIC_U32 : AR_LLMC_MAGIC_U16);
    cr_assert_eq(raw[4], u32 ? 7 : 1);
    cr_assert_eq(raw[8] | raw[9] << 8, N);
    free(raw);
    ar_tokens t;
    cr_assert_eq(ar_tokens_load(&t, p, &e), 0, "%s", e.msg);
    cr_assert_eq(t.n, N);
    cr_assert_eq(t.is_bytes, 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(t.tok[i], tok[i], "token %d", i);
    cr_assert_eq(t.max_token, u32 ? INT32_MAX : 65535);
    ar_tokens_free(&t);
    cr_assert_eq(count_entries(dir), 1, "no temporary file may remain");
}

Test(tokens, uint16_layout_round_trips)
{
    round_trip(0);
}

Test(tokens, uint32_layout_round_trips)
{
    round_trip(1);
}

Test(tokens, gzipped_token_file_loads)
{
    int32_t tok[5] = {3, 1, 4, 1, 5};
    const char *p = tu_path(dir, "t.bin"), *gz = tu_path(dir, "t.bin.gz");
    ar_err e = {{0}};
    cr_assert_eq(ar_tokens_write_llmc(p, tok, 5, 0, &e), 0, "%s", e.msg);
    size_t len;
    char *raw = tu_read_file(p, &len);
    write_gz(gz, raw, len);
    free(raw);
    ar_tokens t;
    cr_assert_eq(ar_tokens_load(&t, gz, &e), 0, "%s", e.msg);
    cr_assert_eq(t.n, 5);
    cr_assert_eq(t.tok[4], 5);
    cr_assert_eq(t.is_bytes, 0);
    ar_tokens_free(&t);
}

Test(tokens, size_mismatch_is_an_error)
{
    const char *shortp = tu_path(dir, "short.bin"), *longp = tu_path(dir, "long.bin");
    write_raw_llmc(shortp, AR_LLMC_MAGIC_U16, 1, 1000, 1998);
    write_raw_llmc(longp, AR_LLMC_MAGIC_U16, 1, 1000, 2002);
    char want[4200];
    snprintf(want, sizeof want, "'%s': header says 1000 tokens (2000 bytes) but the file holds 1998 bytes of tokens",
             shortp);
    expect_load_error(shortp, want);
    expect_load_error(longp, "but the file holds 2002 bytes of tokens");
    const char *p32 = tu_path(dir, "short32.bin");
    write_raw_llmc(p32, AR_LLMC_MAGIC_U32, 7, 10, 36);
    expect_load_error(p32, "header says 10 tokens (40 bytes) but the file holds 36 bytes");
}

Test(tokens, bad_headers_are_errors)
{
    const char *v = tu_path(dir, "v.bin"), *v2 = tu_path(dir, "v2.bin"), *neg = tu_path(dir, "neg.bin"),
               *hdr = tu_path(dir, "hdr.bin");
    write_raw_llmc(v, AR_LLMC_MAGIC_U16, 7, 4, 8);
    expect_load_error(v, "version 7");
    write_raw_llmc(v2, AR_LLMC_MAGIC_U32, 1, 4, 16);
    expect_load_error(v2, "needs version 7");
    write_raw_llmc(neg, AR_LLMC_MAGIC_U16, 1, -5, 0);
    expect_load_error(neg, "negative");
    unsigned char h[16] = {0};
    h[0] = AR_LLMC_MAGIC_U16 & 0xff;
    h[1] = (AR_LLMC_MAGIC_U16 >> 8) & 0xff;
    h[2] = (AR_LLMC_MAGIC_U16 >> 16) & 0xff;
    h[3] = (AR_LLMC_MAGIC_U16 >> 24) & 0xff;
    tu_write_file(hdr, h, sizeof h);
    expect_load_error(hdr, "header is truncated");
}

Test(tokens, uint32_ids_above_int32_max_are_errors)
{
    const char *p = tu_path(dir, "big.bin");
    write_raw_llmc(p, AR_LLMC_MAGIC_U32, 7, 1, 4);
    size_t len;
    unsigned char *raw = (unsigned char *)tu_read_file(p, &len);
    memset(raw + 1024, 0xff, 4);
    tu_write_file(p, raw, len);
    free(raw);
    expect_load_error(p, "4294967295");
}

Test(tokens, empty_and_missing_files_are_errors)
{
    const char *p = tu_path(dir, "empty.txt");
    tu_write_file(p, "", 0);
    char want[4200];
    snprintf(want, sizeof want, "'%s' is empty", p);
    expect_load_error(p, want);
    const char *m = tu_path(dir, "nope.txt");
    snprintf(want, sizeof want, "'%s': no such file", m);
    expect_load_error(m, want);
}

/* Found by fuzzing (fuzz/corpus/tokens/zero-count.bin): a well-formed token
 * file with a count of 0 was accepted as an empty stream. */
Test(tokens, token_file_without_tokens_is_an_error)
{
    const char *p = tu_path(dir, "zero.bin");
    int32_t none[1] = {0};
    ar_err e = {{0}};
    cr_assert_eq(ar_tokens_write_llmc(p, none, 0, 1, &e), 0, "%s", e.msg);
    char want[4200];
    snprintf(want, sizeof want, "'%s': token file holds no tokens", p);
    expect_load_error(p, want);
}

Test(tokens, writer_rejects_ids_outside_the_layout)
{
    int32_t tok[3] = {1, 70000, 2};
    const char *p = tu_path(dir, "w.bin");
    ar_err e = {{0}};
    cr_assert_eq(ar_tokens_write_llmc(p, tok, 3, 0, &e), -1);
    cr_assert(strstr(e.msg, "70000"), "%s", e.msg);
    cr_assert_eq(ar_tokens_write_llmc(p, tok, 3, 1, &e), 0, "%s", e.msg);
    tok[0] = -1;
    cr_assert_eq(ar_tokens_write_llmc(p, tok, 3, 1, &e), -1);
    cr_assert_eq(ar_tokens_write_llmc(tu_path(dir, "no/such/dir.bin"), tok + 1, 2, 1, &e), -1);
    cr_assert(strstr(e.msg, "cannot write"), "%s", e.msg);
}

/* ------------------------------------------------------------ dataset */

static ar_model_cfg byte_model(int T)
{
    ar_model_cfg mc;
    memset(&mc, 0, sizeof mc);
    mc.vocab_bytes = 1;
    mc.vocab = 256;
    mc.seq_len = T;
    return mc;
}

static ar_data_cfg data_cfg(const char *train, const char *val, double frac)
{
    ar_data_cfg dc;
    memset(&dc, 0, sizeof dc);
    snprintf(dc.train, sizeof dc.train, "%s", train);
    snprintf(dc.val, sizeof dc.val, "%s", val ? val : "");
    dc.val_fraction = frac;
    return dc;
}

static const char *text_file(const char *name, size_t n)
{
    char *b = malloc(n);
    for (size_t i = 0; i < n; i++)
        b[i] = (char)('a' + i % 26);
    const char *p = tu_path(dir, name);
    tu_write_file(p, b, n);
    free(b);
    return p;
}

static void expect_open_error(const ar_data_cfg *dc, const ar_model_cfg *mc, const char *needle)
{
    ar_dataset ds;
    ar_err e = {{0}};
    cr_assert_eq(ar_dataset_open(&ds, dc, mc, &e), -1, "open should fail");
    cr_assert(strstr(e.msg, needle) != NULL, "message '%s' lacks '%s'", e.msg, needle);
}

Test(dataset, val_fraction_takes_the_tail)
{
    ar_data_cfg dc = data_cfg(text_file("t.txt", 1001), NULL, 0.05);
    ar_model_cfg mc = byte_model(16);
    ar_dataset ds;
    ar_err e = {{0}};
    cr_assert_eq(ar_dataset_open(&ds, &dc, &mc, &e), 0, "%s", e.msg);
    cr_assert_eq(ds.nval, 1);
    cr_assert_eq(ds.val[0].n, 50); /* floor(1001 * 0.05) */
    cr_assert_eq(ds.train.n, 951);
    cr_assert(ds.train.set == ds.train_set && ds.train.lo == 0 && ds.val_set == NULL);
    cr_assert(ds.val[0].set == ds.train_set && ds.val[0].lo == 951);
    int32_t first;
    cr_assert_eq(ar_token_set_read(ds.val[0].set, ds.val[0].lo, 1, 256, &first, &e), 0, "%s", e.msg);
    cr_assert_eq(first, 'a' + 951 % 26);
    ar_dataset_close(&ds);
}

Test(dataset, val_file_is_loaded_separately)
{
    ar_data_cfg dc = data_cfg(text_file("t.txt", 300), text_file("v.txt", 40), 0.5);
    ar_model_cfg mc = byte_model(8);
    ar_dataset ds;
    ar_err e = {{0}};
    cr_assert_eq(ar_dataset_open(&ds, &dc, &mc, &e), 0, "%s", e.msg);
    cr_assert_eq(ds.train.n, 300);
    cr_assert_eq(ds.nval, 1);
    cr_assert_eq(ds.val[0].n, 40);
    cr_assert(ds.val[0].set == ds.val_set && ds.val[0].lo == 0);
    ar_dataset_close(&ds);
}

Test(dataset, vocabulary_must_match_the_files)
{
    int32_t tok[100];
    for (int i = 0; i < 100; i++)
        tok[i] = i * 3;
    const char *bin = tu_path(dir, "x.bin");
    ar_err e = {{0}};
    cr_assert_eq(ar_tokens_write_llmc(bin, tok, 100, 0, &e), 0, "%s", e.msg);
    ar_model_cfg mc = byte_model(8);
    ar_data_cfg dc = data_cfg(bin, NULL, 0.2);
    char want[4200];
    snprintf(want, sizeof want,
             "'%s' is a token file but model.vocab is bytes; set model.vocab to the tokenizer's vocabulary size",
             bin);
    expect_open_error(&dc, &mc, want);
    /* a token file as val under a byte vocabulary */
    ar_data_cfg dv = data_cfg(text_file("t.txt", 100), bin, 0.2);
    expect_open_error(&dv, &mc, "is a token file but model.vocab is bytes");

    /* integer vocabulary: ids must be below it, checked as they are read
     * (opening reads no tokens) */
    mc.vocab_bytes = 0;
    mc.vocab = 200;
    ar_dataset ds;
    int32_t got[100];
    cr_assert_eq(ar_dataset_open(&ds, &dc, &mc, &e), 0, "%s", e.msg);
    cr_assert_eq(ds.vocab, 200);
    cr_assert_eq(ar_token_set_read(ds.train.set, 0, ds.train.n, ds.vocab, got, &e), -1);
    snprintf(want, sizeof want, "'%s': token 67 has id 201 but the vocabulary holds 200 ids", bin);
    cr_assert_str_eq(e.msg, want);
    ar_dataset_close(&ds);
    mc.vocab = 300;
    cr_assert_eq(ar_dataset_open(&ds, &dc, &mc, &e), 0, "%s", e.msg);
    cr_assert_eq(ar_token_set_read(ds.train.set, 0, ds.train.n, ds.vocab, got, &e), 0, "%s", e.msg);
    ar_dataset_close(&ds);

    /* text under an integer vocabulary needs every byte value */
    ar_data_cfg dt = data_cfg(text_file("t2.txt", 100), NULL, 0.2);
    mc.vocab = 100;
    expect_open_error(&dt, &mc, "is a text file");
    mc.vocab = 256;
    cr_assert_eq(ar_dataset_open(&ds, &dt, &mc, &e), 0, "%s", e.msg);
    ar_dataset_close(&ds);
}

Test(dataset, splits_shorter_than_a_window_are_errors)
{
    ar_model_cfg mc = byte_model(64);
    ar_data_cfg dc = data_cfg(text_file("t.txt", 100), NULL, 0.5);
    expect_open_error(&dc, &mc, "the training split holds 50 tokens but needs at least 65");
    expect_open_error(&dc, &mc, "lower data.val_fraction or model.seq_len");
    ar_data_cfg dv = data_cfg(text_file("t2.txt", 1000), NULL, 0.05);
    expect_open_error(&dv, &mc, "validation split");
    expect_open_error(&dv, &mc, "holds 50 tokens but needs at least 65");
    ar_data_cfg df = data_cfg(text_file("t3.txt", 1000), text_file("v.txt", 10), 0.05);
    char want[4200];
    snprintf(want, sizeof want, "'%s': the shard holds 10 tokens but needs at least 65 (model.seq_len + 1)", df.val);
    expect_open_error(&df, &mc, want);
    ar_data_cfg dm = data_cfg(tu_path(dir, "missing.txt"), NULL, 0.05);
    expect_open_error(&dm, &mc, "no such file");
}

static ar_err_kind load_kind(const char *path)
{
    ar_tokens t;
    ar_err e = {{0}};
    cr_assert_eq(ar_tokens_load(&t, path, &e), -1, "loading %s should fail", path);
    return e.kind;
}

/* The kinds of the load errors: a file missing, or not a token stream. */
Test(tokens, error_kinds)
{
    const char *empty = tu_path(dir, "empty.txt"), *shortp = tu_path(dir, "short.bin");
    tu_write_file(empty, "", 0);
    write_raw_llmc(shortp, AR_LLMC_MAGIC_U16, 1, 1000, 1998);
    cr_expect_eq(load_kind(tu_path(dir, "nope.txt")), AR_ERR_NOT_FOUND);
    cr_expect_eq(load_kind(tu_path(dir, "empty.txt/below")), AR_ERR_NOT_FOUND); /* below a file */
    cr_expect_eq(load_kind(empty), AR_ERR_FORMAT);
    cr_expect_eq(load_kind(shortp), AR_ERR_FORMAT);
}

/* The check the commands run before anything else: the training data is
 * there, and the default corpus's message says how to install it. */
Test(dataset, training_data_check)
{
    ar_err e = {{0}};
    ar_data_cfg ok = data_cfg(text_file("t.txt", 100), NULL, 0.1);
    cr_expect_eq(ar_data_check_train(&ok, &e), 0, "%s", e.msg);

    ar_data_cfg missing = data_cfg(tu_path(dir, "missing.txt"), NULL, 0.1);
    cr_assert_eq(ar_data_check_train(&missing, &e), -1);
    cr_expect_eq(e.kind, AR_ERR_NOT_FOUND);
    char want[4200];
    snprintf(want, sizeof want, "training data '%s' not found", missing.train);
    cr_expect_str_eq(e.msg, want);

    /* the default corpus, relative to the working directory */
    cr_assert_eq(chdir(dir), 0);
    ar_data_cfg def = data_cfg(AR_DEFAULT_CORPUS, NULL, 0.1);
    cr_assert_eq(ar_data_check_train(&def, &e), -1);
    cr_expect_eq(e.kind, AR_ERR_NOT_FOUND);
    cr_expect_str_eq(e.msg, "training data 'data/kjv.txt' not found: run 'tools/get-data.sh' to install the King "
                            "James Bible corpus there, or choose a file with --set data.train=FILE");

    /* there, but not readable (root reads it anyway) */
    if (geteuid() != 0) {
        cr_assert_eq(chmod(ok.train, 0), 0);
        cr_assert_eq(ar_data_check_train(&ok, &e), -1);
        cr_expect_eq(e.kind, AR_ERR_IO);
        cr_expect(strstr(e.msg, "cannot be read: permission denied"), "%s", e.msg);
    }
}

/* ------------------------------------------------------------ batches */

Test(batches, targets_are_inputs_shifted_by_one_and_in_range)
{
    enum { N = 10, T = 3, B = 4000 };
    int32_t x[N];
    for (int i = 0; i < N; i++)
        x[i] = 100 + i;
    int32_t *in = malloc(sizeof(int32_t) * B * T), *tg = malloc(sizeof(int32_t) * B * T);
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, 42);
    ar_token_set *ts = ar_token_set_wrap(x, N, "x");
    ar_token_span sp = {ts, 0, N};
    ar_err e = {{0}};
    cr_assert_eq(ar_sample_batch(&sp, 1000, B, T, r, in, tg, &e), 0, "%s", e.msg);
    int seen[N] = {0};
    for (int b = 0; b < B; b++) {
        int o = in[b * T] - 100;
        cr_assert(o >= 0 && o <= N - T - 1, "offset %d out of [0, %d]", o, N - T - 1);
        seen[o]++;
        for (int t = 0; t < T; t++) {
            cr_assert_eq(in[b * T + t], x[o + t]);
            cr_assert_eq(tg[b * T + t], x[o + t + 1]);
        }
    }
    for (int o = 0; o <= N - T - 1; o++)
        cr_assert(seen[o] > 0, "offset %d never drawn", o);
    /* an id not below the vocabulary fails, naming where it is */
    cr_assert_eq(ar_sample_batch(&sp, 105, B, T, r, in, tg, &e), -1);
    cr_assert(strstr(e.msg, "'x': token ") && strstr(e.msg, " has id 10"), "%s", e.msg);
    ar_token_set_free(ts);
    gsl_rng_free(r);
    free(in);
    free(tg);
}

Test(batches, sampling_is_deterministic_for_a_seed)
{
    enum { N = 5000, T = 16, B = 8 };
    int32_t *x = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++)
        x[i] = i;
    int32_t a[B * T], b[B * T], ta[B * T], tb[B * T];
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    ar_token_set *ts = ar_token_set_wrap(x, N, "x");
    ar_token_span sp = {ts, 0, N};
    ar_err e = {{0}};
    gsl_rng_set(r, 7);
    cr_assert_eq(ar_sample_batch(&sp, N, B, T, r, a, ta, &e), 0, "%s", e.msg);
    gsl_rng_set(r, 7);
    cr_assert_eq(ar_sample_batch(&sp, N, B, T, r, b, tb, &e), 0, "%s", e.msg);
    cr_assert_arr_eq(a, b, sizeof a);
    cr_assert_arr_eq(ta, tb, sizeof ta);
    gsl_rng_set(r, 8);
    cr_assert_eq(ar_sample_batch(&sp, N, B, T, r, b, tb, &e), 0, "%s", e.msg);
    cr_assert(memcmp(a, b, sizeof a) != 0, "another seed should give other windows");
    ar_token_set_free(ts);
    gsl_rng_free(r);
    free(x);
}

Test(batches, eval_windows_follow_the_protocol)
{
    int32_t x[10];
    for (int i = 0; i < 10; i++)
        x[i] = i;
    cr_assert_eq(ar_eval_window_count(10, 3), 3);
    cr_assert_eq(ar_eval_window_count(4, 3), 1);
    cr_assert_eq(ar_eval_window_count(3, 3), 0);
    cr_assert_eq(ar_eval_window_count(0, 3), 0);
    cr_assert_eq(ar_eval_window_count(11, 5), 2);
    int32_t in[3], tg[3];
    for (int w = 0; w < 3; w++) {
        ar_eval_window(x, (size_t)w, 3, in, tg);
        for (int t = 0; t < 3; t++) {
            cr_assert_eq(in[t], 3 * w + t, "window %d input %d", w, t);
            cr_assert_eq(tg[t], 3 * w + t + 1, "window %d target %d", w, t);
        }
    }
}

/* ------------------------------------------------------------ metrics */

static double step_of(const ar_json *j)
{
    const ar_json *s = ar_json_get(j, "step");
    cr_assert(s != NULL);
    return s->num;
}

Test(metrics, append_then_read)
{
    const char *p = tu_path(dir, "metrics.jsonl");
    ar_err e = {{0}};
    char line[128];
    for (int s = 1; s <= 5; s++) {
        snprintf(line, sizeof line, "{\"step\": %d, \"loss\": %g}", s * 10, 5.0 / s);
        cr_assert_eq(ar_metrics_append(p, line, &e), 0, "%s", e.msg);
    }
    size_t len;
    char *raw = tu_read_file(p, &len);
    cr_assert_eq(raw[len - 1], '\n');
    free(raw);
    ar_json **rows;
    int n;
    cr_assert_eq(ar_metrics_read(p, &rows, &n, &e), 0, "%s", e.msg);
    cr_assert_eq(n, 5);
    cr_assert_float_eq(step_of(rows[4]), 50, 0);
    /* %g writes 5.0 / 2 = 2.5 as "2.5", which strtod reads back exactly */
    cr_assert_eq(ar_json_get(rows[1], "loss")->num, 2.5);
    ar_metrics_free(rows, n);
    cr_assert_eq(ar_metrics_append(p, "{\"a\":1}\n{\"b\":2}", &e), -1);
}

Test(metrics, partial_last_line_is_skipped_and_mended)
{
    const char *p = tu_path(dir, "m.jsonl");
    const char *text = "{\"step\": 1, \"loss\": 3}\n\n{\"step\": 2, \"loss\": 2.5}\n{\"step\": 3, \"lo";
    tu_write_file(p, text, strlen(text));
    ar_json **rows;
    int n;
    ar_err e = {{0}};
    cr_assert_eq(ar_metrics_read(p, &rows, &n, &e), 0, "%s", e.msg);
    cr_assert_eq(n, 2);
    ar_metrics_free(rows, n);
    /* the next append starts a fresh line; the fragment is now mid-file */
    cr_assert_eq(ar_metrics_append(p, "{\"step\": 3, \"loss\": 2}", &e), 0, "%s", e.msg);
    cr_assert_eq(ar_metrics_read(p, &rows, &n, &e), -1);
    char want[4200];
    snprintf(want, sizeof want, "%s:4:", p);
    cr_assert(strstr(e.msg, want) != NULL, "message '%s' lacks '%s'", e.msg, want);
}

Test(metrics, bad_middle_line_names_file_and_line)
{
    const char *p = tu_path(dir, "m.jsonl");
    const char *text = "{\"step\": 1}\n[1, 2]\n{\"step\": 2}\n";
    tu_write_file(p, text, strlen(text));
    ar_json **rows;
    int n;
    ar_err e = {{0}};
    cr_assert_eq(ar_metrics_read(p, &rows, &n, &e), -1);
    char want[4200];
    snprintf(want, sizeof want, "%s:2: expected a JSON object", p);
    cr_assert(strstr(e.msg, want) != NULL, "message '%s' lacks '%s'", e.msg, want);
    const char *q = tu_path(dir, "q.jsonl");
    text = "{\"step\": 1}\n{\"step\": oops}\n{\"step\": 2}\n";
    tu_write_file(q, text, strlen(text));
    cr_assert_eq(ar_metrics_read(q, &rows, &n, &e), -1);
    snprintf(want, sizeof want, "%s:2: ", q);
    cr_assert(strstr(e.msg, want) != NULL, "message '%s' lacks '%s'", e.msg, want);
    cr_assert_eq(ar_metrics_truncate_after(q, 1, &e), -1, "a corrupt file must not be rewritten");
    cr_assert_eq(ar_metrics_read(tu_path(dir, "none.jsonl"), &rows, &n, &e), -1);
    cr_assert(strstr(e.msg, "no such file"), "%s", e.msg);
}

Test(metrics, truncate_keeps_steps_up_to_the_cut)
{
    const char *p = tu_path(dir, "m.jsonl");
    const char *text = "{\"run\": \"x\"}\n"
                       "{\"step\": 100, \"loss\": 3}\n"
                       "{\"step\": 200,   \"loss\": 2.5}\n"
                       "{\"step\": 300, \"loss\": 2}\n"
                       "{\"step\": 400, \"lo";
    tu_write_file(p, text, strlen(text));
    ar_err e = {{0}};
    cr_assert_eq(ar_metrics_truncate_after(p, 200, &e), 0, "%s", e.msg);
    size_t len;
    char *raw = tu_read_file(p, &len);
    cr_assert_str_eq(raw, "{\"run\": \"x\"}\n{\"step\": 100, \"loss\": 3}\n{\"step\": 200,   \"loss\": 2.5}\n");
    free(raw);
    cr_assert_eq(count_entries(dir), 1, "no temporary file may remain");
    ar_json **rows;
    int n;
    cr_assert_eq(ar_metrics_read(p, &rows, &n, &e), 0, "%s", e.msg);
    cr_assert_eq(n, 3);
    ar_metrics_free(rows, n);
    cr_assert_eq(ar_metrics_truncate_after(p, 0, &e), 0, "%s", e.msg);
    raw = tu_read_file(p, &len);
    cr_assert_str_eq(raw, "{\"run\": \"x\"}\n");
    free(raw);
    cr_assert_eq(ar_metrics_truncate_after(tu_path(dir, "absent.jsonl"), 5, &e), 0, "%s", e.msg);
}
