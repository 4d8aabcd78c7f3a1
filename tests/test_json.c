/* JSON parser and writer: RFC 8259 conformance, exact integers, escapes,
 * error positions, and writer output that parses back to the same value. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "formats/json.h"
#include "testutil.h"

static ar_json *parse(const char *s, ar_err *e) { return ar_json_parse(s, strlen(s), e); }

static ar_json *parse_ok(const char *s)
{
    ar_err e = {{0}};
    ar_json *j = parse(s, &e);
    cr_assert(j != NULL, "parse of %s failed: %s", s, e.msg);
    return j;
}

/* Writes a parsed value back through the streaming writer. */
static void emit(ar_jw *w, const ar_json *j)
{
    switch (j->type) {
    case AR_JSON_NULL: ar_jw_null(w); break;
    case AR_JSON_BOOL: ar_jw_bool(w, j->boolean); break;
    case AR_JSON_NUM:
        if (j->is_int)
            ar_jw_int(w, j->inum);
        else
            ar_jw_num(w, j->num);
        break;
    case AR_JSON_STR: ar_jw_str(w, j->str); break;
    case AR_JSON_ARR:
        ar_jw_arr_begin(w);
        for (int i = 0; i < j->n; i++)
            emit(w, &j->items[i]);
        ar_jw_arr_end(w);
        break;
    case AR_JSON_OBJ:
        ar_jw_obj_begin(w);
        for (int i = 0; i < j->n; i++) {
            ar_jw_key(w, j->keys[i]);
            emit(w, &j->items[i]);
        }
        ar_jw_obj_end(w);
        break;
    }
}

static int same(const ar_json *a, const ar_json *b)
{
    if (a->type != b->type)
        return 0;
    switch (a->type) {
    case AR_JSON_NULL: return 1;
    case AR_JSON_BOOL: return a->boolean == b->boolean;
    case AR_JSON_NUM: return a->num == b->num && a->is_int == b->is_int && (!a->is_int || a->inum == b->inum);
    case AR_JSON_STR: return strcmp(a->str, b->str) == 0;
    default:
        if (a->n != b->n)
            return 0;
        for (int i = 0; i < a->n; i++)
            if ((a->type == AR_JSON_OBJ && strcmp(a->keys[i], b->keys[i]) != 0) || !same(&a->items[i], &b->items[i]))
                return 0;
        return 1;
    }
}

Test(json, parses_nested_document)
{
    ar_json *j = parse_ok(" {\"a\": [1, 2.5, -3e2, true, false, null], \"b\": {\"c\": \"d\"}, \"e\": []}\r\n\t");
    cr_assert_eq(j->type, AR_JSON_OBJ);
    cr_assert_eq(j->n, 3);
    const ar_json *a = ar_json_get(j, "a");
    cr_assert(a && a->type == AR_JSON_ARR && a->n == 6);
    cr_assert(a->items[0].is_int && a->items[0].inum == 1);
    cr_assert(!a->items[1].is_int && a->items[1].num == 2.5);
    cr_assert(!a->items[2].is_int && a->items[2].num == -300.0);
    cr_assert(a->items[3].type == AR_JSON_BOOL && a->items[3].boolean == 1);
    cr_assert(a->items[4].type == AR_JSON_BOOL && a->items[4].boolean == 0);
    cr_assert_eq(a->items[5].type, AR_JSON_NULL);
    cr_assert_str_eq(ar_json_get(ar_json_get(j, "b"), "c")->str, "d");
    cr_assert_eq(ar_json_get(j, "e")->n, 0);
    cr_assert_null(ar_json_get(j, "zz"));
    cr_assert_null(ar_json_get(a, "a"), "get on an array must give NULL");
    ar_json_free(j);
}

Test(json, scalar_top_level_values)
{
    const char *ok[] = {"0", "-0", "\"\"", "true", "null", " 1.5e-3 ", "[]", "{}"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        ar_json_free(parse_ok(ok[i]));
}

Test(json, escapes_decode_to_utf8)
{
    ar_json *j = parse_ok("\"q\\\" b\\\\ s\\/ \\b\\f\\n\\r\\t \\u0041\\u00e9\\u20AC \\ud83d\\ude00 \xc3\xa9\"");
    cr_assert_str_eq(j->str, "q\" b\\ s/ \b\f\n\r\t A\xc3\xa9\xe2\x82\xac \xf0\x9f\x98\x80 \xc3\xa9");
    ar_json_free(j);
}

Test(json, integers_are_exact)
{
    ar_json *j = parse_ok("[9223372036854775807, -9223372036854775808, 9223372036854775808, "
                          "-9223372036854775809, 9007199254740993, 1.0, 1e2, -0]");
    cr_assert(j->items[0].is_int && j->items[0].inum == INT64_MAX);
    cr_assert(j->items[1].is_int && j->items[1].inum == INT64_MIN);
    cr_assert(!j->items[2].is_int, "2^63 does not fit int64");
    cr_assert(!j->items[3].is_int, "-2^63-1 does not fit int64");
    cr_assert(j->items[4].is_int && j->items[4].inum == 9007199254740993LL, "exact beyond 2^53");
    cr_assert(!j->items[5].is_int && j->items[5].num == 1.0, "a fraction makes it a non-integer");
    cr_assert(!j->items[6].is_int && j->items[6].num == 100.0, "an exponent makes it a non-integer");
    cr_assert(j->items[7].is_int && j->items[7].inum == 0 && signbit(j->items[7].num));
    ar_json_free(j);
}

Test(json, numbers_parse_correctly_rounded)
{
    ar_json *j = parse_ok("[0.1, 1e-310, 2.2250738585072014e-308, 1.7976931348623157e308, 123456789012345678901234567890]");
    cr_assert_eq(j->items[0].num, 0.1);
    cr_assert_eq(j->items[1].num, 1e-310);
    cr_assert_eq(j->items[2].num, 2.2250738585072014e-308);
    cr_assert_eq(j->items[3].num, 1.7976931348623157e308);
    cr_assert(!j->items[4].is_int && j->items[4].num == 1.2345678901234568e29);
    ar_json_free(j);
}

Test(json, nesting_limit_is_64)
{
    char buf[200];
    memset(buf, '[', 64);
    memset(buf + 64, ']', 64);
    buf[128] = 0;
    ar_json_free(parse_ok(buf));
    memset(buf, '[', 65);
    memset(buf + 65, ']', 65);
    buf[130] = 0;
    ar_err e = {{0}};
    cr_assert_null(parse(buf, &e));
    cr_assert(strstr(e.msg, "nesting deeper than 64"), "%s", e.msg);
}

struct bad {
    const char *text;
    size_t len; /* 0: strlen */
    const char *msg;
};

Test(json, rejects_malformed_input)
{
    static const struct bad cases[] = {
        {"", 0, "at byte 0: expected a value, found end of input"},
        {"   ", 0, "at byte 3: expected a value"},
        {"{", 0, "at byte 1: expected a string key, found end of input"},
        {"[1,]", 0, "at byte 3: expected a value, found ']'"},
        {"[1 2]", 0, "at byte 3: expected ',' or ']'"},
        {"{\"a\":1,}", 0, "at byte 7: expected a string key"},
        {"{\"a\" 1}", 0, "expected ':' after the key"},
        {"{a:1}", 0, "expected a string key"},
        {"{\"a\":1 \"b\":2}", 0, "expected ',' or '}'"},
        {"[1}", 0, "expected ',' or ']'"},
        {"01", 0, "leading zero"},
        {"-01", 0, "leading zero"},
        {"1.", 0, "expected a digit after the decimal point"},
        {".5", 0, "expected a value"},
        {"-", 0, "expected a digit"},
        {"1e", 0, "expected a digit in the exponent"},
        {"1e+", 0, "expected a digit in the exponent"},
        {"+1", 0, "expected a value"},
        {"0x10", 0, "expected end of input"},
        {"tru", 0, "expected a value"},
        {"True", 0, "expected a value"},
        {"nul", 0, "expected a value"},
        {"NaN", 0, "expected a value"},
        {"Infinity", 0, "expected a value"},
        {"-Infinity", 0, "expected a digit"},
        {"1e999", 0, "number out of range"},
        {"'a'", 0, "expected a value"},
        {"\"abc", 0, "at byte 0: unterminated string"},
        {"\"abc\\\"", 0, "unterminated string"},
        {"\"\\x\"", 0, "invalid escape"},
        {"\"\\u12\"", 0, "\\u escape needs 4 hex digits"},
        {"\"\\u12g4\"", 0, "\\u escape needs 4 hex digits"},
        {"\"\\u12", 0, "at byte 0: unterminated string"},
        {"\"\\ud800\"", 0, "unpaired high surrogate"},
        {"\"\\ud800\\u0041\"", 0, "not followed by a low surrogate"},
        {"\"\\udc00\"", 0, "unpaired low surrogate"},
        {"\"\\u0000\"", 0, "\\u0000 is not supported"},
        {"\"a\tb\"", 0, "at byte 2: control character 0x09"},
        {"\"a\nb\"", 0, "control character 0x0a"},
        {"\"\x01\"", 0, "control character 0x01"},
        {"\"a\0b\"", 5, "control character 0x00"},
        {"[1]\0", 4, "at byte 3: expected end of input"},
        {"\"\xff\"", 0, "invalid UTF-8"},
        {"\"\xc0\xaf\"", 0, "invalid UTF-8"},         /* overlong '/' */
        {"\"\xed\xa0\x80\"", 0, "invalid UTF-8"},     /* encoded surrogate */
        {"\"\xf4\x90\x80\x80\"", 0, "invalid UTF-8"}, /* above U+10FFFF */
        {"\"\xe2\x82\"", 0, "invalid UTF-8"},         /* truncated sequence */
        {"[1] x", 0, "at byte 4: expected end of input after the value, found 'x'"},
        {"{} {}", 0, "expected end of input"},
        {"{\"a\":1,\"b\":2,\"a\":3}", 0, "at byte 13: duplicate key 'a'"},
        {"{\"x\":{\"k\":1,\"k\":1}}", 0, "duplicate key 'k'"},
        {"[1,,2]", 0, "expected a value"},
        {"\xef\xbb\xbf{}", 0, "expected a value"}, /* a BOM is not JSON text */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ar_err e = {{0}};
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].text);
        ar_json *j = ar_json_parse(cases[i].text, len, &e);
        cr_expect_null(j, "case %zu (%s) was accepted", i, cases[i].text);
        ar_json_free(j);
        cr_expect(strstr(e.msg, cases[i].msg) != NULL, "case %zu (%s): message '%s' lacks '%s'", i, cases[i].text,
                  e.msg, cases[i].msg);
    }
}

Test(json, error_without_err_struct_is_safe)
{
    cr_assert_null(ar_json_parse("[", 1, NULL));
}

Test(json, input_need_not_be_nul_terminated)
{
    const char text[] = {'[', '1', ',', '2', ']', 'x'};
    ar_json *j = ar_json_parse(text, 5, NULL);
    cr_assert(j && j->n == 2 && j->items[1].inum == 2);
    ar_json_free(j);
}

/* --- writer -------------------------------------------------------- */

static char *write_num(double x)
{
    static char buf[64];
    ar_jw w;
    ar_jw_init(&w);
    ar_jw_num(&w, x);
    snprintf(buf, sizeof buf, "%s", w.s);
    ar_jw_free(&w);
    return buf;
}

Test(json, writer_inserts_commas)
{
    ar_jw w;
    ar_jw_init(&w);
    cr_assert_str_eq(w.s, "");
    ar_jw_obj_begin(&w);
    ar_jw_key(&w, "a");
    ar_jw_int(&w, 1);
    ar_jw_key(&w, "b");
    ar_jw_arr_begin(&w);
    ar_jw_int(&w, -2);
    ar_jw_str(&w, "x");
    ar_jw_bool(&w, 1);
    ar_jw_null(&w);
    ar_jw_obj_begin(&w);
    ar_jw_obj_end(&w);
    ar_jw_arr_begin(&w);
    ar_jw_arr_end(&w);
    ar_jw_arr_end(&w);
    ar_jw_key(&w, "c");
    ar_jw_bool(&w, 0);
    ar_jw_obj_end(&w);
    cr_assert_str_eq(w.s, "{\"a\":1,\"b\":[-2,\"x\",true,null,{},[]],\"c\":false}");
    cr_assert_eq(w.len, strlen(w.s));
    cr_assert(ar_jw_ok(&w));
    ar_jw_free(&w);
}

Test(json, writer_numbers_are_shortest_round_trip)
{
    cr_assert_str_eq(write_num(0.1), "0.1");
    cr_assert_str_eq(write_num(0.1 + 0.2), "0.30000000000000004");
    cr_assert_str_eq(write_num(1.0 / 3.0), "0.3333333333333333");
    cr_assert_str_eq(write_num(3.0), "3");
    cr_assert_str_eq(write_num(-2000.0), "-2000");
    cr_assert_str_eq(write_num(1e300), "1e+300");
    cr_assert_str_eq(write_num(2.5e-7), "2.5e-07");
    cr_assert_str_eq(write_num(NAN), "null");
    cr_assert_str_eq(write_num(INFINITY), "null");
    cr_assert_str_eq(write_num(-INFINITY), "null");
}

Test(json, writer_integers_at_the_limits)
{
    ar_jw w;
    ar_jw_init(&w);
    ar_jw_arr_begin(&w);
    ar_jw_int(&w, INT64_MIN);
    ar_jw_int(&w, INT64_MAX);
    ar_jw_arr_end(&w);
    cr_assert_str_eq(w.s, "[-9223372036854775808,9223372036854775807]");
    ar_json *j = parse_ok(w.s);
    cr_assert(j->items[0].inum == INT64_MIN && j->items[1].inum == INT64_MAX);
    ar_json_free(j);
    ar_jw_free(&w);
}

/* Random bit patterns cover subnormals, huge exponents and 17-digit cases;
 * each must come back as the identical double through our own parser. */
Test(json, writer_doubles_round_trip_bit_exact)
{
    uint64_t s = 88172645463325252ull;
    for (int i = 0; i < 20000; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        double x;
        memcpy(&x, &s, sizeof x);
        if (!isfinite(x))
            continue;
        const char *txt = write_num(x);
        ar_json *j = parse_ok(txt);
        cr_assert(j->num == x, "%.17g written as %s reads back as %.17g", x, txt, j->num);
        cr_assert(strlen(txt) <= 24, "%s is not short", txt);
        ar_json_free(j);
    }
}

Test(json, writer_escapes_strings)
{
    ar_jw w;
    ar_jw_init(&w);
    ar_jw_str(&w, "q\"b\\n\n\t\x01\x1f\x7f \xc3\xa9 \xff!");
    cr_assert_str_eq(w.s, "\"q\\\"b\\\\n\\n\\t\\u0001\\u001f\x7f \xc3\xa9 \xef\xbf\xbd!\"");
    ar_json *j = parse_ok(w.s);
    cr_assert_str_eq(j->str, "q\"b\\n\n\t\x01\x1f\x7f \xc3\xa9 \xef\xbf\xbd!");
    ar_json_free(j);
    ar_jw_free(&w);
}

Test(json, writer_top_level_values_form_json_lines)
{
    ar_jw w;
    ar_jw_init(&w);
    ar_jw_obj_begin(&w);
    ar_jw_key(&w, "step");
    ar_jw_int(&w, 1);
    ar_jw_obj_end(&w);
    ar_jw_obj_begin(&w);
    ar_jw_obj_end(&w);
    cr_assert_str_eq(w.s, "{\"step\":1}\n{}");
    ar_jw_free(&w);
}

Test(json, writer_refuses_keys_outside_objects)
{
    ar_jw w;
    ar_jw_init(&w);
    ar_jw_arr_begin(&w);
    ar_jw_key(&w, "k");
    ar_jw_int(&w, 1);
    ar_jw_arr_end(&w);
    cr_assert(!ar_jw_ok(&w));
    cr_assert_str_eq(w.s, "[", "nothing may be written after misuse");
    ar_jw_free(&w);

    ar_jw_init(&w);
    ar_jw_key(&w, "top");
    cr_assert(!ar_jw_ok(&w), "a key at the top level is misuse");
    cr_assert_str_eq(w.s, "");
    ar_jw_free(&w);
}

Test(json, writer_refuses_values_without_keys_and_bad_ends)
{
    ar_jw w;
    ar_jw_init(&w);
    ar_jw_obj_begin(&w);
    ar_jw_int(&w, 1);
    cr_assert(!ar_jw_ok(&w), "value in an object needs a key");
    ar_jw_free(&w);

    ar_jw_init(&w);
    ar_jw_arr_begin(&w);
    ar_jw_obj_end(&w);
    cr_assert(!ar_jw_ok(&w), "'}' cannot close '['");
    ar_jw_free(&w);

    ar_jw_init(&w);
    ar_jw_obj_begin(&w);
    ar_jw_key(&w, "a");
    ar_jw_obj_end(&w);
    cr_assert(!ar_jw_ok(&w), "a key without a value");
    ar_jw_free(&w);

    ar_jw_init(&w);
    ar_jw_arr_end(&w);
    cr_assert(!ar_jw_ok(&w), "end without begin");
    ar_jw_free(&w);
}

Test(json, writer_nesting_limit)
{
    ar_jw w;
    ar_jw_init(&w);
    for (int i = 0; i < 63; i++)
        ar_jw_arr_begin(&w);
    cr_assert(ar_jw_ok(&w));
    ar_jw_arr_begin(&w);
    cr_assert(!ar_jw_ok(&w));
    ar_jw_free(&w);
}

Test(json, parse_print_round_trip)
{
    const char *doc = "{\"name\":\"r\\u00e9sum\\u00e9 \\\"x\\\"\\n\",\"ints\":[0,-1,9223372036854775807,-9223372036854775808],"
                      "\"nums\":[0.1,-2.5e-300,1.7976931348623157e+308,6.02214076e+23],\"flags\":[true,false,null],"
                      "\"nested\":{\"a\":{\"b\":[[],{}]}},\"emoji\":\"\\ud83d\\ude00\"}";
    ar_json *a = parse_ok(doc);
    ar_jw w;
    ar_jw_init(&w);
    emit(&w, a);
    cr_assert(ar_jw_ok(&w));
    ar_json *b = parse_ok(w.s);
    cr_assert(same(a, b), "round trip changed the value: %s", w.s);
    /* A second pass is a fixed point: the writer's output is canonical. */
    ar_jw w2;
    ar_jw_init(&w2);
    emit(&w2, b);
    cr_assert_str_eq(w.s, w2.s);
    cr_assert(strstr(w.s, "\"ints\":[0,-1,9223372036854775807,-9223372036854775808]"), "%s", w.s);
    cr_assert(strstr(w.s, "\"emoji\":\"\xf0\x9f\x98\x80\""), "%s", w.s);
    ar_jw_free(&w);
    ar_jw_free(&w2);
    ar_json_free(a);
    ar_json_free(b);
}

Test(json, large_object_with_many_keys)
{
    ar_jw w;
    ar_jw_init(&w);
    ar_jw_obj_begin(&w);
    char key[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(key, sizeof key, "k%d", i);
        ar_jw_key(&w, key);
        ar_jw_int(&w, i);
    }
    ar_jw_obj_end(&w);
    ar_json *j = parse_ok(w.s);
    cr_assert_eq(j->n, 5000);
    cr_assert_eq(ar_json_get(j, "k4321")->inum, 4321);
    ar_json_free(j);
    /* The same object with one repeated key must be refused. */
    w.s[w.len - 1] = 0;
    w.len--;
    size_t n = strlen(w.s) + 32;
    char *dup = malloc(n);
    snprintf(dup, n, "%s,\"k17\":0}", w.s);
    ar_err e = {{0}};
    cr_assert_null(parse(dup, &e));
    cr_assert(strstr(e.msg, "duplicate key 'k17'"), "%s", e.msg);
    free(dup);
    ar_jw_free(&w);
}
