/* Strict RFC 8259 JSON: DOM parser and streaming writer.
 *
 * Deliberate limits of the parser (RFC 8259 section 9 lets a parser set
 * them): nesting deeper than 64 is rejected, numbers whose magnitude
 * overflows a double are rejected, and "\u0000" is rejected because decoded
 * strings are handed out NUL-terminated without a length, so an embedded NUL
 * would silently truncate them.  Input must be UTF-8 (section 8.1); invalid
 * sequences and unpaired surrogate escapes are errors.  Error positions are
 * 0-based byte offsets into the text. */
#include "json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

/* ------------------------------------------------------------------ */
/* memory                                                              */

/* realloc with the project's out-of-memory policy: ar_xmalloc aborts with
 * its message if the retry fails too. */
static void *grow(void *p, size_t old, size_t n)
{
    void *q = realloc(p, n);
    if (q)
        return q;
    q = ar_xmalloc(n);
    memcpy(q, p, old);
    free(p);
    return q;
}

static void free_contents(ar_json *j)
{
    if (j->type == AR_JSON_STR)
        free(j->str);
    if (j->type == AR_JSON_ARR || j->type == AR_JSON_OBJ) {
        for (int i = 0; i < j->n; i++) {
            free_contents(&j->items[i]);
            if (j->keys)
                free(j->keys[i]);
        }
        free(j->items);
        free(j->keys);
    }
}

void ar_json_free(ar_json *j)
{
    if (!j)
        return;
    free_contents(j);
    free(j);
}

const ar_json *ar_json_get(const ar_json *j, const char *key)
{
    if (!j || j->type != AR_JSON_OBJ)
        return NULL;
    for (int i = 0; i < j->n; i++)
        if (strcmp(j->keys[i], key) == 0)
            return &j->items[i];
    return NULL;
}

/* ------------------------------------------------------------------ */
/* parser                                                              */

typedef struct {
    const unsigned char *s;
    size_t len, pos;
    int depth;
    ar_err *e;
} parser;

static int at_end(const parser *p) { return p->pos >= p->len; }
static int peek(const parser *p) { return at_end(p) ? -1 : p->s[p->pos]; }

/* How the byte at pos reads in a message: a quoted printable character,
 * its hex value, or "end of input". */
static const char *found(const parser *p, size_t pos, char buf[24])
{
    if (pos >= p->len)
        return "end of input";
    unsigned c = p->s[pos];
    if (c >= 0x20 && c < 0x7f && c != '\'')
        snprintf(buf, 24, "'%c'", (char)c);
    else
        snprintf(buf, 24, "byte 0x%02x", c);
    return buf;
}

static int fail_at(parser *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(parser *p, size_t at, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ar_fail(p->e, "at byte %zu: %s", at, msg);
}

static int expected(parser *p, const char *what)
{
    char buf[24];
    return fail_at(p, p->pos, "expected %s, found %s", what, found(p, p->pos, buf));
}

/* RFC 8259 whitespace is exactly these four bytes. */
static void skip_ws(parser *p)
{
    while (!at_end(p)) {
        int c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        p->pos++;
    }
}

static int parse_value(parser *p, ar_json *out);

/* --- strings ------------------------------------------------------- */

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Reads the 4 hex digits after "\u" at p->pos (which points at 'u'). */
static int read_hex4(parser *p, unsigned *cp)
{
    unsigned v = 0;
    for (int i = 1; i <= 4; i++) {
        int h = p->pos + i < p->len ? hexval(p->s[p->pos + i]) : -1;
        if (h < 0)
            return fail_at(p, p->pos - 1, "\\u escape needs 4 hex digits");
        v = v * 16 + (unsigned)h;
    }
    p->pos += 5;
    *cp = v;
    return 0;
}

static size_t put_utf8(char *d, unsigned cp)
{
    if (cp < 0x80) {
        d[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (char)(0xC0 | cp >> 6);
        d[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (char)(0xE0 | cp >> 12);
        d[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        d[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    d[0] = (char)(0xF0 | cp >> 18);
    d[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    d[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    d[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A \uXXXX escape, p->pos at 'u'.  UTF-16 surrogates must come as a
 * high-low pair (RFC 8259 section 7); either half alone is an error. */
static int decode_u_escape(parser *p, unsigned *cp)
{
    size_t at = p->pos - 1;
    if (read_hex4(p, cp) < 0)
        return -1;
    if (*cp >= 0xDC00 && *cp <= 0xDFFF)
        return fail_at(p, at, "unpaired low surrogate \\u%04x", *cp);
    if (*cp >= 0xD800 && *cp <= 0xDBFF) {
        unsigned lo;
        if (p->len - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
            return fail_at(p, at, "unpaired high surrogate \\u%04x", *cp);
        p->pos++;
        if (read_hex4(p, &lo) < 0)
            return -1;
        if (lo < 0xDC00 || lo > 0xDFFF)
            return fail_at(p, at, "high surrogate \\u%04x not followed by a low surrogate", *cp);
        *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (*cp == 0)
        return fail_at(p, at, "\\u0000 is not supported (strings are NUL-terminated)");
    return 0;
}

/* One backslash escape, p->pos at the backslash; appends to d. */
static int decode_escape(parser *p, char *d, size_t *dn)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    size_t at = p->pos++;
    int c = peek(p);
    if (c == 'u') {
        unsigned cp;
        if (decode_u_escape(p, &cp) < 0)
            return -1;
        *dn += put_utf8(d + *dn, cp);
        return 0;
    }
    const char *k = c > 0 ? strchr(from, c) : NULL;
    if (!k) {
        char buf[24];
        return fail_at(p, at, "invalid escape, backslash followed by %s", found(p, p->pos, buf));
    }
    d[(*dn)++] = to[k - from];
    p->pos++;
    return 0;
}

/* Length of the well-formed UTF-8 sequence at s (at most n bytes), 0 if
 * invalid: no overlongs, no surrogates, nothing above U+10FFFF. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return len;
}

/* Finds the closing quote so the decoded string can be allocated once
 * (decoding never makes it longer). */
static int string_end(parser *p, size_t start, size_t *end)
{
    size_t i = start;
    while (i < p->len && p->s[i] != '"')
        i += p->s[i] == '\\' ? 2 : 1;
    if (i >= p->len)
        return fail_at(p, start - 1, "unterminated string");
    *end = i;
    return 0;
}

/* p->pos at the opening quote; *out gets the malloc'd decoded string. */
static int parse_string(parser *p, char **out)
{
    size_t end = 0;
    p->pos++;
    if (string_end(p, p->pos, &end) < 0)
        return -1;
    char *d = ar_xmalloc(end - p->pos + 1);
    size_t dn = 0;
    while (p->pos < end) {
        unsigned c = p->s[p->pos];
        size_t n;
        if (c == '\\') {
            if (decode_escape(p, d, &dn) < 0)
                goto fail;
            continue;
        }
        if (c < 0x20) {
            fail_at(p, p->pos, "control character 0x%02x in string must be escaped", c);
            goto fail;
        }
        n = utf8_len(p->s + p->pos, end - p->pos);
        if (n == 0) {
            fail_at(p, p->pos, "invalid UTF-8 in string");
            goto fail;
        }
        memcpy(d + dn, p->s + p->pos, n);
        dn += n;
        p->pos += n;
    }
    p->pos = end + 1;
    d[dn] = 0;
    *out = d;
    return 0;
fail:
    free(d);
    return -1;
}

/* --- numbers ------------------------------------------------------- */

static int is_digit(int c) { return c >= '0' && c <= '9'; }

static void skip_digits(parser *p)
{
    while (is_digit(peek(p)))
        p->pos++;
}

/* Scans the RFC 8259 number grammar
 *   -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
 * and sets *integral when neither fraction nor exponent is present. */
static int scan_number(parser *p, int *integral)
{
    if (peek(p) == '-')
        p->pos++;
    if (peek(p) == '0') {
        p->pos++;
        if (is_digit(peek(p)))
            return fail_at(p, p->pos - 1, "leading zero in number");
    } else if (is_digit(peek(p)))
        skip_digits(p);
    else
        return expected(p, "a digit");
    *integral = 1;
    if (peek(p) == '.') {
        p->pos++;
        if (!is_digit(peek(p)))
            return expected(p, "a digit after the decimal point");
        skip_digits(p);
        *integral = 0;
    }
    if (peek(p) == 'e' || peek(p) == 'E') {
        p->pos++;
        if (peek(p) == '+' || peek(p) == '-')
            p->pos++;
        if (!is_digit(peek(p)))
            return expected(p, "a digit in the exponent");
        skip_digits(p);
        *integral = 0;
    }
    return 0;
}

/* Exact int64 value of an integral literal; 0 if it does not fit. */
static int to_int64(const char *s, int64_t *v)
{
    int neg = *s == '-';
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, u = 0;
    for (s += neg; *s; s++) {
        unsigned d = (unsigned)(*s - '0');
        if (u > (limit - d) / 10)
            return 0;
        u = u * 10 + d;
    }
    /* -2^63 has no positive int64 counterpart, so negate in unsigned. */
    *v = neg ? (int64_t)(0 - u) : (int64_t)u;
    return 1;
}

static int parse_number(parser *p, ar_json *out)
{
    size_t start = p->pos;
    int integral = 0;
    if (scan_number(p, &integral) < 0)
        return -1;
    size_t n = p->pos - start;
    char small[64], *buf = n < sizeof small ? small : ar_xmalloc(n + 1);
    memcpy(buf, p->s + start, n);
    buf[n] = 0;
    out->type = AR_JSON_NUM;
    out->num = strtod(buf, NULL);
    out->is_int = integral && to_int64(buf, &out->inum);
    if (buf != small)
        free(buf);
    if (isinf(out->num))
        return fail_at(p, start, "number out of range of a double");
    return 0;
}

/* --- containers ---------------------------------------------------- */

static int enter(parser *p)
{
    if (++p->depth > MAX_DEPTH)
        return fail_at(p, p->pos, "nesting deeper than %d", MAX_DEPTH);
    p->pos++;
    return 0;
}

/* Appends a zeroed item and counts it at once, so a failure while parsing
 * it still frees whatever it had allocated. */
static ar_json *add_item(ar_json *j, int *cap)
{
    if (j->n == *cap) {
        int nc = *cap ? *cap * 2 : 4;
        j->items = grow(j->items, (size_t)*cap * sizeof *j->items, (size_t)nc * sizeof *j->items);
        if (j->type == AR_JSON_OBJ)
            j->keys = grow(j->keys, (size_t)*cap * sizeof *j->keys, (size_t)nc * sizeof *j->keys);
        *cap = nc;
    }
    ar_json *it = &j->items[j->n];
    memset(it, 0, sizeof *it);
    if (j->type == AR_JSON_OBJ)
        j->keys[j->n] = NULL;
    j->n++;
    return it;
}

/* After an item: ',' continues, `close` ends the container. */
static int after_item(parser *p, int close, const char *what, int *done)
{
    skip_ws(p);
    if (peek(p) == ',') {
        p->pos++;
        *done = 0;
        return 0;
    }
    if (peek(p) == close) {
        p->pos++;
        *done = 1;
        return 0;
    }
    return expected(p, what);
}

static int parse_array(parser *p, ar_json *out)
{
    int cap = 0, done = 0;
    out->type = AR_JSON_ARR;
    if (enter(p) < 0)
        return -1;
    skip_ws(p);
    if (peek(p) == ']') {
        p->pos++;
        done = 1;
    }
    while (!done) {
        if (parse_value(p, add_item(out, &cap)) < 0)
            return -1;
        if (after_item(p, ']', "',' or ']'", &done) < 0)
            return -1;
    }
    p->depth--;
    return 0;
}

typedef struct {
    const char *key;
    size_t pos;
} key_pos;

static int cmp_key_pos(const void *a, const void *b)
{
    const key_pos *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

/* Sorting finds duplicates in n log n, which matters for safetensors
 * headers with thousands of tensors; the later occurrence is reported. */
static int check_duplicates(parser *p, const ar_json *obj, const size_t *pos)
{
    if (obj->n < 2)
        return 0;
    key_pos *kp = ar_xmalloc((size_t)obj->n * sizeof *kp);
    for (int i = 0; i < obj->n; i++)
        kp[i] = (key_pos){obj->keys[i], pos[i]};
    qsort(kp, (size_t)obj->n, sizeof *kp, cmp_key_pos);
    int rc = 0;
    for (int i = 1; i < obj->n && rc == 0; i++)
        if (strcmp(kp[i - 1].key, kp[i].key) == 0)
            rc = fail_at(p, kp[i].pos, "duplicate key '%s'", kp[i].key);
    free(kp);
    return rc;
}

/* One "key": value member; records where the key started. */
static int parse_member(parser *p, ar_json *obj, int *cap, size_t **pos, int *pcap)
{
    skip_ws(p);
    if (peek(p) != '"')
        return expected(p, "a string key");
    if (obj->n == *pcap) {
        int nc = *pcap ? *pcap * 2 : 4;
        *pos = grow(*pos, (size_t)*pcap * sizeof **pos, (size_t)nc * sizeof **pos);
        *pcap = nc;
    }
    (*pos)[obj->n] = p->pos;
    ar_json *val = add_item(obj, cap);
    if (parse_string(p, &obj->keys[obj->n - 1]) < 0)
        return -1;
    skip_ws(p);
    if (peek(p) != ':')
        return expected(p, "':' after the key");
    p->pos++;
    return parse_value(p, val);
}

static int parse_object(parser *p, ar_json *out)
{
    int cap = 0, pcap = 0, done = 0, rc = 0;
    size_t *pos = NULL;
    out->type = AR_JSON_OBJ;
    if (enter(p) < 0)
        return -1;
    skip_ws(p);
    if (peek(p) == '}') {
        p->pos++;
        done = 1;
    }
    while (!done && rc == 0) {
        rc = parse_member(p, out, &cap, &pos, &pcap);
        if (rc == 0)
            rc = after_item(p, '}', "',' or '}'", &done);
    }
    if (rc == 0)
        rc = check_duplicates(p, out, pos);
    free(pos);
    p->depth--;
    return rc;
}

/* --- values -------------------------------------------------------- */

static int parse_literal(parser *p, ar_json *out)
{
    static const struct {
        const char *word;
        ar_json_type type;
        int b;
    } lit[] = {{"true", AR_JSON_BOOL, 1}, {"false", AR_JSON_BOOL, 0}, {"null", AR_JSON_NULL, 0}};
    for (size_t i = 0; i < sizeof lit / sizeof lit[0]; i++) {
        size_t n = strlen(lit[i].word);
        if (p->len - p->pos >= n && memcmp(p->s + p->pos, lit[i].word, n) == 0) {
            out->type = lit[i].type;
            out->boolean = lit[i].b;
            p->pos += n;
            return 0;
        }
    }
    return expected(p, "a value");
}

static int parse_value(parser *p, ar_json *out)
{
    skip_ws(p);
    int c = peek(p);
    if (c == '{')
        return parse_object(p, out);
    if (c == '[')
        return parse_array(p, out);
    if (c == '"') {
        out->type = AR_JSON_STR;
        return parse_string(p, &out->str);
    }
    if (c == '-' || is_digit(c))
        return parse_number(p, out);
    return parse_literal(p, out);
}

ar_json *ar_json_parse(const char *text, size_t len, ar_err *e)
{
    parser p = {(const unsigned char *)text, len, 0, 0, e};
    ar_json *j = ar_xcalloc(1, sizeof *j);
    if (parse_value(&p, j) < 0)
        goto fail;
    skip_ws(&p);
    if (!at_end(&p)) {
        expected(&p, "end of input after the value");
        goto fail;
    }
    return j;
fail:
    ar_json_free(j);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* writer                                                              */

/* first[] flags per nesting level; level 0 is the top level. */
enum { JW_FIRST = 1, JW_OBJ = 2 };

static void put(ar_jw *w, const char *s, size_t n)
{
    if (w->len + n + 1 > w->cap) {
        size_t nc = w->cap ? w->cap : 64;
        while (w->len + n + 1 > nc)
            nc *= 2;
        w->s = grow(w->s, w->cap, nc);
        w->cap = nc;
    }
    memcpy(w->s + w->len, s, n);
    w->len += n;
    w->s[w->len] = 0;
}

static void puts_jw(ar_jw *w, const char *s) { put(w, s, strlen(s)); }

void ar_jw_init(ar_jw *w)
{
    memset(w, 0, sizeof *w);
    w->first[0] = JW_FIRST;
    put(w, "", 0); /* w->s is a valid C string from the start */
}

void ar_jw_free(ar_jw *w)
{
    free(w->s);
    memset(w, 0, sizeof *w);
}

int ar_jw_ok(const ar_jw *w) { return w->depth >= 0; }

static int in_object(const ar_jw *w) { return w->depth > 0 && (w->first[w->depth] & JW_OBJ); }

/* Misuse poisons the writer (depth -1) instead of emitting invalid JSON;
 * every later call is then ignored. */
static void poison(ar_jw *w) { w->depth = -1; }

/* Separator before a value: none after a key, ',' between items, and a
 * newline between top-level values so repeated values form JSON Lines.
 * Returns 0 when the writer is (or becomes) poisoned. */
static int begin_value(ar_jw *w)
{
    if (w->depth < 0)
        return 0;
    if (w->after_key) {
        w->after_key = 0;
        return 1;
    }
    if (in_object(w)) {
        poison(w);
        return 0;
    }
    if (!(w->first[w->depth] & JW_FIRST))
        put(w, w->depth ? "," : "\n", 1);
    w->first[w->depth] &= (unsigned char)~JW_FIRST;
    return 1;
}

static void open_container(ar_jw *w, int obj)
{
    if (!begin_value(w))
        return;
    if (w->depth + 1 >= (int)sizeof w->first) {
        poison(w);
        return;
    }
    put(w, obj ? "{" : "[", 1);
    w->first[++w->depth] = (unsigned char)(JW_FIRST | (obj ? JW_OBJ : 0));
}

static void close_container(ar_jw *w, int obj)
{
    if (w->depth <= 0 || w->after_key || !(w->first[w->depth] & JW_OBJ) != !obj) {
        poison(w);
        return;
    }
    put(w, obj ? "}" : "]", 1);
    w->depth--;
}

void ar_jw_obj_begin(ar_jw *w) { open_container(w, 1); }
void ar_jw_obj_end(ar_jw *w) { close_container(w, 1); }
void ar_jw_arr_begin(ar_jw *w) { open_container(w, 0); }
void ar_jw_arr_end(ar_jw *w) { close_container(w, 0); }

/* Writes a quoted string.  Control characters are escaped as JSON requires;
 * bytes that are not valid UTF-8 become U+FFFD so the output always
 * parses. */
static void put_string(ar_jw *w, const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s);
    put(w, "\"", 1);
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        char esc[8];
        const char *named = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n"
                          : c == '\r' ? "\\r" : c == '\t' ? "\\t" : c == '\b' ? "\\b"
                          : c == '\f' ? "\\f" : NULL;
        size_t len;
        if (named) {
            puts_jw(w, named);
            i++;
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            puts_jw(w, esc);
            i++;
        } else if ((len = utf8_len(u + i, n - i)) == 0) {
            puts_jw(w, "\xEF\xBF\xBD");
            i++;
        } else {
            put(w, s + i, len);
            i += len;
        }
    }
    put(w, "\"", 1);
}

void ar_jw_key(ar_jw *w, const char *k)
{
    if (w->depth < 0)
        return;
    if (!in_object(w) || w->after_key) {
        poison(w);
        return;
    }
    if (!(w->first[w->depth] & JW_FIRST))
        put(w, ",", 1);
    w->first[w->depth] &= (unsigned char)~JW_FIRST;
    put_string(w, k);
    put(w, ":", 1);
    w->after_key = 1;
}

/* Integral values below 2^53 print as plain integers (steps, counts);
 * otherwise the shortest of %.15g/%.16g/%.17g that reads back to the same
 * double (17 significant digits always do). */
static void format_double(double x, char buf[40])
{
    if (x == nearbyint(x) && fabs(x) < 9007199254740992.0) {
        snprintf(buf, 40, "%.0f", x);
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, 40, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

void ar_jw_num(ar_jw *w, double x)
{
    char buf[40];
    if (!isfinite(x)) {
        ar_jw_null(w); /* JSON has no NaN or Infinity */
        return;
    }
    if (!begin_value(w))
        return;
    format_double(x, buf);
    puts_jw(w, buf);
}

void ar_jw_int(ar_jw *w, long long x)
{
    char buf[24];
    if (!begin_value(w))
        return;
    snprintf(buf, sizeof buf, "%lld", x);
    puts_jw(w, buf);
}

void ar_jw_str(ar_jw *w, const char *s)
{
    if (begin_value(w))
        put_string(w, s);
}

void ar_jw_bool(ar_jw *w, int b)
{
    if (begin_value(w))
        puts_jw(w, b ? "true" : "false");
}

void ar_jw_null(ar_jw *w)
{
    if (begin_value(w))
        puts_jw(w, "null");
}
