/* Safetensors: round trips, byte-stable rewrites, atomic replacement, and
 * one rejection test per validation rule with the message it must give. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/safetensors.h"
#include "testutil.h"

/* --- fixtures ------------------------------------------------------ */

/* One scratch directory per test (each test runs in its own process),
 * emptied and removed by the suite's teardown. */
static char scratch[4096];

static const char *dir(void)
{
    if (!scratch[0])
        snprintf(scratch, sizeof scratch, "%s", tu_tmpdir());
    return scratch;
}

static void teardown(void)
{
    if (!scratch[0])
        return;
    DIR *d = opendir(scratch);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            const char *p = tu_path(scratch, de->d_name);
            if (unlink(p) != 0)
                rmdir(p);
        }
    if (d)
        closedir(d);
    rmdir(scratch);
}

TestSuite(safetensors, .fini = teardown);

static float a_data[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
static int32_t idx_data[4] = {7, -1, 2147483647, -2147483647 - 1};
static uint8_t u_data[5] = {0, 1, 127, 128, 255}; /* odd size: later offsets not 4-aligned */
static float s_data[1] = {42.0f};
static float b_data[3] = {0.1f, 0.2f, 0.3f};

static const char *const sample_meta[] = {"config", "model:\n  d_model: 16\n", "step", "12", NULL};

static int sample_entries(ar_st_entry *t)
{
    t[0] = (ar_st_entry){"a", "F32", 2, {2, 3}, a_data};
    t[1] = (ar_st_entry){"idx", "I32", 1, {4}, idx_data};
    t[2] = (ar_st_entry){"u", "U8", 1, {5}, u_data};
    t[3] = (ar_st_entry){"s", "F32", 0, {0}, s_data};
    t[4] = (ar_st_entry){"b", "F32", 1, {3}, b_data};
    t[5] = (ar_st_entry){"empty", "F32", 2, {0, 4}, NULL};
    return 6;
}

static void write_sample(const char *path)
{
    ar_st_entry t[8];
    ar_err e = {{0}};
    int n = sample_entries(t);
    cr_assert_eq(ar_st_write(path, t, n, sample_meta, &e), 0, "%s", e.msg);
}

static uint64_t header_len(const char *bytes)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | (unsigned char)bytes[i];
    return v;
}

/* A hand-made file: length prefix, the given header text, data_len bytes. */
static const char *craft(const char *header, size_t data_len)
{
    size_t h = strlen(header), n = 8 + h + data_len;
    unsigned char *b = calloc(1, n);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    const char *path = tu_path(dir(), "crafted.safetensors");
    tu_write_file(path, b, n);
    free(b);
    return path;
}

/* Reading path must fail with a message containing want and the path. */
static void expect_reject(const char *path, const char *want)
{
    ar_st_file f;
    ar_err e = {{0}};
    cr_assert_eq(ar_st_read(&f, path, &e), -1, "accepted, expected '%s'", want);
    cr_expect(strstr(e.msg, want) != NULL, "message '%s' lacks '%s'", e.msg, want);
    char quoted[4200];
    snprintf(quoted, sizeof quoted, "'%s'", path);
    cr_expect(strncmp(e.msg, quoted, strlen(quoted)) == 0, "message '%s' does not start with the path", e.msg);
    cr_expect(f.n == 0 && f.t == NULL && f.data == NULL && f.path == NULL, "failed read must leave f empty");
}

static void expect_header_reject(const char *header, size_t data_len, const char *want)
{
    expect_reject(craft(header, data_len), want);
}

static int count_entries(void)
{
    DIR *d = opendir(dir());
    cr_assert(d != NULL);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

#define TENSOR(name, dtype, shape, off) "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" off "}"

/* --- round trips --------------------------------------------------- */

Test(safetensors, round_trip)
{
    const char *path = tu_path(dir(), "m.safetensors");
    write_sample(path);
    ar_st_file f;
    ar_err e = {{0}};
    cr_assert_eq(ar_st_read(&f, path, &e), 0, "%s", e.msg);
    cr_assert_eq(f.n, 6);
    const char *names[] = {"a", "idx", "u", "s", "b", "empty"};
    for (int i = 0; i < 6; i++)
        cr_assert_str_eq(f.t[i].name, names[i], "file order must be kept");
    cr_assert_str_eq(ar_st_find(&f, "idx")->dtype, "I32");
    cr_assert_eq(ar_st_find(&f, "s")->ndim, 0);
    cr_assert_eq(ar_st_find(&f, "b")->ndim, 1);
    cr_assert_eq(ar_st_find(&f, "a")->shape[1], 3);
    cr_assert_null(ar_st_find(&f, "nope"));
    cr_assert_eq(f.data_size, 24 + 16 + 5 + 4 + 12);

    const ar_st_tensor *ti = ar_st_find(&f, "idx");
    cr_assert_eq(memcmp(f.data + ti->begin, idx_data, sizeof idx_data), 0);
    const ar_st_tensor *tu = ar_st_find(&f, "u");
    cr_assert_eq(memcmp(f.data + tu->begin, u_data, sizeof u_data), 0);

    float a[6], s, b[3];
    cr_assert_eq(ar_st_get_f32(&f, "a", (int64_t[]){2, 3}, 2, a, &e), 0, "%s", e.msg);
    cr_assert_eq(memcmp(a, a_data, sizeof a), 0);
    cr_assert_eq(ar_st_get_f32(&f, "s", NULL, 0, &s, &e), 0, "%s", e.msg);
    cr_assert_eq(s, 42.0f);
    cr_assert_eq(ar_st_get_f32(&f, "b", (int64_t[]){3}, 1, b, &e), 0, "%s", e.msg);
    cr_assert_eq(memcmp(b, b_data, sizeof b), 0, "unaligned offset after the U8 tensor");

    cr_assert_eq(f.nmeta, 2);
    cr_assert_str_eq(ar_st_meta(&f, "config"), "model:\n  d_model: 16\n");
    cr_assert_str_eq(ar_st_meta(&f, "step"), "12");
    cr_assert_null(ar_st_meta(&f, "absent"));
    ar_st_free(&f);
    cr_assert_eq(f.n, 0);
}

Test(safetensors, header_layout)
{
    const char *path = tu_path(dir(), "m.safetensors");
    write_sample(path);
    size_t n;
    char *b = tu_read_file(path, &n);
    uint64_t h = header_len(b);
    cr_assert_eq((8 + h) % 8, 0, "data area must start at a multiple of 8");
    cr_assert(8 + h <= n);
    cr_assert_eq(strncmp(b + 8, "{\"__metadata__\":{\"config\":", 26), 0, "metadata comes first: %.60s", b + 8);
    char *hdr = strndup(b + 8, (size_t)h);
    cr_assert(strstr(hdr, "\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]}"), "%s", hdr);
    cr_assert(strstr(hdr, "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[45,49]}"), "%s", hdr);
    cr_assert(strstr(hdr, "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[61,61]}"), "%s", hdr);
    size_t end = strlen(hdr);
    while (end && hdr[end - 1] == ' ')
        end--;
    cr_assert(end > 0 && hdr[end - 1] == '}' && h - end < 8, "padding is at most 7 spaces");
    free(hdr);
    free(b);
}

Test(safetensors, rewrite_is_byte_identical)
{
    const char *p1 = tu_path(dir(), "one.safetensors"), *p2 = tu_path(dir(), "two.safetensors");
    write_sample(p1);
    ar_st_file f;
    ar_err e = {{0}};
    cr_assert_eq(ar_st_read(&f, p1, &e), 0, "%s", e.msg);
    ar_st_entry t[8];
    for (int i = 0; i < f.n; i++) {
        t[i] = (ar_st_entry){f.t[i].name, f.t[i].dtype, f.t[i].ndim, {0}, f.data + f.t[i].begin};
        memcpy(t[i].shape, f.t[i].shape, sizeof t[i].shape);
    }
    const char *meta[16];
    int k = 0;
    for (int i = 0; i < f.nmeta; i++) {
        meta[k++] = f.meta_key[i];
        meta[k++] = f.meta_val[i];
    }
    meta[k] = NULL;
    cr_assert_eq(ar_st_write(p2, t, f.n, meta, &e), 0, "%s", e.msg);
    ar_st_free(&f);
    size_t n1, n2;
    char *b1 = tu_read_file(p1, &n1), *b2 = tu_read_file(p2, &n2);
    cr_assert_eq(n1, n2);
    cr_assert_eq(memcmp(b1, b2, n1), 0);
    free(b1);
    free(b2);
}

Test(safetensors, no_tensors_no_metadata)
{
    const char *path = tu_path(dir(), "empty.safetensors");
    ar_err e = {{0}};
    cr_assert_eq(ar_st_write(path, NULL, 0, NULL, &e), 0, "%s", e.msg);
    size_t n;
    char *b = tu_read_file(path, &n);
    cr_assert_eq(n, 16);
    cr_assert_eq(memcmp(b + 8, "{}      ", 8), 0);
    free(b);
    ar_st_file f;
    cr_assert_eq(ar_st_read(&f, path, &e), 0, "%s", e.msg);
    cr_assert(f.n == 0 && f.nmeta == 0 && f.data_size == 0);
    ar_st_free(&f);
}

Test(safetensors, accepts_reference_style_zero_size_and_unordered_entries)
{
    /* Header order differs from offset order and a zero-size tensor sits at
     * the same offset as its neighbour: both are legal. */
    const char *h = "{" TENSOR("b", "F32", "[1]", "[4,8]") "," TENSOR("z", "I8", "[0]", "[4,4]") ","
                    TENSOR("a", "F32", "[1]", "[0,4]") ",\"__metadata__\":{}}  ";
    const char *path = craft(h, 8);
    ar_st_file f;
    ar_err e = {{0}};
    cr_assert_eq(ar_st_read(&f, path, &e), 0, "%s", e.msg);
    cr_assert_eq(f.n, 3);
    cr_assert_str_eq(f.t[0].name, "b");
    ar_st_free(&f);
}

/* --- rejections: file structure ------------------------------------ */

Test(safetensors, rejects_truncated_files)
{
    const char *path = tu_path(dir(), "m.safetensors"), *cut = tu_path(dir(), "cut.safetensors");
    write_sample(path);
    size_t n;
    char *b = tu_read_file(path, &n);
    size_t h = (size_t)header_len(b);
    struct {
        size_t len;
        const char *msg;
    } cases[] = {
        {0, "file is 0 bytes, too short for the 8-byte header length"},
        {3, "file is 3 bytes"},
        {7, "file is 7 bytes"},
        {8, "exceeds file size 8"},
        {8 + h / 2, "exceeds file size"},
        {8 + h - 1, "exceeds file size"},
        {8 + h, "exceeds data area size 0"},
        {8 + h + 30, "exceeds data area size 30"},
        {n - 1, "exceeds data area size"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tu_write_file(cut, b, cases[i].len);
        expect_reject(cut, cases[i].msg);
    }
    free(b);
}

Test(safetensors, rejects_header_length_above_limit)
{
    unsigned char b[16] = {0};
    uint64_t h = 200ull << 20;
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(h >> (8 * i));
    const char *path = tu_path(dir(), "big.safetensors");
    tu_write_file(path, b, sizeof b);
    expect_reject(path, "header length 209715200 exceeds the maximum 104857600");
}

Test(safetensors, rejects_header_length_past_end_of_file)
{
    unsigned char b[100] = {0};
    b[0] = 0xe8, b[1] = 0x03; /* 1000 */
    const char *path = tu_path(dir(), "short.safetensors");
    tu_write_file(path, b, sizeof b);
    expect_reject(path, "header length 1000 exceeds file size 100");
}

Test(safetensors, rejects_missing_file_and_directory)
{
    expect_reject(tu_path(dir(), "absent.safetensors"), "cannot open: no such file or directory");
    expect_reject(dir(), "not a regular file");
}

Test(safetensors, rejects_non_object_header)
{
    expect_header_reject("[1, 2]  ", 0, "header is a JSON array, expected an object");
    expect_header_reject("\"x\"", 0, "header is a JSON string, expected an object");
    expect_header_reject("{\"a\": ", 0, "header: at byte 6: expected a value");
    expect_header_reject("{} x", 0, "header: at byte 3: expected end of input");
}

Test(safetensors, rejects_bad_metadata)
{
    expect_header_reject("{\"__metadata__\":{\"step\":1}}", 0, "'__metadata__' entry 'step' must be a string, found number");
    expect_header_reject("{\"__metadata__\":{\"a\":\"x\",\"b\":{}}}", 0, "entry 'b' must be a string, found object");
    expect_header_reject("{\"__metadata__\":\"x\"}", 0, "'__metadata__' must be an object of strings, found string");
    expect_header_reject("{\"__metadata__\":null}", 0, "found null");
}

Test(safetensors, rejects_duplicate_tensor_names)
{
    expect_header_reject("{" TENSOR("a", "U8", "[1]", "[0,1]") "," TENSOR("a", "U8", "[1]", "[1,2]") "}", 2,
                         "duplicate key 'a'");
}

/* --- rejections: tensor entries ------------------------------------ */

Test(safetensors, rejects_unknown_dtype)
{
    expect_header_reject("{" TENSOR("w", "F8", "[2]", "[0,2]") "}", 2, "tensor 'w': unknown dtype 'F8'");
    expect_header_reject("{" TENSOR("w", "f32", "[2]", "[0,8]") "}", 8, "unknown dtype 'f32'");
    expect_header_reject("{" TENSOR("w", "F32_EXTRA_LONG", "[2]", "[0,8]") "}", 8, "unknown dtype 'F32_EXTRA_LONG'");
}

Test(safetensors, rejects_malformed_entries)
{
    expect_header_reject("{\"w\":[1]}", 0, "tensor 'w': expected an object, found array");
    expect_header_reject("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'w': missing 'dtype'");
    expect_header_reject("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "tensor 'w': missing 'shape'");
    expect_header_reject("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "tensor 'w': missing 'data_offsets'");
}

Test(safetensors, rejects_wrong_field_types)
{
    expect_header_reject("{\"w\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'dtype' must be a string, found number");
    expect_header_reject("{" TENSOR("w", "F32", "4", "[0,16]") "}", 16, "'shape' must be a list of integers, found number");
    expect_header_reject("{" TENSOR("w", "F32", "[2.0]", "[0,8]") "}", 8, "'shape' dimension 0 is not an integer");
    expect_header_reject("{" TENSOR("w", "F32", "[\"2\"]", "[0,8]") "}", 8, "'shape' dimension 0 is not an integer");
    expect_header_reject("{" TENSOR("w", "F32", "[2]", "[0]") "}", 8, "'data_offsets' must be a list of two non-negative integers");
    expect_header_reject("{" TENSOR("w", "F32", "[2]", "[0,8,8]") "}", 8, "'data_offsets' must be a list of two");
    expect_header_reject("{" TENSOR("w", "F32", "[2]", "[-8,0]") "}", 8, "'data_offsets' must be a list of two");
    expect_header_reject("{" TENSOR("w", "F32", "[2]", "{}") "}", 8, "'data_offsets' must be a list of two");
}

Test(safetensors, rejects_bad_shapes)
{
    expect_header_reject("{" TENSOR("w", "F32", "[2,-1]", "[0,8]") "}", 8, "'shape' dimension 1 is -1, expected >= 0");
    expect_header_reject("{" TENSOR("w", "U8", "[1,1,1,1,1,1,1,1,1]", "[0,1]") "}", 1,
                         "'shape' has 9 dimensions, at most 8 are supported");
    expect_header_reject("{" TENSOR("w", "F32", "[4294967296,4294967296]", "[0,8]") "}", 8,
                         "shape [4294967296, 4294967296] of F32 overflows a 64-bit byte size");
    expect_header_reject("{" TENSOR("w", "U8", "[4294967296,4294967296]", "[0,8]") "}", 8, "overflows");
}

Test(safetensors, rejects_size_mismatch)
{
    expect_header_reject("{" TENSOR("w", "F32", "[3]", "[0,8]") "}", 8,
                         "tensor 'w': data_offsets [0, 8] span 8 bytes, shape [3] of F32 needs 12");
    expect_header_reject("{" TENSOR("w", "F16", "[2,2]", "[0,16]") "}", 16, "shape [2, 2] of F16 needs 8");
}

Test(safetensors, rejects_begin_after_end)
{
    expect_header_reject("{" TENSOR("w", "F32", "[0]", "[8,0]") "}", 8, "tensor 'w': data_offsets [8, 0] begin after end");
}

Test(safetensors, rejects_offsets_past_end)
{
    expect_header_reject("{" TENSOR("w", "F32", "[2]", "[0,8]") "}", 4, "tensor 'w': data_offsets end 8 exceeds data area size 4");
    expect_header_reject("{" TENSOR("a", "F32", "[1]", "[0,4]") "," TENSOR("b", "F32", "[1]", "[4,8]") "}", 6,
                         "tensor 'b': data_offsets end 8 exceeds data area size 6");
}

Test(safetensors, rejects_overlapping_tensors)
{
    expect_header_reject("{" TENSOR("a", "F32", "[2]", "[0,8]") "," TENSOR("b", "F32", "[2]", "[4,12]") "}", 12,
                         "tensors 'a' [0, 8) and 'b' [4, 12) overlap");
    /* Identical ranges, listed in the other order. */
    expect_header_reject("{" TENSOR("b", "F32", "[1]", "[0,4]") "," TENSOR("a", "F32", "[1]", "[0,4]") "}", 4,
                         "overlap");
    /* A zero-size tensor inside another one. */
    expect_header_reject("{" TENSOR("a", "F32", "[2]", "[0,8]") "," TENSOR("z", "F32", "[0]", "[4,4]") "}", 8,
                         "tensors 'a' [0, 8) and 'z' [4, 4) overlap");
}

Test(safetensors, rejects_gaps_and_trailing_bytes)
{
    expect_header_reject("{" TENSOR("a", "F32", "[1]", "[0,4]") "," TENSOR("b", "F32", "[1]", "[8,12]") "}", 12,
                         "data area bytes [4, 8) are not covered by any tensor");
    expect_header_reject("{" TENSOR("a", "F32", "[1]", "[4,8]") "}", 8, "data area bytes [0, 4) are not covered");
    expect_header_reject("{" TENSOR("a", "F32", "[1]", "[0,4]") "}", 9, "data area bytes [4, 9) are not covered");
    expect_header_reject("{}", 1, "data area bytes [0, 1) are not covered");
}

/* --- CRC-32 of every tensor ------------------------------------------ */

Test(safetensors, writes_and_verifies_a_crc32_per_tensor)
{
    const char *path = tu_path(dir(), "m.safetensors");
    write_sample(path);
    size_t n;
    char *b = tu_read_file(path, &n);
    char want[64];
    snprintf(want, sizeof want, "\"crc32:a\":\"%08x\"", (unsigned)ar_st_crc32(a_data, sizeof a_data));
    cr_expect(strstr(b + 8, want), "header lacks %s", want);
    cr_expect(strstr(b + 8, "\"crc32:empty\":\"00000000\""), "a zero-size tensor has the CRC of no bytes");
    free(b);
    /* zlib's crc32 of "123456789" is the standard check value */
    cr_expect_eq(ar_st_crc32("123456789", 9), 0xcbf43926u);
    ar_st_file f;
    ar_err e = {{0}};
    cr_assert_eq(ar_st_read(&f, path, &e), 0, "%s", e.msg);
    cr_expect(f.crc_verified);
    cr_expect_eq(f.nmeta, 2, "the crc32 entries are not shown as metadata");
    for (int i = 0; i < f.n; i++)
        cr_expect(f.t[i].has_crc, "tensor '%s' unverified", f.t[i].name);
    cr_expect_eq(ar_st_find(&f, "u")->crc32, ar_st_crc32(u_data, sizeof u_data));
    ar_st_free(&f);
}

Test(safetensors, rejects_a_damaged_tensor_by_name)
{
    const char *path = tu_path(dir(), "m.safetensors");
    write_sample(path);
    size_t n;
    char *b = tu_read_file(path, &n);
    b[n - 1] ^= 0x01; /* the last byte of the data area: tensor 'b' */
    tu_write_file(path, b, n);
    free(b);
    char want[128];
    snprintf(want, sizeof want, "tensor 'b': CRC-32 mismatch (stored %08x, computed ",
             (unsigned)ar_st_crc32(b_data, sizeof b_data));
    expect_reject(path, want);
    expect_reject(path, "the file is damaged");
}

Test(safetensors, rejects_bad_crc32_entries)
{
    char h[512];
    unsigned z4 = (unsigned)ar_st_crc32("\0\0\0\0", 4);
    snprintf(h, sizeof h, "{\"__metadata__\":{\"crc32:nope\":\"%08x\"}," TENSOR("a", "F32", "[1]", "[0,4]") "}",
             z4);
    expect_header_reject(h, 4, "'__metadata__' entry 'crc32:nope' names no tensor");
    snprintf(h, sizeof h, "{\"__metadata__\":{\"crc32:a\":\"%.7s\"}," TENSOR("a", "F32", "[1]", "[0,4]") "}",
             "2144df1c");
    expect_header_reject(h, 4, "tensor 'a': '__metadata__' entry 'crc32:a' is not 8 hex digits");
    snprintf(h, sizeof h, "{\"__metadata__\":{\"crc32:a\":\"%08xz\"}," TENSOR("a", "F32", "[1]", "[0,4]") "}",
             z4);
    expect_header_reject(h, 4, "is not 8 hex digits");
    snprintf(h, sizeof h,
             "{\"__metadata__\":{\"crc32:a\":\"%08x\"}," TENSOR("a", "F32", "[1]", "[0,4]") ","
             TENSOR("b", "F32", "[1]", "[4,8]") "}",
             z4);
    expect_header_reject(h, 8, "tensor 'b' has no CRC-32 ('__metadata__' lacks 'crc32:b', which other tensors have)");
    /* Upper-case hex digits are read too; a right one passes. */
    snprintf(h, sizeof h, "{\"__metadata__\":{\"crc32:a\":\"%08X\"}," TENSOR("a", "F32", "[1]", "[0,4]") "}",
             z4);
    ar_st_file f;
    ar_err e = {{0}};
    cr_assert_eq(ar_st_read(&f, craft(h, 4), &e), 0, "%s", e.msg);
    cr_expect(f.crc_verified && f.nmeta == 0);
    ar_st_free(&f);
}

Test(safetensors, accepts_files_without_crc32_entries)
{
    ar_st_file f;
    ar_err e = {{0}};
    const char *path =
        craft("{\"__metadata__\":{\"step\":\"3\"}," TENSOR("a", "F32", "[1]", "[0,4]") "}", 4);
    cr_assert_eq(ar_st_read(&f, path, &e), 0, "%s", e.msg);
    cr_expect(!f.crc_verified && !f.t[0].has_crc);
    cr_expect_str_eq(ar_st_meta(&f, "step"), "3");
    ar_st_free(&f);
}

/* --- ar_st_get_f32 ------------------------------------------------- */

static void read_sample(ar_st_file *f, char *path_out)
{
    const char *path = tu_path(dir(), "m.safetensors");
    strcpy(path_out, path);
    write_sample(path);
    ar_err e = {{0}};
    cr_assert_eq(ar_st_read(f, path, &e), 0, "%s", e.msg);
}

Test(safetensors, get_f32_rejects_wrong_dtype)
{
    ar_st_file f;
    char path[4096], want[4200];
    read_sample(&f, path);
    ar_err e = {{0}};
    float dst[4];
    cr_assert_eq(ar_st_get_f32(&f, "idx", (int64_t[]){4}, 1, dst, &e), -1);
    snprintf(want, sizeof want, "'%s': tensor 'idx': expected dtype F32, found I32", path);
    cr_assert_str_eq(e.msg, want);
    ar_st_free(&f);
}

Test(safetensors, get_f32_rejects_wrong_shape)
{
    ar_st_file f;
    char path[4096], want[4200];
    read_sample(&f, path);
    ar_err e = {{0}};
    float dst[6] = {99, 99, 99, 99, 99, 99};
    cr_assert_eq(ar_st_get_f32(&f, "a", (int64_t[]){3, 2}, 2, dst, &e), -1);
    snprintf(want, sizeof want, "'%s': tensor 'a': expected shape [3, 2], found [2, 3]", path);
    cr_assert_str_eq(e.msg, want);
    cr_assert_eq(dst[0], 99, "nothing copied on failure");
    cr_assert_eq(ar_st_get_f32(&f, "a", (int64_t[]){6}, 1, dst, &e), -1, "same size, different rank");
    cr_assert(strstr(e.msg, "expected shape [6], found [2, 3]"), "%s", e.msg);
    cr_assert_eq(ar_st_get_f32(&f, "s", (int64_t[]){1}, 1, dst, &e), -1, "0-d is not [1]");
    cr_assert(strstr(e.msg, "expected shape [1], found []"), "%s", e.msg);
    cr_assert_eq(ar_st_get_f32(&f, "missing", (int64_t[]){1}, 1, dst, &e), -1);
    snprintf(want, sizeof want, "'%s': tensor 'missing' not found", path);
    cr_assert_str_eq(e.msg, want);
    ar_st_free(&f);
}

/* --- writer -------------------------------------------------------- */

Test(safetensors, write_into_missing_directory_fails_cleanly)
{
    const char *path = tu_path(dir(), "nodir/m.safetensors");
    ar_st_entry t[8];
    ar_err e = {{0}};
    int n = sample_entries(t);
    cr_assert_eq(ar_st_write(path, t, n, NULL, &e), -1);
    cr_assert(strstr(e.msg, "cannot create") && strstr(e.msg, "no such file or directory"), "%s", e.msg);
    cr_assert_eq(count_entries(), 0, "nothing may be left behind");
}

Test(safetensors, failed_rename_removes_temp_file)
{
    /* Renaming a file over a directory fails after the temp file has been
     * written completely, so this exercises the cleanup path. */
    const char *path = tu_path(dir(), "m.safetensors");
    cr_assert_eq(mkdir(path, 0755), 0);
    ar_st_entry t[8];
    ar_err e = {{0}};
    int n = sample_entries(t);
    cr_assert_eq(ar_st_write(path, t, n, NULL, &e), -1);
    cr_assert(strstr(e.msg, "cannot rename"), "%s", e.msg);
    cr_assert_eq(count_entries(), 1, "only the directory may remain");
}

Test(safetensors, overwrite_replaces_existing_file)
{
    const char *path = tu_path(dir(), "m.safetensors");
    write_sample(path);
    float v[2] = {5, 6};
    ar_st_entry t = {"only", "F32", 1, {2}, v};
    ar_err e = {{0}};
    cr_assert_eq(ar_st_write(path, &t, 1, (const char *const[]){"step", "99", NULL}, &e), 0, "%s", e.msg);
    cr_assert_eq(count_entries(), 1, "no temp file left");
    ar_st_file f;
    cr_assert_eq(ar_st_read(&f, path, &e), 0, "%s", e.msg);
    cr_assert_eq(f.n, 1);
    cr_assert_str_eq(f.t[0].name, "only");
    cr_assert_str_eq(ar_st_meta(&f, "step"), "99");
    cr_assert_null(ar_st_meta(&f, "config"));
    float got[2];
    cr_assert_eq(ar_st_get_f32(&f, "only", (int64_t[]){2}, 1, got, &e), 0, "%s", e.msg);
    cr_assert(got[0] == 5 && got[1] == 6);
    ar_st_free(&f);
}

/* Invalid requests fail before anything is written and leave the existing
 * file as it was. */
Test(safetensors, write_rejects_invalid_entries)
{
    const char *path = tu_path(dir(), "m.safetensors");
    write_sample(path);
    size_t n0;
    char *before = tu_read_file(path, &n0);
    float v[2] = {1, 2};
    struct {
        ar_st_entry t[2];
        int n;
        const char *const *meta;
        const char *msg;
    } cases[] = {
        {{{"w", "F8", 1, {2}, v}}, 1, NULL, "tensor 'w': unknown dtype 'F8'"},
        {{{"w", "F32", 1, {2}, v}, {"w", "F32", 1, {2}, v}}, 2, NULL, "tensor 'w' appears twice"},
        {{{"w", "F32", 1, {-2}, v}}, 1, NULL, "dimension 0 is -2"},
        {{{"w", "F32", 9, {1}, v}}, 1, NULL, "9 dimensions"},
        {{{"w", "F32", 1, {2}, NULL}}, 1, NULL, "tensor 'w': no data"},
        {{{"__metadata__", "F32", 1, {2}, v}}, 1, NULL, "reserved"},
        {{{"w", "F32", 1, {2}, v}}, 1, (const char *const[]){"config", NULL}, "metadata key 'config' has no value"},
        {{{"w", "F32", 1, {2}, v}}, 1, (const char *const[]){"crc32:w", "00000000", NULL},
         "metadata key 'crc32:w' is reserved"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ar_err e = {{0}};
        cr_expect_eq(ar_st_write(path, cases[i].t, cases[i].n, cases[i].meta, &e), -1, "case %zu accepted", i);
        cr_expect(strstr(e.msg, cases[i].msg), "case %zu: '%s' lacks '%s'", i, e.msg, cases[i].msg);
    }
    size_t n1;
    char *after = tu_read_file(path, &n1);
    cr_assert(n0 == n1 && memcmp(before, after, n0) == 0, "existing file changed");
    cr_assert_eq(count_entries(), 1);
    free(before);
    free(after);
}

/* --- golden file from the independent implementation --------------- */

Test(safetensors, reads_golden_model)
{
    const char *g = tu_golden_dir();
    if (!g)
        cr_skip_test("golden folder absent");
    char path[4200];
    snprintf(path, sizeof path, "%s/baseline/model.safetensors", g);
    ar_st_file f;
    ar_err e = {{0}};
    cr_assert_eq(ar_st_read(&f, path, &e), 0, "%s", e.msg);
    const ar_st_tensor *t = ar_st_find(&f, "embed.weight");
    cr_assert(t != NULL);
    cr_assert_str_eq(t->dtype, "F32");
    cr_assert(t->ndim == 2 && t->shape[0] == 256 && t->shape[1] == 16);
    float *w = malloc(256 * 16 * sizeof *w);
    cr_assert_eq(ar_st_get_f32(&f, "embed.weight", (int64_t[]){256, 16}, 2, w, &e), 0, "%s", e.msg);
    double ss = 0;
    for (int i = 0; i < 256 * 16; i++)
        ss += (double)w[i] * w[i];
    cr_assert(ss > 0, "weights are random, not zero");
    free(w);
    const char *cfg = ar_st_meta(&f, "config");
    cr_assert(cfg != NULL && strlen(cfg) > 0);
    cr_assert(strstr(cfg, "d_model"), "config is the YAML: %s", cfg);
    ar_st_free(&f);
}
