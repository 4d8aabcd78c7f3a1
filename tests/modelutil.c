#include "modelutil.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lib/backend.h"
#include "testutil.h"

void tu_model_randomize(ar_model *m, uint64_t seed)
{
    float *h = calloc(m->pt.total, sizeof(float));
    for (int i = 0; i < m->pt.n; i++) {
        const ar_param *p = &m->pt.p[i];
        float s = p->init == AR_INIT_NORMAL ? 0.3f : 1.0f;
        tu_fill_uniform(h + p->offset, p->numel, -s, s, seed * 131 + (uint64_t)i);
        if (p->init == AR_INIT_ONES)
            for (size_t j = 0; j < p->numel; j++)
                h[p->offset + j] += 1.0f;
    }
    m->be->upload(m->params, h, m->pt.total * sizeof(float));
    free(h);
}

void tu_tokens(int32_t *in, int32_t *tg, int n, uint64_t seed)
{
    float *u = malloc((size_t)(n + 1) * sizeof(float));
    tu_fill_uniform(u, (size_t)n + 1, 0, 256, seed);
    for (int i = 0; i < n; i++) {
        in[i] = (int32_t)u[i];
        tg[i] = (int32_t)u[i + 1];
    }
    free(u);
}

ar_model *tu_model_random(ar_model_cfg c, int B, uint64_t seed, uint64_t token_seed, int32_t *in, int32_t *tg,
                          int cap)
{
    ar_model *m;
    ar_err e;
    cr_assert_eq(ar_model_create(&m, &c, ar_backend_cpu(), B, &e), 0, "%s", e.msg);
    tu_model_randomize(m, seed);
    cr_assert_leq(B * m->T, cap, "%d tokens, room for %d", B * m->T, cap);
    tu_tokens(in, tg, B * m->T, token_seed);
    return m;
}

void tu_model_fd_check(ar_model_cfg mc, const char *what, const char *must_have)
{
    tu_model_fd_check_prep(mc, what, must_have, NULL);
}

static void fd_check(ar_model_cfg mc, const char *what, const char *must_have, void (*prep)(ar_model *m),
                     float h);

void tu_model_fd_check_prep(ar_model_cfg mc, const char *what, const char *must_have,
                            void (*prep)(ar_model *m))
{
    fd_check(mc, what, must_have, prep, 1e-2f);
}

void tu_model_fd_check_step(ar_model_cfg mc, const char *what, float h)
{
    fd_check(mc, what, NULL, NULL, h);
}

static void fd_check(ar_model_cfg mc, const char *what, const char *must_have, void (*prep)(ar_model *m),
                     float h)
{
    ar_model *m;
    ar_err e;
    int B = 2, N = B * mc.seq_len;
    cr_assert_leq(N, 64, "fd check: at most 64 tokens");
    cr_assert_eq(ar_model_create(&m, &mc, ar_backend_cpu(), B, &e), 0, "%s", e.msg);
    if (must_have)
        cr_assert_geq(ar_params_find(&m->pt, must_have), 0, "%s: no tensor '%s'", what, must_have);
    tu_model_randomize(m, 7);
    if (prep)
        prep(m);
    int32_t in[64], tg[64];
    tu_tokens(in, tg, N, 3);
    ar_model_zero_grad(m);
    ar_model_forward(m, in, tg, B, NULL);
    ar_model_backward(m, 1.0f / N);
    for (int i = 0; i < m->pt.n; i++) {
        const ar_param *p = &m->pt.p[i];
        float *x = ar_model_param(m, i), *g = ar_model_grad(m, i);
        float *u = malloc(p->numel * sizeof(float)), *x0 = malloc(p->numel * sizeof(float));
        tu_fill_uniform(u, p->numel, -1, 1, 100 + (uint64_t)i);
        double nu = 0, gu = 0;
        for (size_t j = 0; j < p->numel; j++)
            nu += (double)u[j] * u[j];
        for (size_t j = 0; j < p->numel; j++) {
            u[j] /= (float)sqrt(nu);
            gu += (double)g[j] * u[j];
        }
        memcpy(x0, x, p->numel * sizeof(float));
        double lp, lm;
        for (size_t j = 0; j < p->numel; j++)
            x[j] = x0[j] + h * u[j];
        ar_model_forward(m, in, tg, B, &lp);
        for (size_t j = 0; j < p->numel; j++)
            x[j] = x0[j] - h * u[j];
        ar_model_forward(m, in, tg, B, &lm);
        memcpy(x, x0, p->numel * sizeof(float));
        double fd = (lp - lm) / (2.0 * h * N);
        /* truncation: 2e-2 |g.u| (h^2/6 times the third derivative);
         * rounding: 50 u of the mean loss, divided by h (modelutil.h) */
        double tol = 2e-2 * fabs(gu) + 50 * TU_U_FLOAT / h;
        cr_expect(fabs(fd - gu) <= tol, "%s %s: fd %.6g vs analytic %.6g (bound %.3g)", what, p->name, fd, gu,
                  tol);
        free(u);
        free(x0);
    }
    ar_model_free(m);
}

double tu_model_diff(ar_model *ma, ar_model *mb, int B)
{
    int N = B * ma->T;
    cr_assert_leq(N, 64, "model diff: at most 64 tokens");
    int32_t in[64], tg[64];
    tu_tokens(in, tg, N, 5);
    ar_model *ms[2] = {ma, mb};
    double loss[2];
    for (int k = 0; k < 2; k++) {
        ar_model_zero_grad(ms[k]);
        loss[k] = ar_model_forward(ms[k], in, tg, B, NULL);
        ar_model_backward(ms[k], 1.0f / N);
    }
    double d = fabs(loss[0] - loss[1]) / fmax(fabs(loss[0]), fabs(loss[1]));
    size_t nl = (size_t)N * ma->V;
    float *la = malloc(nl * sizeof(float)), *lb = malloc(nl * sizeof(float));
    ar_model_logits(ma, 0, N, la); /* CPU backend: host memory */
    ar_model_logits(mb, 0, N, lb);
    double dz = 0, sz = 0;
    for (size_t i = 0; i < nl; i++) {
        dz = fmax(dz, fabs((double)la[i] - lb[i]));
        sz = fmax(sz, fmax(fabs((double)la[i]), fabs((double)lb[i])));
    }
    d = fmax(d, sz > 0 ? dz / sz : dz);
    free(la);
    free(lb);
    /* the largest gradient entry of either model, then tensor by tensor */
    double sg = 0;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < ms[k]->pt.n; i++)
            for (size_t j = 0; j < ms[k]->pt.p[i].numel; j++)
                sg = fmax(sg, fabs((double)ar_model_grad(ms[k], i)[j]));
    for (int i = 0; i < ma->pt.n; i++) {
        int j = ar_params_find(&mb->pt, ma->pt.p[i].name);
        if (j < 0)
            continue;
        const float *ga = ar_model_grad(ma, i), *gb = ar_model_grad(mb, j);
        double dg = 0, s = sg / 64;
        for (size_t k = 0; k < ma->pt.p[i].numel; k++) {
            dg = fmax(dg, fabs((double)ga[k] - gb[k]));
            s = fmax(s, fmax(fabs((double)ga[k]), fabs((double)gb[k])));
        }
        d = fmax(d, s > 0 ? dg / s : dg);
    }
    return d;
}

double tu_model_mixing_bound(const ar_model *m, int B)
{
    double mixers = m->L + 1, n = fmax(m->d, (double)B * m->T * mixers);
    return 2 * 2 * mixers * tu_gamma(n);
}

const ar_eval_data *tu_mem_eval_of(tu_mem_eval *me, const int32_t *x, size_t n, int32_t vocab)
{
    me->set = ar_token_set_wrap(x, n, "tokens in memory");
    me->part = (ar_token_span){me->set, 0, n};
    me->d = (ar_eval_data){&me->part, 1, vocab};
    return &me->d;
}

void tu_mem_eval_free(tu_mem_eval *me)
{
    ar_token_set_free(me->set);
    me->set = NULL;
}
