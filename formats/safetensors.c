/* Safetensors reader and writer.  The layout rules follow the reference
 * implementation (huggingface/safetensors): tensors sorted by data_offsets
 * must tile the data area exactly, with no gaps, overlaps or trailing
 * bytes. */
#include "safetensors.h"

#include "../core/atomic.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "json.h"

/* Tensor bytes are copied to and from memory as they are in the file. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

#define META_KEY "__metadata__"

static const struct {
    const char *name;
    int size;
} dtypes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
    {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1},
};

uint32_t ar_st_crc32(const void *data, uint64_t n)
{
    uLong crc = crc32_z(0L, Z_NULL, 0);
    const Bytef *p = data;
    while (n > 0) {
        z_size_t k = n > (1u << 30) ? (1u << 30) : (z_size_t)n;
        crc = crc32_z(crc, p, k);
        p += k;
        n -= k;
    }
    return (uint32_t)crc;
}

int ar_st_dtype_size(const char *dtype)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dtype, dtypes[i].name) == 0)
            return dtypes[i].size;
    return 0;
}

/* ------------------------------------------------------------------ */
/* messages                                                            */

/* ar_fail with the "'path': " prefix every message here carries. */
static int fail(ar_err *e, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(ar_err *e, const char *path, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ar_fail(e, "'%s': %s", path, msg);
}

/* strerror in the project's lowercase message style. */
static const char *os_error(int err, char buf[128])
{
    snprintf(buf, 128, "%s", strerror(err));
    if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z'))
        buf[0] = (char)(buf[0] - 'A' + 'a');
    return buf;
}

static const char *json_type_name(ar_json_type t)
{
    static const char *names[] = {"null", "boolean", "number", "string", "array", "object"};
    return names[t];
}

/* "[16, 8]", "[]" for a scalar. */
static const char *shape_str(const int64_t *shape, int ndim, char buf[256])
{
    size_t n = 0;
    buf[n++] = '[';
    for (int i = 0; i < ndim; i++)
        n += (size_t)snprintf(buf + n, 256 - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    snprintf(buf + n, 256 - n, "]");
    return buf;
}

/* prod(shape) * elem, 0 on uint64 overflow (a real zero-size tensor is
 * told apart by the caller checking for a zero dimension). */
static int byte_size(const int64_t *shape, int ndim, int elem, uint64_t *out)
{
    uint64_t n = (uint64_t)elem;
    for (int i = 0; i < ndim; i++) {
        uint64_t d = (uint64_t)shape[i];
        if (d && n > UINT64_MAX / d)
            return -1;
        n *= d;
    }
    *out = n;
    return 0;
}

/* ------------------------------------------------------------------ */
/* header entries                                                      */

static int load_dtype(const char *path, const char *name, const ar_json *v, ar_st_tensor *t, ar_err *e)
{
    const ar_json *d = ar_json_get(v, "dtype");
    if (!d)
        return fail(e, path, "tensor '%s': missing 'dtype'", name);
    if (d->type != AR_JSON_STR)
        return fail(e, path, "tensor '%s': 'dtype' must be a string, found %s", name, json_type_name(d->type));
    if (!ar_st_dtype_size(d->str))
        return fail(e, path, "tensor '%s': unknown dtype '%s'", name, d->str);
    snprintf(t->dtype, sizeof t->dtype, "%s", d->str);
    return 0;
}

static int load_shape(const char *path, const char *name, const ar_json *v, ar_st_tensor *t, ar_err *e)
{
    const ar_json *s = ar_json_get(v, "shape");
    if (!s)
        return fail(e, path, "tensor '%s': missing 'shape'", name);
    if (s->type != AR_JSON_ARR)
        return fail(e, path, "tensor '%s': 'shape' must be a list of integers, found %s", name,
                    json_type_name(s->type));
    if (s->n > AR_ST_MAX_DIMS)
        return fail(e, path, "tensor '%s': 'shape' has %d dimensions, at most %d are supported", name, s->n,
                    AR_ST_MAX_DIMS);
    for (int i = 0; i < s->n; i++) {
        const ar_json *d = &s->items[i];
        if (d->type != AR_JSON_NUM || !d->is_int)
            return fail(e, path, "tensor '%s': 'shape' dimension %d is not an integer", name, i);
        if (d->inum < 0)
            return fail(e, path, "tensor '%s': 'shape' dimension %d is %lld, expected >= 0", name, i,
                        (long long)d->inum);
        t->shape[i] = d->inum;
    }
    t->ndim = s->n;
    return 0;
}

static int load_offsets(const char *path, const char *name, const ar_json *v, ar_st_tensor *t, ar_err *e)
{
    const ar_json *o = ar_json_get(v, "data_offsets");
    if (!o)
        return fail(e, path, "tensor '%s': missing 'data_offsets'", name);
    int ok = o->type == AR_JSON_ARR && o->n == 2;
    for (int i = 0; ok && i < 2; i++)
        ok = o->items[i].type == AR_JSON_NUM && o->items[i].is_int && o->items[i].inum >= 0;
    if (!ok)
        return fail(e, path, "tensor '%s': 'data_offsets' must be a list of two non-negative integers", name);
    t->begin = (uint64_t)o->items[0].inum;
    t->end = (uint64_t)o->items[1].inum;
    return 0;
}

/* The offsets must span exactly the bytes the shape and dtype need, inside
 * the data area. */
static int check_extent(const char *path, const ar_st_tensor *t, uint64_t data_size, ar_err *e)
{
    char sh[256];
    uint64_t need;
    if (byte_size(t->shape, t->ndim, ar_st_dtype_size(t->dtype), &need) < 0)
        return fail(e, path, "tensor '%s': shape %s of %s overflows a 64-bit byte size", t->name,
                    shape_str(t->shape, t->ndim, sh), t->dtype);
    if (t->begin > t->end)
        return fail(e, path, "tensor '%s': data_offsets [%llu, %llu] begin after end", t->name,
                    (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end - t->begin != need)
        return fail(e, path, "tensor '%s': data_offsets [%llu, %llu] span %llu bytes, shape %s of %s needs %llu",
                    t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                    (unsigned long long)(t->end - t->begin), shape_str(t->shape, t->ndim, sh), t->dtype,
                    (unsigned long long)need);
    if (t->end > data_size)
        return fail(e, path, "tensor '%s': data_offsets end %llu exceeds data area size %llu", t->name,
                    (unsigned long long)t->end, (unsigned long long)data_size);
    return 0;
}

static int load_tensor(const char *path, const ar_json *v, ar_st_tensor *t, uint64_t data_size, ar_err *e)
{
    if (v->type != AR_JSON_OBJ)
        return fail(e, path, "tensor '%s': expected an object, found %s", t->name, json_type_name(v->type));
    if (load_dtype(path, t->name, v, t, e) < 0 || load_shape(path, t->name, v, t, e) < 0 ||
        load_offsets(path, t->name, v, t, e) < 0)
        return -1;
    return check_extent(path, t, data_size, e);
}

/* __metadata__ is a string-to-string map (the reference implementation
 * parses it as HashMap<String, String>). */
static int load_meta(ar_st_file *f, const ar_json *m, ar_err *e)
{
    if (m->type != AR_JSON_OBJ)
        return fail(e, f->path, "'%s' must be an object of strings, found %s", META_KEY, json_type_name(m->type));
    f->meta_key = ar_xcalloc((size_t)m->n, sizeof *f->meta_key);
    f->meta_val = ar_xcalloc((size_t)m->n, sizeof *f->meta_val);
    for (int i = 0; i < m->n; i++) {
        if (m->items[i].type != AR_JSON_STR)
            return fail(e, f->path, "'%s' entry '%s' must be a string, found %s", META_KEY, m->keys[i],
                        json_type_name(m->items[i].type));
        f->meta_key[i] = ar_xstrdup(m->keys[i]);
        f->meta_val[i] = ar_xstrdup(m->items[i].str);
        f->nmeta++;
    }
    return 0;
}

static int load_entries(ar_st_file *f, const ar_json *h, uint64_t data_size, ar_err *e)
{
    if (h->type != AR_JSON_OBJ)
        return fail(e, f->path, "header is a JSON %s, expected an object", json_type_name(h->type));
    f->t = ar_xcalloc((size_t)h->n, sizeof *f->t);
    for (int i = 0; i < h->n; i++) {
        if (strcmp(h->keys[i], META_KEY) == 0) {
            if (load_meta(f, &h->items[i], e) < 0)
                return -1;
            continue;
        }
        ar_st_tensor *t = &f->t[f->n++];
        t->name = ar_xstrdup(h->keys[i]);
        if (load_tensor(f->path, &h->items[i], t, data_size, e) < 0)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* data area tiling                                                    */

static int cmp_by_offsets(const void *a, const void *b)
{
    const ar_st_tensor *x = *(const ar_st_tensor *const *)a, *y = *(const ar_st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* Sorted by (begin, end) as the reference implementation does, so
 * zero-size tensors may share an offset with their neighbour. */
static int check_tiling(const ar_st_file *f, uint64_t data_size, ar_err *e)
{
    const ar_st_tensor **order = ar_xmalloc((size_t)(f->n > 0 ? f->n : 1) * sizeof *order);
    int rc = 0;
    for (int i = 0; i < f->n; i++)
        order[i] = &f->t[i];
    qsort(order, (size_t)f->n, sizeof *order, cmp_by_offsets);
    uint64_t pos = 0;
    for (int k = 0; k < f->n && rc == 0; k++) {
        const ar_st_tensor *t = order[k], *prev = k ? order[k - 1] : NULL;
        if (t->begin < pos)
            rc = fail(e, f->path, "tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap", prev->name,
                      (unsigned long long)prev->begin, (unsigned long long)prev->end, t->name,
                      (unsigned long long)t->begin, (unsigned long long)t->end);
        else if (t->begin > pos)
            rc = fail(e, f->path, "data area bytes [%llu, %llu) are not covered by any tensor",
                      (unsigned long long)pos, (unsigned long long)t->begin);
        pos = t->end;
    }
    if (rc == 0 && pos != data_size)
        rc = fail(e, f->path, "data area bytes [%llu, %llu) are not covered by any tensor",
                  (unsigned long long)pos, (unsigned long long)data_size);
    free(order);
    return rc;
}

/* ------------------------------------------------------------------ */
/* reading                                                             */

static uint64_t get_u64le(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

static int read_exact(FILE *fp, void *dst, size_t n, const char *path, const char *what, ar_err *e)
{
    if (fread(dst, 1, n, fp) == n)
        return 0;
    if (ferror(fp)) {
        char eb[128];
        return fail(e, path, "cannot read %s: %s", what, os_error(errno, eb));
    }
    return fail(e, path, "unexpected end of file in %s", what);
}

/* Reads the length prefix and checks it against the file size and the
 * reference implementation's limit. */
static int read_header_len(FILE *fp, const char *path, uint64_t *hlen, uint64_t *data_size, ar_err *e)
{
    struct stat st;
    unsigned char b[8];
    char eb[128];
    if (fstat(fileno(fp), &st) < 0)
        return fail(e, path, "cannot stat: %s", os_error(errno, eb));
    if (!S_ISREG(st.st_mode))
        return fail(e, path, "not a regular file");
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8)
        return fail(e, path, "file is %llu bytes, too short for the 8-byte header length", (unsigned long long)size);
    if (read_exact(fp, b, 8, path, "the header length", e) < 0)
        return -1;
    *hlen = get_u64le(b);
    /* the first thing any other file (text, a token file) breaks */
    if (*hlen > AR_ST_MAX_HEADER)
        return fail(e, path, "header length %llu exceeds the maximum %u: not a safetensors file, or a damaged one",
                    (unsigned long long)*hlen, AR_ST_MAX_HEADER);
    if (*hlen > size - 8)
        return fail(e, path, "header length %llu exceeds file size %llu: not a safetensors file, or a damaged one",
                    (unsigned long long)*hlen, (unsigned long long)size);
    *data_size = size - 8 - *hlen;
    return 0;
}

static int read_header(FILE *fp, ar_st_file *f, uint64_t hlen, uint64_t data_size, ar_err *e)
{
    char *text = ar_xmalloc((size_t)hlen);
    if (read_exact(fp, text, (size_t)hlen, f->path, "the header", e) < 0) {
        free(text);
        return -1;
    }
    ar_json *h = ar_json_parse(text, (size_t)hlen, e);
    free(text);
    if (!h)
        return ar_wrap(e, "'%s': header", f->path);
    int rc = load_entries(f, h, data_size, e);
    ar_json_free(h);
    if (rc == 0)
        rc = check_tiling(f, data_size, e);
    return rc;
}

/* ------------------------------------------------------------------ */
/* CRC-32 of every tensor                                              */

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Exactly 8 hex digits. */
static int parse_crc(const char *s, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        int d = hex_digit(s[i]);
        if (d < 0)
            return -1;
        v = v << 4 | (uint32_t)d;
    }
    if (s[8])
        return -1;
    *out = v;
    return 0;
}

/* Checks the "crc32:NAME" entries against the tensors' bytes and removes
 * them from the metadata the caller sees. */
static int verify_crcs(ar_st_file *f, ar_err *e)
{
    size_t plen = strlen(AR_ST_CRC_PREFIX);
    int ncrc = 0, k = 0;
    for (int i = 0; i < f->nmeta; i++) {
        const char *key = f->meta_key[i];
        if (strncmp(key, AR_ST_CRC_PREFIX, plen) != 0)
            continue;
        ar_st_tensor *t = (ar_st_tensor *)ar_st_find(f, key + plen);
        uint32_t want;
        if (!t)
            return fail(e, f->path, "'%s' entry '%s' names no tensor", META_KEY, key);
        if (parse_crc(f->meta_val[i], &want) < 0)
            return fail(e, f->path, "tensor '%s': '%s' entry '%s' is not 8 hex digits", t->name, META_KEY, key);
        uint32_t got = ar_st_crc32(f->data + t->begin, t->end - t->begin);
        if (got != want)
            return fail(e, f->path,
                        "tensor '%s': CRC-32 mismatch (stored %08x, computed %08x): the file is damaged", t->name,
                        (unsigned)want, (unsigned)got);
        t->has_crc = 1;
        t->crc32 = got;
        ncrc++;
    }
    for (int i = 0; ncrc > 0 && i < f->n; i++)
        if (!f->t[i].has_crc)
            return fail(e, f->path, "tensor '%s' has no CRC-32 ('%s' lacks '%s%s', which other tensors have)",
                        f->t[i].name, META_KEY, AR_ST_CRC_PREFIX, f->t[i].name);
    for (int i = 0; i < f->nmeta; i++) {
        if (strncmp(f->meta_key[i], AR_ST_CRC_PREFIX, plen) == 0) {
            free(f->meta_key[i]);
            free(f->meta_val[i]);
            continue;
        }
        f->meta_key[k] = f->meta_key[i];
        f->meta_val[k++] = f->meta_val[i];
    }
    f->nmeta = k;
    f->crc_verified = ncrc > 0;
    return 0;
}

static int read_file(FILE *fp, ar_st_file *f, ar_err *e)
{
    uint64_t hlen = 0, data_size = 0;
    if (read_header_len(fp, f->path, &hlen, &data_size, e) < 0 || read_header(fp, f, hlen, data_size, e) < 0)
        return -1;
    f->data = ar_xmalloc((size_t)data_size);
    f->data_size = data_size;
    if (read_exact(fp, f->data, (size_t)data_size, f->path, "the data area", e) < 0)
        return -1;
    return verify_crcs(f, e);
}

int ar_st_read(ar_st_file *f, const char *path, ar_err *e)
{
    char eb[128];
    memset(f, 0, sizeof *f);
    f->path = ar_xstrdup(path);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fail(e, path, "cannot open: %s", os_error(errno, eb));
        ar_st_free(f);
        return -1;
    }
    int rc = read_file(fp, f, e);
    fclose(fp);
    if (rc < 0)
        ar_st_free(f);
    return rc;
}

void ar_st_free(ar_st_file *f)
{
    for (int i = 0; i < f->n; i++)
        free(f->t[i].name);
    for (int i = 0; i < f->nmeta; i++) {
        free(f->meta_key[i]);
        free(f->meta_val[i]);
    }
    free(f->t);
    free(f->meta_key);
    free(f->meta_val);
    free(f->data);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const ar_st_tensor *ar_st_find(const ar_st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}

const char *ar_st_meta(const ar_st_file *f, const char *key)
{
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_key[i], key) == 0)
            return f->meta_val[i];
    return NULL;
}

int ar_st_get_f32(const ar_st_file *f, const char *name, const int64_t *shape, int ndim, float *dst, ar_err *e)
{
    char want[256], have[256];
    const ar_st_tensor *t = ar_st_find(f, name);
    if (!t)
        return fail(e, f->path, "tensor '%s' not found", name);
    if (strcmp(t->dtype, "F32") != 0)
        return fail(e, f->path, "tensor '%s': expected dtype F32, found %s", name, t->dtype);
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (!same)
        return fail(e, f->path, "tensor '%s': expected shape %s, found %s", name, shape_str(shape, ndim, want),
                    shape_str(t->shape, t->ndim, have));
    memcpy(dst, f->data + t->begin, (size_t)(t->end - t->begin));
    return 0;
}

/* ------------------------------------------------------------------ */
/* writing                                                             */

static int check_entry(const char *path, const ar_st_entry *t, uint64_t *bytes, ar_err *e)
{
    char sh[256];
    if (!t->name || !t->dtype)
        return fail(e, path, "tensor entry without a name or dtype");
    if (strcmp(t->name, META_KEY) == 0)
        return fail(e, path, "tensor name '%s' is reserved", META_KEY);
    if (!ar_st_dtype_size(t->dtype))
        return fail(e, path, "tensor '%s': unknown dtype '%s'", t->name, t->dtype);
    if (t->ndim < 0 || t->ndim > AR_ST_MAX_DIMS)
        return fail(e, path, "tensor '%s': %d dimensions, expected 0 to %d", t->name, t->ndim, AR_ST_MAX_DIMS);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0)
            return fail(e, path, "tensor '%s': dimension %d is %lld, expected >= 0", t->name, i,
                        (long long)t->shape[i]);
    if (byte_size(t->shape, t->ndim, ar_st_dtype_size(t->dtype), bytes) < 0)
        return fail(e, path, "tensor '%s': shape %s overflows a 64-bit byte size", t->name,
                    shape_str(t->shape, t->ndim, sh));
    if (*bytes && !t->data)
        return fail(e, path, "tensor '%s': no data", t->name);
    return 0;
}

/* Validates all entries and returns their byte sizes (malloc'd). */
static uint64_t *check_entries(const char *path, const ar_st_entry *t, int n, ar_err *e)
{
    uint64_t *bytes = ar_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *bytes);
    for (int i = 0; i < n; i++) {
        int dup = 0;
        for (int j = 0; j < i && !dup && t[i].name && t[j].name; j++)
            dup = strcmp(t[i].name, t[j].name) == 0;
        if (dup || check_entry(path, &t[i], &bytes[i], e) < 0) {
            if (dup)
                fail(e, path, "tensor '%s' appears twice", t[i].name);
            free(bytes);
            return NULL;
        }
    }
    return bytes;
}

/* The caller's metadata, then "crc32:NAME" for every tensor. */
static int write_meta(ar_jw *w, const char *path, const char *const *meta, const ar_st_entry *t, int n,
                      const uint64_t *bytes, ar_err *e)
{
    if ((!meta || !meta[0]) && n == 0)
        return 0;
    ar_jw_key(w, META_KEY);
    ar_jw_obj_begin(w);
    for (int i = 0; meta && meta[i]; i += 2) {
        if (!meta[i + 1])
            return fail(e, path, "metadata key '%s' has no value", meta[i]);
        if (strncmp(meta[i], AR_ST_CRC_PREFIX, strlen(AR_ST_CRC_PREFIX)) == 0)
            return fail(e, path, "metadata key '%s' is reserved (the writer stores the CRC-32s)", meta[i]);
        ar_jw_key(w, meta[i]);
        ar_jw_str(w, meta[i + 1]);
    }
    for (int i = 0; i < n; i++) {
        char key[8 + 1024], val[16];
        snprintf(key, sizeof key, "%s%s", AR_ST_CRC_PREFIX, t[i].name);
        if (strlen(t[i].name) > 1000)
            return fail(e, path, "tensor name '%.40s...' is too long", t[i].name);
        snprintf(val, sizeof val, "%08x", (unsigned)ar_st_crc32(t[i].data, bytes[i]));
        ar_jw_key(w, key);
        ar_jw_str(w, val);
    }
    ar_jw_obj_end(w);
    return 0;
}

/* Header JSON with contiguous offsets in the given order (padding is added
 * by write_body). */
static int build_header(ar_jw *w, const char *path, const ar_st_entry *t, int n, const uint64_t *bytes,
                        const char *const *meta, ar_err *e)
{
    uint64_t off = 0;
    ar_jw_init(w);
    ar_jw_obj_begin(w);
    if (write_meta(w, path, meta, t, n, bytes, e) < 0)
        return -1;
    for (int i = 0; i < n; i++) {
        ar_jw_key(w, t[i].name);
        ar_jw_obj_begin(w);
        ar_jw_key(w, "dtype");
        ar_jw_str(w, t[i].dtype);
        ar_jw_key(w, "shape");
        ar_jw_arr_begin(w);
        for (int d = 0; d < t[i].ndim; d++)
            ar_jw_int(w, t[i].shape[d]);
        ar_jw_arr_end(w);
        ar_jw_key(w, "data_offsets");
        ar_jw_arr_begin(w);
        ar_jw_int(w, (long long)off);
        ar_jw_int(w, (long long)(off + bytes[i]));
        ar_jw_arr_end(w);
        ar_jw_obj_end(w);
        off += bytes[i];
    }
    ar_jw_obj_end(w);
    return 0;
}

static int write_all(FILE *fp, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, fp) == n ? 0 : -1; }

/* The header is padded with spaces so the data area starts at a multiple
 * of 8 (8 + padded length = 0 mod 8), as the reference writer does. */
static int write_body(FILE *fp, const ar_jw *hdr, const ar_st_entry *t, int n, const uint64_t *bytes)
{
    static const char spaces[8] = "        ";
    size_t pad = (8 - hdr->len % 8) % 8;
    unsigned char len[8];
    for (int i = 0; i < 8; i++)
        len[i] = (unsigned char)((uint64_t)(hdr->len + pad) >> (8 * i));
    if (write_all(fp, len, 8) < 0 || write_all(fp, hdr->s, hdr->len) < 0 || write_all(fp, spaces, pad) < 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (write_all(fp, t[i].data, (size_t)bytes[i]) < 0)
            return -1;
    return 0;
}

typedef struct {
    const ar_jw *hdr;
    const ar_st_entry *t;
    int n;
    const uint64_t *bytes;
} body_args;

static int fill_body(FILE *fp, void *ud)
{
    const body_args *b = ud;
    return write_body(fp, b->hdr, b->t, b->n, b->bytes);
}

static int write_atomic(const char *path, const ar_jw *hdr, const ar_st_entry *t, int n, const uint64_t *bytes,
                        ar_err *e)
{
    body_args b = {hdr, t, n, bytes};
    return ar_write_atomic(path, fill_body, &b, e);
}

int ar_st_write(const char *path, const ar_st_entry *t, int n, const char *const *meta, ar_err *e)
{
    if (n < 0)
        return fail(e, path, "negative tensor count %d", n);
    uint64_t *bytes = check_entries(path, t, n, e);
    if (!bytes)
        return -1;
    ar_jw hdr;
    int rc = build_header(&hdr, path, t, n, bytes, meta, e);
    if (rc == 0)
        rc = write_atomic(path, &hdr, t, n, bytes, e);
    ar_jw_free(&hdr);
    free(bytes);
    return rc;
}
