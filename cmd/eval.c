/* attnres eval: the evaluation protocol (docs/reference.md §5) on a checkpoint. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../formats/json.h"
#include "../formats/token_set.h"
#include "../run/checkpoint.h"
#include "../parallel/comm.h"
#include "../run/depth_stats.h"
#include "../run/eval.h"
#include "cmds.h"
#include "options.h"

static const char *usage =
    "attnres eval RUN_OR_SAFETENSORS --data FILE [--max-windows N] [--threads N] [--device cpu|cuda] [--json] "
    "[--grads OUT.safetensors]";

static void print_result(const ar_eval_result *r, const ar_config *cfg, long step, const char *ckpt,
                         const char *data, const ar_depth_route *route, int json)
{
    double bpb = r->loss / M_LN2;
    if (json) {
        ar_jw w;
        ar_jw_init(&w);
        ar_jw_obj_begin(&w);
        ar_jw_key(&w, "loss");
        ar_jw_num(&w, r->loss);
        ar_jw_key(&w, "perplexity");
        ar_jw_num(&w, exp(r->loss));
        if (cfg->model.vocab_bytes) {
            ar_jw_key(&w, "bits_per_byte");
            ar_jw_num(&w, bpb);
        }
        ar_jw_key(&w, "tokens");
        ar_jw_int(&w, r->tokens);
        ar_jw_key(&w, "windows");
        ar_jw_int(&w, r->windows);
        ar_jw_key(&w, "seq_len");
        ar_jw_int(&w, cfg->model.seq_len);
        ar_jw_key(&w, "step");
        ar_jw_int(&w, step);
        ar_jw_key(&w, "checkpoint");
        ar_jw_str(&w, ckpt);
        ar_jw_key(&w, "data");
        ar_jw_str(&w, data);
        if (route->acc) /* every evaluated token, for schemes with depth weights */
            ar_depth_route_json(&w, "depth_routing", route);
        ar_jw_obj_end(&w);
        printf("%s\n", w.s);
        ar_jw_free(&w);
        return;
    }
    printf("loss         %.6f nats/token\n", r->loss);
    if (cfg->model.vocab_bytes)
        printf("bits/byte    %.6f\n", bpb);
    printf("perplexity   %.4f\n", exp(r->loss));
    printf("tokens       %ld (%ld windows of %d)\n", r->tokens, r->windows, cfg->model.seq_len);
}

int cmd_eval(int argc, char **argv)
{
    const char *ckpt = NULL, *data = NULL, *grads = NULL;
    long max_windows = 0;
    int json = 0, rc = AR_EXIT_USAGE;
    ar_err e = {{0}};
    ar_model *m = NULL;
    ar_token_set *set = NULL;
    ar_token_span *parts = NULL;
    ar_eval_data ed;
    ar_depth_route route = {0};
    static const char *const own[] = {"--data", "--max-windows", "--grads", NULL};
    cli_opts so;
    cli_opts_init(&so, usage, CLI_THREADS | CLI_DEVICE, own, argc, argv);
    for (const char *a, *v; (a = cli_opts_next(&so, &v));) {
        if (!strcmp(a, "--data"))
            data = v;
        else if (!strcmp(a, "--grads"))
            grads = v;
        else if (!strcmp(a, "--max-windows")) {
            if (cli_parse_long(a, v, 1, &max_windows) != 0)
                goto done;
        } else if (!strcmp(a, "--json"))
            json = 1;
        else if (cli_opts_argument(&so, a, &ckpt) != 0)
            goto done;
    }
    if (so.bad)
        goto done;
    if (!ckpt) {
        cli_usage_error(usage, "missing the checkpoint (a run directory or a .safetensors file)");
        goto done;
    }
    if (!data) {
        cli_usage_error(usage, "missing '--data FILE'");
        goto done;
    }
    rc = AR_EXIT_FAIL;
    /* under mpirun the windows are split over the ranks (the same number) */
    ar_comm *comm = ar_comm_world();
    if (grads && comm->size > 1) {
        cli_usage_error(usage, "'--grads' runs in one process: start it without mpirun");
        rc = AR_EXIT_USAGE;
        goto done;
    }
    ar_config cfg;
    long step = 0;
    const ar_backend *be = so.dev == AR_DEVICE_CUDA ? ar_backend_cuda(&e) : ar_backend_cpu();
    int loaded = be ? 0 : ar_wrap(&e, "'--device cuda'");
    if (loaded == 0) {
        be->set_bf16(0); /* evaluation is always fp32: its numbers are the reference */
        be->set_threads(so.threads >= 0 ? so.threads : 0);
        if (ar_ckpt_load_model(ckpt, be, 8, &cfg, &m, &step, &e) != 0 || ar_eval_data_open(data, &cfg.model, &set, &parts, &ed, &e) != 0)
            loaded = -1;
    }
    if (ar_comm_agree(comm, loaded, &e) != 0)
        goto fail;
    ar_eval_result r;
    int routed = json && ar_depth_route_init(&route, m->res);
    ar_eval_hook hook = routed ? ar_depth_route_hook : NULL;
    int evaluated = grads ? ar_evaluate_with(m, &ed, max_windows, 1, hook, &route, &r, &e)
                          : ar_evaluate_ranks_with(m, comm, &ed, max_windows, hook, &route, &r, &e);
    if (evaluated == 0 && routed && !grads)
        evaluated = ar_depth_route_reduce(&route, comm, &e);
    if (evaluated != 0) {
        ar_wrap(&e, "'%s'", data);
        goto fail;
    }
    if (grads && ar_ckpt_save_grads(grads, m, &e) != 0)
        goto fail;
    print_result(&r, &cfg, step, ckpt, data, &route, json);
    rc = AR_EXIT_OK;
    goto done;
fail:
    cli_error("%s", e.msg);
done:
    ar_depth_route_free(&route);
    ar_model_free(m);
    ar_eval_data_close(set, parts);
    cli_opts_free(&so);
    return rc;
}
