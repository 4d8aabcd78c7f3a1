/* attnres eval: the evaluation protocol (docs/reference.md §5) on a checkpoint. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../formats/json.h"
#include "../formats/tokens.h"
#include "../study/checkpoint.h"
#include "../study/eval.h"
#include "cmds.h"

static const char *usage =
    "attnres eval RUN_OR_SAFETENSORS --data FILE [--max-windows N] [--threads N] [--device cpu|cuda] [--json] "
    "[--grads OUT.safetensors]";

static void print_result(const ar_eval_result *r, const ar_config *cfg, long step, const char *ckpt,
                         const char *data, int json)
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
    long max_windows = 0, threads = 0;
    int json = 0;
    ar_device dev = AR_DEVICE_CPU;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        if (!strcmp(a, "--data") || !strcmp(a, "--max-windows") || !strcmp(a, "--grads") ||
            !strcmp(a, "--threads") || !strcmp(a, "--device")) {
            if (!has_val)
                return cli_usage_error(usage, "'%s' needs a value", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--data"))
                data = v;
            else if (!strcmp(a, "--grads"))
                grads = v;
            else if (!strcmp(a, "--device")) {
                if (cli_parse_device(usage, v, &dev) != 0)
                    return AR_EXIT_USAGE;
            } else if (!strcmp(a, "--threads")) {
                if (cli_parse_long(a, v, 0, &threads) != 0)
                    return AR_EXIT_USAGE;
                if (threads > INT_MAX) {
                    cli_error("'%s' expects an integer <= %d, got '%s'", a, INT_MAX, v);
                    return AR_EXIT_USAGE;
                }
            } else if (cli_parse_long(a, v, 1, &max_windows) != 0)
                return AR_EXIT_USAGE;
        } else if (!strcmp(a, "--json"))
            json = 1;
        else if (a[0] == '-' && a[1])
            return cli_usage_error(usage, "unknown option '%s'", a);
        else if (!ckpt)
            ckpt = a;
        else
            return cli_usage_error(usage, "unexpected argument '%s'", a);
    }
    if (!ckpt)
        return cli_usage_error(usage, "missing the checkpoint (a run directory or a .safetensors file)");
    if (!data)
        return cli_usage_error(usage, "missing '--data FILE'");
    ar_err e = {{0}};
    ar_config cfg;
    ar_model *m = NULL;
    ar_tokens t = {0};
    long step = 0;
    int rc = AR_EXIT_FAIL;
    const ar_backend *be = dev == AR_DEVICE_CUDA ? ar_backend_cuda(&e) : ar_backend_cpu();
    if (!be) {
        ar_wrap(&e, "'--device cuda'");
        goto done;
    }
    be->set_bf16(0); /* evaluation is always fp32: its numbers are the reference */
    be->set_threads((int)threads);
    if (ar_ckpt_load_model(ckpt, be, 8, &cfg, &m, &step, &e) != 0)
        goto done;
    if (ar_tokens_load(&t, data, &e) != 0)
        goto done;
    if (ar_eval_check_tokens(&t, &cfg.model, data, &e) != 0)
        goto done;
    ar_eval_result r;
    if (ar_evaluate(m, t.tok, t.n, max_windows, grads != NULL, &r, &e) != 0) {
        ar_wrap(&e, "'%s'", data);
        goto done;
    }
    if (grads && ar_ckpt_save_grads(grads, m, &e) != 0)
        goto done;
    print_result(&r, &cfg, step, ckpt, data, json);
    rc = AR_EXIT_OK;
done:
    if (rc != AR_EXIT_OK)
        cli_error("%s", e.msg);
    ar_model_free(m);
    ar_tokens_free(&t);
    return rc;
}
