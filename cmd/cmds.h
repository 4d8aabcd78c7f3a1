/* The command table's entries and what the commands share. */
#ifndef AR_CMDS_H
#define AR_CMDS_H

#include <stdio.h>

#include "../core/config.h"
#include "../core/error.h"
#include "../viz/canvas.h"

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_sweep(int argc, char **argv);
int cmd_ablate(int argc, char **argv);
int cmd_fit_scaling(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_plot_depth_attn(int argc, char **argv);
int cmd_plot(int argc, char **argv);
int cmd_plot_pipeline(int argc, char **argv);
int cmd_plot_sweep(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_data(int argc, char **argv);
int cmd_generate(int argc, char **argv);

/* attnres bench --pipeline (cmd/bench_pipeline.c): whether bench's
 * arguments (argv[0] the command's name) ask for a pipeline, which runs on
 * the ranks of an mpirun launch; and that bench, with bench's usage. */
int cli_bench_pipelined(int argc, char **argv);
int cmd_bench_pipeline(int argc, char **argv, const char *usage);

/* Exit statuses: 0 ok, 1 the work failed, 2 the command line was wrong. */
enum { AR_EXIT_OK = 0, AR_EXIT_FAIL = 1, AR_EXIT_USAGE = 2 };

/* Set on ranks other than 0 of an mpirun launch: rank 0 alone speaks
 * (the ranks agree on every error, parallel/comm.h). */
extern int cli_quiet;

/* "attnres: error: <msg>" on stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "usage: <usage>" and a hint to stderr, returns AR_EXIT_USAGE. */
int cli_usage_error(const char *usage, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Shows man page `page` (e.g. "attnres-train"); returns an exit status. */
int cli_show_man(const char *page);
/* 1 if argv contains -h or --help before any "--". */
int cli_wants_help(int argc, char **argv);
/* Parses a positive/non-negative long option value. */
int cli_parse_long(const char *opt, const char *s, long min, long *out);
/* The same for an int: also an error above INT_MAX. */
int cli_parse_int(const char *opt, const char *s, long min, int *out);
/* "2,4,8" -> positive ints (at most 100000 each) in a malloc'd *out (the
 * caller frees it, also on failure); -1 on an empty or malformed list. */
int cli_parse_int_list(const char *s, int **out, int *n);
/* A finite number > 0 from option opt's value s: 0, or AR_EXIT_USAGE after
 * the usage error (cli_usage_error). */
int cli_parse_positive(const char *usage, const char *opt, const char *s, double *out);

/* A config on a device this build lacks (cuda without the CUDA backend)
 * fails before any work, with ar_backend_open's message: -1 with e set.
 * With the backend built this opens nothing (the device is opened where
 * the work runs, which may be a forked child: a CUDA context does not
 * survive fork). */
int cli_check_device(const ar_config *c, ar_err *e);

/* --format VALUE of the figure commands: 0, or a usage error (-1). */
int cli_parse_format(const char *usage, const char *v, ar_fig_format *f);
/* Default figure path for one run: RUN/STEM.EXT for a run directory, the
 * file's directory for a file (f AUTO = PNG). */
void cli_figure_path(const char *run, const char *stem, ar_fig_format f, char *out, size_t cap);

/* The man pages compiled into the binary (man_pages.c, generated). */
typedef struct {
    const char *name; /* "attnres-train" */
    const char *roff;
} cli_man_page;
extern const cli_man_page cli_man_pages[];
extern const int cli_n_man_pages;

#endif
