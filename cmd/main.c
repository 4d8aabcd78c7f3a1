/* attnres: the command table (as git's), help and version. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../parallel/comm.h"
#include "cmds.h"

#ifndef AR_VERSION
#define AR_VERSION "0.0.0"
#endif

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"train", cmd_train, "train a model from a YAML config"},
    {"eval", cmd_eval, "evaluate a checkpoint on a token stream"},
    {"generate", cmd_generate, "sample text from a checkpoint with a key/value cache"},
    {"sweep", cmd_sweep, "train a grid of model sizes x variants for scaling laws"},
    {"ablate", cmd_ablate, "train residual variants x seeds on one config and compare them"},
    {"fit-scaling", cmd_fit_scaling, "fit power-law scaling curves and compare compute"},
    {"bench", cmd_bench, "measure speed and memory of the residual variants"},
    {"plot", cmd_plot, "draw the training dynamics of runs"},
    {"plot-depth-attn", cmd_plot_depth_attn, "draw what depth attention learned, or the depth mixing matrix"},
    {"plot-sweep", cmd_plot_sweep, "draw a sweep as one heatmap per method"},
    {"plot-pipeline", cmd_plot_pipeline, "draw the pipeline-parallel schedule and cross-stage block caching"},
    {"tokenize", cmd_tokenize, "turn text into GPT-2 BPE token files, and back"},
    {"data", cmd_data, "check a token set: its shards, tokens and largest id"},
    {"help", NULL, "show the manual page of attnres or of a command"},
};
#define N_COMMANDS (int)(sizeof commands / sizeof *commands)

/* Other names of commands: the same command, the same man page. */
static const struct {
    const char *alias, *name;
} aliases[] = {
    {"plot-attn", "plot-depth-attn"},
};
#define N_ALIASES (int)(sizeof aliases / sizeof *aliases)

static const char *main_usage = "attnres [--version] [--help] <command> [<args>]";

static void list_commands(FILE *f)
{
    fprintf(f, "usage: %s\n\ncommands:\n", main_usage);
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "   %-16s %s\n", commands[i].name, commands[i].summary);
    for (int i = 0; i < N_ALIASES; i++)
        fprintf(f, "   %-16s same as %s\n", aliases[i].alias, aliases[i].name);
    fprintf(f, "\n'attnres help <command>' shows a command's manual page.\n");
}

static const command *find(const char *name)
{
    for (int i = 0; i < N_ALIASES; i++)
        if (strcmp(aliases[i].alias, name) == 0)
            name = aliases[i].name;
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static int cmd_help(int argc, char **argv)
{
    if (argc < 2)
        return cli_show_man("attnres");
    if (strcmp(argv[1], "config") == 0)
        return cli_show_man("attnres-config");
    const command *c = find(argv[1]);
    if (!c) {
        cli_error("'%s' is not an attnres command (see 'attnres help')", argv[1]);
        return AR_EXIT_USAGE;
    }
    char page[64];
    snprintf(page, sizeof page, c->fn ? "attnres-%s" : "attnres", c->name);
    return cli_show_man(page);
}

/* Under mpirun: every rank runs the command; rank 0 alone prints.  The
 * commands that use ranks are train (data parallelism), eval (its windows
 * split over the ranks), sweep and ablate (their runs spread over the
 * ranks) and bench --pipeline (the stages of the pipeline it measures);
 * any other refuses more than one. */
static int run_ranks(const command *c, int argc, char **argv)
{
    ar_err e = {{0}};
    ar_comm *w = ar_comm_mpi_init(&argc, &argv, &e);
    if (!w) {
        /* no MPI to ask which rank this is: the launcher's variable says */
        const char *rank = getenv("OMPI_COMM_WORLD_RANK");
        if (!rank || strcmp(rank, "0") == 0)
            cli_error("%s", e.msg);
        return AR_EXIT_FAIL;
    }
    if (w->rank != 0) {
        cli_quiet = 1;
        (void)!freopen("/dev/null", "w", stdout);
    }
    int rc;
    const char *ranked[] = {"train", "eval", "sweep", "ablate"};
    int uses_ranks = 0;
    for (size_t i = 0; i < sizeof ranked / sizeof *ranked; i++)
        uses_ranks |= strcmp(c->name, ranked[i]) == 0;
    int bench = strcmp(c->name, "bench") == 0;
    uses_ranks |= bench && cli_bench_pipelined(argc, argv);
    if (w->size > 1 && !uses_ranks) {
        cli_error("'attnres %s' runs in one process: start it without mpirun (train, eval, sweep, ablate and "
                  "bench --pipeline use the ranks of an mpirun launch)%s",
                  c->name, bench ? "; under mpirun, 'attnres bench --pipeline P' measures a pipeline" : "");
        rc = AR_EXIT_USAGE;
    } else {
        rc = c->fn(argc, argv);
    }
    w->ops->finalize(w);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        list_commands(stderr);
        return AR_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
        printf("attnres %s\n", AR_VERSION);
        return AR_EXIT_OK;
    }
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0)
        return cli_show_man("attnres");
    if (strcmp(name, "help") == 0)
        return cmd_help(argc - 1, argv + 1);
    const command *c = find(name);
    if (!c) {
        cli_error("'%s' is not an attnres command (see 'attnres help')", name);
        return AR_EXIT_USAGE;
    }
    if (cli_wants_help(argc - 1, argv + 1)) {
        char page[64];
        snprintf(page, sizeof page, "attnres-%s", c->name); /* an alias shows its command's page */
        return cli_show_man(page);
    }
    if (!ar_comm_launched())
        return c->fn(argc - 1, argv + 1);
    return run_ranks(c, argc - 1, argv + 1);
}
