/* The command line through the real binary ($AR_BIN): usage lines that match
 * the man pages' SYNOPSIS, help, version, error style and exit statuses, and
 * configuration / checkpoint errors.  Nothing here trains a model: every
 * case fails (or finishes) before the first training step.
 *
 * Covers: cmd/ (main.c, options.c and each command's argument handling) and
 * man/ (the synopses). */
#include <criterion/criterion.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/json.h"
#include "lib/backend.h"
#include "lib/backend.h"
#include "run/checkpoint.h"
#include "testutil.h"

/* ---- helpers ---- */

static const char *bin(void)
{
    const char *b = tu_bin();
    if (!b)
        cr_skip_test("AR_BIN is not set");
    return b;
}

static const char *srcdir(void)
{
    const char *s = tu_source_dir();
    if (!s)
        cr_skip_test("AR_SOURCE_DIR is not set");
    return s;
}

/* Runs `attnres ARGS` (ARGS is shell text) in directory dir (NULL: the
 * current one).  what: 0 = stdout and stderr together, 1 = stdout only,
 * 2 = stderr only.  The result is malloc'd. */
static char *run_in(const char *dir, int what, int *status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static char *run_in(const char *dir, int what, int *status, const char *fmt, ...)
{
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    const char *redir = what == 1 ? " 2>/dev/null" : what == 2 ? " 2>&1 >/dev/null" : "";
    /* tu_run appends "2>&1" to the whole group: stderr of the group is
     * the pipe too, and the redirections inside pick the stream. */
    snprintf(cmd, sizeof cmd, "{ %s%s%s'%s' %s%s; }", dir ? "cd '" : "", dir ? dir : "",
             dir ? "' && " : "", bin(), args, redir);
    return tu_run(cmd, status);
}

#define RUN(what, st, ...) run_in(NULL, what, st, __VA_ARGS__)

/* Drops the roff font escapes \fB \fI \fR \fP and turns \- into -. */
static void strip_roff(const char *in, char *out, size_t n)
{
    size_t k = 0;
    for (const char *p = in; *p && k + 1 < n; p++) {
        if (p[0] == '\\' && p[1] == 'f' && p[2]) {
            p += 2;
            continue;
        }
        if (p[0] == '\\' && p[1] == '-') {
            out[k++] = '-';
            p++;
            continue;
        }
        out[k++] = *p;
    }
    out[k] = 0;
}

/* Reads man/PAGE from the source tree. */
static char *read_page(const char *page)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/man/%s", srcdir(), page);
    char *s = tu_read_file(path, NULL);
    cr_assert(s != NULL, "cannot read %s", path);
    return s;
}

/* The SYNOPSIS of a man page normalised: the lines between .nf and .fi
 * after .SH SYNOPSIS, escapes stripped, joined with single spaces. */
static void page_synopsis(const char *page, char *out, size_t n)
{
    char *s = read_page(page);
    char *p = strstr(s, "\n.SH SYNOPSIS\n");
    cr_assert(p != NULL, "%s has no '.SH SYNOPSIS' line", page);
    p = strchr(p + 1, '\n') + 1;
    cr_assert(strncmp(p, ".nf\n", 4) == 0, "%s: SYNOPSIS must start with .nf", page);
    p += 4;
    char *end = strstr(p, "\n.fi\n");
    cr_assert(end != NULL, "%s: SYNOPSIS has no closing .fi", page);
    out[0] = 0;
    size_t k = 0;
    while (p <= end) {
        char *eol = strchr(p, '\n');
        char line[1024], clean[1024];
        size_t len = (size_t)(eol - p);
        cr_assert(len < sizeof line);
        memcpy(line, p, len);
        line[len] = 0;
        cr_assert(line[0] != '.', "%s: a request inside SYNOPSIS: %s", page, line);
        strip_roff(line, clean, sizeof clean);
        k += (size_t)snprintf(out + k, n - k, "%s%s", k ? " " : "", clean);
        cr_assert(k < n);
        p = eol + 1;
    }
    free(s);
}

/* The text of the NAME line of a man page ("attnres-train - train ..."). */
static void page_name_line(const char *page, char *out, size_t n)
{
    char *s = read_page(page);
    char *p = strstr(s, "\n.SH NAME\n");
    cr_assert(p != NULL, "%s has no '.SH NAME' line", page);
    p += strlen("\n.SH NAME\n");
    char *eol = strchr(p, '\n');
    cr_assert(eol != NULL);
    *eol = 0;
    strip_roff(p, out, n);
    free(s);
}

/* The "usage: " line of some output, without the prefix. */
static void usage_line(const char *output, char *out, size_t n)
{
    const char *p = output;
    while (p && strncmp(p, "usage: ", 7) != 0) {
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    cr_assert(p != NULL, "no 'usage: ' line in:\n%s", output);
    p += 7;
    size_t len = strcspn(p, "\n");
    cr_assert(len < n);
    memcpy(out, p, len);
    out[len] = 0;
}

/* Folds the typographic hyphens some groff setups emit (U+2010, U+2212)
 * back to '-', in place. */
static void ascii_hyphens(char *s)
{
    char *w = s;
    for (char *r = s; *r;) {
        if ((unsigned char)r[0] == 0xE2 && (((unsigned char)r[1] == 0x80 && (unsigned char)r[2] == 0x90) ||
                                            ((unsigned char)r[1] == 0x88 && (unsigned char)r[2] == 0x92))) {
            *w++ = '-';
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = 0;
}

/* Every "attnres: error: " (and "attnres: warning: ") line follows the
 * project's style: one line,
 * a message that does not start with a capital letter (an all-capitals
 * word such as "YAML" is fine) and does not end with a period. */
static void check_error_style(const char *output)
{
    int found = 0;
    for (const char *p = output; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *pre = "attnres: error: ", *wpre = "attnres: warning: ";
        size_t pl = strlen(pre);
        if (len >= strlen(wpre) && strncmp(p, wpre, strlen(wpre)) == 0)
            pl = strlen(wpre); /* a warning: the same style */
        if (len >= pl && (strncmp(p, pre, pl) == 0 || strncmp(p, wpre, pl) == 0)) {
            found |= strncmp(p, pre, pl) == 0;
            const char *m = p + pl;
            size_t ml = len - pl;
            cr_assert(ml > 0, "empty error message in:\n%s", output);
            cr_assert(!(isupper((unsigned char)m[0]) && ml > 1 && islower((unsigned char)m[1])),
                      "error message starts with a capital: %.*s", (int)ml, m);
            cr_assert(m[ml - 1] != '.', "error message ends with a period: %.*s", (int)ml, m);
            cr_assert(m[ml - 1] != ' ', "error message ends with a space: %.*s", (int)ml, m);
        } else {
            cr_assert(strncmp(p, "attnres:", 8) != 0, "a diagnostic in another format: %.*s", (int)len, p);
        }
        p = eol ? eol + 1 : NULL;
    }
    cr_assert(found, "no 'attnres: error: ' line in:\n%s", output);
}

/* Asserts status and that out contains needle; frees out. */
static void expect(char *out, int st, int want_st, const char *needle)
{
    cr_assert_eq(st, want_st, "exit status %d, expected %d; output:\n%s", st, want_st, out);
    if (needle)
        cr_assert(strstr(out, needle) != NULL, "expected '%s' in:\n%s", needle, out);
    free(out);
}

static void write_text(const char *path, const char *text)
{
    tu_write_file(path, text, strlen(text));
}

/* ---- usage lines = SYNOPSIS of the man pages ---- */

static void check_usage_matches(const char *args, const char *page)
{
    int st;
    char *err = RUN(2, &st, "%s", args);
    cr_assert_eq(st, 2, "'attnres %s' exited %d, expected 2; stderr:\n%s", args, st, err);
    check_error_style(err);
    char usage[1024], syn[1024];
    usage_line(err, usage, sizeof usage);
    page_synopsis(page, syn, sizeof syn);
    cr_assert_str_eq(usage, syn,
                     "'attnres %s' prints\n  usage: %s\nbut man/%s has the SYNOPSIS\n  %s", args, usage,
                     page, syn);
    free(err);
}

Test(cli, train_usage_matches_man_synopsis)
{
    check_usage_matches("train --bogus", "attnres-train.1");
}

Test(cli, eval_usage_matches_man_synopsis)
{
    check_usage_matches("eval --bogus", "attnres-eval.1");
}

Test(cli, bench_usage_matches_man_synopsis)
{
    check_usage_matches("bench --bogus", "attnres-bench.1");
}

Test(cli, sweep_usage_matches_man_synopsis)
{
    check_usage_matches("sweep --bogus", "attnres-sweep.1");
}

Test(cli, ablate_usage_matches_man_synopsis)
{
    check_usage_matches("ablate --bogus", "attnres-ablate.1");
}

Test(cli, fit_scaling_usage_matches_man_synopsis)
{
    check_usage_matches("fit-scaling --bogus", "attnres-fit-scaling.1");
}

Test(cli, plot_usage_matches_man_synopsis)
{
    check_usage_matches("plot --bogus", "attnres-plot.1");
}

Test(cli, plot_depth_attn_usage_matches_man_synopsis)
{
    check_usage_matches("plot-depth-attn --bogus", "attnres-plot-depth-attn.1");
    /* plot-attn is the same command */
    check_usage_matches("plot-attn --bogus", "attnres-plot-depth-attn.1");
}

Test(cli, plot_pipeline_usage_matches_man_synopsis)
{
    check_usage_matches("plot-pipeline --bogus", "attnres-plot-pipeline.1");
}

Test(cli, generate_usage_matches_man_synopsis)
{
    check_usage_matches("generate --bogus", "attnres-generate.1");
}

Test(cli, tokenize_usage_matches_man_synopsis)
{
    check_usage_matches("tokenize --bogus", "attnres-tokenize.1");
}

Test(cli, data_usage_matches_man_synopsis)
{
    check_usage_matches("data check --bogus", "attnres-data.1");
}

Test(cli, main_usage_matches_man_synopsis)
{
    /* With no command, attnres lists the commands after its usage line. */
    int st;
    char *err = RUN(2, &st, "%s", "");
    cr_assert_eq(st, 2, "'attnres' exited %d, expected 2", st);
    char usage[1024], syn[1024];
    usage_line(err, usage, sizeof usage);
    page_synopsis("attnres.1", syn, sizeof syn);
    cr_assert_str_eq(usage, syn, "'attnres' prints\n  usage: %s\nbut man/attnres.1 has\n  %s", usage, syn);
    cr_assert(strstr(err, "train") && strstr(err, "eval") && strstr(err, "help"),
              "the command list lacks a command:\n%s", err);
    free(err);
}

Test(cli, usage_goes_to_stderr_not_stdout)
{
    int st;
    char *out = RUN(1, &st, "train --bogus");
    cr_assert_eq(st, 2);
    cr_assert_str_eq(out, "", "usage errors must print nothing on stdout, got:\n%s", out);
    free(out);
}

/* ---- help ---- */

static void check_help_pair(const char *help_args, const char *dash_args, const char *page)
{
    int st1, st2;
    char *a = RUN(1, &st1, "%s", help_args);
    char *b = RUN(1, &st2, "%s", dash_args);
    cr_assert_eq(st1, 0, "'attnres %s' exited %d", help_args, st1);
    cr_assert_eq(st2, 0, "'attnres %s' exited %d", dash_args, st2);
    cr_assert_str_eq(a, b, "'attnres %s' and 'attnres %s' differ", help_args, dash_args);
    char name[512];
    page_name_line(page, name, sizeof name);
    ascii_hyphens(a);
    cr_assert(strstr(a, name) != NULL, "'attnres %s' does not show the NAME line '%s':\n%s", help_args,
              name, a);
    free(a);
    free(b);
}

Test(cli, help_train_equals_train_dash_help)
{
    check_help_pair("help train", "train --help", "attnres-train.1");
}

Test(cli, help_eval_equals_eval_dash_h)
{
    check_help_pair("help eval", "eval -h", "attnres-eval.1");
}

Test(cli, help_bench_equals_bench_dash_help)
{
    check_help_pair("help bench", "bench --help", "attnres-bench.1");
}

Test(cli, help_sweep_equals_sweep_dash_help)
{
    check_help_pair("help sweep", "sweep --help", "attnres-sweep.1");
}

Test(cli, help_fit_scaling_equals_fit_scaling_dash_h)
{
    check_help_pair("help fit-scaling", "fit-scaling -h", "attnres-fit-scaling.1");
}

Test(cli, help_plot_equals_plot_dash_help)
{
    check_help_pair("help plot", "plot --help", "attnres-plot.1");
}

Test(cli, help_plot_depth_attn_and_its_alias)
{
    check_help_pair("help plot-depth-attn", "plot-depth-attn -h", "attnres-plot-depth-attn.1");
    check_help_pair("help plot-attn", "plot-attn --help", "attnres-plot-depth-attn.1");
}

Test(cli, help_plot_pipeline_equals_plot_pipeline_dash_help)
{
    check_help_pair("help plot-pipeline", "plot-pipeline --help", "attnres-plot-pipeline.1");
}

Test(cli, help_plot_sweep_equals_plot_sweep_dash_help)
{
    check_help_pair("help plot-sweep", "plot-sweep --help", "attnres-plot-sweep.1");
}

Test(cli, help_generate_equals_generate_dash_help)
{
    check_help_pair("help generate", "generate --help", "attnres-generate.1");
}

Test(cli, help_tokenize_equals_tokenize_dash_h)
{
    check_help_pair("help tokenize", "tokenize -h", "attnres-tokenize.1");
}

Test(cli, help_data_equals_data_dash_h)
{
    check_help_pair("help data", "data --help", "attnres-data.1");
}

Test(cli, help_equals_dash_help)
{
    check_help_pair("help", "--help", "attnres.1");
}

Test(cli, help_wins_over_other_arguments)
{
    /* --help anywhere before "--" shows the page instead of running. */
    int st1, st2;
    char *a = RUN(1, &st1, "train --bogus --help");
    char *b = RUN(1, &st2, "help train");
    cr_assert_eq(st1, 0);
    cr_assert_str_eq(a, b);
    free(a);
    free(b);
}

Test(cli, help_config_shows_config_page)
{
    int st;
    char *out = RUN(1, &st, "help config");
    ascii_hyphens(out);
    expect(out, st, 0, "attnres-config");
}

Test(cli, help_of_unknown_command)
{
    int st;
    char *err = RUN(2, &st, "help frob");
    check_error_style(err);
    expect(err, st, 2, "attnres: error: 'frob' is not an attnres command");
}

/* ---- version, unknown commands ---- */

Test(cli, version_matches_project_version)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/meson.build", srcdir());
    char *mb = tu_read_file(path, NULL);
    cr_assert(mb != NULL);
    char *v = strstr(mb, "version : '");
    cr_assert(v != NULL, "no project version in meson.build");
    v += strlen("version : '");
    char want[128];
    snprintf(want, sizeof want, "attnres %.*s\n", (int)strcspn(v, "'"), v);
    free(mb);
    int st;
    char *out = RUN(0, &st, "--version");
    cr_assert_eq(st, 0);
    cr_assert_str_eq(out, want);
    free(out);
    out = RUN(0, &st, "version");
    cr_assert_eq(st, 0);
    cr_assert_str_eq(out, want);
    free(out);
}

Test(cli, unknown_command)
{
    int st;
    char *err = RUN(2, &st, "frob");
    check_error_style(err);
    cr_assert(strncmp(err, "attnres: error: 'frob' is not an attnres command", 48) == 0,
              "unexpected message:\n%s", err);
    expect(err, st, 2, NULL);
}

Test(cli, unknown_dash_command)
{
    int st;
    char *err = RUN(2, &st, "--bogus");
    check_error_style(err);
    expect(err, st, 2, "'--bogus' is not an attnres command");
}

/* ---- train: command line ---- */

Test(cli, train_unknown_option)
{
    int st;
    char *err = RUN(2, &st, "train --bogus");
    check_error_style(err);
    expect(err, st, 2, "attnres: error: unknown option '--bogus'");
}

Test(cli, train_option_without_value)
{
    const char *opts[] = {"--set", "--out", "--resume"};
    for (int i = 0; i < 3; i++) {
        int st;
        char *err = RUN(2, &st, "train %s", opts[i]);
        check_error_style(err);
        cr_assert(strstr(err, "usage: attnres train") != NULL, "no usage line for %s:\n%s", opts[i], err);
        expect(err, st, 2, "needs a value");
    }
}

Test(cli, train_two_configs)
{
    int st;
    char *err = RUN(2, &st, "train a.yaml b.yaml");
    check_error_style(err);
    expect(err, st, 2, "unexpected argument 'b.yaml'");
}

Test(cli, train_resume_with_other_out)
{
    int st;
    char *err = RUN(2, &st, "train --resume runs/a --out runs/b");
    check_error_style(err);
    expect(err, st, 2, "--resume");
}

/* ---- train: configuration errors ---- */

Test(cli, config_unknown_key_has_place)
{
    const char *dir = tu_tmpdir();
    char cfg[4096];
    snprintf(cfg, sizeof cfg, "%s", tu_path(dir, "bad.yaml"));
    write_text(cfg, "model:\n  d_model: 64\n  d_modle: 64\n");
    int st;
    char *err = run_in(dir, 2, &st, "train '%s'", cfg);
    check_error_style(err);
    cr_assert_eq(st, 1, "exit %d, expected 1:\n%s", st, err);
    /* "FILE:LINE:COL: unknown key 'model.d_modle' ..." */
    char *p = strstr(err, cfg);
    cr_assert(p != NULL, "the message does not name '%s':\n%s", cfg, err);
    int line = 0, col = 0, used = 0;
    cr_assert(sscanf(p + strlen(cfg), ":%d:%d: %n", &line, &col, &used) == 2 && used > 0,
              "no FILE:LINE:COL place in:\n%s", err);
    cr_assert_eq(line, 3, "line %d, expected 3:\n%s", line, err);
    cr_assert_eq(col, 3, "column %d, expected 3 (1-based):\n%s", col, err);
    cr_assert(strncmp(p + strlen(cfg) + used, "unknown key 'model.d_modle'", 27) == 0,
              "unexpected message:\n%s", err);
    free(err);
}

Test(cli, config_missing_file)
{
    const char *dir = tu_tmpdir();
    int st;
    char *err = run_in(dir, 2, &st, "train nope.yaml");
    check_error_style(err);
    expect(err, st, 1, "'nope.yaml'");
}

Test(cli, set_bad_value)
{
    const char *dir = tu_tmpdir();
    int st;
    char *err = run_in(dir, 2, &st, "train --set model.d_model=abc");
    check_error_style(err);
    cr_assert(strstr(err, "'model.d_model'") != NULL, "the key is not named:\n%s", err);
    expect(err, st, 1, "attnres: error: --set 'model.d_model=abc'");
}

Test(cli, set_equals_form_and_unknown_key)
{
    const char *dir = tu_tmpdir();
    int st;
    char *err = run_in(dir, 2, &st, "train --set=model.bogus=1");
    check_error_style(err);
    cr_assert(strstr(err, "unknown key") != NULL, "no 'unknown key' in:\n%s", err);
    expect(err, st, 1, "--set 'model.bogus=1'");
}

Test(cli, set_without_equals)
{
    const char *dir = tu_tmpdir();
    int st;
    char *err = run_in(dir, 2, &st, "train --set model.d_model");
    check_error_style(err);
    expect(err, st, 1, "--set 'model.d_model'");
}

Test(cli, invalid_combination_is_a_config_error)
{
    /* Each value is fine alone; validation rejects the pair. */
    const char *dir = tu_tmpdir();
    int st;
    char *err = run_in(dir, 2, &st, "train --set model.d_model=100 --set model.n_head=3");
    check_error_style(err);
    expect(err, st, 1, "'model.n_head'");
}

Test(cli, missing_default_corpus_names_get_data)
{
    const char *dir = tu_tmpdir();
    int st;
    char *err = run_in(dir, 2, &st, "train");
    check_error_style(err);
    cr_assert(strstr(err, "data/kjv.txt") != NULL, "the default corpus is not named:\n%s", err);
    expect(err, st, 1, "tools/get-data.sh");
    /* It fails before creating a run directory. */
    struct stat sb;
    cr_assert(stat(tu_path(dir, "runs"), &sb) != 0, "a runs/ directory was created");
}

Test(cli, missing_chosen_corpus)
{
    const char *dir = tu_tmpdir();
    int st;
    char *err = run_in(dir, 2, &st, "train --set data.train=missing.txt --out run");
    check_error_style(err);
    cr_assert(strstr(err, "get-data") == NULL, "a chosen corpus is not the default one:\n%s", err);
    expect(err, st, 1, "'missing.txt'");
}

/* train, ablate (with and without --depths) and sweep check the training
 * data first, with one message, and leave nothing behind. */
Test(cli, missing_training_data_is_one_check)
{
    const char *dir = tu_tmpdir();
    const char *cmds[] = {"train", "ablate --variant full", "ablate --variant full --depths 2,3", "sweep"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        int st;
        char *err = run_in(dir, 2, &st, "%s --out out", cmds[i]);
        check_error_style(err);
        cr_assert(strstr(err, "training data 'data/kjv.txt' not found: run 'tools/get-data.sh'"), "%s:\n%s",
                  cmds[i], err);
        expect(err, st, 1, NULL);
        err = run_in(dir, 2, &st, "%s --set data.train=missing.txt --out out", cmds[i]);
        check_error_style(err);
        cr_assert(strstr(err, "get-data") == NULL, "a chosen corpus is not the default one:\n%s", err);
        expect(err, st, 1, "training data 'missing.txt' not found");
        struct stat sb;
        cr_assert(stat(tu_path(dir, "out"), &sb) != 0, "'%s' created its directory", cmds[i]);
    }
}

Test(cli, refuses_run_directory_with_checkpoint)
{
    const char *dir = tu_tmpdir();
    mkdir(tu_path(dir, "run"), 0777);
    write_text(tu_path(dir, "run/model.safetensors"), "not really");
    write_text(tu_path(dir, "corpus.txt"), "in the beginning was the word\n");
    int st;
    char *err = run_in(dir, 2, &st, "train --set data.train=corpus.txt --out run");
    check_error_style(err);
    cr_assert(strstr(err, "--force") != NULL, "the message does not point to --force:\n%s", err);
    expect(err, st, 1, "'run'");
    /* The file is untouched. */
    char *s = tu_read_file(tu_path(dir, "run/model.safetensors"), NULL);
    cr_assert_str_eq(s, "not really");
    free(s);
}

Test(cli, resume_without_run)
{
    const char *dir = tu_tmpdir();
    mkdir(tu_path(dir, "empty"), 0777);
    int st;
    char *err = run_in(dir, 2, &st, "train --resume empty");
    check_error_style(err);
    expect(err, st, 1, "empty");
}

/* ---- eval ---- */

Test(cli, eval_missing_data)
{
    const char *dir = tu_tmpdir();
    int st;
    char *err = run_in(dir, 2, &st, "eval run");
    check_error_style(err);
    cr_assert(strstr(err, "usage: attnres eval") != NULL, "no usage line:\n%s", err);
    expect(err, st, 2, "--data");
}

Test(cli, eval_missing_checkpoint_argument)
{
    int st;
    char *err = RUN(2, &st, "eval --data x.txt");
    check_error_style(err);
    expect(err, st, 2, "usage: attnres eval");
}

Test(cli, eval_bad_max_windows)
{
    const char *bad[] = {"0", "-3", "abc", "5x"};
    for (int i = 0; i < 4; i++) {
        int st;
        char *err = RUN(2, &st, "eval run --data x.txt --max-windows %s", bad[i]);
        check_error_style(err);
        expect(err, st, 2, "'--max-windows'");
    }
}

Test(cli, eval_extra_argument)
{
    int st;
    char *err = RUN(2, &st, "eval a b --data x.txt");
    check_error_style(err);
    expect(err, st, 2, "unexpected argument 'b'");
}

Test(cli, eval_nonexistent_checkpoint)
{
    const char *dir = tu_tmpdir();
    char data[4096], ck[4096], want[4200];
    snprintf(data, sizeof data, "%s", tu_path(dir, "d.txt"));
    snprintf(ck, sizeof ck, "%s", tu_path(dir, "no-such-run"));
    write_text(data, "and god said, let there be light: and there was light.\n");
    int st;
    char *err = RUN(2, &st, "eval '%s' --data '%s'", ck, data);
    check_error_style(err);
    snprintf(want, sizeof want, "'%s'", ck);
    expect(err, st, 1, want);
}

Test(cli, eval_run_directory_without_model)
{
    const char *dir = tu_tmpdir();
    char data[4096], want[4200];
    snprintf(data, sizeof data, "%s", tu_path(dir, "d.txt"));
    write_text(data, "and god said, let there be light: and there was light.\n");
    int st;
    char *err = RUN(2, &st, "eval '%s' --data '%s'", dir, data);
    check_error_style(err);
    snprintf(want, sizeof want, "'%s/model.safetensors'", dir);
    expect(err, st, 1, want);
}

Test(cli, eval_malformed_checkpoint)
{
    const char *dir = tu_tmpdir();
    char data[4096], ck[4096], want[4200];
    snprintf(data, sizeof data, "%s", tu_path(dir, "d.txt"));
    snprintf(ck, sizeof ck, "%s", tu_path(dir, "junk.safetensors"));
    write_text(data, "and god said, let there be light: and there was light.\n");
    write_text(ck, "this is not a safetensors file at all");
    int st;
    char *err = RUN(2, &st, "eval '%s' --data '%s'", ck, data);
    check_error_style(err);
    snprintf(want, sizeof want, "'%s'", ck);
    expect(err, st, 1, want);
}

Test(cli, eval_missing_data_file)
{
    /* a valid checkpoint, so the data file is what fails */
    const char *dir = tu_tmpdir();
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 8;
    c.model.n_layer = 1;
    c.model.n_head = 2;
    c.model.d_ff = 8;
    c.model.seq_len = 4;
    ar_model *m;
    ar_err e;
    cr_assert_eq(ar_model_create(&m, &c.model, ar_backend_cpu(), 1, &e), 0, "%s", e.msg);
    ar_model_init(m, 1);
    cr_assert_eq(ar_ckpt_save(dir, &c, m, NULL, 0, &e), 0, "%s", e.msg);
    ar_model_free(m);
    char data[4096], want[4200];
    snprintf(data, sizeof data, "%s", tu_path(dir, "nope.txt"));
    int st;
    char *err = RUN(2, &st, "eval '%s' --data '%s'", dir, data);
    check_error_style(err);
    snprintf(want, sizeof want, "'%s'", data);
    expect(err, st, 1, want);
}

/* ---- --threads (train, eval) ---- */

Test(cli, train_threads_is_validated)
{
    const char *bad[] = {"x", "-1", "2x", ""};
    for (int i = 0; i < 4; i++) {
        int st;
        char *err = RUN(2, &st, "train --threads '%s'", bad[i]);
        check_error_style(err);
        expect(err, st, 2, "'--threads' expects an integer >= 0");
    }
    int st;
    char *err = RUN(2, &st, "train --threads");
    check_error_style(err);
    expect(err, st, 2, "'--threads' needs a value");
}

Test(cli, train_threads_zero_is_accepted)
{
    /* 0 = all cores: the command line is fine, so it goes on to the
     * missing default corpus (and does not start training). */
    const char *dir = tu_tmpdir();
    int st;
    char *err = run_in(dir, 2, &st, "train --threads 0");
    check_error_style(err);
    expect(err, st, 1, "tools/get-data.sh");
    err = run_in(dir, 2, &st, "train --set train.threads=3 --threads 1 --set model.n_head=5");
    check_error_style(err);
    expect(err, st, 1, "'model.n_head'");
}

Test(cli, eval_threads_is_validated)
{
    const char *bad[] = {"x", "-2"};
    for (int i = 0; i < 2; i++) {
        int st;
        char *err = RUN(2, &st, "eval run --data x.txt --threads %s", bad[i]);
        check_error_style(err);
        expect(err, st, 2, "'--threads'");
    }
}

/* ---- plot, plot-depth-attn ---- */

/* A tiny run directory holding a checkpoint of the given kind (no
 * training: the weights are the initial ones). */
static const char *tiny_run_dir_window(ar_res_kind kind, int n_layer, int window)
{
    const char *dir = tu_tmpdir();
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 8;
    c.model.n_layer = n_layer;
    c.model.n_head = 2;
    c.model.d_ff = 8;
    c.model.seq_len = 4;
    c.model.residual.kind = kind;
    c.model.residual.window = window;
    ar_model *m;
    ar_err e;
    cr_assert_eq(ar_model_create(&m, &c.model, ar_backend_cpu(), 1, &e), 0, "%s", e.msg);
    ar_model_init(m, 1);
    cr_assert_eq(ar_ckpt_save(dir, &c, m, NULL, 3, &e), 0, "%s", e.msg);
    ar_model_free(m);
    return dir;
}

static const char *tiny_run_dir(ar_res_kind kind) { return tiny_run_dir_window(kind, 1, 0); }

/* swa's weights are drawn over Full's columns, and its matrix has 0 for
 * the outputs before each mixer's window (L = 4, window 1: h_4 reads v_0
 * and v_3, so v_1 and v_2 get 0, and v_0 and v_3 weights that sum to 1). */
Test(cli, plot_depth_attn_of_a_swa_run)
{
    char dir[4096], data[4200], want[4300], path[4300];
    snprintf(dir, sizeof dir, "%s", tiny_run_dir_window(AR_RES_SWA, 2, 1));
    snprintf(data, sizeof data, "%s/d.txt", dir);
    write_text(data, "and god said, let there be light: and there was light.\n");
    int st;
    char *out = RUN(0, &st, "plot-depth-attn '%s' --data '%s'", dir, data);
    snprintf(want, sizeof want, "wrote '%s/depth_attn.png'", dir);
    expect(out, st, 0, want);
    out = RUN(0, &st, "plot-depth-attn '%s' --data '%s' --stats", dir, data);
    cr_expect_eq(st, 0, "--stats: %s", out);
    free(out);
    out = RUN(0, &st, "plot-depth-attn '%s' --data '%s' --matrix --csv '%s/m.csv'", dir, data, dir);
    snprintf(want, sizeof want, "wrote '%s/depth_matrix.png'", dir);
    expect(out, st, 0, want);
    snprintf(path, sizeof path, "%s/m.csv", dir);
    char *csv = tu_read_file(path, NULL);
    cr_assert(csv != NULL);
    /* columns run,step,kind,mixer,role,source,m: mixer 4's row */
    double h4[4] = {NAN, NAN, NAN, NAN};
    char *save = NULL;
    strtok_r(csv, "\n", &save); /* the header */
    for (char *line = strtok_r(NULL, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *field[7], *fs = NULL;
        int nf = 0;
        for (char *t = strtok_r(line, ",", &fs); t && nf < 7; t = strtok_r(NULL, ",", &fs))
            field[nf++] = t;
        cr_assert_eq(nf, 7, "a matrix CSV line of %d fields", nf);
        int mixer = atoi(field[3]), source = atoi(field[5]);
        if (mixer == 4 && source < 4)
            h4[source] = atof(field[6]);
    }
    cr_expect_eq(h4[1], 0.0, "v_1 is before h_4's window: %g", h4[1]);
    cr_expect_eq(h4[2], 0.0, "v_2 is before h_4's window: %g", h4[2]);
    cr_expect(h4[0] > 0 && h4[3] > 0 && fabs(h4[0] + h4[3] - 1) < 1e-6, "h_4: v_0 %g, v_3 %g", h4[0], h4[3]);
    free(csv);
}

Test(cli, plot_depth_attn_of_a_baseline_run)
{
    char dir[4096], data[4200], want[4300];
    snprintf(dir, sizeof dir, "%s", tiny_run_dir(AR_RES_BASELINE));
    snprintf(data, sizeof data, "%s/d.txt", dir);
    write_text(data, "and god said, let there be light: and there was light.\n");
    int st;
    char *err = RUN(2, &st, "plot-depth-attn '%s' --data '%s'", dir, data);
    check_error_style(err);
    snprintf(want, sizeof want, "'%s' is a baseline run: it has no depth attention to draw", dir);
    cr_assert(strstr(err, "--matrix") != NULL, "the message does not point to --matrix:\n%s", err);
    expect(err, st, 1, want);
    /* --matrix draws it: M is all ones below the diagonal */
    char *out = RUN(0, &st, "plot-attn '%s' --data '%s' --matrix --csv '%s/m.csv'", dir, data, dir);
    snprintf(want, sizeof want, "wrote '%s/depth_matrix.png'", dir);
    expect(out, st, 0, want);
    char path[4300];
    snprintf(path, sizeof path, "%s/m.csv", dir);
    char *csv = tu_read_file(path, NULL);
    cr_assert(csv != NULL);
    int lines = 0;
    for (char *p = strchr(csv, '\n'); p && p[1]; p = strchr(p + 1, '\n')) {
        lines++;
        const char *comma = strrchr(p, ',');
        cr_assert(comma && atof(comma + 1) == 1.0, "baseline M entry is not 1: %.40s", p + 1);
    }
    cr_assert_eq(lines, 6, "L = 2: (L+1)(L+2)/2 = 6 entries, got %d", lines);
    free(csv);
}

Test(cli, plot_depth_attn_command_line_errors)
{
    int st;
    char *err = RUN(2, &st, "plot-depth-attn");
    check_error_style(err);
    expect(err, st, 2, "missing the run");
    err = RUN(2, &st, "plot-depth-attn a b");
    check_error_style(err);
    expect(err, st, 2, "several runs need '--out FILE'");
    err = RUN(2, &st, "plot-depth-attn a --format gif");
    check_error_style(err);
    expect(err, st, 2, "'--format' expects png, svg or pdf, got 'gif'");
    err = RUN(2, &st, "plot-attn a --max-windows 0");
    check_error_style(err);
    expect(err, st, 2, "'--max-windows'");
    const char *dir = tu_tmpdir();
    char want[4200];
    snprintf(want, sizeof want, "'%s/none'", dir);
    err = RUN(2, &st, "plot-depth-attn '%s/none'", dir);
    check_error_style(err);
    expect(err, st, 1, want);
    snprintf(want, sizeof want, "'%s/model.safetensors'", dir);
    err = RUN(2, &st, "plot-depth-attn '%s'", dir);
    check_error_style(err);
    expect(err, st, 1, want);
}

Test(cli, plot_depth_attn_without_the_runs_data)
{
    /* the run's config names data/kjv.txt, which this directory lacks */
    const char *dir = tiny_run_dir(AR_RES_FULL);
    int st;
    char *err = run_in(dir, 2, &st, "plot-depth-attn .");
    check_error_style(err);
    cr_assert(strstr(err, "--data FILE") != NULL, "no hint at --data:\n%s", err);
    expect(err, st, 1, "data/kjv.txt");
}

Test(cli, plot_reports_a_corrupt_metrics_line)
{
    const char *dir = tu_tmpdir();
    char path[4200], want[4300];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    write_text(path, "{\"step\":1,\"tokens\":8,\"loss\":5.1}\n{\"step\":2,\"tokens\":16,\"loss\":5.0}\n"
                     "{\"step\":3,\"tokens\":24,\"loss\":[4.9]}\n{\"step\":4,\"tokens\":32,\"loss\":4.8}\n");
    int st;
    char *err = RUN(2, &st, "plot '%s'", dir);
    check_error_style(err);
    snprintf(want, sizeof want, "attnres: error: %s:3: 'loss' must be a number, not a list", path);
    expect(err, st, 1, want);
    write_text(path, "{\"step\":1,\"tokens\":8,\"loss\":5.1}\n{\"step\":2,\"tok\n{\"step\":3}\n");
    err = RUN(2, &st, "plot '%s'", dir);
    check_error_style(err);
    snprintf(want, sizeof want, "attnres: error: %s:2: ", path);
    expect(err, st, 1, want);
    err = RUN(2, &st, "plot '%s/nothing'", dir);
    check_error_style(err);
    snprintf(want, sizeof want, "'%s/nothing'", dir);
    expect(err, st, 1, want);
    err = RUN(2, &st, "plot a b");
    check_error_style(err);
    expect(err, st, 2, "several runs need '--out FILE'");
    /* a good file draws */
    write_text(path, "{\"step\":1,\"tokens\":8,\"loss\":5.1}\n{\"step\":2,\"tokens\":16,\"loss\":5.0,"
                     "\"val_loss\":5.2,\"out_rms\":[1,2],\"grad_rms\":[0.1,0.2]}\n");
    char *out = RUN(0, &st, "plot '%s' --format svg", dir);
    snprintf(want, sizeof want, "wrote '%s/dynamics.svg'", dir);
    expect(out, st, 0, want);
}

/* ---- bench ---- */

#define BENCH_TINY                                                                                   \
    "--steps 1 --repeat 1 --warmup 0 --threads 2 --set model.d_model=32 --set model.n_layer=2 "      \
    "--set model.n_head=2 --set model.d_ff=64 --set model.seq_len=16 --set train.batch_size=2"

static const ar_json *json_field(const ar_json *o, const char *key, ar_json_type type)
{
    const ar_json *v = ar_json_get(o, key);
    cr_assert(v != NULL, "no '%s' in the bench JSON", key);
    cr_assert_eq(v->type, type, "'%s' has JSON type %d, expected %d", key, v->type, type);
    return v;
}

/* key is the string want, or null where want is NULL */
static void expect_str_or_null(const ar_json *o, const char *key, const char *want)
{
    const ar_json *v = ar_json_get(o, key);
    cr_assert(v != NULL, "no '%s' in the bench JSON", key);
    if (want)
        cr_expect(v->type == AR_JSON_STR && strcmp(v->str, want) == 0, "'%s' is not '%s'", key, want);
    else
        cr_expect(v->type == AR_JSON_NULL, "'%s' is not null", key);
}

Test(cli, bench_json_has_the_required_fields)
{
    /* In an empty directory: bench reads no data file. */
    const char *dir = tu_tmpdir();
    int st;
    char *out = run_in(dir, 1, &st, "bench --json --variants baseline,full " BENCH_TINY);
    cr_assert_eq(st, 0, "bench exited %d; stdout:\n%s", st, out);
    ar_err e;
    ar_json *j = ar_json_parse(out, strlen(out), &e);
    cr_assert(j != NULL, "bench --json printed invalid JSON (%s):\n%s", e.msg, out);
    cr_assert_eq(j->type, AR_JSON_OBJ);
    double ceiling = json_field(j, "ceiling_gflops", AR_JSON_NUM)->num;
    cr_assert_gt(ceiling, 0);
    /* The two are timed at different moments, and a loaded machine slows
     * either by a large factor (the sanitizer suite on an AMD Zen 4, two
     * test programs at once: the FMA peak read 12.9 GFLOP/s against a
     * ceiling of 142.8, where it measures 235 idle), so their ratio is no
     * test of either: only that the FMA peak is the same kind of number,
     * within 100x of the sgemm ceiling either way (a peak in the wrong
     * unit, 1000x off, or a stray zero still fails). */
    double fma = json_field(j, "fma_peak_gflops", AR_JSON_NUM)->num;
    cr_expect(fma >= ceiling / 100 && fma <= 100 * ceiling, "FMA peak %.1f GFLOP/s against the sgemm ceiling %.1f",
              fma, ceiling);
    /* the libraries beside the BLAS: named as this process names them, or
     * null (no libxsmm; the BLAS runs the large products) */
    expect_str_or_null(j, "small_products", ar_cpu_small_products());
    expect_str_or_null(j, "large_products", ar_cpu_large_products());
    const ar_json *cfg = json_field(j, "config", AR_JSON_OBJ);
    cr_assert_eq(json_field(cfg, "d_model", AR_JSON_NUM)->num, 32);
    cr_assert_eq(json_field(cfg, "batch_size", AR_JSON_NUM)->num, 2);
    cr_assert_eq(json_field(j, "threads", AR_JSON_NUM)->num, 2);
    const ar_json *res = json_field(j, "results", AR_JSON_ARR);
    cr_assert_eq(res->n, 2, "expected 2 results, got %d", res->n);
    const char *nums[] = {"train_tok_per_s", "train_tok_per_s_min", "train_tok_per_s_max", "infer_tok_per_s",
                          "gflops", "ceiling_gflops", "peak_rss_bytes", "extra_rss_bytes",
                          "predicted_extra_bytes", "train_overhead", "infer_overhead",
                          "train_overhead_outside_matmul", "infer_overhead_outside_matmul",
                          "train_ms_outside_matmul", "infer_ms_outside_matmul",
                          "fma_peak_gflops", "fma_peak_percent"};
    const char *names[] = {"baseline", "full"};
    for (int i = 0; i < 2; i++) {
        const ar_json *r = &res->items[i];
        cr_assert_str_eq(json_field(r, "variant", AR_JSON_STR)->str, names[i]);
        for (size_t k = 0; k < sizeof nums / sizeof *nums; k++)
            json_field(r, nums[k], AR_JSON_NUM);
        double tps = json_field(r, "train_tok_per_s", AR_JSON_NUM)->num;
        cr_assert_gt(tps, 0);
        cr_assert_gt(json_field(r, "infer_tok_per_s", AR_JSON_NUM)->num, 0);
        cr_assert_gt(json_field(r, "peak_rss_bytes", AR_JSON_NUM)->num, 0);
        double fpt = json_field(r, "flops_per_token", AR_JSON_NUM)->num;
        /* gflops = train_tok_per_s flops_per_token / 1e9, the same two
         * operations on the same doubles (JSON reads them back exactly) */
        cr_assert_eq(json_field(r, "gflops", AR_JSON_NUM)->num, tps * fpt / 1e9);
    }
    cr_assert_str_eq(json_field(j, "device", AR_JSON_STR)->str, "cpu");
    cr_assert_str_eq(json_field(j, "device_name", AR_JSON_STR)->str, "cpu");
    cr_assert_str_eq(json_field(j, "precision", AR_JSON_STR)->str, "fp32");
    json_field(j, "peak_tflops", AR_JSON_NULL);
    cr_assert_str_eq(json_field(j, "peak_source", AR_JSON_STR)->str, "unknown");
    for (int i = 0; i < 2; i++)
        json_field(&res->items[i], "mfu", AR_JSON_NULL); /* the CPU has no known peak */
    cr_assert_eq(json_field(&res->items[0], "train_overhead", AR_JSON_NUM)->num, 0);
    cr_assert_eq(json_field(&res->items[0], "infer_overhead_outside_matmul", AR_JSON_NUM)->num, 0);
    cr_assert_eq(json_field(&res->items[0], "train_ms_outside_matmul", AR_JSON_NUM)->num, 0);
    cr_assert_eq(json_field(&res->items[0], "predicted_extra_bytes", AR_JSON_NUM)->num, 0);
    /* full: L*B*T*d floats = 4*2*16*32*4 bytes */
    cr_assert_eq(json_field(&res->items[1], "predicted_extra_bytes", AR_JSON_NUM)->num, 4.0 * 2 * 16 * 32 * 4);
    ar_json_free(j);
    free(out);
}

Test(cli, bench_unknown_variant_lists_the_valid_ones)
{
    int st;
    char *err = RUN(2, &st, "bench --variants baseline,block16");
    check_error_style(err);
    cr_assert(strstr(err, "baseline, block8, block4, full, block, sigmoid") != NULL &&
                  strstr(err, "rescaled, or all") != NULL,
              "the valid names are not listed:\n%s", err);
    expect(err, st, 2, "unknown variant 'block16'");
    err = RUN(2, &st, "bench --variants full,all");
    expect(err, st, 2, "unknown variant 'all'");
}

Test(cli, bench_bad_numbers)
{
    const char *bad[] = {"--steps 0", "--repeat 0", "--warmup -1", "--threads x", "--steps abc"};
    for (int i = 0; i < 5; i++) {
        int st;
        char *err = RUN(2, &st, "bench %s", bad[i]);
        check_error_style(err);
        expect(err, st, 2, "expects an integer");
    }
    int st;
    char *err = RUN(2, &st, "bench --variants full,full");
    check_error_style(err);
    expect(err, st, 2, "'full'");
}

Test(cli, bench_config_errors)
{
    const char *dir = tu_tmpdir();
    int st;
    char *err = run_in(dir, 2, &st, "bench nope.yaml");
    check_error_style(err);
    expect(err, st, 1, "'nope.yaml'");
    err = run_in(dir, 2, &st, "bench --set model.d_model=100 --set model.n_head=3");
    check_error_style(err);
    expect(err, st, 1, "'model.n_head'");
}

Test(cli, bench_peak_tflops_gives_mfu)
{
    const char *dir = tu_tmpdir();
    int st;
    char *out = run_in(dir, 1, &st, "bench --json --variants baseline --peak-tflops 0.5 " BENCH_TINY);
    cr_assert_eq(st, 0, "bench exited %d; stdout:\n%s", st, out);
    ar_err e;
    ar_json *j = ar_json_parse(out, strlen(out), &e);
    cr_assert(j != NULL, "invalid JSON (%s):\n%s", e.msg, out);
    cr_assert_eq(json_field(j, "peak_tflops", AR_JSON_NUM)->num, 0.5);
    cr_assert_str_eq(json_field(j, "peak_source", AR_JSON_STR)->str, "option");
    const ar_json *r = &json_field(j, "results", AR_JSON_ARR)->items[0];
    double g = json_field(r, "gflops", AR_JSON_NUM)->num, mfu = json_field(r, "mfu", AR_JSON_NUM)->num;
    /* mfu = tok/s x FLOPs per token / 5e11, g / 500 the same with one
     * division more: within 3 roundings, 4 x 2^-53 relative */
    cr_assert_float_eq(mfu, g / 500.0, 4 * TU_U_DOUBLE * mfu);
    ar_json_free(j);
    free(out);
    /* the table shows MFU instead of %ceil */
    out = run_in(dir, 1, &st, "bench --variants baseline --peak-tflops 0.5 " BENCH_TINY);
    cr_assert_eq(st, 0, "bench exited %d; stdout:\n%s", st, out);
    cr_assert(strstr(out, " MFU ") && strstr(out, "peak 0.5 TFLOP/s (--peak-tflops)"), "%s", out);
    free(out);
}

/* bench --ops: every variant's ops, their times adding up with the time
 * between them to the step, in JSON and as tables; refused off the CPU. */
Test(cli, bench_ops_splits_the_step_by_op)
{
    const char *dir = tu_tmpdir();
    int st;
    char *out = run_in(dir, 1, &st, "bench --json --ops --variants baseline,full " BENCH_TINY);
    cr_assert_eq(st, 0, "bench exited %d; stdout:\n%s", st, out);
    ar_err e;
    ar_json *j = ar_json_parse(out, strlen(out), &e);
    cr_assert(j != NULL, "invalid JSON (%s):\n%s", e.msg, out);
    const ar_json *res = json_field(j, "results", AR_JSON_ARR);
    for (int i = 0; i < 2; i++) {
        const ar_json *ops = json_field(&res->items[i], "ops", AR_JSON_OBJ);
        const char *passes[] = {"train", "infer"};
        for (int p = 0; p < 2; p++) {
            const ar_json *ps = json_field(ops, passes[p], AR_JSON_OBJ);
            double step = json_field(ps, "step_ms", AR_JSON_NUM)->num;
            double sum = json_field(ps, "between_ops_ms", AR_JSON_NUM)->num, mag = step + fabs(sum);
            const ar_json *list = json_field(ps, "ops", AR_JSON_ARR);
            int mm = 0, depth = 0, adamw = 0;
            for (int k = 0; k < list->n; k++) {
                const char *name = json_field(&list->items[k], "op", AR_JSON_STR)->str;
                double ms = json_field(&list->items[k], "ms_per_step", AR_JSON_NUM)->num;
                cr_assert(ms >= 0, "%s: %g ms", name, ms);
                cr_assert_gt(json_field(&list->items[k], "calls_per_step", AR_JSON_NUM)->num, 0);
                json_field(&list->items[k], "gap_ms_per_step", AR_JSON_NUM);
                mm |= !strcmp(name, "matmul_fwd");
                depth |= !strncmp(name, "depth_", 6);
                adamw |= !strcmp(name, "adamw");
                sum += ms;
                mag += 2 * ms;
            }
            cr_assert(step > 0);
            /* between = per_step(S - sum of the ops' seconds), each per_step
             * a product and a division: the ops' n seconds and the step
             * are added twice (there and here) in other orders, within
             * gamma(2n + 8) in double of their magnitudes, which mag adds */
            cr_assert_float_eq(sum, step, tu_gamma_d(2.0 * list->n + 8) * mag,
                               "%s %s: ops and the time between them %g ms, step %g ms", i ? "full" : "baseline",
                               passes[p], sum, step);
            cr_assert(mm, "no matmul_fwd in %s", passes[p]);
            cr_assert_eq(depth, i == 1, "depth ops in %s of variant %d", passes[p], i);
            cr_assert_eq(adamw, p == 0, "adamw in %s", passes[p]);
            cr_assert_gt(json_field(ps, "counted_gflop_per_step", AR_JSON_NUM)->num, 0);
        }
    }
    ar_json_free(j);
    free(out);
    out = run_in(dir, 1, &st, "bench --ops --variants baseline " BENCH_TINY);
    cr_assert_eq(st, 0, "bench exited %d; stdout:\n%s", st, out);
    cr_assert(strstr(out, "training step: ms per step by op") && strstr(out, "forward-only pass: ms per step by op") &&
                  strstr(out, "gap to the sgemm ceiling") && strstr(out, "matmul_bwd"),
              "%s", out);
    free(out);
    /* on a device the ops are timed in steps of their own, each waited
     * for; the CUDA emulator (tests/cuda_emu, not in sanitized builds)
     * stands in for the GPU, as the module attnres loads */
    char emu[4096];
    const char *slash = strrchr(bin(), '/');
    snprintf(emu, sizeof emu, "%.*s/tests/libattnres-cuda-emu.so", slash ? (int)(slash - bin()) : 1,
             slash ? bin() : ".");
    if (ar_cuda_built() && access(emu, R_OK) == 0) { /* -Dcuda=disabled refuses --device cuda */
        setenv("ATTNRES_CUDA_MODULE", emu, 1);
        out = run_in(dir, 1, &st, "bench --ops --device cuda --variants baseline,block " BENCH_TINY);
        unsetenv("ATTNRES_CUDA_MODULE");
        cr_assert_eq(st, 0, "bench --ops --device cuda (emulated) exited %d; stdout:\n%s", st, out);
        cr_assert(strstr(out, "training step: ms per step by op") && strstr(out, "gap to the device's bf16 peak") &&
                      strstr(out, "attention_bwd") && strstr(out, "depth_fwd_inter") && strstr(out, "step_check"),
                  "%s", out);
        free(out);
        /* a device's memory: the backend's count of its buffers, per
         * variant, and Block's extra over the baseline from it */
        setenv("ATTNRES_CUDA_MODULE", emu, 1);
        out = run_in(dir, 1, &st, "bench --json --device cuda --variants baseline,block " BENCH_TINY);
        unsetenv("ATTNRES_CUDA_MODULE");
        cr_assert_eq(st, 0, "bench --json --device cuda (emulated) exited %d; stdout:\n%s", st, out);
        ar_err de = {0};
        ar_json *dj = ar_json_parse(out, strlen(out), &de);
        cr_assert_not_null(dj, "%s\n%s", de.msg, out);
        const ar_json *dres = json_field(dj, "results", AR_JSON_ARR);
        cr_assert_eq(dres->n, 2);
        double pb = json_field(&dres->items[0], "peak_device_bytes", AR_JSON_NUM)->num,
               pv = json_field(&dres->items[1], "peak_device_bytes", AR_JSON_NUM)->num;
        cr_expect_gt(pb, 0, "no device memory counted for the baseline");
        cr_expect_eq(json_field(&dres->items[1], "extra_device_bytes", AR_JSON_NUM)->num, pv - pb);
        cr_expect_gt(pv, pb, "Block holds its block summaries on top of the baseline's buffers");
        json_field(&dres->items[1], "extra_rss_bytes", AR_JSON_NULL);
        ar_json_free(dj);
        free(out);
    }
}

/* ---- --device, --precision ---- */

Test(cli, device_and_precision_values_are_checked)
{
    const char *cases[][2] = {
        {"train --device gpu", "'--device' expects cpu or cuda, got 'gpu'"},
        {"train --device", "'--device' needs a value"},
        {"train --precision fp16", "'--precision' expects fp32 or bf16, got 'fp16'"},
        {"eval run --data x.txt --device tpu", "'--device' expects cpu or cuda, got 'tpu'"},
        {"bench --device CUDA", "'--device' expects cpu or cuda, got 'CUDA'"},
        {"bench --precision half", "'--precision' expects fp32 or bf16, got 'half'"},
        {"bench --peak-tflops 0", "'--peak-tflops' expects a positive number, got '0'"},
        {"bench --peak-tflops x", "'--peak-tflops' expects a positive number, got 'x'"},
        {"ablate --variant full --device x", "'--device' expects cpu or cuda, got 'x'"},
        {"sweep --precision x", "'--precision' expects fp32 or bf16, got 'x'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int st;
        char *err = RUN(2, &st, "%s", cases[i][0]);
        check_error_style(err);
        cr_assert(strstr(err, "usage: attnres "), "no usage line for '%s':\n%s", cases[i][0], err);
        expect(err, st, 2, cases[i][1]);
    }
}

Test(cli, bf16_needs_cuda)
{
    const char *dir = tu_tmpdir();
    tu_write_corpus_text(tu_path(dir, "c.txt"));
    const char *cmds[] = {"train --set data.train=c.txt --precision bf16 --out r",
                          "train --set data.train=c.txt --set train.precision=bf16 --out r",
                          "bench --precision bf16 --variants baseline",
                          "ablate --variant full --set data.train=c.txt --precision bf16 --out a"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        int st;
        char *err = run_in(dir, 2, &st, "%s", cmds[i]);
        check_error_style(err);
        expect(err, st, 1, "'train.precision' bf16 needs 'train.device' cuda");
    }
    /* --device cpu drops a bf16 taken from the config: the command gets
     * past validation to the data, which is missing */
    int st;
    char *err =
        run_in(dir, 2, &st, "train --set data.train=missing.txt --set train.precision=bf16 --device cpu --out r");
    check_error_style(err);
    cr_assert(strstr(err, "precision") == NULL, "%s", err);
    expect(err, st, 1, "missing.txt");
}

/* Without a CUDA build, --device cuda fails at once with the message that
 * says how to get one, and leaves nothing behind. */
Test(cli, cuda_without_a_cuda_build)
{
    if (ar_cuda_built())
        cr_skip_test("this attnres has the CUDA backend");
    const char *dir = tu_tmpdir();
    tu_write_corpus_text(tu_path(dir, "c.txt"));
    const char *cmds[] = {"train --set data.train=c.txt --device cuda --out r",
                          "train --set data.train=c.txt --set train.device=cuda --precision bf16 --out r",
                          "eval r --data c.txt --device cuda",
                          "bench --device cuda",
                          "bench --set train.device=cuda --precision bf16 --json",
                          "ablate --variant full --set data.train=c.txt --device cuda --out a",
                          "sweep --device cuda --out s"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        int st;
        char *err = run_in(dir, 2, &st, "%s", cmds[i]);
        check_error_style(err);
        cr_assert(strstr(err, "-Dcuda=enabled"), "'%s' does not say how to build with CUDA:\n%s", cmds[i], err);
        expect(err, st, 1, "'cuda' is not available");
    }
    struct stat sb;
    cr_assert_neq(stat(tu_path(dir, "r"), &sb), 0, "train made its run directory before failing");
}

/* ---- short runs (attnres-train(1), SHORT RUNS) ---- */

/* A shipped config cut below its warmup trains, with a warning; the same
 * cut under ablate, sweep and bench runs too. */
Test(cli, a_run_shorter_than_its_warmup_trains, .timeout = 300)
{
    const char *dir = tu_tmpdir();
    tu_write_corpus_text(tu_path(dir, "corpus.txt"));
    int st;
    char *out = run_in(dir, 0, &st,
                       "train '%s/configs/quickstart.yaml' --set train.steps=3 --set data.train=corpus.txt "
                       "--set train.eval_windows=2 --out run",
                       srcdir());
    cr_assert(strstr(out, "done: 3 steps"), "%s", out);
    expect(out, st, 0, "attnres: warning: 'train.warmup' (100) exceeds 'train.steps' (3)");
    const char *small = "--set model.d_model=32 --set model.n_head=2 --set model.d_ff=64 --set model.seq_len=16 "
                        "--set train.batch_size=2 --set train.eval_windows=2 --set train.threads=1";
    out = run_in(dir, 0, &st,
                 "ablate '%s/configs/quickstart.yaml' --variant baseline,block --seeds 1 --set train.steps=2 "
                 "--set data.train=corpus.txt %s --out ab",
                 srcdir(), small);
    cr_assert(strstr(out, "and 1 other:"), "one warning for both runs:\n%s", out);
    expect(out, st, 0, "'train.warmup' (100) exceeds 'train.steps' (2)");
    out = run_in(dir, 0, &st, "sweep '%s/configs/scaling.yaml' --dry-run --set train.warmup=100000 --set data.train=corpus.txt",
                 srcdir());
    expect(out, st, 0, "'train.warmup' (100000) exceeds 'train.steps'");
    out = run_in(dir, 0, &st, "bench '%s/configs/quickstart.yaml' " BENCH_TINY " --set train.steps=2", srcdir());
    expect(out, st, 0, "tok/s");
}

/* ---- generate and tokenize: bad input ---- */

/* `attnres ARGS` (run in dir) must fail with status want_st and an error in
 * the project's style holding needle, print nothing on stdout, and leave
 * no file in dir whose name starts with out (the output and the atomic
 * writer's temporary; NULL: nothing to check). */
static void expect_clean_failure(const char *dir, int want_st, const char *needle, const char *out, const char *fmt,
                                 ...) __attribute__((format(printf, 5, 6)));
static void expect_clean_failure(const char *dir, int want_st, const char *needle, const char *out, const char *fmt,
                                 ...)
{
    char args[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int st;
    char *so = run_in(dir, 1, &st, "%s", args);
    cr_expect_str_eq(so, "", "'attnres %s' wrote to stdout:\n%s", args, so);
    free(so);
    char *err = run_in(dir, 2, &st, "%s", args);
    cr_assert_eq(st, want_st, "'attnres %s' exited %d, expected %d; stderr:\n%s", args, st, want_st, err);
    check_error_style(err);
    cr_assert(strstr(err, needle) != NULL, "'attnres %s': expected '%s' in:\n%s", args, needle, err);
    free(err);
    if (!out)
        return;
    DIR *d = opendir(dir);
    cr_assert(d != NULL);
    for (struct dirent *de; (de = readdir(d));)
        cr_expect(strncmp(de->d_name, out, strlen(out)) != 0, "'attnres %s' left '%s' behind", args, de->d_name);
    closedir(d);
}

/* A checkpoint in dir/run (bytes, seq_len 4), made without training. */
static void untrained_run(const char *dir)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 8;
    c.model.n_layer = 1;
    c.model.n_head = 2;
    c.model.d_ff = 8;
    c.model.seq_len = 4;
    ar_model *m;
    ar_err e;
    const char *rd = tu_path(dir, "run");
    cr_assert_eq(mkdir(rd, 0777), 0);
    cr_assert_eq(ar_model_create(&m, &c.model, ar_backend_cpu(), 1, &e), 0, "%s", e.msg);
    ar_model_init(m, 1);
    cr_assert_eq(ar_ckpt_save(rd, &c, m, NULL, 0, &e), 0, "%s", e.msg);
    ar_model_free(m);
}

Test(cli, generate_bad_input)
{
    const char *dir = tu_tmpdir();
    untrained_run(dir);
    write_text(tu_path(dir, "prompt.txt"), "And God said");
    write_text(tu_path(dir, "text.txt"), "this is not a safetensors file at all");
    cr_assert_eq(mkdir(tu_path(dir, "empty"), 0777), 0);
    static const struct {
        int st;
        const char *args, *needle;
    } cases[] = {
        /* the command line: before the checkpoint is read */
        {2, "generate", "missing the checkpoint"},
        {2, "generate run --bogus", "unknown option '--bogus'"},
        {2, "generate run other", "unexpected argument 'other'"},
        {2, "generate run --top-p 0", "'--top-p' expects a number > 0 and <= 1, got '0'"},
        {2, "generate run --top-p 1.5", "'--top-p' expects a number > 0 and <= 1, got '1.5'"},
        {2, "generate run --top-p nan", "'--top-p'"},
        {2, "generate run --temperature -1", "'--temperature' expects a number >= 0, got '-1'"},
        {2, "generate run --temperature inf", "'--temperature'"},
        {2, "generate run --tokens 0", "'--tokens' expects an integer >= 1, got '0'"},
        {2, "generate run --tokens", "'--tokens' needs a value"},
        {2, "generate run --top-k -1", "'--top-k'"},
        {2, "generate run --prefill-chunk 0", "'--prefill-chunk'"},
        {2, "generate run --seed -3", "'--seed'"},
        {2, "generate run --threads -2", "'--threads'"},
        {2, "generate run --prompt a --prompt-file prompt.txt", "give the prompt once"},
        {2, "generate run --prompt-ids 1 --prompt a", "give the prompt once"},
        {2, "generate run --prompt-ids 1,x", "'--prompt-ids' expects token ids"},
        {2, "generate run --prompt-ids -1", "'--prompt-ids' expects token ids"},
        {2, "generate run --prompt-ids 99999999999", "'--prompt-ids' expects token ids"},
        /* the checkpoint */
        {1, "generate missing.safetensors", "'missing.safetensors': cannot open: no such file"},
        {1, "generate empty", "'empty/model.safetensors'"},
        {1, "generate text.txt", "'text.txt': header length"},
        {1, "generate text.txt", "not a safetensors file"},
        /* the prompt, against the model */
        {1, "generate run --prompt-ids 256", "'--prompt-ids': token id 256 is not below the model's vocabulary "
                                             "size 256"},
        {1, "generate run --prompt-ids 1,2,3,4,5", "'--prompt-ids': the prompt is 5 tokens, longer than the "
                                                   "model's context of 4"},
        {1, "generate run --prompt abcdefgh", "'--prompt': the prompt is 8 tokens"},
        {1, "generate run --prompt-file prompt.txt", "'prompt.txt': the prompt is 12 tokens"},
        {1, "generate run --prompt-file missing.txt", "'missing.txt': cannot open the prompt file: no such file"},
        {1, "generate run --prompt-file empty", "'empty': cannot read the prompt file: is a directory"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        expect_clean_failure(dir, cases[i].st, cases[i].needle, NULL, "%s", cases[i].args);
    /* the checkpoint itself is fine */
    int st;
    char *out = run_in(dir, 1, &st, "generate run --prompt-ids 1,2 --tokens 3 --seed 1");
    cr_assert_eq(st, 0);
    cr_expect_eq(strlen(out), 3, "3 bytes, got '%s'", out);
    free(out);
}

Test(cli, tokenize_bad_input)
{
    const char *dir = tu_tmpdir();
    write_text(tu_path(dir, "in.txt"), "some text\n");
    write_text(tu_path(dir, "empty.txt"), "");
    cr_assert_eq(mkdir(tu_path(dir, "sub"), 0777), 0);
    static const struct {
        int st;
        const char *args, *needle;
    } cases[] = {
        /* the command line */
        {2, "tokenize", "missing the input files (text)"},
        {2, "tokenize --bogus in.txt -o out.bin", "unknown option '--bogus'"},
        {2, "tokenize in.txt", "missing '-o OUT.bin'"},
        {2, "tokenize in.txt -o", "'-o' needs a value"},
        {2, "tokenize -o out.bin", "missing the input files"},
        {2, "tokenize --vocab in.txt in.txt -o out.bin", "'--vocab' needs '--merges' too"},
        {2, "tokenize --merges in.txt in.txt -o out.bin", "'--merges' needs '--vocab' too"},
        {2, "tokenize --decode", "missing the input file (a token file)"},
        {2, "tokenize --decode a.bin b.bin -o out.bin", "'--decode' takes one token file, got 2 files"},
        /* the vocabulary */
        {1, "tokenize --vocab nope.json --merges nope.bpe in.txt -o out.bin", "cannot read 'nope.json': no such file"},
        {1, "tokenize --vocab in.txt --merges nope.bpe in.txt -o out.bin", "cannot read 'nope.bpe': no such file"},
        {1, "tokenize --vocab in.txt --merges in.txt in.txt -o out.bin", "'in.txt': at byte 0"},
        /* the inputs and the output */
        {1, "tokenize missing.txt -o out.bin", "cannot read 'missing.txt': no such file"},
        {1, "tokenize in.txt missing.txt -o out.bin", "cannot read 'missing.txt': no such file"},
        {1, "tokenize sub -o out.bin", "cannot read 'sub': is a directory"},
        {1, "tokenize empty.txt -o out.bin", "'empty.txt' holds no text"},
        {1, "tokenize in.txt -o nodir/out.bin", "cannot write 'nodir/out.bin'"},
        {1, "tokenize --decode missing.bin -o out.bin", "'missing.bin': no such file"},
        {1, "tokenize --decode in.txt -o out.bin", "'in.txt' is not a token file"},
        {1, "tokenize --decode sub -o out.bin", "'sub'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        expect_clean_failure(dir, cases[i].st, cases[i].needle, "out.bin", "%s", cases[i].args);
    int st;
    char *out = run_in(dir, 1, &st, "tokenize in.txt -o out.bin");
    expect(out, st, 0, "out.bin: 3 tokens");
}
