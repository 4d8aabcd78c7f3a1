/* GPT-2's byte-level BPE (formats/bpe.h) and `attnres tokenize`: the ids of
 * a reference encoder on the fixtures of tests/fixtures/bpe/ (made once by
 * tools/make-bpe-fixtures.py with tiktoken; no Python here), round trips,
 * merge order on a small vocabulary of our own, the loader's errors, token
 * files, and the command end to end. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "formats/bpe.h"
#include "formats/tokens.h"
#include "testutil.h"

static const char *dir;

static void setup(void)
{
    dir = tu_tmpdir();
}

TestSuite(bpe, .init = setup);
TestSuite(tokenize_cli, .init = setup);

/* ------------------------------------------------------------ helpers */

static const char *srcdir(void)
{
    const char *s = tu_source_dir();
    if (!s)
        cr_skip_test("AR_SOURCE_DIR is not set");
    return s;
}

static ar_bpe *gpt2(void)
{
    ar_err e = {{0}};
    ar_bpe *b = ar_bpe_load(NULL, NULL, &e);
    cr_assert(b != NULL, "the built-in GPT-2 vocabulary does not load: %s", e.msg);
    return b;
}

static int32_t *encode(const ar_bpe *b, const void *text, size_t len, size_t *n)
{
    ar_err e = {{0}};
    int32_t *ids = NULL;
    *n = 0;
    cr_assert_eq(ar_bpe_encode(b, text, len, &ids, n, &e), 0, "encode failed: %s", e.msg);
    return ids;
}

/* The bytes of ids[0..n) one after another (malloc'd), *len their count. */
static char *decode(const ar_bpe *b, const int32_t *ids, size_t n, size_t *len)
{
    size_t cap = 16 * n + 1, k = 0;
    char *s = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        int m = ar_bpe_token_bytes(b, ids[i], s + k, cap - k);
        cr_assert(m >= 0, "id %d has no bytes", ids[i]);
        cr_assert((size_t)m <= cap - k, "a token of %d bytes", m);
        k += (size_t)m;
    }
    *len = k;
    return s;
}

/* A fixture's .ids file: decimal ids separated by spaces. */
static int32_t *read_ids(const char *path, size_t *n)
{
    char *s = tu_read_file(path, NULL);
    cr_assert(s != NULL, "cannot read %s", path);
    size_t cap = strlen(s) / 2 + 1, k = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    for (char *p = s, *end; *p;) {
        long v = strtol(p, &end, 10);
        if (end == p) {
            cr_assert(*p == ' ' || *p == '\n', "%s: not an id at '%.10s'", path, p);
            p++;
            continue;
        }
        ids[k++] = (int32_t)v;
        p = end;
    }
    free(s);
    *n = k;
    return ids;
}

static void write_text(const char *path, const char *text)
{
    tu_write_file(path, text, strlen(text));
}

/* GPT-2's bytes_to_unicode, written again here (the test's own copy): the
 * character that stands for byte c in encoder.json, as UTF-8 into out. */
static const char *byte_char(int c, char out[3])
{
    int n = 0, cp = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        int mine = printable ? b : 256 + n++;
        if (b == c)
            cp = mine;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
    return out;
}

/* A small vocabulary in GPT-2's format: the 256 byte tokens (ids 0..255 in
 * byte order) but byte `skip` (-1: none), then `extra` (JSON members, may
 * be ""), and vocab.bpe with the given merge lines.  Paths in dir, into
 * enc and mer. */
static void vocab_without(int skip, const char *extra, const char *merges, const char **enc, const char **mer)
{
    size_t cap = 1 << 16, k = 0;
    char *s = malloc(cap), ch[3];
    k += (size_t)snprintf(s + k, cap - k, "{");
    for (int c = 0; c < 256; c++) {
        if (c == skip)
            continue;
        byte_char(c, ch);
        k += (size_t)snprintf(s + k, cap - k, "%s\"%s%s\": %d", k > 1 ? ", " : "",
                              ch[0] == '"' || ch[0] == '\\' ? "\\" : "", ch, c);
    }
    k += (size_t)snprintf(s + k, cap - k, "%s%s}", *extra ? ", " : "", extra);
    *enc = tu_path(dir, "encoder.json");
    *mer = tu_path(dir, "vocab.bpe");
    write_text(*enc, s);
    write_text(*mer, merges);
    free(s);
}

static void small_vocab(const char *extra, const char *merges, const char **enc, const char **mer)
{
    vocab_without(-1, extra, merges, enc, mer);
}

/* Loading must fail with a message holding every one of the needles. */
static void expect_load_error(const char *enc, const char *mer, ...)
{
    ar_err e = {{0}};
    ar_bpe *b = ar_bpe_load(enc, mer, &e);
    cr_assert(b == NULL, "loading %s and %s should fail", enc, mer);
    va_list ap;
    va_start(ap, mer);
    for (const char *needle; (needle = va_arg(ap, const char *));)
        cr_assert(strstr(e.msg, needle) != NULL, "expected '%s' in: %s", needle, e.msg);
    va_end(ap);
}

/* ------------------------------------------------------------ reference ids */

/* Every fixture: the ids of the reference, the count index.txt gives, and
 * the bytes back on decoding. */
Test(bpe, fixtures_give_the_reference_ids)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/bpe/index.txt", srcdir());
    FILE *f = fopen(path, "r");
    cr_assert(f != NULL, "cannot read %s", path);
    ar_bpe *b = gpt2();
    char line[512];
    int cases = 0, invalid = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#')
            continue;
        char name[256], kind[64];
        size_t bytes, want_n;
        cr_assert_eq(sscanf(line, "%255s %zu %zu %63s", name, &bytes, &want_n, kind), 4, "index line: %s", line);
        snprintf(path, sizeof path, "%s/tests/fixtures/bpe/%s.in", srcdir(), name);
        size_t len;
        char *text = tu_read_file(path, &len);
        cr_assert(text != NULL, "cannot read %s", path);
        cr_assert_eq(len, bytes, "%s: %zu bytes, index says %zu", name, len, bytes);
        snprintf(path, sizeof path, "%s/tests/fixtures/bpe/%s.ids", srcdir(), name);
        size_t nwant, n;
        int32_t *want = read_ids(path, &nwant);
        cr_assert_eq(nwant, want_n, "%s: %zu ids in the file, index says %zu", name, nwant, want_n);
        int32_t *got = encode(b, text, len, &n);
        size_t first = 0;
        while (first < n && first < nwant && got[first] == want[first])
            first++;
        cr_assert(n == nwant && first == n, "%s: %zu ids, reference %zu; first difference at id %zu (%d, reference %d)",
                  name, n, nwant, first, first < n ? got[first] : -1, first < nwant ? want[first] : -1);
        size_t blen;
        char *back = decode(b, got, n, &blen);
        cr_assert(blen == len && memcmp(back, text, len) == 0, "%s: decoding does not give the input back", name);
        invalid += strncmp(kind, "bytes-", 6) == 0;
        cases++;
        free(back);
        free(got);
        free(want);
        free(text);
    }
    fclose(f);
    ar_bpe_free(b);
    cr_assert_geq(cases, 40, "only %d fixtures in index.txt", cases);
    cr_assert_geq(invalid, 10, "only %d invalid-UTF-8 fixtures", invalid);
}

/* The files in data/gpt2/ read at run time give the built-in vocabulary. */
Test(bpe, files_and_built_in_vocabulary_agree)
{
    char enc[4096], mer[4096];
    snprintf(enc, sizeof enc, "%s/data/gpt2/encoder.json", srcdir());
    snprintf(mer, sizeof mer, "%s/data/gpt2/vocab.bpe", srcdir());
    ar_err e = {{0}};
    ar_bpe *a = ar_bpe_load(enc, mer, &e);
    cr_assert(a != NULL, "%s", e.msg);
    ar_bpe *b = gpt2();
    cr_assert_eq(ar_bpe_vocab_size(a), 50257);
    cr_assert_eq(ar_bpe_vocab_size(b), 50257);
    for (int32_t id = 0; id < 50257; id++) {
        char x[256], y[256];
        int nx = ar_bpe_token_bytes(a, id, x, sizeof x), ny = ar_bpe_token_bytes(b, id, y, sizeof y);
        cr_assert(nx == ny && nx > 0 && memcmp(x, y, (size_t)nx) == 0, "token %d differs", id);
    }
    const char *text = "The quick brown fox jumps over the lazy dog's 123 tails!\n";
    size_t na, nb;
    int32_t *ia = encode(a, text, strlen(text), &na), *ib = encode(b, text, strlen(text), &nb);
    cr_assert(na == nb && memcmp(ia, ib, na * sizeof *ia) == 0);
    free(ia);
    free(ib);
    ar_bpe_free(a);
    ar_bpe_free(b);
}

Test(bpe, token_bytes)
{
    ar_bpe *b = gpt2();
    char s[64];
    cr_assert_eq(ar_bpe_token_bytes(b, 50256, s, sizeof s), 13);
    cr_assert(memcmp(s, "<|endoftext|>", 13) == 0);
    cr_assert_eq(ar_bpe_token_bytes(b, 220, s, sizeof s), 1);
    cr_assert_eq(s[0], ' ');
    cr_assert_eq(ar_bpe_token_bytes(b, 198, s, sizeof s), 1);
    cr_assert_eq(s[0], '\n');
    /* 15496 is "Hello"; a short buffer gets a prefix and the whole count */
    memset(s, 0, sizeof s);
    cr_assert_eq(ar_bpe_token_bytes(b, 15496, s, 3), 5);
    cr_assert_str_eq(s, "Hel");
    cr_assert_eq(ar_bpe_token_bytes(b, -1, s, sizeof s), -1);
    cr_assert_eq(ar_bpe_token_bytes(b, 50257, s, sizeof s), -1);
    /* every byte decodes from its own token: ids 0..255 are the bytes */
    int seen[256] = {0};
    for (int32_t id = 0; id < 256; id++) {
        cr_assert_eq(ar_bpe_token_bytes(b, id, s, sizeof s), 1);
        seen[(unsigned char)s[0]]++;
    }
    for (int c = 0; c < 256; c++)
        cr_assert_eq(seen[c], 1, "byte %d", c);
    ar_bpe_free(b);
}

/* Encoding appends: earlier ids stay, *n grows by the new ones; empty text
 * adds nothing. */
Test(bpe, encode_appends)
{
    ar_bpe *b = gpt2();
    ar_err e = {{0}};
    int32_t *ids = malloc(2 * sizeof *ids);
    ids[0] = 7;
    ids[1] = 9;
    size_t n = 2;
    cr_assert_eq(ar_bpe_encode(b, "", 0, &ids, &n, &e), 0);
    cr_assert_eq(n, 2);
    cr_assert_eq(ar_bpe_encode(b, "Hello world", 11, &ids, &n, &e), 0);
    cr_assert_eq(n, 4);
    cr_assert(ids[0] == 7 && ids[1] == 9 && ids[2] == 15496 && ids[3] == 995, "%d %d %d %d", ids[0], ids[1], ids[2],
              ids[3]);
    free(ids);
    ar_bpe_free(b);
}

/* Random bytes, mostly invalid UTF-8, and a long text with pieces of every
 * kind come back byte for byte. */
Test(bpe, random_bytes_round_trip)
{
    ar_bpe *b = gpt2();
    size_t len = 1 << 16;
    unsigned char *s = malloc(len);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        /* a mixture: bytes of every value, runs of ASCII, spaces and UTF-8 */
        unsigned r = (unsigned)(x >> 32);
        s[i] = r % 4 == 0   ? (unsigned char)(r >> 8)
               : r % 4 == 1 ? (unsigned char)" \n\tab'e"[(r >> 8) % 7]
                            : (unsigned char)(0x80 | (r >> 8) % 64);
    }
    size_t n, blen;
    int32_t *ids = encode(b, s, len, &n);
    char *back = decode(b, ids, n, &blen);
    cr_assert(blen == len && memcmp(back, s, len) == 0);
    free(back);
    free(ids);
    free(s);
    ar_bpe_free(b);
}

/* ------------------------------------------------------------ merge order */

/* Merges apply by rank, the lowest first, leftmost among equals; a pair
 * that is no merge never joins, even when its concatenation is a token. */
Test(bpe, merges_by_rank_on_a_small_vocabulary)
{
    const char *enc, *mer;
    small_vocab("\"el\": 256, \"he\": 257, \"hel\": 258, \"ll\": 259, \"hell\": 260, \"lo\": 261",
                "#version: 0.2\ne l\nh e\nh el\nl l\nhe ll\nl o\n", &enc, &mer);
    ar_err e = {{0}};
    ar_bpe *b = ar_bpe_load(enc, mer, &e);
    cr_assert(b != NULL, "%s", e.msg);
    cr_assert_eq(ar_bpe_vocab_size(b), 262);
    size_t n;
    /* "hello": e-l (rank 0) first: h el l o; then h-el (rank 2): hel l o;
     * l-o (rank 5): hel lo.  "he ll" never forms: "he" never did. */
    int32_t *ids = encode(b, "hello", 5, &n);
    cr_assert(n == 2 && ids[0] == 258 && ids[1] == 261, "n %zu: %d %d", n, ids[0], n > 1 ? ids[1] : -1);
    free(ids);
    /* "lll": l-l (rank 3) at the left first: ll l */
    ids = encode(b, "lll", 3, &n);
    cr_assert(n == 2 && ids[0] == 259 && ids[1] == 'l', "n %zu", n);
    free(ids);
    /* the same on a piece long enough for the heap: 100 letters l, then o */
    char longp[102];
    memset(longp, 'l', 100);
    longp[100] = 'o';
    longp[101] = 0;
    ids = encode(b, longp, 101, &n);
    cr_assert_eq(n, 51);
    for (size_t i = 0; i < 49; i++)
        cr_assert_eq(ids[i], 259, "id %zu is %d", i, ids[i]);
    cr_assert(ids[49] == 259 && ids[50] == 'o', "%d %d", ids[49], ids[50]);
    free(ids);
    ids = encode(b, longp + 1, 100, &n); /* 99 l then o: ll x 49 then lo */
    cr_assert_eq(n, 50);
    cr_assert(ids[48] == 259 && ids[49] == 261, "%d %d", ids[48], ids[49]);
    free(ids);
    ar_bpe_free(b);
}

/* ------------------------------------------------------------ loader errors */

Test(bpe, missing_vocabulary_file)
{
    const char *enc, *mer;
    small_vocab("", "#version: 0.2\n", &enc, &mer);
    const char *nope = tu_path(dir, "nope.json");
    expect_load_error(nope, mer, "cannot read", nope, "no such file", NULL);
    expect_load_error(enc, tu_path(dir, "nope.bpe"), "cannot read", "nope.bpe", NULL);
}

Test(bpe, bad_json)
{
    const char *enc, *mer;
    small_vocab("", "", &enc, &mer);
    write_text(enc, "{\"a\": 1,");
    expect_load_error(enc, mer, enc, "at byte", NULL);
    write_text(enc, "[1, 2]");
    expect_load_error(enc, mer, enc, "expected a JSON object", NULL);
}

Test(bpe, bad_ids_and_keys)
{
    const char *enc, *mer;
    small_vocab("\"ab\": 2.5", "", &enc, &mer);
    expect_load_error(enc, mer, enc, "token 'ab'", "integer", NULL);
    small_vocab("\"ab\": -1", "", &enc, &mer);
    expect_load_error(enc, mer, enc, "integer in 0..", NULL);
    small_vocab("\"ab\": 99999999", "", &enc, &mer);
    expect_load_error(enc, mer, enc, "integer in 0..", NULL);
    small_vocab("\"ab\": 7", "", &enc, &mer);
    expect_load_error(enc, mer, enc, "id 7 is given twice", "'ab'", NULL);
    small_vocab("\"a b\": 300", "", &enc, &mer); /* a raw space is not in the alphabet (it is U+0120) */
    expect_load_error(enc, mer, enc, "'a b'", "U+0020", "byte-level alphabet", NULL);
    small_vocab("\"\": 300", "", &enc, &mer);
    expect_load_error(enc, mer, enc, "empty token", NULL);
    /* every byte needs a token */
    vocab_without('A', "", "", &enc, &mer);
    expect_load_error(enc, mer, enc, "byte 0x41", "missing", NULL);
}

Test(bpe, bad_merges)
{
    const char *enc, *mer;
    small_vocab("\"ab\": 256", "#version: 0.2\na b\nab\n", &enc, &mer);
    expect_load_error(enc, mer, tu_path(dir, "vocab.bpe"), ":3:", "expected a merge of two tokens", "'ab'", NULL);
    small_vocab("\"ab\": 256", "a b c\n", &enc, &mer);
    expect_load_error(enc, mer, ":1:", "two tokens", NULL);
    small_vocab("\"ab\": 256", "a b\n\nb a\n", &enc, &mer);
    expect_load_error(enc, mer, ":2:", "two tokens", NULL);
    small_vocab("\"ab\": 256", "a b\nab xy\n", &enc, &mer);
    expect_load_error(enc, mer, ":2:", "token 'xy' is missing from the encoder", enc, NULL);
    small_vocab("\"ab\": 256", "a b\nb a\n", &enc, &mer);
    expect_load_error(enc, mer, ":2:", "merged token 'ba' is missing", NULL);
    small_vocab("\"ab\": 256", "a b\na b\n", &enc, &mer);
    expect_load_error(enc, mer, ":2:", "given twice", "rank 0", NULL);
    /* U+0130 is in the alphabet (a byte), but "a" + that byte is no token */
    small_vocab("\"ab\": 256", "a\xc4\xb0 b\n", &enc, &mer);
    expect_load_error(enc, mer, ":1:", "missing from the encoder", NULL);
    /* the alphabet ends at U+0143 */
    small_vocab("\"ab\": 256", "a\xd0\x96 b\n", &enc, &mer);
    expect_load_error(enc, mer, ":1:", "U+0416", "byte-level alphabet", NULL);
}

/* A vocabulary without the version line, with CRLF line ends, and with
 * gaps in its ids loads; an id in a gap has no bytes. */
Test(bpe, lenient_where_harmless)
{
    const char *enc, *mer;
    small_vocab("\"ab\": 300", "a b\r\n", &enc, &mer);
    ar_err e = {{0}};
    ar_bpe *b = ar_bpe_load(enc, mer, &e);
    cr_assert(b != NULL, "%s", e.msg);
    cr_assert_eq(ar_bpe_vocab_size(b), 301);
    char s[8];
    cr_assert_eq(ar_bpe_token_bytes(b, 280, s, sizeof s), -1);
    size_t n;
    int32_t *ids = encode(b, "abab", 4, &n);
    cr_assert(n == 2 && ids[0] == 300 && ids[1] == 300);
    free(ids);
    ar_bpe_free(b);
}

/* ------------------------------------------------------------ threads */

typedef struct {
    const ar_bpe *b;
    const char *text;
    size_t len, n;
    int32_t *ids;
} job;

static void *run_job(void *p)
{
    job *j = p;
    ar_err e = {{0}};
    j->n = 0;
    j->ids = NULL;
    if (ar_bpe_encode(j->b, j->text, j->len, &j->ids, &j->n, &e) != 0)
        j->n = (size_t)-1;
    return NULL;
}

/* One loaded vocabulary, four threads encoding at once: the same ids as
 * one thread. */
Test(bpe, threads_share_a_vocabulary)
{
    ar_bpe *b = gpt2();
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/bpe/austen-1.in", srcdir());
    size_t len, n;
    char *text = tu_read_file(path, &len);
    cr_assert(text != NULL);
    int32_t *want = encode(b, text, len, &n);
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){b, text, len, 0, NULL};
        cr_assert_eq(pthread_create(&th[i], NULL, run_job, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_assert(jobs[i].n == n && memcmp(jobs[i].ids, want, n * sizeof *want) == 0, "thread %d", i);
        free(jobs[i].ids);
    }
    free(want);
    free(text);
    ar_bpe_free(b);
}

/* ------------------------------------------------------------ token files */

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A token file's header fields and its uint16 ids (malloc'd). */
static uint16_t *read_token_file(const char *path, uint32_t *magic, uint32_t *version, uint32_t *count,
                                 size_t *n)
{
    size_t len;
    unsigned char *s = (unsigned char *)tu_read_file(path, &len);
    cr_assert(s != NULL, "cannot read %s", path);
    cr_assert_geq(len, 1024, "%s is shorter than its header", path);
    *magic = le32(s);
    *version = le32(s + 4);
    *count = le32(s + 8);
    *n = (len - 1024) / 2;
    uint16_t *ids = malloc(*n * 2 + 2);
    for (size_t i = 0; i < *n; i++)
        ids[i] = (uint16_t)(s[1024 + 2 * i] | s[1024 + 2 * i + 1] << 8);
    free(s);
    return ids;
}

/* GPT-2 ids written as an llm.c file come back from formats/tokens.c's
 * reader. */
Test(bpe, token_file_writer_and_reader_agree)
{
    ar_bpe *b = gpt2();
    const char *text = "It is a truth universally acknowledged, that a single man in possession of a good "
                       "fortune, must be in want of a wife.\n";
    size_t n;
    int32_t *ids = encode(b, text, strlen(text), &n);
    const char *path = tu_path(dir, "t.bin");
    ar_err e = {{0}};
    cr_assert_eq(ar_tokens_write_llmc(path, ids, n, 0, &e), 0, "%s", e.msg);
    uint32_t magic, version, count;
    size_t m;
    uint16_t *raw = read_token_file(path, &magic, &version, &count, &m);
    cr_assert(magic == 20240520 && version == 1 && count == n && m == n);
    ar_tokens t;
    cr_assert_eq(ar_tokens_load(&t, path, &e), 0, "%s", e.msg);
    cr_assert(!t.is_bytes && t.n == n);
    for (size_t i = 0; i < n; i++)
        cr_assert(t.tok[i] == ids[i] && raw[i] == ids[i], "id %zu", i);
    ar_tokens_free(&t);
    free(raw);
    free(ids);
    ar_bpe_free(b);
}

/* ------------------------------------------------------------ the command */

static const char *bin(void)
{
    const char *b = tu_bin();
    if (!b)
        cr_skip_test("AR_BIN is not set");
    return b;
}

/* Runs `attnres ARGS` (shell text); what: 0 = stdout and stderr, 1 =
 * stdout only, 2 = stderr only.  Malloc'd output. */
static char *run(int what, int *status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static char *run(int what, int *status, const char *fmt, ...)
{
    char args[8192], cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    const char *redir = what == 1 ? " 2>/dev/null" : what == 2 ? " 2>&1 >/dev/null" : "";
    snprintf(cmd, sizeof cmd, "{ '%s' %s%s; }", bin(), args, redir);
    return tu_run(cmd, status);
}

static void expect(char *out, int st, int want_st, const char *needle)
{
    cr_assert_eq(st, want_st, "exit status %d, expected %d; output:\n%s", st, want_st, out);
    if (needle)
        cr_assert(strstr(out, needle) != NULL, "expected '%s' in:\n%s", needle, out);
    free(out);
}

/* Runs attnres (run's what and arguments) and checks its exit status and
 * that its output holds needle (NULL: anything). */
#define EXPECT(what, want_st, needle, ...)                                                                     \
    do {                                                                                                       \
        int st_;                                                                                               \
        char *out_ = run(what, &st_, __VA_ARGS__);                                                             \
        expect(out_, st_, want_st, needle);                                                                    \
    } while (0)

static int same_file(const char *a, const char *b)
{
    size_t na, nb;
    char *x = tu_read_file(a, &na), *y = tu_read_file(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* A text file in, an llm.c file out with the library's ids, and back. */
Test(tokenize_cli, encodes_and_decodes_a_file)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/bpe/invalid-mixed.in", srcdir());
    const char *out = tu_path(dir, "out.bin"), *back = tu_path(dir, "back.txt");
    int st;
    char *o = run(1, &st, "tokenize '%s' -o '%s'", path, out);
    cr_assert_eq(st, 0, "%s", o);
    cr_assert(strstr(o, "19 tokens (uint16) from 35 bytes") != NULL, "%s", o);
    free(o);
    uint32_t magic, version, count;
    size_t n, nwant;
    uint16_t *ids = read_token_file(out, &magic, &version, &count, &n);
    cr_assert(magic == 20240520 && version == 1 && count == 19 && n == 19, "%u %u %u %zu", magic, version, count, n);
    snprintf(path, sizeof path, "%s/tests/fixtures/bpe/invalid-mixed.ids", srcdir());
    int32_t *want = read_ids(path, &nwant);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(ids[i], want[i], "id %zu", i);
    free(want);
    free(ids);
    snprintf(path, sizeof path, "%s/tests/fixtures/bpe/invalid-mixed.in", srcdir());
    EXPECT(0, 0, NULL, "tokenize --decode '%s' -o '%s'", out, back);
    cr_assert(same_file(back, path), "decoding to a file does not give the input back");
    char *text = run(1, &st, "tokenize --decode '%s'", out);
    size_t len;
    char *in = tu_read_file(path, &len);
    cr_assert(st == 0 && strlen(text) == len && memcmp(text, in, len) == 0, "decoding to stdout: '%s'", text);
    free(in);
    free(text);
}

/* Several inputs, one gzip-compressed: their ids one after another, and
 * decoding gives the files concatenated. */
Test(tokenize_cli, several_inputs_and_gzip)
{
    const char *a = tu_path(dir, "a.txt"), *bgz = tu_path(dir, "b.txt.gz"), *out = tu_path(dir, "ab.bin");
    write_text(a, "First file.\n");
    gzFile g = gzopen(bgz, "wb");
    cr_assert(g != NULL);
    gzputs(g, "Second file: caf\xc3\xa9!");
    gzclose(g);
    int st;
    EXPECT(0, 0, NULL, "tokenize '%s' '%s' -o '%s'", a, bgz, out);
    ar_bpe *b = gpt2();
    size_t na, nb, n;
    int32_t *ia = encode(b, "First file.\n", 12, &na), *ib = encode(b, "Second file: caf\xc3\xa9!", 19, &nb);
    uint32_t magic, version, count;
    uint16_t *ids = read_token_file(out, &magic, &version, &count, &n);
    cr_assert(count == na + nb && n == na + nb);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(ids[i], i < na ? ia[i] : ib[i - na], "id %zu", i);
    char *text = run(1, &st, "tokenize --decode '%s'", out);
    cr_assert_str_eq(text, "First file.\nSecond file: caf\xc3\xa9!");
    free(text);
    free(ids);
    free(ia);
    free(ib);
    ar_bpe_free(b);
}

/* --vocab/--merges with an id above 65535 give llm.c's uint32 layout. */
Test(tokenize_cli, large_vocabulary_writes_uint32)
{
    const char *enc, *mer, *in = tu_path(dir, "in.txt"), *out = tu_path(dir, "out.bin");
    small_vocab("\"ab\": 70000", "#version: 0.2\na b\n", &enc, &mer);
    write_text(in, "abab");
    EXPECT(0, 0, "2 tokens (uint32)", "tokenize --vocab '%s' --merges '%s' '%s' -o '%s'", enc, mer, in, out);
    size_t len;
    unsigned char *s = (unsigned char *)tu_read_file(out, &len);
    cr_assert(len == 1024 + 8 && le32(s) == 20240801 && le32(s + 4) == 7 && le32(s + 8) == 2);
    cr_assert(le32(s + 1024) == 70000 && le32(s + 1028) == 70000);
    free(s);
    EXPECT(1, 0, "abab", "tokenize --decode --vocab '%s' --merges '%s' '%s'", enc, mer, out);
}

Test(tokenize_cli, errors)
{
    const char *in = tu_path(dir, "in.txt"), *out = tu_path(dir, "out.bin"), *enc, *mer;
    write_text(in, "some text");
    /* vocabulary files: missing, malformed */
    EXPECT(2, 1, "attnres: error: cannot read '", "tokenize --vocab '%s/nope.json' --merges '%s/nope.bpe' '%s' -o '%s'",
           dir, dir, in, out);
    small_vocab("", "", &enc, &mer);
    write_text(enc, "{\"a\": ");
    EXPECT(2, 1, "encoder.json': at byte", "tokenize --vocab '%s' --merges '%s' '%s' -o '%s'", enc, mer, in, out);
    /* inputs: unreadable, empty, not a token file, an id past the vocabulary */
    EXPECT(2, 1, "missing.txt': no such file", "tokenize '%s/missing.txt' -o '%s'", dir, out);
    write_text(tu_path(dir, "empty.txt"), "");
    EXPECT(2, 1, "holds no text", "tokenize '%s/empty.txt' -o '%s'", dir, out);
    EXPECT(2, 1, "is not a token file", "tokenize --decode '%s'", in);
    int32_t big[2] = {50256, 50257};
    ar_err e = {{0}};
    cr_assert_eq(ar_tokens_write_llmc(out, big, 2, 0, &e), 0);
    EXPECT(2, 1, "token 1 is 50257, outside the vocabulary", "tokenize --decode '%s'", out);
    /* the command line */
    EXPECT(2, 2, "missing '-o OUT.bin'", "tokenize '%s'", in);
    EXPECT(2, 2, "missing the input", "tokenize -o '%s'", out);
    EXPECT(2, 2, "'--vocab' needs '--merges'", "tokenize --vocab x.json '%s' -o '%s'", in, out);
    EXPECT(2, 2, "one token file", "tokenize --decode a.bin b.bin");
    EXPECT(2, 2, "unknown option '--bogus'", "tokenize --bogus");
    EXPECT(2, 2, "'-o' needs a value", "tokenize '%s' -o", in);
    EXPECT(2, 2, "'--read-mb'", "tokenize --read-mb 0 '%s' -o '%s'", in, out);
    EXPECT(2, 2, "'--read-mb' is at most 65536", "tokenize --read-mb 65537 '%s' -o '%s'", in, out);
    EXPECT(2, 2, "'--read-mb' is for encoding", "tokenize --read-mb 4 --decode '%s'", out);
}

/* The usage line is the man page's SYNOPSIS (tests/test_cli.c's rule), and
 * --help shows the page. */
Test(tokenize_cli, usage_matches_man_synopsis)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/man/attnres-tokenize.1", srcdir());
    char *page = tu_read_file(path, NULL);
    cr_assert(page != NULL);
    char *p = strstr(page, "\n.SH SYNOPSIS\n.nf\n");
    cr_assert(p != NULL);
    p += strlen("\n.SH SYNOPSIS\n.nf\n");
    char *end = strstr(p, "\n.fi\n");
    cr_assert(end != NULL);
    char syn[1024];
    size_t k = 0;
    for (; p < end && k + 1 < sizeof syn; p++) {
        if (p[0] == '\\' && p[1] == 'f') {
            p += 2;
            continue;
        }
        if (p[0] == '\\' && p[1] == '-') {
            syn[k++] = '-';
            p++;
            continue;
        }
        syn[k++] = *p == '\n' ? ' ' : *p;
    }
    syn[k] = 0;
    int st;
    char *err = run(2, &st, "tokenize --bogus");
    cr_assert_eq(st, 2);
    char *u = strstr(err, "\nusage: ");
    cr_assert(u != NULL, "%s", err);
    u += strlen("\nusage: ");
    u[strcspn(u, "\n")] = 0;
    cr_assert_str_eq(u, syn);
    free(err);
    char *help = run(1, &st, "tokenize --help");
    cr_assert(st == 0 && strstr(help, "GPT") != NULL && strstr(help, "Byte") != NULL, "%s", help);
    free(help);
    free(page);
}

/* ------------------------------------------------------------ shards and threads */

/* A book-like text of about `bytes` bytes (malloc'd, *len): paragraphs of
 * hard-wrapped lines of words, numbers, punctuation and contractions, where
 * most line ends are the kind a chunk must not be cut at (a space or
 * CR before the '\n', a blank line, an indent, a tab, non-ASCII or
 * invalid UTF-8 on either side, a no-break or ideographic space), so that
 * tokenize's cuts (cmd/tokenize_encode.c) meet them wherever they fall. */
static char *book_text(size_t bytes, unsigned seed, size_t *len)
{
    static const char *const words[] = {
        "the", "of", "and", "Elizabeth", "Darcy's", "was", "not", "in", "1811", "house", "caf\xc3\xa9", "it's",
        "said", "very", "\xe2\x80\x94", "who", "\"Indeed,\"", "they'll", "(perhaps)", "na\xc3\xafve", "42.5", "I'm",
        "letters", "would", "!", "well;", "\xce\xb1\xce\xb2\xce\xb3", "walk", "Mr.", "Bennet", "3rd", "she'd"};
    /* most are no place to cut: white space before the '\n' or after it.
     * With GPT-2's merges a wrong cut shows most often after the first of
     * several '\n' (whole, "\n\n\n" is the ids of "\n\n" and "\n"; cut
     * after its first '\n', three times that of "\n"), so those come most */
    static const char *const ends[] = {
        "\n",         "\n\n\n",        "\n\n  ",    "\n\n\t",    " \n\n\n",      "\n\n\n\n",  ".\n\n  ",
        "\n\n\n",     "\n\n  ",       "\n\n\t",    " \n\n\n",    "\n\n\n\n",     " \n",      "\r\n",
        "  \n",       "\xc2\xa0\n",    "\t\n",      "\r\n\r\n",  "\n ",          "\n\t",     "\n's ",
        "\n\xff",     "\xff\n",       "\n\xe3\x80\x80", "\n\xc3\xa9", "\n\xc2\xa0", "\xe3\x80\x80\n"};
    size_t cap = bytes + 256, k = 0, col = 0;
    char *s = malloc(cap);
    uint32_t x = seed;
    while (k < bytes) {
        x = x * 1103515245u + 12345u;
        const char *w = words[(x >> 16) % (sizeof words / sizeof *words)];
        size_t n = strlen(w);
        if (col > 0)
            s[k++] = ' ';
        memcpy(s + k, w, n);
        k += n;
        col += n + 1;
        if (col > 60 + (x >> 8) % 20) {
            x = x * 1103515245u + 12345u;
            const char *end = ends[(x >> 16) % (sizeof ends / sizeof *ends)];
            memcpy(s + k, end, strlen(end));
            k += strlen(end);
            col = 0;
        }
    }
    *len = k;
    return s;
}

/* The ids of a uint16 token file whose header count matches its size. */
static uint16_t *shard_ids(const char *path, size_t *n)
{
    uint32_t magic, version, count;
    uint16_t *ids = read_token_file(path, &magic, &version, &count, n);
    cr_assert(magic == 20240520 && version == 1 && count == *n, "%s: magic %u version %u count %u, %zu ids", path,
              magic, version, count, *n);
    return ids;
}

/* The names in directory d, sorted, one a line (malloc'd). */
static char *listing(const char *d)
{
    int st;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "ls -A '%s'", d);
    char *out = tu_run(cmd, &st);
    cr_assert_eq(st, 0, "%s", out);
    return out;
}

/* val + train shards of a small text: the val shard holds the first
 * --val-tokens ids, the train shards --shard-tokens each (the last fewer),
 * and together they are the single file's ids in order. */
Test(tokenize_cli, shards_concatenate_to_the_single_file)
{
    size_t len;
    char *text = book_text(40000, 7, &len);
    char in[4096], one[4096];
    snprintf(in, sizeof in, "%s/book.txt", dir);
    snprintf(one, sizeof one, "%s/one.bin", dir);
    tu_write_file(in, text, len);
    free(text);
    EXPECT(0, 0, NULL, "tokenize '%s' -o '%s'", in, one);
    size_t n;
    uint16_t *all = shard_ids(one, &n);
    cr_assert_gt(n, 8000, "only %zu tokens", n);
    /* -o a path ending in '/': made */
    int st;
    char *err = run(2, &st, "tokenize '%s' -o '%s/sh/' --shard-tokens 1000 --val-tokens 2500", in, dir);
    cr_assert_eq(st, 0, "%s", err);
    size_t ntrain = (n - 2500 + 999) / 1000;
    char want[256];
    snprintf(want, sizeof want, "in %zu shards (1 val, %zu train)", ntrain + 1, ntrain);
    cr_assert(strstr(err, "tokenize: ") && strstr(err, want), "expected '%s' in:\n%s", want, err);
    free(err);
    char sh[4096];
    snprintf(sh, sizeof sh, "%s/sh", dir);
    size_t at = 0, m;
    uint16_t *v = shard_ids(tu_path(sh, "val_000000.bin"), &m);
    cr_assert_eq(m, 2500);
    cr_assert(memcmp(v, all, m * 2) == 0, "the val shard is not the first 2500 ids");
    at += m;
    free(v);
    for (size_t k = 1; k <= ntrain; k++) {
        char name[64];
        snprintf(name, sizeof name, "train_%06zu.bin", k);
        uint16_t *t = shard_ids(tu_path(sh, name), &m);
        cr_assert_eq(m, k < ntrain ? 1000 : n - 2500 - 1000 * (ntrain - 1), "%s: %zu ids", name, m);
        cr_assert(memcmp(t, all + at, m * 2) == 0, "%s is not the single file's ids %zu..", name, at);
        at += m;
        free(t);
    }
    cr_assert_eq(at, n);
    /* nothing else there: no temporary file, no further shard */
    char *ls = listing(sh);
    size_t lines = 0;
    for (char *p = ls; *p; p++)
        lines += *p == '\n';
    cr_assert_eq(lines, ntrain + 1, "%s", ls);
    free(ls);
    /* an existing directory (no '/'), no val shard: train shards from
     * train_000001.bin, and the earlier run's shards that this one does not
     * replace (its val shard and its later train shards) are gone */
    EXPECT(2, 0, "removed", "tokenize '%s' -o '%s' --shard-tokens 4000", in, sh);
    ls = listing(sh);
    snprintf(want, sizeof want, "train_%06zu.bin\n", (n + 3999) / 4000);
    cr_assert(strncmp(ls, "train_000001.bin\n", 17) == 0 && strstr(ls, want) && !strstr(ls, "val_"), "%s", ls);
    snprintf(want, sizeof want, "train_%06zu.bin", (n + 3999) / 4000 + 1);
    cr_assert(!strstr(ls, want), "%s", ls);
    free(ls);
    uint16_t *t = shard_ids(tu_path(sh, "train_000001.bin"), &m);
    cr_assert(m == 4000 && memcmp(t, all, m * 2) == 0);
    free(t);
    free(all);
}

/* The uint16 ids of the token file at path are want[0..n) */
static void expect_ids(const char *path, const int32_t *want, size_t n)
{
    size_t m, first = 0;
    uint16_t *got = shard_ids(path, &m);
    while (first < m && first < n && got[first] == want[first])
        first++;
    cr_assert(m == n && first == n, "%zu ids, ar_bpe_encode %zu; first difference at %zu", m, n, first);
    free(got);
}

/* --threads 1, 2 and 4 give the same bytes, one file or shards, and they
 * are ar_bpe_encode's ids for the whole text: a text of several chunks
 * whose line ends are mostly places no chunk may be cut at. */
Test(tokenize_cli, threads_give_identical_files)
{
    size_t len, n;
    char *text = book_text(2000000, 11, &len);
    const char *in = tu_path(dir, "book.txt");
    tu_write_file(in, text, len);
    ar_bpe *b = gpt2();
    int32_t *want = encode(b, text, len, &n);
    ar_bpe_free(b);
    free(text);
    static const int threads[] = {1, 2, 4};
    char one[3][4096], shard[3][4096];
    for (int i = 0; i < 3; i++) {
        snprintf(one[i], sizeof one[i], "%s/t%d.bin", dir, threads[i]);
        snprintf(shard[i], sizeof shard[i], "%s/s%d/train_000003.bin", dir, threads[i]);
        EXPECT(0, 0, NULL, "tokenize --threads %d '%s' -o '%s'", threads[i], in, one[i]);
        EXPECT(0, 0, NULL, "tokenize --threads %d '%s' -o '%s/s%d/' --shard-tokens 100000 --val-tokens 12345",
               threads[i], in, dir, threads[i]);
    }
    expect_ids(one[0], want, n);
    free(want);
    for (int i = 1; i < 3; i++) {
        cr_assert(same_file(one[0], one[i]), "--threads %d differs from --threads 1", threads[i]);
        cr_assert(same_file(shard[0], shard[i]), "--threads %d's shard 3 differs", threads[i]);
    }
}

/* --read-mb 1 reads and encodes a 2.6 MB text (plain and gzip-compressed)
 * a MiB at a time, carrying what follows each block's last safe cut into
 * the next, and growing a block that holds none (a 1.2 MB line): the ids
 * of ar_bpe_encode on the whole text, one file or shards. */
Test(tokenize_cli, read_in_blocks_gives_the_whole_texts_ids)
{
    size_t len, n;
    char *book = book_text(1400000, 5, &len);
    size_t line = 1200000, total = len + line + len;
    char *text = malloc(total);
    memcpy(text, book, len);
    for (size_t k = 0; k < line; k++) /* one line of words, no newline */
        text[len + k] = "ab cd, "[k % 7];
    memcpy(text + len + line, book, len);
    free(book);
    const char *in = tu_path(dir, "long.txt"), *gz = tu_path(dir, "long.txt.gz");
    tu_write_file(in, text, total);
    gzFile g = gzopen(gz, "wb");
    cr_assert(g && gzwrite(g, text, (unsigned)total) == (int)total && gzclose(g) == Z_OK);
    ar_bpe *b = gpt2();
    int32_t *want = encode(b, text, total, &n);
    ar_bpe_free(b);
    free(text);
    char whole[4096], plain[4096], zipped[4096];
    snprintf(whole, sizeof whole, "%s/whole.bin", dir);
    snprintf(plain, sizeof plain, "%s/blocks.bin", dir);
    snprintf(zipped, sizeof zipped, "%s/blocks-gz.bin", dir);
    EXPECT(0, 0, NULL, "tokenize '%s' -o '%s'", in, whole);
    EXPECT(0, 0, NULL, "tokenize --read-mb 1 --threads 2 '%s' -o '%s'", in, plain);
    EXPECT(0, 0, NULL, "tokenize --read-mb 1 '%s' -o '%s'", gz, zipped);
    EXPECT(0, 0, NULL, "tokenize --read-mb 1 '%s' -o '%s/sh/' --shard-tokens 100000", in, dir);
    expect_ids(plain, want, n);
    free(want);
    size_t m;
    cr_assert(same_file(whole, plain), "--read-mb 1 differs from reading the text whole");
    cr_assert(same_file(plain, zipped), "the gzip-compressed text differs");
    uint16_t *s1 = shard_ids(tu_path(dir, "sh/train_000001.bin"), &m), *all = shard_ids(plain, &n);
    cr_assert(m == 100000 && memcmp(s1, all, m * 2) == 0, "the first shard is not the file's first ids");
    free(s1);
    free(all);
}

/* --eot puts <|endoftext|> (50256) before each input, as llm.c does, in
 * both modes. */
Test(tokenize_cli, eot_before_each_document)
{
    const char *a = tu_path(dir, "a.txt"), *c = tu_path(dir, "c.txt"), *out = tu_path(dir, "ac.bin");
    write_text(a, "First file.\n");
    write_text(c, "Second file.");
    EXPECT(0, 0, NULL, "tokenize --eot '%s' '%s' -o '%s'", a, c, out);
    ar_bpe *b = gpt2();
    size_t na, nc, n;
    int32_t *ia = encode(b, "First file.\n", 12, &na), *ic = encode(b, "Second file.", 12, &nc);
    ar_bpe_free(b);
    uint16_t *ids = shard_ids(out, &n);
    cr_assert_eq(n, na + nc + 2);
    cr_assert(ids[0] == 50256 && ids[1 + na] == 50256);
    for (size_t i = 0; i < na; i++)
        cr_assert_eq(ids[1 + i], ia[i]);
    for (size_t i = 0; i < nc; i++)
        cr_assert_eq(ids[2 + na + i], ic[i]);
    EXPECT(0, 0, NULL, "tokenize --eot '%s' '%s' -o '%s/eot/' --val-tokens 1", a, c, dir);
    size_t m;
    uint16_t *v = shard_ids(tu_path(dir, "eot/val_000000.bin"), &m);
    cr_assert_eq(m, 1);
    uint16_t *t = shard_ids(tu_path(dir, "eot/train_000001.bin"), &m);
    cr_assert(v[0] == 50256 && m == n - 1 && memcmp(t, ids + 1, m * 2) == 0);
    free(v);
    free(t);
    free(ids);
    free(ia);
    free(ic);
}

Test(tokenize_cli, shard_option_errors)
{
    const char *in = tu_path(dir, "in.txt");
    write_text(in, "some text\n");
    EXPECT(2, 2, "'--shard-tokens' expects an integer >= 1, got '0'", "tokenize '%s' -o '%s/d/' --shard-tokens 0", in,
           dir);
    EXPECT(2, 2, "'--shard-tokens' expects an integer >= 1, got 'x'", "tokenize '%s' -o '%s/d/' --shard-tokens x", in,
           dir);
    EXPECT(2, 2, "'--val-tokens' expects an integer >= 0, got '-1'", "tokenize '%s' -o '%s/d/' --val-tokens -1", in,
           dir);
    EXPECT(2, 2, "'--shard-tokens' needs '-o DIR/'", "tokenize '%s' -o '%s/x.bin' --shard-tokens 10", in, dir);
    EXPECT(2, 2, "'--val-tokens' needs '-o DIR/'", "tokenize '%s' -o '%s/x.bin' --val-tokens 10", in, dir);
    EXPECT(2, 2, "'--val-tokens' is for encoding", "tokenize --decode '%s' --val-tokens 10", in);
    EXPECT(2, 2, "'--eot' is for encoding", "tokenize --decode '%s' --eot", in);
    EXPECT(2, 2, "'--threads' expects an integer >= 0", "tokenize '%s' -o '%s/d/' --threads -2", in, dir);
    /* every token in the val shard: refused, nothing written, the
     * directory it would have made not left behind */
    EXPECT(2, 1, "'--val-tokens 3' takes all 3 tokens", "tokenize '%s' -o '%s/d/' --val-tokens 3", in, dir);
    char *ls = listing(dir);
    cr_assert(strstr(ls, "d\n") == NULL, "%s", ls);
    free(ls);
}

/* A run that fails midway keeps the shards it finished, whole, leaves no
 * part of the next, and says which were written. */
Test(tokenize_cli, failure_leaves_whole_shards_only)
{
    size_t len;
    char *text = book_text(20000, 3, &len);
    const char *in = tu_path(dir, "book.txt");
    tu_write_file(in, text, len);
    free(text);
    /* a directory where shard 2 goes: its rename fails (even for root) */
    char sh[4096], in_way[4200];
    snprintf(sh, sizeof sh, "%s/sh", dir);
    snprintf(in_way, sizeof in_way, "%s/train_000002.bin", sh);
    cr_assert_eq(mkdir(sh, 0777), 0);
    cr_assert_eq(mkdir(in_way, 0777), 0);
    write_text(tu_path(in_way, "keep"), "x");
    int st;
    char *err = run(2, &st, "tokenize '%s' -o '%s' --shard-tokens 1000", in, sh);
    cr_assert_eq(st, 1, "%s", err);
    cr_assert(strstr(err, "attnres: error: cannot write '") && strstr(err, "train_000002.bin'") &&
                  strstr(err, "train_000001.bin' was written and is complete"),
              "%s", err);
    free(err);
    char *ls = listing(sh);
    cr_assert_str_eq(ls, "train_000001.bin\ntrain_000002.bin\n");
    free(ls);
    size_t m;
    free(shard_ids(tu_path(sh, "train_000001.bin"), &m));
    cr_assert_eq(m, 1000);
    /* an input that cannot be read after some shards */
    err = run(2, &st, "tokenize '%s' '%s/missing.txt' -o '%s/sh2/' --shard-tokens 1000 --val-tokens 500", in, dir,
              dir);
    cr_assert(st == 1 && strstr(err, "missing.txt': no such file") &&
                  strstr(err, "shards '") && strstr(err, "sh2/val_000000.bin' to '"),
              "%s", err);
    free(err);
    /* an unwritable directory (not for root, whom permissions do not stop):
     * nothing written, no temporary file */
    if (geteuid() != 0) {
        char ro[4096];
        snprintf(ro, sizeof ro, "%s/ro", dir);
        cr_assert_eq(mkdir(ro, 0555), 0);
        EXPECT(2, 1, "no shard was written", "tokenize '%s' -o '%s' --shard-tokens 1000", in, ro);
        ls = listing(ro);
        cr_assert_str_eq(ls, "");
        free(ls);
    }
}
