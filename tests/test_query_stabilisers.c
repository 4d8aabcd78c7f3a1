/* The input-dependent query's stabilisers (lib/residual_mixer.c:
 * query_scale, query_norm, query_gate): finite differences of every form,
 * the mixers' weights and inputs against the same equations in double, the
 * gated form's start (uniform weights), the config keys, and that a
 * checkpoint written before the keys existed still loads as the plain form
 * with the same results. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/config.h"
#include "lib/backend.h"
#include "lib/model.h"
#include "lib/optim.h"
#include "lib/residual.h"
#include "run/checkpoint.h"
#include "modelutil.h"
#include "testutil.h"

static const ar_backend *cpu(void)
{
    const ar_backend *be = ar_backend_cpu();
    be->set_threads(1);
    return be;
}

/* d 12, 2 blocks (L = 4 sublayers), T 6; query: input with the given forms. */
static ar_model_cfg qcfg(ar_res_kind kind, ar_query_scale scale, int norm, int gate, int heads)
{
    ar_config c;
    ar_config_defaults(&c);
    ar_model_cfg m = c.model;
    m.d_model = 12;
    m.n_layer = 2;
    m.n_head = 2;
    m.d_ff = 20;
    m.seq_len = 6;
    m.residual.kind = kind;
    m.residual.block_size = kind == AR_RES_BLOCK ? 2 : 0;
    m.residual.query = AR_QUERY_INPUT;
    m.residual.query_scale = scale;
    m.residual.query_norm = norm;
    m.residual.query_gate = gate;
    m.residual.heads = heads;
    c.model = m;
    ar_err e;
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
    return m;
}

/* Steps below tu_model_fd_check's 1e-2 where the form is smooth but curved:
 * with random W the scaled and normed logits sit where the softmax bends
 * most, and at 1e-2 the central difference's h^2 term alone was 4-70% of
 * g.u; at 1-2e-3 it is below the 2e-2 |g.u| allowance (the rounding term,
 * 50 u / h, grows to 2.5-5e-3). */
Test(query_stabilisers, fd_scale) { tu_model_fd_check_step(qcfg(AR_RES_FULL, AR_QUERY_SCALE_HEAD, 0, 0, 0), "scale", 2e-3f); }
Test(query_stabilisers, fd_norm) { tu_model_fd_check_step(qcfg(AR_RES_FULL, AR_QUERY_SCALE_HEAD, 1, 0, 0), "norm + scale", 2e-3f); }
Test(query_stabilisers, fd_norm_alone) { tu_model_fd_check_step(qcfg(AR_RES_FULL, AR_QUERY_SCALE_NONE, 1, 0, 0), "norm", 1e-3f); }
Test(query_stabilisers, fd_gate) { tu_model_fd_check_step(qcfg(AR_RES_FULL, AR_QUERY_SCALE_NONE, 0, 1, 0), "gate", 2e-3f); }
Test(query_stabilisers, fd_gate_static_part) { tu_model_fd_check(qcfg(AR_RES_FULL, AR_QUERY_SCALE_HEAD, 0, 1, 0), "gate + scale", "blocks.0.attn_res.query"); }
Test(query_stabilisers, fd_all_block_heads)
{
    tu_model_fd_check(qcfg(AR_RES_BLOCK, AR_QUERY_SCALE_HEAD, 1, 1, 2), "block, heads 2, all three", "final_res.query.gate");
}

static const float *param(ar_model *m, const char *name)
{
    int i = ar_params_find(&m->pt, name);
    return i < 0 ? NULL : ar_model_param(m, i);
}

/* Mixer l's weights alpha (N x H x n) and input h (N x d) from its sources
 * in double, by the equations of lib/residual_mixer.c:
 *   qn = last r_q (r_q = 1/sqrt(mean last^2 + eps)),  u = W qn,
 *   norm: u <- u r_u,  gate: w = q + g u (else u),  w <- w scale,
 *   logit[a,s] = sum_{j in G_a} w_j src_s,j r_s gain_j,  alpha = softmax_s,
 *   h_j = sum_s alpha[a(j),s] src_s,j.
 * Bounds: each float logit comes out of at most K = 4d + 30 roundings
 * along its longest chain (two RMS sums of d terms and their roots, the
 * d-term product W qn, the norm of u, the gate, the scale, the key's RMS,
 * the d/H-term dot product and its two factors), each applied to terms
 * whose magnitudes the same sums of absolute values bound; with the norm
 * the error of u also moves r_u: |d r_u| <= r_u^3 sum_k |u_k| |du_k| / d,
 * so |d un_i| <= r_u |du_i| + |u_i| |d r_u|.  So |d logit| <= gamma(K) M
 * with M the logit's sum of absolute values so propagated.  A softmax of
 * logits each off by at most e moves each weight by a factor within
 * exp(2e) - 1 <= 2.2 e (e < 0.05), and rounds it within gamma(n + 5);
 * then h_j, a sum of n products, by sum_s (|d alpha_s| + gamma(n + 1)
 * alpha_s) |src_s,j|. */
static void check_mixer(ar_model *m, int l, int N, const ar_model_cfg *c, double *worst)
{
    ar_residual *r = m->res;
    int n = r->vt->n_sources(r, l), d = m->d, H = c->residual.heads > 1 ? c->residual.heads : 1, e = d / H;
    char pre[64], nm[96];
    if (l == m->L + 1)
        snprintf(pre, sizeof pre, "final_res");
    else
        snprintf(pre, sizeof pre, "blocks.%d.%s", (l - 1) / 2, l % 2 ? "attn_res" : "mlp_res");
    snprintf(nm, sizeof nm, "%s.query.weight", pre);
    const float *W = param(m, nm);
    snprintf(nm, sizeof nm, "%s.query", pre);
    const float *q = param(m, nm);
    snprintf(nm, sizeof nm, "%s.query.gate", pre);
    const float *g = param(m, nm);
    snprintf(nm, sizeof nm, "%s.norm.weight", pre);
    const float *gain = param(m, nm);
    cr_assert(W && gain, "mixer %d: no query weight or key gain", l);
    cr_assert_eq(!!q && !!g, c->residual.query_gate, "mixer %d: the gate's tensors go with query_gate", l);
    double scale = c->residual.query_scale == AR_QUERY_SCALE_HEAD ? 1 / sqrt((double)e) : 1;
    long nw = r->vt->token_weights(r, l, N, NULL);
    cr_assert_eq(nw, (long)N * H);
    float *alpha = malloc((size_t)N * H * n * sizeof(float));
    r->vt->token_weights(r, l, N, alpha);
    const float *h = r->vt->input_saved(r, l, N);
    double gK = tu_gamma(4.0 * d + 30);
    double *qn = calloc((size_t)d, sizeof(double)), *u = calloc((size_t)d, sizeof(double)),
           *um = calloc((size_t)d, sizeof(double)), *w = calloc((size_t)d, sizeof(double)),
           *wm = calloc((size_t)d, sizeof(double)), *rs = calloc((size_t)n, sizeof(double)),
           *z = calloc((size_t)H * n, sizeof(double)), *zm = calloc((size_t)H * n, sizeof(double)),
           *a = calloc((size_t)H * n, sizeof(double)), *da = calloc((size_t)H * n, sizeof(double));
    for (int t = 0; t < N; t++) {
        const float *last = r->vt->source(r, l, n - 1) + (size_t)t * d;
        double ss = 0;
        for (int j = 0; j < d; j++)
            ss += (double)last[j] * last[j];
        double rq = 1 / sqrt(ss / d + AR_RMS_EPS);
        for (int j = 0; j < d; j++)
            qn[j] = last[j] * rq;
        for (int i = 0; i < d; i++) {
            u[i] = um[i] = 0;
            for (int j = 0; j < d; j++) {
                u[i] += (double)W[(size_t)i * d + j] * qn[j];
                um[i] += fabs((double)W[(size_t)i * d + j] * qn[j]);
            }
        }
        if (c->residual.query_norm) {
            double su = 0, sum = 0;
            for (int i = 0; i < d; i++)
                su += u[i] * u[i], sum += fabs(u[i]) * um[i];
            double ru = 1 / sqrt(su / d + AR_RMS_EPS), dru = ru * ru * ru * sum / d;
            for (int i = 0; i < d; i++) {
                um[i] = ru * um[i] + fabs(u[i]) * dru;
                u[i] *= ru;
            }
        }
        for (int j = 0; j < d; j++) {
            w[j] = c->residual.query_gate ? q[j] + (double)g[0] * u[j] : u[j];
            wm[j] = c->residual.query_gate ? fabs(q[j]) + fabs((double)g[0]) * um[j] : um[j];
            w[j] *= scale;
            wm[j] *= scale;
        }
        for (int s = 0; s < n; s++) {
            const float *x = r->vt->source(r, l, s) + (size_t)t * d;
            double sx = 0;
            for (int j = 0; j < d; j++)
                sx += (double)x[j] * x[j];
            rs[s] = 1 / sqrt(sx / d + AR_RMS_EPS);
            for (int aa = 0; aa < H; aa++) {
                z[aa * n + s] = zm[aa * n + s] = 0;
                for (int j = aa * e; j < (aa + 1) * e; j++) {
                    z[aa * n + s] += w[j] * x[j] * rs[s] * gain[j];
                    zm[aa * n + s] += wm[j] * fabs(x[j] * rs[s] * gain[j]);
                }
            }
        }
        for (int aa = 0; aa < H; aa++) {
            double mx = -INFINITY, sum = 0, emax = 0;
            for (int s = 0; s < n; s++) {
                mx = fmax(mx, z[aa * n + s]);
                emax = fmax(emax, gK * zm[aa * n + s]);
            }
            cr_assert_lt(emax, 0.05, "mixer %d: logits too large for the bound's linearisation", l);
            for (int s = 0; s < n; s++)
                sum += exp(z[aa * n + s] - mx);
            for (int s = 0; s < n; s++) {
                a[aa * n + s] = exp(z[aa * n + s] - mx) / sum;
                da[aa * n + s] = a[aa * n + s] * (2.2 * emax + tu_gamma(n + 5));
                double got = alpha[((size_t)t * H + aa) * n + s];
                *worst = fmax(*worst, fabs(got - a[aa * n + s]) / da[aa * n + s]);
            }
        }
        for (int j = 0; j < d; j++) {
            int aa = j / e;
            double want = 0, bound = 0;
            for (int s = 0; s < n; s++) {
                double x = r->vt->source(r, l, s)[(size_t)t * d + j];
                want += a[aa * n + s] * x;
                bound += (da[aa * n + s] + tu_gamma(n + 1) * a[aa * n + s]) * fabs(x);
            }
            *worst = fmax(*worst, fabs(h[(size_t)t * d + j] - want) / (bound + 1e-30));
        }
    }
    free(alpha), free(qn), free(u), free(um), free(w), free(wm), free(rs), free(z), free(zm), free(a), free(da);
}

static void against_double(ar_model_cfg c, const char *what)
{
    ar_model *m;
    ar_err e;
    cr_assert_eq(ar_model_create(&m, &c, cpu(), 2, &e), 0, "%s", e.msg);
    tu_model_randomize(m, 5);
    int N = 2 * m->T;
    int32_t in[64], tg[64];
    tu_tokens(in, tg, N, 3);
    ar_model_forward(m, in, tg, 2, NULL);
    for (int l = 1; l <= m->L + 1; l++) {
        double worst = 0;
        check_mixer(m, l, N, &c, &worst);
        cr_expect_leq(worst, 1, "%s, mixer %d: weights or input off the double reference by %g of the bound", what,
                      l, worst);
    }
    ar_model_free(m);
}

Test(query_stabilisers, forms_match_double)
{
    against_double(qcfg(AR_RES_FULL, AR_QUERY_SCALE_NONE, 0, 0, 0), "plain");
    against_double(qcfg(AR_RES_FULL, AR_QUERY_SCALE_HEAD, 0, 0, 0), "scale");
    against_double(qcfg(AR_RES_FULL, AR_QUERY_SCALE_HEAD, 1, 0, 0), "norm + scale");
    against_double(qcfg(AR_RES_FULL, AR_QUERY_SCALE_NONE, 0, 1, 0), "gate");
    against_double(qcfg(AR_RES_BLOCK, AR_QUERY_SCALE_HEAD, 1, 1, 3), "block, heads 3, all three");
}

/* Gated, at the model's own initialisation: q and g are zero, so every
 * query is zero and every mixer weighs its n sources 1/n (the softmax of
 * zeros, rounded once), while W is random (its gradient needs g, g's
 * needs W qn). */
Test(query_stabilisers, gate_starts_uniform)
{
    ar_model_cfg c = qcfg(AR_RES_FULL, AR_QUERY_SCALE_HEAD, 1, 1, 0);
    ar_model *m;
    ar_err e;
    cr_assert_eq(ar_model_create(&m, &c, cpu(), 2, &e), 0, "%s", e.msg);
    ar_model_init(m, 7);
    const float *W = param(m, "blocks.0.attn_res.query.weight");
    double ss = 0;
    for (int i = 0; i < 144; i++)
        ss += (double)W[i] * W[i];
    cr_expect(ss > 0, "W is random");
    int N = 2 * m->T;
    int32_t in[64], tg[64];
    tu_tokens(in, tg, N, 4);
    ar_model_forward(m, in, tg, 2, NULL);
    for (int l = 1; l <= m->L + 1; l++) {
        int n = m->res->vt->n_sources(m->res, l);
        float *alpha = malloc((size_t)N * n * sizeof(float));
        m->res->vt->token_weights(m->res, l, N, alpha);
        for (int i = 0; i < N * n; i++)
            cr_assert_float_eq(alpha[i], 1.0f / n, tu_gamma(n + 2) / n, "mixer %d: %g", l, alpha[i]);
        free(alpha);
    }
    ar_model_free(m);
}

Test(query_stabilisers, config_keys)
{
    const char *y = "model:\n  residual:\n    kind: full\n    query: input\n    query_scale: head\n"
                    "    query_norm: true\n    query_gate: true\n    query_lr_scale: 0.1\n";
    ar_config c, d;
    ar_err e;
    ar_config_defaults(&c);
    cr_assert_eq(ar_config_parse(&c, y, strlen(y), "t.yaml", &e), 0, "%s", e.msg);
    cr_expect_eq(c.model.residual.query_scale, AR_QUERY_SCALE_HEAD);
    cr_expect_eq(c.model.residual.query_norm, 1);
    cr_expect_eq(c.model.residual.query_gate, 1);
    cr_expect_eq(c.model.residual.query_lr_scale, 0.1);
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
    char *out = ar_config_to_yaml(&c);
    ar_config_defaults(&d);
    cr_assert_eq(ar_config_parse(&d, out, strlen(out), "resolved", &e), 0, "%s", e.msg);
    char buf[256];
    cr_expect_eq(ar_config_diff(&c, &d, buf, sizeof buf), 0, "%s", buf);
    free(out);
    /* query: input always names its form, whatever the defaults */
    ar_config_defaults(&c);
    c.model.residual.kind = AR_RES_FULL;
    c.model.residual.block_size = 0;
    c.model.residual.query = AR_QUERY_INPUT;
    out = ar_config_to_yaml(&c);
    cr_expect(strstr(out, "query_scale: ") && strstr(out, "query_norm: ") && strstr(out, "query_gate: ") &&
                  strstr(out, "query_lr_scale: "),
              "%s", out);
    free(out);
    /* a learned query names none of them */
    ar_config_defaults(&c);
    out = ar_config_to_yaml(&c);
    cr_expect_null(strstr(out, "query_"), "%s", out);
    free(out);
    /* misplaced or misspelled */
    ar_config_defaults(&c);
    c.model.residual.query_gate = !c.model.residual.query_gate;
    cr_expect_neq(ar_config_validate(&c, &e), 0);
    cr_expect(strstr(e.msg, "'model.residual.query_scale', 'query_norm', 'query_gate' and 'query_lr_scale' apply to "
                            "'query: input', not 'learned'"),
              "%s", e.msg);
    ar_config_defaults(&c);
    cr_expect_neq(ar_config_set(&c, "model.residual.query_scale=sqrt", &e), 0);
    cr_expect(strstr(e.msg, "'model.residual.query_scale'") && strstr(e.msg, "none|head"), "%s", e.msg);
    cr_expect_neq(ar_config_set(&c, "model.residual.query_norm=yes", &e), 0);
    cr_expect(strstr(e.msg, "false|true"), "%s", e.msg);
    cr_expect_neq(ar_config_set(&c, "model.residual.query_lr_scale=0", &e), 0);
    cr_expect(strstr(e.msg, "'model.residual.query_lr_scale' expects a positive number"), "%s", e.msg);
    ar_config_defaults(&c);
    cr_assert_eq(ar_config_set(&c, "model.residual.query_lr_scale=0.5", &e), 0, "%s", e.msg);
    cr_expect_neq(ar_config_validate(&c, &e), 0, "a learned query has no W_l to scale");
    cr_expect(strstr(e.msg, "'query_lr_scale' apply to 'query: input'"), "%s", e.msg);
}

/* Hides "key: value" in the safetensors header as a YAML comment
 * ("#ey: value", the same length, so the header's size and the tensors'
 * offsets stay): how a checkpoint written before the key existed reads. */
static void comment_out(const char *file, const char *key)
{
    size_t n;
    char *b = tu_read_file(file, &n);
    cr_assert(b);
    size_t kl = strlen(key);
    char *p = NULL;
    for (size_t i = 0; i + kl <= n; i++)
        if (memcmp(b + i, key, kl) == 0) {
            p = b + i;
            break;
        }
    cr_assert(p, "'%s' not in %s", key, file);
    p[0] = '#';
    tu_write_file(file, b, n);
    free(b);
}

/* A plain input-query checkpoint from before the stabilisers: its config
 * has none of the keys.  It must read as the plain form, whatever the
 * defaults are, and give the loss it was saved with, bit for bit (same
 * code, shapes and threads). */
Test(query_stabilisers, old_checkpoints_load_as_plain)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model = qcfg(AR_RES_FULL, AR_QUERY_SCALE_NONE, 0, 0, 0);
    ar_model *m;
    ar_err e;
    cr_assert_eq(ar_model_create(&m, &c.model, cpu(), 2, &e), 0, "%s", e.msg);
    tu_model_randomize(m, 9);
    int N = 2 * m->T;
    int32_t in[64], tg[64];
    tu_tokens(in, tg, N, 6);
    double want = ar_model_forward(m, in, tg, 2, NULL);
    const char *dir = tu_tmpdir();
    cr_assert_eq(ar_ckpt_save(dir, &c, m, NULL, 0, &e), 0, "%s", e.msg);
    ar_model_free(m);
    char file[4200];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    comment_out(file, "query_scale: ");
    comment_out(file, "query_norm: ");
    comment_out(file, "query_gate: ");
    comment_out(file, "query_lr_scale: ");
    ar_config got;
    long step;
    cr_assert_eq(ar_ckpt_read_config(file, &got, &step, &e), 0, "%s", e.msg);
    cr_expect_eq(got.model.residual.query, AR_QUERY_INPUT);
    cr_expect_eq(got.model.residual.query_scale, AR_QUERY_SCALE_NONE);
    cr_expect_eq(got.model.residual.query_norm, 0);
    cr_expect_eq(got.model.residual.query_gate, 0);
    cr_expect_eq(got.model.residual.query_lr_scale, 1.0);
    ar_model *m2;
    cr_assert_eq(ar_ckpt_load_model(file, cpu(), 2, &got, &m2, &step, &e), 0, "%s", e.msg);
    double loss = ar_model_forward(m2, in, tg, 2, NULL);
    cr_expect_eq(loss, want, "loaded %.17g, saved %.17g", loss, want);
    ar_model_free(m2);
}

/* A learned-query checkpoint reads with the defaults, as its config file
 * would: the configs compare equal. */
Test(query_stabilisers, learned_query_checkpoints_keep_the_defaults)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model = qcfg(AR_RES_FULL, AR_QUERY_SCALE_NONE, 0, 0, 0);
    c.model.residual.query = AR_QUERY_LEARNED;
    ar_config d;
    ar_config_defaults(&d);
    c.model.residual.query_scale = d.model.residual.query_scale;
    c.model.residual.query_norm = d.model.residual.query_norm;
    c.model.residual.query_gate = d.model.residual.query_gate;
    c.model.residual.query_lr_scale = d.model.residual.query_lr_scale;
    ar_model *m;
    ar_err e;
    cr_assert_eq(ar_model_create(&m, &c.model, cpu(), 1, &e), 0, "%s", e.msg);
    ar_model_init(m, 1);
    const char *dir = tu_tmpdir();
    cr_assert_eq(ar_ckpt_save(dir, &c, m, NULL, 0, &e), 0, "%s", e.msg);
    ar_model_free(m);
    ar_config got;
    long step;
    char file[4200], buf[256];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    cr_assert_eq(ar_ckpt_read_config(file, &got, &step, &e), 0, "%s", e.msg);
    cr_expect_eq(ar_config_diff(&c, &got, buf, sizeof buf), 0, "%s", buf);
}

/* query_lr_scale s: AdamW moves the W_l as with learning rate s lr and
 * every other tensor as with lr.  Three models with the same weights and
 * gradients take one step: A (s = 0.25, lr 4e-3), B (s = 1, lr 1e-3) and
 * C (s = 1, lr 4e-3).  A's W_l equal B's and A's other tensors C's, bit
 * for bit: the same element-wise update with the same float learning rate
 * ((float)(4e-3 x 0.25) = (float)1e-3: 0.25 is a power of two). */
Test(query_stabilisers, lr_scale_moves_only_the_query_matrices)
{
    ar_model_cfg ca = qcfg(AR_RES_FULL, AR_QUERY_SCALE_HEAD, 0, 0, 0), cb = ca;
    ca.residual.query_lr_scale = 0.25;
    cb.residual.query_lr_scale = 1.0;
    ar_model *m[3];
    ar_err e;
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(ar_model_create(&m[k], k == 0 ? &ca : &cb, cpu(), 2, &e), 0, "%s", e.msg);
        tu_model_randomize(m[k], 3);
    }
    int N = 2 * m[0]->T;
    int32_t in[64], tg[64];
    tu_tokens(in, tg, N, 2);
    ar_config c;
    ar_config_defaults(&c);
    c.train.weight_decay = 0.1;
    const double lr[3] = {4e-3, 1e-3, 4e-3};
    for (int k = 0; k < 3; k++) {
        ar_model_zero_grad(m[k]);
        ar_model_forward_backward(m[k], in, tg, 2, 1.0f, NULL);
        ar_adamw o;
        ar_adamw_init(&o, m[k]);
        ar_adamw_step(&o, m[k], &c.train, lr[k], ar_grad_norm(m[k]));
        ar_adamw_free(&o);
    }
    int nq = 0;
    for (int i = 0; i < m[0]->pt.n; i++) {
        const ar_param *p = &m[0]->pt.p[i];
        int q = strstr(p->name, ".query.weight") != NULL;
        nq += q;
        cr_assert_eq(p->lr_scale, q ? 0.25f : 1.0f, "%s", p->name);
        const float *want = ar_model_param(m[q ? 1 : 2], i);
        cr_expect_eq(memcmp(ar_model_param(m[0], i), want, p->numel * sizeof(float)), 0, "%s differs from %s", p->name,
                     q ? "lr 1e-3" : "lr 4e-3");
        if (q) /* and the step did move it */
            cr_expect_neq(memcmp(ar_model_param(m[0], i), ar_model_param(m[2], i), p->numel * sizeof(float)), 0);
    }
    cr_expect_eq(nq, m[0]->L + 1);
    for (int k = 0; k < 3; k++)
        ar_model_free(m[k]);
}
