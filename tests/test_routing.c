/* Depth-routing statistics (lib/mixing.h): the math on hand-computed
 * weights, the per-token statistics of tiny models against a direct
 * computation, and where they surface: `attnres eval --json`,
 * metrics.jsonl (and its reader), `attnres plot-depth-attn --stats` (figure
 * and CSV) and `attnres plot` (the routing panel).
 *
 * Covers: lib/mixing.c (ar_route_*), run/depth_stats.c, run/depth_csv.c,
 * formats/metrics.c and formats/run_record.c, cmd/eval.c,
 * cmd/plot_depth_attn.c and viz/dynamics.c (the routing panel). */
#include <criterion/criterion.h>
#include <math.h>
#include <png.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/csv.h"
#include "formats/json.h"
#include "formats/metrics.h"
#include "formats/run_record.h"
#include "lib/mixing.h"
#include "run/checkpoint.h"
#include "formats/tokens.h"
#include "modelutil.h"
#include "run/data.h"
#include "run/depth_stats.h"
#include "run/train.h"
#include "testutil.h"
#include "viz/dynamics.h"

TestSuite(routing, .timeout = 60);

/* ------------------------------------------------------------- helpers */

/* The statistics of rows x n weights. */
static void stats_of(const float *w, long rows, int n, ar_route_stats *st, double *share)
{
    double acc[4 + 16] = {0};
    ar_route_add(acc, w, rows, n);
    ar_route_stats_of(acc, n, st, share);
}

static ar_config tiny_cfg(ar_res_kind kind, int n_layer, int S)
{
    ar_config c;
    ar_config_defaults(&c);
    c.model.d_model = 16;
    c.model.n_layer = n_layer;
    c.model.n_head = 2;
    c.model.d_ff = 24;
    c.model.seq_len = 8;
    c.model.residual.kind = kind;
    c.model.residual.block_size = kind == AR_RES_BLOCK ? S : 0;
    c.model.residual.num_blocks = 0;
    c.train.threads = 1;
    return c;
}

static ar_model *tiny_model(const ar_config *c, int max_batch)
{
    ar_model *m;
    ar_err e;
    cr_assert_eq(ar_model_create(&m, &c->model, ar_backend_cpu(), max_batch, &e), 0, "%s", e.msg);
    ar_model_init(m, 7);
    /* non-zero pseudo-queries and logits: weights far from uniform */
    for (int i = 0; i < m->pt.n; i++)
        if (strstr(m->pt.p[i].name, "res.query") || strstr(m->pt.p[i].name, "res.logits"))
            tu_fill_uniform(ar_model_param(m, i), m->pt.p[i].numel, -3, 3, 100 + (uint64_t)i);
    return m;
}

static void write_text(const char *path, int lines)
{
    FILE *f = fopen(path, "w");
    cr_assert(f);
    for (int i = 0; i < lines; i++)
        fprintf(f, "in the beginning %d was the word, and the word was %d.\n", i, i * 7 % 13);
    fclose(f);
}

static char *run_cli(int *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *run_cli(int *st, const char *fmt, ...)
{
    const char *b = tu_bin();
    if (!b)
        cr_skip_test("AR_BIN is not set");
    char args[8192], cmd[9000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s' %s", b, args);
    return tu_run(cmd, st);
}

/* A readable PNG: its width and height. */
static void check_png(const char *path, int *w, int *h)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f != NULL, "%s was not written", path);
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    cr_assert(png && info);
    cr_assert(setjmp(png_jmpbuf(png)) == 0, "libpng cannot read %s", path);
    png_init_io(png, f);
    png_read_png(png, info, PNG_TRANSFORM_IDENTITY, NULL);
    *w = (int)png_get_image_width(png, info);
    *h = (int)png_get_image_height(png, info);
    png_destroy_read_struct(&png, &info, NULL);
    fclose(f);
}

/* ------------------------------------------------------------- the math */

/* Uniform rows: the float weights 1/n sum exactly in double (n equal floats),
 * so each q = w / sum is 1/n correctly rounded, and the statistics are
 * closed forms in double: at most a dozen operations per row (n <= 5
 * products, logarithms and sums, an exp), 3 rows averaged, each within
 * 2^-53 relative with or without FMA contraction, on values below 5: within
 * 1e-14 of ln n, 1, n and 1/n; 1e-12 leaves 100 times that.  The shares are
 * counts divided by 3, correctly rounded like 1.0 / 3: exact. */
Test(routing, uniform_and_one_hot_weights)
{
    for (int n = 2; n <= 5; n++) {
        float w[3 * 5], o[3 * 5] = {0};
        for (int i = 0; i < 3 * n; i++)
            w[i] = 1.0f / n;
        for (int t = 0; t < 3; t++)
            o[t * n + (t + 1) % n] = 1; /* tokens 0, 1, 2 pick sources 1, 2, 0 (mod n) */
        ar_route_stats st;
        double share[5];
        stats_of(w, 3, n, &st, share);
        cr_assert_float_eq(st.entropy, log(n), 1e-12);
        cr_assert_float_eq(st.entropy_norm, 1, 1e-12);
        cr_assert_float_eq(st.eff_sources, n, 1e-12);
        cr_assert_float_eq(st.max_weight, 1.0 / n, 1e-12);
        cr_assert_eq(st.rows, 3);
        cr_assert_eq(share[0], 1, "ties go to the lowest index");
        stats_of(o, 3, n, &st, share);
        cr_assert_eq(st.entropy, 0);
        cr_assert_eq(st.entropy_norm, 0);
        cr_assert_eq(st.eff_sources, 1);
        cr_assert_eq(st.max_weight, 1);
        double want0 = n == 2 ? 1.0 / 3 : n == 3 ? 1.0 / 3 : 0;
        cr_assert_eq(share[0], want0, "n = %d", n);
        cr_assert_eq(share[1], n == 2 ? 2.0 / 3 : 1.0 / 3, "n = %d", n);
    }
    /* one source: the normalised entropy is undefined */
    float one[2] = {1, 1};
    ar_route_stats st;
    stats_of(one, 2, 1, &st, NULL);
    cr_assert_eq(st.entropy, 0);
    cr_assert(isnan(st.entropy_norm));
    cr_assert_eq(st.eff_sources, 1);
    cr_assert_eq(st.max_weight, 1);
    /* nothing added: all undefined */
    double acc[5] = {0};
    ar_route_stats_of(acc, 1, &st, NULL);
    cr_assert(isnan(st.entropy) && isnan(st.eff_sources) && isnan(st.max_weight));
}

/* Three sources, three tokens, the last given as sigmoid-like scores that
 * do not sum to 1 (normalised to (0.25, 0.25, 0.5)):
 *   p_1 = (0.5, 0.3, 0.2)   H = -(.5 ln .5 + .3 ln .3 + .2 ln .2) = 1.0296530140645737
 *   p_2 = (0.1, 0.1, 0.8)   H = -(2 (.1 ln .1) + .8 ln .8)         = 0.6390318596501770
 *   p_3 = (0.25, 0.25, 0.5) H = 1.5 ln 2                          = 1.0397207708399179
 *   entropy = 0.9028018815182227, / ln 3 = 0.8217656864304007
 *   eff = (2.8000940728538315 + 1.8946457081379977 + 2.8284271247461900) / 3 = 2.5077223019126733
 *   max = (0.5 + 0.8 + 0.5) / 3 = 0.6;  top: 0, 2, 2 -> shares (1/3, 0, 2/3)
 * Bounds.  The float inputs 0.3f, 0.2f, 0.1f, 0.8f are within u = 2^-24
 * relative of the decimals, their sum too, so each normalised q_i is
 * within 2u relative of p_i.  As sum_i dq_i = 0, a row's entropy moves by
 * |sum_i ln(p_i) dq_i| <= 2u sum_i p_i |ln p_i| = 2u H: the entropy (and
 * its normalised value) within 2u relative, each exp(H) within 2u H <= 2u
 * 1.04 relative, the largest weight within 2u relative.  The double
 * arithmetic adds below 1e-14.  Shares: counts over 3, as 1.0 / 3: exact. */
Test(routing, three_sources_written_out)
{
    float w[9] = {0.5f, 0.3f, 0.2f, 0.1f, 0.1f, 0.8f, 1, 1, 2};
    ar_route_stats st;
    double share[3];
    stats_of(w, 3, 3, &st, share);
    const double u2 = 2 * TU_U_FLOAT;
    cr_assert_float_eq(st.entropy, 0.9028018815182227, u2 * 0.9028018815182227 + 1e-14);
    cr_assert_float_eq(st.entropy_norm, 0.8217656864304007, u2 * 0.8217656864304007 + 1e-14);
    cr_assert_float_eq(st.eff_sources, 2.5077223019126733, u2 * 1.04 * 2.5077223019126733 + 1e-14);
    cr_assert_float_eq(st.max_weight, 0.6, u2 * 0.6 + 1e-14);
    cr_assert_eq(share[0], 1.0 / 3);
    cr_assert_eq(share[1], 0);
    cr_assert_eq(share[2], 2.0 / 3);
    /* batches add up: the same rows one at a time.  ar_route_add treats
     * rows one by one and adds each into the accumulators in row order, so
     * both ways run the same operations in the same order: the same bits. */
    double acc[7] = {0};
    for (int t = 0; t < 3; t++)
        ar_route_add(acc, w + 3 * t, 1, 3);
    ar_route_stats s2;
    ar_route_stats_of(acc, 3, &s2, share);
    cr_assert_eq(s2.entropy, st.entropy);
    cr_assert_eq(s2.eff_sources, st.eff_sources);
    /* a row that sums to zero makes its mixer undefined */
    float z[6] = {0.5f, 0.5f, 0, 0, 0, 0};
    stats_of(z, 2, 3, &st, share);
    cr_assert(isnan(st.entropy) && isnan(st.max_weight) && isnan(share[0]));
}

/* ----------------------------------------------- tiny models, per token */

/* ar_depth_measure over 11 windows (batches of 4) against the statistics
 * computed here from the per-token weights.  The reference runs the
 * forward on the same batches (4, 4 and 3 windows) in the same process, so
 * its float weights are those ar_depth_measure saw, bit for bit (the same
 * code, shapes and thread count).  What differs is the double arithmetic of
 * the statistics, written out again here: per row a sum of n weights, n
 * quotients and logarithms, an exp; then a mean over R rows.  Each side is
 * within gamma(R + 3n + 8) (1 + 2 ln n) of the exact entropy (a row's
 * q ln q terms add to at most ln n, the logarithms' arguments carry n + 2
 * roundings), n times that for exp(H) <= n, gamma(R + n + 2) for the
 * largest weight (<= 1); twice that between the two sides, gamma in
 * double.  The shares count the same argmax of the same floats: exact. */
static void per_token_matches(ar_config c, const char *what)
{
    ar_model *m = tiny_model(&c, 4);
    int32_t x[200];
    for (int i = 0; i < 200; i++)
        x[i] = (i * 37 + 11) % 256;
    ar_depth_attn a;
    ar_depth_route rt;
    ar_err e = {{0}};
    tu_mem_eval me;
    cr_assert_eq(ar_depth_measure(m, tu_mem_eval_of(&me, x, 200, 256), 11, &a, &rt, NULL, &e), 0, "%s: %s", what,
                 e.msg);
    tu_mem_eval_free(&me);
    cr_assert_eq(rt.tokens, 11 * 8);
    int L = m->L, H = ar_cfg_heads(&c.model);
    if (c.model.residual.kind == AR_RES_STATIC || c.model.residual.kind == AR_RES_RESCALED)
        H = 1;
    double spread = 0;
    for (int l = 1; l <= L + 1; l++) {
        int n = rt.n[l - 1];
        double sh = 0, se = 0, sm = 0, cnt[16] = {0}, rows = 0;
        for (int w0 = 0; w0 < 11; w0 += 4) {
            int B = 11 - w0 < 4 ? 11 - w0 : 4;
            int32_t in[4 * 8], tg[4 * 8];
            for (int b = 0; b < B; b++)
                ar_eval_window(x, (size_t)(w0 + b), 8, in + 8 * b, tg + 8 * b);
            ar_model_forward(m, in, tg, B, NULL);
            long R = m->res->vt->token_weights(m->res, l, 8 * B, NULL);
            cr_assert_eq(R, 8L * B * H, "%s: rows", what);
            float *w = malloc((size_t)R * n * sizeof(float));
            m->res->vt->token_weights(m->res, l, 8 * B, w);
            for (long t = 0; t < R; t++) {
                double sum = 0, h = 0, mx = 0;
                int top = 0;
                for (int i = 0; i < n; i++)
                    sum += w[t * n + i];
                for (int i = 0; i < n; i++) {
                    double p = w[t * n + i] / sum;
                    h -= p > 0 ? p * log(p) : 0;
                    if (p > mx) {
                        mx = p;
                        top = i;
                    }
                }
                sh += h;
                se += exp(h);
                sm += mx;
                cnt[top] += 1;
                rows += 1;
            }
            free(w);
        }
        ar_route_stats st;
        double share[16];
        ar_route_stats_of(ar_depth_route_acc(&rt, l), n, &st, share);
        cr_assert_eq(st.rows, rows, "%s mixer %d", what, l);
        double tol_h = 2 * tu_gamma_d(rows + 3 * n + 8) * (1 + 2 * log(n));
        cr_assert_float_eq(st.entropy, sh / rows, tol_h, "%s mixer %d entropy", what, l);
        cr_assert_float_eq(st.eff_sources, se / rows, n * tol_h, "%s mixer %d eff", what, l);
        cr_assert_float_eq(st.max_weight, sm / rows, 2 * tu_gamma_d(rows + n + 2), "%s mixer %d max", what, l);
        for (int i = 0; i < n; i++)
            cr_assert_eq(share[i], cnt[i] / rows, "%s mixer %d share %d", what, l, i);
        if (n > 1)
            spread = fmax(spread, 1 - st.entropy_norm);
    }
    if (c.model.residual.kind != AR_RES_RESCALED)
        cr_assert_gt(spread, 0.02, "%s: nearly uniform weights prove little", what);
    ar_depth_route_free(&rt);
    ar_depth_attn_free(&a);
    ar_model_free(m);
}

Test(routing, per_token_statistics_equal_a_direct_computation)
{
    per_token_matches(tiny_cfg(AR_RES_FULL, 2, 1), "full");
    per_token_matches(tiny_cfg(AR_RES_BLOCK, 3, 2), "block");
    ar_config h = tiny_cfg(AR_RES_BLOCK, 2, 2);
    h.model.residual.heads = 2;
    per_token_matches(h, "block, heads 2");
    ar_config s = tiny_cfg(AR_RES_FULL, 2, 1);
    s.model.residual.score = AR_SCORE_SIGMOID;
    per_token_matches(s, "full, sigmoid");
    per_token_matches(tiny_cfg(AR_RES_STATIC, 2, 1), "static");
    per_token_matches(tiny_cfg(AR_RES_RESCALED, 2, 1), "rescaled");
    /* baseline has none */
    ar_config b = tiny_cfg(AR_RES_BASELINE, 2, 0);
    ar_model *m = tiny_model(&b, 2);
    ar_depth_route rt;
    cr_assert_eq(ar_depth_route_init(&rt, m->res), 0);
    ar_depth_route_free(&rt);
    ar_model_free(m);
}

/* --------------------------------------------- eval --json, plot-depth-attn */

static const ar_json *field(const ar_json *j, const char *k)
{
    const ar_json *v = ar_json_get(j, k);
    cr_assert(v != NULL, "no '%s'", k);
    return v;
}

/* `eval --json`'s depth_routing: rt's statistics of each of the L + 1
 * mixers, bit for bit. */
static void expect_eval_json(const char *dir, const char *data, const ar_depth_route *rt, int L)
{
    ar_err e = {{0}};
    int st;
    char *out = run_cli(&st, "eval '%s' --data '%s' --max-windows 11 --json --threads 1", dir, data);
    cr_assert_eq(st, 0, "%s", out);
    ar_json *j = ar_json_parse(out, strlen(out), &e);
    cr_assert(j, "%s\n%s", e.msg, out);
    const ar_json *r = field(j, "depth_routing");
    cr_assert_eq(field(r, "tokens")->inum, 88);
    const char *keys[] = {"sources", "entropy", "entropy_norm", "eff_sources", "mean_max", "top_share"};
    for (int k = 0; k < 6; k++)
        cr_assert_eq(field(r, keys[k])->n, L + 1, "%s", keys[k]);
    for (int l = 1; l <= L + 1; l++) {
        ar_route_stats s;
        double share[8];
        ar_route_stats_of(ar_depth_route_acc(rt, l), rt->n[l - 1], &s, share);
        cr_assert_eq(field(r, "sources")->items[l - 1].inum, rt->n[l - 1]);
        cr_assert_eq(field(r, "entropy")->items[l - 1].num, s.entropy, "mixer %d", l);
        cr_assert_eq(field(r, "mean_max")->items[l - 1].num, s.max_weight, "mixer %d", l);
        cr_assert_eq(field(r, "eff_sources")->items[l - 1].num, s.eff_sources, "mixer %d", l);
        if (rt->n[l - 1] == 1)
            cr_assert_eq(field(r, "entropy_norm")->items[l - 1].type, AR_JSON_NULL, "n = 1: null");
        else
            cr_assert_eq(field(r, "entropy_norm")->items[l - 1].num, s.entropy_norm, "mixer %d", l);
        const ar_json *ts = &field(r, "top_share")->items[l - 1];
        cr_assert_eq(ts->n, rt->n[l - 1]);
        for (int i = 0; i < ts->n; i++)
            cr_assert_eq(ts->items[i].num, share[i], "mixer %d share %d", l, i);
    }
    ar_json_free(j);
    free(out);

}

/* `plot-depth-attn --stats`: the table on stdout, the figure, and the CSV
 * of rt's statistics. */
static void expect_stats_csv_and_figure(const char *dir, const char *data, const char *csv, const char *fig,
                                        const ar_depth_route *rt, int L)
{
    ar_err e = {{0}};
    int st;
    char *out = run_cli(&st,
                        "plot-depth-attn '%s' --data '%s' --max-windows 11 --stats --csv '%s' --out '%s' --threads 1",
                        dir, data, csv, fig);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(strstr(out, "H/ln n"), "the table on stdout:\n%s", out);
    free(out);
    int w, h;
    check_png(fig, &w, &h);
    cr_assert_gt(w, 100);
    ar_csv *tab;
    cr_assert_eq(ar_csv_read(&tab, csv, &e), 0, "%s", e.msg);
    cr_assert_eq(tab->nrows, L + 1);
    int cm = ar_csv_col(tab, "mixer"), cn = ar_csv_col(tab, "n_sources"), ce = ar_csv_col(tab, "entropy"),
        cz = ar_csv_col(tab, "entropy_norm"), cf = ar_csv_col(tab, "eff_sources"), cx = ar_csv_col(tab, "mean_max"),
        c0 = ar_csv_col(tab, "top_share_0"), ck = ar_csv_col(tab, "tokens");
    cr_assert(cm >= 0 && cn >= 0 && ce >= 0 && cz >= 0 && cf >= 0 && cx >= 0 && c0 >= 0 && ck >= 0);
    cr_assert_eq(ar_csv_col(tab, "top_share_3"), -1, "block S = 2, L = 4: at most 3 sources");
    /* The same numbers as above (the same code, shapes and thread count),
     * written with %.9g: at most 5e-9 relative, on values of at most 3. */
    for (int row = 0; row < tab->nrows; row++) {
        int l = atoi(ar_csv_cell(tab, row, cm));
        ar_route_stats s;
        double share[8];
        ar_route_stats_of(ar_depth_route_acc(rt, l), rt->n[l - 1], &s, share);
        cr_assert_eq(atoi(ar_csv_cell(tab, row, cn)), rt->n[l - 1]);
        cr_assert_eq(atol(ar_csv_cell(tab, row, ck)), 88);
        cr_assert_float_eq(atof(ar_csv_cell(tab, row, ce)), s.entropy, 1e-7);
        cr_assert_float_eq(atof(ar_csv_cell(tab, row, cf)), s.eff_sources, 1e-7);
        cr_assert_float_eq(atof(ar_csv_cell(tab, row, cx)), s.max_weight, 1e-7);
        cr_assert_float_eq(atof(ar_csv_cell(tab, row, c0)), share[0], 1e-7);
        if (rt->n[l - 1] == 1)
            cr_assert_str_eq(ar_csv_cell(tab, row, cz), "", "undefined: empty");
        else
            cr_assert_float_eq(atof(ar_csv_cell(tab, row, cz)), s.entropy_norm, 1e-7);
    }
    ar_csv_free(tab);

}

/* A baseline has no depth attention: plot-depth-attn --stats refuses it,
 * eval --json leaves depth_routing out. */
static void expect_baseline_without_routing(const char *dir, const char *data)
{
    ar_err e = {{0}};
    int st;
    char bdir[4200];
    snprintf(bdir, sizeof bdir, "%s", tu_path(dir, "base"));
    mkdir(bdir, 0755);
    ar_config b = tiny_cfg(AR_RES_BASELINE, 2, 0);
    ar_model *m = tiny_model(&b, 2);
    cr_assert_eq(ar_ckpt_save(bdir, &b, m, NULL, 1, &e), 0, "%s", e.msg);
    ar_model_free(m);
    char *out = run_cli(&st, "plot-depth-attn '%s' --data '%s' --stats", bdir, data);
    cr_assert_neq(st, 0);
    cr_assert(strstr(out, "no depth attention"), "%s", out);
    free(out);
    /* eval --json of a baseline has no depth_routing */
    out = run_cli(&st, "eval '%s' --data '%s' --json", bdir, data);
    cr_assert_eq(st, 0, "%s", out);
    cr_assert(!strstr(out, "depth_routing"), "%s", out);
    free(out);
}

Test(routing, eval_json_and_stats_csv_and_figure)
{
    const char *dir = tu_tmpdir();
    ar_config c = tiny_cfg(AR_RES_BLOCK, 2, 2);
    /* The reference runs the same code as `eval --threads 1` on the same
     * shapes (batches of 8 windows, as the CLI loads a model) with one
     * thread, so the statistics are bit-identical by construction, and the
     * JSON writes doubles that read back exactly. */
    ar_backend_cpu()->set_threads(1);
    ar_model *m = tiny_model(&c, 8);
    ar_err e = {{0}};
    cr_assert_eq(ar_ckpt_save(dir, &c, m, NULL, 5, &e), 0, "%s", e.msg);
    char data[4200], csv[4200], fig[4200];
    snprintf(data, sizeof data, "%s", tu_path(dir, "val.txt"));
    snprintf(csv, sizeof csv, "%s", tu_path(dir, "s.csv"));
    snprintf(fig, sizeof fig, "%s", tu_path(dir, "s.png"));
    write_text(data, 4);
    /* the reference: ar_depth_measure on the same 11 windows */
    ar_tokens t;
    cr_assert_eq(ar_tokens_load(&t, data, &e), 0, "%s", e.msg);
    ar_depth_attn a;
    ar_depth_route rt;
    tu_mem_eval me;
    cr_assert_eq(ar_depth_measure(m, tu_mem_eval_of(&me, t.tok, t.n, 256), 11, &a, &rt, NULL, &e), 0, "%s", e.msg);
    tu_mem_eval_free(&me);
    ar_tokens_free(&t);
    int L = m->L;

    expect_eval_json(dir, data, &rt, L);
    expect_stats_csv_and_figure(dir, data, csv, fig, &rt, L);

    /* bad combinations */
    int st;
    char *out = run_cli(&st, "plot-depth-attn '%s' --data '%s' --stats --matrix", dir, data);
    cr_assert_neq(st, 0);
    cr_assert(strstr(out, "attnres: error:") && strstr(out, "'--stats'"), "%s", out);
    free(out);
    ar_depth_route_free(&rt);
    ar_depth_attn_free(&a);
    ar_model_free(m);

    expect_baseline_without_routing(dir, data);
}

/* ---------------------------------------------------- metrics.jsonl, plot */

Test(routing, metrics_records_and_the_plot_panel)
{
    const char *dir = tu_tmpdir();
    char corpus[2048], run[4200];
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    snprintf(run, sizeof run, "%s", tu_path(dir, "run"));
    write_text(corpus, 80);
    ar_config c = tiny_cfg(AR_RES_FULL, 2, 1);
    snprintf(c.data.train, sizeof c.data.train, "%s", corpus);
    c.data.val_fraction = 0.2;
    c.train.steps = 6;
    c.train.batch_size = 2;
    c.train.warmup = 1;
    c.train.eval_every = 3;
    c.train.eval_windows = 4;
    c.train.save_every = 0;
    c.train.log_every = 1;
    ar_train_opts o = {.out_dir = run};
    ar_train_result res;
    ar_err e = {{0}};
    cr_assert_eq(ar_train(&c, &o, &res, &e), 0, "%s", e.msg);
    char mpath[4300];
    snprintf(mpath, sizeof mpath, "%s/metrics.jsonl", run);
    ar_json **rows;
    int n, evals = 0;
    cr_assert_eq(ar_metrics_read(mpath, &rows, &n, &e), 0, "%s", e.msg);
    for (int i = 0; i < n; i++) {
        const ar_json *r = ar_json_get(rows[i], "depth_routing");
        cr_assert_eq(r != NULL, ar_json_get(rows[i], "val_loss") != NULL, "routing at evaluations only");
        if (!r)
            continue;
        evals++;
        cr_assert_eq(field(r, "tokens")->inum, 4 * 8, "every evaluated window");
        cr_assert_eq(field(r, "entropy_norm")->n, 5);
        cr_assert_eq(field(r, "sources")->items[4].inum, 5, "Full: the output mixes v_0..v_4");
    }
    ar_metrics_free(rows, n);
    cr_assert_eq(evals, 2);
    ar_run_record rec;
    cr_assert_eq(ar_run_record_read(&rec, mpath, &e), 0, "%s", e.msg);
    cr_assert_eq(rec.nrt, 2);
    cr_assert_eq(rec.rt_nmix, 5);
    cr_assert_eq(rec.rt_step[1], 6);
    cr_assert(isnan(rec.rt_hnorm[0]), "mixer 1 has one source");
    /* H / ln n <= 1; in double a few roundings above at most */
    cr_assert(rec.rt_hnorm[1] > 0.5 && rec.rt_hnorm[1] <= 1 + 1e-9);
    ar_run_record_free(&rec);
    int w, h;
    check_png(tu_path(run, "dynamics.png"), &w, &h);
    cr_assert_eq(w, AR_DYNAMICS_ROUTING_WIDTH, "the routing panel");
    int st;
    char *out = run_cli(&st, "plot '%s' --out '%s'", run, tu_path(dir, "dyn.png"));
    cr_assert_eq(st, 0, "%s", out);
    free(out);
    check_png(tu_path(dir, "dyn.png"), &w, &h);
    cr_assert_eq(w, AR_DYNAMICS_ROUTING_WIDTH);

    /* old files (no depth_routing) still read, and draw three panels */
    char old[4200];
    snprintf(old, sizeof old, "%s", tu_path(dir, "old.jsonl"));
    const char *txt = "{\"step\":1,\"tokens\":16,\"loss\":5.0}\n{\"step\":2,\"tokens\":32,\"loss\":4.0,\"val_loss\":4.5}\n";
    tu_write_file(old, txt, strlen(txt));
    cr_assert_eq(ar_run_record_read(&rec, old, &e), 0, "%s", e.msg);
    cr_assert_eq(rec.nrt, 0);
    ar_run_record_free(&rec);
    out = run_cli(&st, "plot '%s' --out '%s'", old, tu_path(dir, "old.png"));
    cr_assert_eq(st, 0, "%s", out);
    free(out);
    check_png(tu_path(dir, "old.png"), &w, &h);
    cr_assert_eq(w, AR_DYNAMICS_WIDTH);

    /* bad values are errors placed at their line */
    struct {
        const char *rec, *msg;
    } bad[] = {
        {"\"depth_routing\":[1]", "'depth_routing' must be an object"},
        {"\"depth_routing\":{\"entropy\":[0],\"entropy_norm\":[null],\"eff_sources\":[1]}",
         "'depth_routing.mean_max' must be a list"},
        {"\"depth_routing\":{\"entropy\":[0],\"entropy_norm\":[null],\"eff_sources\":[1],\"mean_max\":[1.5]}",
         "'depth_routing.mean_max' item 1 is 1.5, outside [0, 1]"},
        {"\"depth_routing\":{\"entropy\":[-1],\"entropy_norm\":[null],\"eff_sources\":[1],\"mean_max\":[1]}",
         "'depth_routing.entropy' item 1 is -1"},
        {"\"depth_routing\":{\"entropy\":[0,1],\"entropy_norm\":[null],\"eff_sources\":[1],\"mean_max\":[1]}",
         "'depth_routing.entropy_norm' lists 1 mixers"},
        {"\"depth_routing\":{\"entropy\":[0],\"entropy_norm\":[\"x\"],\"eff_sources\":[1],\"mean_max\":[1]}",
         "'depth_routing.entropy_norm' item 1 must be a number, not a string"},
        {"\"depth_routing\":{\"entropy\":[0],\"entropy_norm\":[null],\"eff_sources\":[1],\"mean_max\":[1],"
         "\"top_share\":[[2]]}",
         "'depth_routing.top_share' mixer 1 item 1 must be a number in [0, 1]"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char line[1024];
        int len = snprintf(line, sizeof line, "{\"step\":1,\"loss\":5.0}\n{\"step\":2,\"val_loss\":4.0,%s}\n{\"step\":3,\"loss\":4.0}\n",
                           bad[k].rec);
        tu_write_file(old, line, (size_t)len);
        cr_assert_eq(ar_run_record_read(&rec, old, &e), -1, "%s", bad[k].rec);
        cr_assert(strstr(e.msg, ":2: ") && strstr(e.msg, bad[k].msg), "got: %s\nwant: %s", e.msg, bad[k].msg);
    }
}
