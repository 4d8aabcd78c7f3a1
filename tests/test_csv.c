/* The strict CSV reader: RFC 4180 quoting, header lookup, the line numbers
 * in errors, numbers, the field writer, and robustness on damaged input. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/csv.h"
#include "testutil.h"

static ar_csv *parse_ok(const char *text)
{
    ar_csv *c;
    ar_err e = {{0}};
    cr_assert_eq(ar_csv_parse(&c, text, strlen(text), "t.csv", &e), 0, "%s", e.msg);
    return c;
}

/* Parses text that must fail; returns the message. */
static const char *parse_err(const char *text, size_t len)
{
    static ar_err e;
    ar_csv *c = NULL;
    memset(&e, 0, sizeof e);
    cr_assert_eq(ar_csv_parse(&c, text, len, "t.csv", &e), -1, "accepted:\n%s", text);
    cr_assert_null(c);
    return e.msg;
}

#define EXPECT_ERR(text, needle)                                                                    \
    do {                                                                                            \
        const char *m_ = parse_err(text, strlen(text));                                             \
        cr_assert(strstr(m_, needle) != NULL, "expected '%s' in the message: %s", needle, m_);      \
    } while (0)

Test(csv, header_lookup_and_cells)
{
    ar_csv *c = parse_ok("variant,size,val_loss\nbaseline,s1,2.5\nblock,s1,2.4\n");
    cr_assert_eq(c->ncols, 3);
    cr_assert_eq(c->nrows, 2);
    cr_assert_eq(ar_csv_col(c, "size"), 1);
    cr_assert_eq(ar_csv_col(c, "nope"), -1);
    cr_assert_str_eq(ar_csv_cell(c, 1, 0), "block");
    cr_assert_eq(c->line[0], 2);
    cr_assert_eq(c->line[1], 3);
    double v;
    ar_err e;
    cr_assert_eq(ar_csv_num(c, 1, 2, &v, &e), 0, "%s", e.msg);
    cr_assert_eq(v, 2.4); /* strtod: the double nearest the decimal, as the literal */
    ar_csv_free(c);
}

Test(csv, quoted_fields_per_rfc4180)
{
    /* Commas, doubled quotes and line breaks inside quotes; CRLF records;
     * an empty quoted field; lines counted through the embedded breaks. */
    ar_csv *c = parse_ok("name,note\r\n\"a,b\",\"say \"\"hi\"\"\"\r\n\"multi\nline\",\"\"\r\nlast,x");
    cr_assert_eq(c->nrows, 3);
    cr_assert_str_eq(ar_csv_cell(c, 0, 0), "a,b");
    cr_assert_str_eq(ar_csv_cell(c, 0, 1), "say \"hi\"");
    cr_assert_str_eq(ar_csv_cell(c, 1, 0), "multi\nline");
    cr_assert_str_eq(ar_csv_cell(c, 1, 1), "");
    cr_assert_str_eq(ar_csv_cell(c, 2, 0), "last");
    cr_assert_eq(c->line[1], 3);
    cr_assert_eq(c->line[2], 5, "the record after a two-line field starts on line 5, got %d", c->line[2]);
    ar_csv_free(c);
}

Test(csv, bom_trailing_blank_lines_and_empty_fields)
{
    ar_csv *c = parse_ok("\xEF\xBB\xBF" "a,b,c\n1,,3\n,,\n\n\n");
    cr_assert_eq(ar_csv_col(c, "a"), 0, "the byte order mark is not part of the first name");
    cr_assert_eq(c->nrows, 2);
    cr_assert_str_eq(ar_csv_cell(c, 0, 1), "");
    cr_assert_str_eq(ar_csv_cell(c, 1, 2), "");
    ar_csv_free(c);
    c = parse_ok("only\n");
    cr_assert_eq(c->nrows, 0);
    ar_csv_free(c);
}

Test(csv, errors_name_file_and_line)
{
    EXPECT_ERR("a,b\n1,2\n3\n", "t.csv:3: 1 field, expected 2");
    EXPECT_ERR("a,b\n1,2,3\n", "t.csv:2: 3 fields, expected 2");
    EXPECT_ERR("a,b\n1,\"open\n\nx,y\n", "t.csv:2: unterminated quoted field");
    EXPECT_ERR("a,b\n1,x\"y\n", "t.csv:2: a quote inside an unquoted field");
    EXPECT_ERR("a,b\n1,\"x\"y\n", "t.csv:2: text after the closing quote");
    EXPECT_ERR("a,a\n1,2\n", "t.csv:1: duplicate column 'a'");
    EXPECT_ERR("a,,c\n", "t.csv:1: column 2 of the header has no name");
    EXPECT_ERR("a,b\n1,2\r3,4\n", "t.csv:2: carriage return without a line feed");
    EXPECT_ERR("a,b\n1,2\n\n3,4\n", "t.csv:3: 1 field, expected 2");
    EXPECT_ERR("", "t.csv:1: empty file");
    EXPECT_ERR("\n\n", "t.csv:1: empty file");
    const char nul[] = "a,b\n1,\0\n";
    const char *m = parse_err(nul, sizeof nul - 1);
    cr_assert(strstr(m, "t.csv:2: NUL byte"), "%s", m);
}

Test(csv, number_errors_name_the_line)
{
    ar_csv *c = parse_ok("x,y\n 1.5e-3 ,a\nabc,b\nnan,c\ninf,d\n0x10,e\n,f\n-2,g\n");
    double v;
    ar_err e;
    cr_assert_eq(ar_csv_num(c, 0, 0, &v, &e), 0, "%s", e.msg);
    cr_assert_eq(v, 1.5e-3); /* strtod, spaces trimmed: the literal's double */
    cr_assert_eq(ar_csv_num(c, 6, 0, &v, &e), 0, "%s", e.msg);
    cr_assert_float_eq(v, -2.0, 0);
    const int bad[] = {1, 2, 3, 4, 5};
    const char *text[] = {"abc", "nan", "inf", "0x10", ""};
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(ar_csv_num(c, bad[i], 0, &v, &e), -1, "'%s' was read as a number", text[i]);
        char want[128];
        snprintf(want, sizeof want, "t.csv:%d: column 'x' expects a number, got '%s'", bad[i] + 2, text[i]);
        cr_assert_str_eq(e.msg, want);
    }
    ar_csv_free(c);
}

Test(csv, require_col_lists_the_columns)
{
    ar_csv *c = parse_ok("variant,size\nb,s\n");
    ar_err e;
    cr_assert_eq(ar_csv_require_col(c, "val_loss", &e), -1);
    cr_assert_str_eq(e.msg, "t.csv:1: no column 'val_loss' (columns: variant, size)");
    cr_assert_eq(ar_csv_require_col(c, "size", &e), 1);
    ar_csv_free(c);
}

Test(csv, writer_round_trips)
{
    const char *fields[] = {"plain", "with,comma", "with \"quotes\"", "two\nlines", " padded ", "", "cr\r\nlf"};
    int n = sizeof fields / sizeof *fields;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%sc%d", i ? "," : "", i);
    }
    fputc('\n', f);
    for (int i = 0; i < n; i++) {
        if (i)
            fputc(',', f);
        ar_csv_write_field(f, fields[i]);
    }
    fputc('\n', f);
    fclose(f);
    ar_csv *c = parse_ok(buf);
    cr_assert_eq(c->nrows, 1);
    for (int i = 0; i < n; i++)
        cr_assert_str_eq(ar_csv_cell(c, 0, i), fields[i]);
    ar_csv_free(c);
    free(buf);
}

Test(csv, read_names_the_file)
{
    const char *dir = tu_tmpdir();
    const char *p = tu_path(dir, "r.csv");
    tu_write_file(p, "a\n1\n\"x\n", 7);
    ar_csv *c;
    ar_err e;
    cr_assert_eq(ar_csv_read(&c, p, &e), -1);
    char want[4200];
    snprintf(want, sizeof want, "%s:3: unterminated", p);
    cr_assert(strstr(e.msg, want), "%s", e.msg);
    cr_assert_eq(ar_csv_read(&c, tu_path(dir, "missing.csv"), &e), -1);
    cr_assert(strstr(e.msg, "missing.csv") && strstr(e.msg, "cannot open"), "%s", e.msg);
}

/* Damaged input: every prefix of a tricky document, and seeded random
 * bytes from a small alphabet, either parse or fail with a message; a
 * successful parse has a rectangular table.  (Run under ASan in CI for the
 * bounds.) */
Test(csv, damaged_input_never_misbehaves)
{
    const char *doc = "\xEF\xBB\xBF" "a,\"b\"\"c\",d\r\n\"1\n2\",,\"\"\n3,\"x,y\",4\n";
    size_t n = strlen(doc);
    for (size_t k = 0; k <= n; k++) {
        char *copy = malloc(k + 1); /* exactly k bytes of content */
        memcpy(copy, doc, k);
        ar_csv *c = NULL;
        ar_err e = {{0}};
        int rc = ar_csv_parse(&c, copy, k, "p.csv", &e);
        if (rc == 0) {
            cr_assert(c->ncols > 0);
            for (int r = 0; r < c->nrows; r++)
                for (int q = 0; q < c->ncols; q++)
                    cr_assert_not_null(ar_csv_cell(c, r, q));
            ar_csv_free(c);
        } else {
            cr_assert(strncmp(e.msg, "p.csv:", 6) == 0, "prefix %zu: %s", k, e.msg);
        }
        free(copy);
    }
    const char alphabet[] = {'a', '1', ',', '"', '\n', '\r', '\0', ' ', '\xEF'};
    unsigned s = 12345;
    for (int trial = 0; trial < 3000; trial++) {
        size_t len = (size_t)(trial % 40);
        char *buf = malloc(len + 1);
        for (size_t i = 0; i < len; i++) {
            s = s * 1103515245u + 12345u;
            buf[i] = alphabet[(s >> 16) % sizeof alphabet];
        }
        ar_csv *c = NULL;
        ar_err e = {{0}};
        if (ar_csv_parse(&c, buf, len, "r.csv", &e) == 0) {
            cr_assert(c->ncols > 0 && c->nrows >= 0);
            ar_csv_free(c);
        } else {
            cr_assert(strncmp(e.msg, "r.csv:", 6) == 0, "%s", e.msg);
        }
        free(buf);
    }
}
