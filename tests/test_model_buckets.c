/* The gradient buckets of ar_model (lib/model.h): they tile the gradient
 * exactly once, and a bucket announced by grad_ready already holds its
 * final values (data parallelism reduces it from that moment on), for every
 * residual kind, on a randomised model, with the backward accumulating over
 * two micro-batches as training does. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "lib/backend.h"
#include "lib/model.h"
#include "modelutil.h"

typedef struct {
    float **copy;
    int *seen;
} snapshot;

static void take(ar_model *m, int b, void *ud)
{
    snapshot *s = ud;
    s->seen[b]++;
    m->be->download(s->copy[b], m->grads + m->bucket_off[b], m->bucket_len[b] * sizeof(float));
}

static void check_kind(ar_res_kind kind, int block_size, int streams, const char *what)
{
    ar_config c;
    ar_config_defaults(&c);
    ar_model_cfg mc = c.model;
    mc.d_model = 16;
    mc.n_layer = 3;
    mc.n_head = 2;
    mc.d_ff = 32;
    mc.seq_len = 8;
    mc.residual.kind = kind;
    mc.residual.block_size = block_size;
    mc.residual.num_blocks = 0;
    if (kind == AR_RES_MHC)
        mc.residual.streams = streams;
    if (kind == AR_RES_SWA)
        mc.residual.window = 2;
    ar_err e = {{0}};
    ar_model *m;
    const ar_backend *be = ar_backend_open("cpu", 0, &e);
    cr_assert(be, "%s", e.msg);
    cr_assert_eq(ar_model_create(&m, &mc, be, 2, &e), 0, "%s: %s", what, e.msg);
    tu_model_randomize(m, 11);

    /* the buckets tile [0, total) */
    char *cover = calloc(m->pt.total, 1);
    for (int b = 0; b < m->nbuckets; b++)
        for (size_t i = 0; i < m->bucket_len[b]; i++)
            cover[m->bucket_off[b] + i]++;
    for (size_t i = 0; i < m->pt.total; i++)
        cr_assert_eq(cover[i], 1, "%s: gradient element %zu is in %d buckets", what, i, cover[i]);
    free(cover);

    snapshot s = {calloc((size_t)m->nbuckets, sizeof(float *)), calloc((size_t)m->nbuckets, sizeof(int))};
    for (int b = 0; b < m->nbuckets; b++)
        s.copy[b] = malloc((m->bucket_len[b] + 1) * sizeof(float));
    int n = 2 * mc.seq_len;
    int32_t in[64], tg[64];
    ar_model_zero_grad(m);
    for (int a = 0; a < 2; a++) {
        tu_tokens(in, tg, n, 100 + (uint64_t)a);
        ar_model_forward(m, in, tg, 2, NULL);
        m->grad_ready = a == 1 ? take : NULL;
        m->grad_ready_ud = &s;
        ar_model_backward(m, 0.5f);
    }
    float *g = malloc(m->pt.total * sizeof(float));
    be->download(g, m->grads, m->pt.total * sizeof(float));
    for (int b = 0; b < m->nbuckets; b++) {
        cr_assert_eq(s.seen[b], 1, "%s: bucket %d announced %d times", what, b, s.seen[b]);
        for (size_t i = 0; i < m->bucket_len[b]; i++)
            cr_assert_eq(memcmp(&s.copy[b][i], &g[m->bucket_off[b] + i], sizeof(float)), 0,
                         "%s: bucket %d element %zu changed after it was announced final (%g then %g)", what, b,
                         i, s.copy[b][i], g[m->bucket_off[b] + i]);
        free(s.copy[b]);
    }
    free(g);
    free(s.copy);
    free(s.seen);
    ar_model_free(m);
}

Test(model_buckets, baseline) { check_kind(AR_RES_BASELINE, 0, 0, "baseline"); }
Test(model_buckets, full) { check_kind(AR_RES_FULL, 0, 0, "full"); }
Test(model_buckets, block2) { check_kind(AR_RES_BLOCK, 2, 0, "block S=2"); }
Test(model_buckets, block4) { check_kind(AR_RES_BLOCK, 4, 0, "block S=4"); }
Test(model_buckets, static_mixer) { check_kind(AR_RES_STATIC, 0, 0, "static"); }
Test(model_buckets, rescaled) { check_kind(AR_RES_RESCALED, 0, 0, "rescaled"); }
Test(model_buckets, swa) { check_kind(AR_RES_SWA, 0, 0, "swa"); }
Test(model_buckets, denseformer) { check_kind(AR_RES_DENSEFORMER, 0, 0, "denseformer"); }
Test(model_buckets, mhc) { check_kind(AR_RES_MHC, 0, 3, "mhc"); }
