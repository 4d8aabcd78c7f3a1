/* Minimal JSON: a DOM parser (for safetensors headers, metrics.jsonl, test
 * fixtures) and a streaming writer (metrics lines, --json output). */
#ifndef AR_JSON_H
#define AR_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"

typedef enum { AR_JSON_NULL, AR_JSON_BOOL, AR_JSON_NUM, AR_JSON_STR, AR_JSON_ARR, AR_JSON_OBJ } ar_json_type;

typedef struct ar_json {
    ar_json_type type;
    int boolean;
    double num;
    int is_int;       /* number written without fraction/exponent and fits int64 */
    int64_t inum;     /* exact value when is_int */
    char *str;        /* AR_JSON_STR: decoded UTF-8, NUL-terminated */
    int n;            /* ARR/OBJ: number of items */
    char **keys;      /* OBJ: n keys */
    struct ar_json *items; /* ARR/OBJ: n values */
} ar_json;

/* Parses exactly one JSON value (surrounding whitespace allowed).  On error
 * returns NULL with "at byte N: expected ..." in e.  Duplicate object keys
 * are an error. Nesting deeper than 64 is an error. */
ar_json *ar_json_parse(const char *text, size_t len, ar_err *e);
void ar_json_free(ar_json *j);
/* Object member by key, NULL if absent or j is not an object. */
const ar_json *ar_json_get(const ar_json *j, const char *key);

/* Writer: appends to a growing buffer (s stays NUL-terminated), inserting
 * commas itself; several top-level values are separated by newlines (JSON
 * Lines).  Misuse (a key outside an object, a value in an object without a
 * key, a mismatched end, nesting past 63) never emits invalid JSON: the
 * writer stops writing and ar_jw_ok() returns 0. */
typedef struct {
    char *s;
    size_t len, cap;
    int depth;
    unsigned char first[64]; /* per nesting level: no item written yet */
    int after_key;
} ar_jw;

void ar_jw_init(ar_jw *w);
void ar_jw_free(ar_jw *w);
void ar_jw_obj_begin(ar_jw *w);
void ar_jw_obj_end(ar_jw *w);
void ar_jw_arr_begin(ar_jw *w);
void ar_jw_arr_end(ar_jw *w);
void ar_jw_key(ar_jw *w, const char *k);
void ar_jw_num(ar_jw *w, double x);     /* shortest round-trip (%.17g trimmed); NaN/Inf -> null */
void ar_jw_int(ar_jw *w, long long x);
void ar_jw_str(ar_jw *w, const char *s); /* escapes quotes, backslash, control chars */
void ar_jw_bool(ar_jw *w, int b);
void ar_jw_null(ar_jw *w);
/* 1 while every call so far was well-formed, 0 after misuse. */
int ar_jw_ok(const ar_jw *w);

#endif
