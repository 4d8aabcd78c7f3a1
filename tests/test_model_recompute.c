/* train.recompute: sublayer (lib/model.h, internals): the same gradients
 * and weights, bit for bit, as keeping every activation, for every residual
 * kind; finite differences through the recomputing backward; and the
 * activation memory the rule says it saves, counted at the allocator. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/config.h"
#include "lib/model.h"
#include "lib/optim.h"
#include "modelutil.h"

static const ar_backend *cpu(void)
{
    const ar_backend *be = ar_backend_cpu();
    be->set_threads(2);
    return be;
}

/* 3 blocks (L = 6), d 16, T 8: small, with more than one block sharing the
 * internals and blocks of AttnRes that span sublayers. */
static ar_config tiny(const char *kind, const char *extra)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 16;
    c.model.n_layer = 3;
    c.model.n_head = 2;
    c.model.d_ff = 24;
    c.model.seq_len = 8;
    char set[128];
    ar_err e = {{0}};
    snprintf(set, sizeof set, "model.residual.kind=%s", kind);
    cr_assert_eq(ar_config_set(&c, set, &e), 0, "%s", e.msg);
    if (extra)
        cr_assert_eq(ar_config_set(&c, extra, &e), 0, "%s", e.msg);
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s: %s", kind, e.msg);
    return c;
}

static ar_model *create(const ar_config *c, ar_recompute rc)
{
    ar_model_cfg mc = c->model;
    mc.recompute = rc;
    ar_model *m;
    ar_err e = {{0}};
    cr_assert_eq(ar_model_create(&m, &mc, cpu(), 3, &e), 0, "%s", e.msg);
    return m;
}

/* Four AdamW steps of two micro-batches each (B = 3, then 2), through
 * both training entry points: weights and gradients bit for bit.  This
 * holds by construction: recomputing a sublayer runs the same forward code
 * on the same inputs, shapes and thread count (both models in this process,
 * 2 threads), so it rebuilds the same floats the other model kept, and the
 * backward then does the same arithmetic on them. */
static void same_bits(const char *kind, const char *extra)
{
    ar_config c = tiny(kind, extra);
    ar_model *a = create(&c, AR_RECOMPUTE_NONE), *b = create(&c, AR_RECOMPUTE_SUBLAYER);
    tu_model_randomize(a, 5);
    memcpy(b->params, a->params, a->pt.total * sizeof(float));
    ar_adamw oa, ob;
    ar_adamw_init(&oa, a);
    ar_adamw_init(&ob, b);
    int T = c.model.seq_len;
    int32_t in[24], tg[24];
    for (int step = 0; step < 4; step++) {
        ar_model_zero_grad(a);
        ar_model_zero_grad(b);
        for (int mb = 0; mb < 2; mb++) {
            int B = 3 - mb;
            tu_tokens(in, tg, B * T, 100 + 10 * (uint64_t)step + (uint64_t)mb);
            float scale = 1.0f / (float)(2 * B * T);
            double la, lb;
            if (step % 2) { /* the two-pass path (pipelines, eval --grads) */
                la = ar_model_forward(a, in, tg, B, NULL);
                ar_model_backward(a, scale);
                lb = ar_model_forward(b, in, tg, B, NULL);
                ar_model_backward(b, scale);
            } else {
                la = ar_model_forward_backward(a, in, tg, B, scale, NULL);
                lb = ar_model_forward_backward(b, in, tg, B, scale, NULL);
            }
            cr_expect(la == lb, "%s: step %d loss %.17g vs %.17g", kind, step, la, lb);
        }
        cr_expect(memcmp(a->grads, b->grads, a->pt.total * sizeof(float)) == 0,
                  "%s %s: gradients differ at step %d", kind, extra ? extra : "", step);
        ar_adamw_step(&oa, a, &c.train, 1e-2, 1.0);
        ar_adamw_step(&ob, b, &c.train, 1e-2, 1.0);
    }
    cr_expect(memcmp(a->params, b->params, a->pt.total * sizeof(float)) == 0,
              "%s %s: weights differ after 4 steps", kind, extra ? extra : "");
    /* and training moved them (a test that compares nothing with nothing fails) */
    ar_model *init = create(&c, AR_RECOMPUTE_NONE);
    tu_model_randomize(init, 5);
    cr_expect(memcmp(init->params, b->params, b->pt.total * sizeof(float)) != 0);
    ar_model_free(init);
    ar_adamw_free(&oa);
    ar_adamw_free(&ob);
    ar_model_free(a);
    ar_model_free(b);
}

Test(model_recompute, same_bits_for_every_kind)
{
    same_bits("baseline", NULL);
    same_bits("full", NULL);
    same_bits("block", "model.residual.block_size=2");
    same_bits("block", "model.residual.score=sigmoid");
    same_bits("static", NULL);
    same_bits("swa", "model.residual.window=2");
    same_bits("mhc", NULL);
    same_bits("denseformer", NULL);
}

Test(model_recompute, finite_differences)
{
    ar_config c = tiny("block", "model.residual.block_size=2");
    c.model.recompute = AR_RECOMPUTE_SUBLAYER;
    tu_model_fd_check(c.model, "block S=2, recompute sublayer", NULL);
    c = tiny("baseline", NULL);
    c.model.recompute = AR_RECOMPUTE_SUBLAYER;
    tu_model_fd_check(c.model, "baseline, recompute sublayer", NULL);
}

/* Bytes alive through the CPU backend's allocator (a copy of its table
 * with alloc/free counted; sizes kept in a small header). */
static long live_bytes;
static void *counted_alloc(size_t n)
{
    size_t *p = ar_backend_cpu()->alloc(n + 16);
    p[0] = n;
    live_bytes += (long)n;
    return (char *)p + 16;
}
static void counted_free(void *q)
{
    size_t *p = (size_t *)((char *)q - 16);
    live_bytes -= (long)p[0];
    ar_backend_cpu()->free(p);
}

/* Recomputation keeps one set of internals for all n_layer blocks:
 * (n_layer - 1) (4 N d + 3 N d_ff + B n_head T^2) floats fewer (q, k, v,
 * y; gate, up, their product; the attention probabilities). */
Test(model_recompute, memory_is_the_rule)
{
    ar_backend counted = *ar_backend_cpu();
    counted.alloc = counted_alloc;
    counted.free = counted_free;
    ar_config c = tiny("block", "model.residual.block_size=2");
    long used[2];
    for (int rc = 0; rc < 2; rc++) {
        ar_model_cfg mc = c.model;
        mc.recompute = rc ? AR_RECOMPUTE_SUBLAYER : AR_RECOMPUTE_NONE;
        ar_model *m;
        ar_err e = {{0}};
        long before = live_bytes;
        cr_assert_eq(ar_model_create(&m, &mc, &counted, 3, &e), 0, "%s", e.msg);
        used[rc] = live_bytes - before;
        if (rc) /* every block's internals are the one set */
            for (int k = 1; k < m->cfg.n_layer; k++)
                cr_expect(m->act[k].att == m->act[0].att && m->act[k].q == m->act[0].q &&
                              m->act[k].act == m->act[0].act && m->act[k].xn != m->act[0].xn,
                          "block %d", k);
        ar_model_free(m);
        cr_assert_eq(live_bytes, before, "recompute %d: freeing leaves %ld bytes", rc, live_bytes - before);
    }
    long B = 3, T = c.model.seq_len, N = B * T, d = c.model.d_model, F = c.model.d_ff;
    long nh = c.model.n_head, nl = c.model.n_layer;
    long saved = (nl - 1) * (4 * N * d + 3 * N * F + B * nh * T * T) * (long)sizeof(float);
    cr_expect_eq(used[0] - used[1], saved, "saved %ld bytes, the rule says %ld", used[0] - used[1], saved);
}
