/* The CPU backend's vector helpers that carry math (v_max, v_min in
 * lib/cpu/vec.h, v_expf in lib/cpu/loops.h) against the scalar forms they
 * replace and against libm in double:
 * - v_expf: within 1.5 u of exp (u = 2^-24) over fast_expf's domain
 *   [-87.3, 88.3] (the bound the softmax tests count for the CPU's exp,
 *   U_EXP = 2 u with libm's 1 u), on a stride through every float of it,
 *   and the clamp outside it as fast_expf's;
 * - v_max and v_min: lane by lane the scalar a > b ? a : b (a < b ? a :
 *   b), NaN and signed zeros included (which lane wins matters for the
 *   bits of what follows); v_expf(NaN) is NaN;
 * - v_hsums: lane l the bits of v_hsum(v[l]), on random vectors whose
 *   lanes span many magnitudes (so a sum in another order rounds
 *   differently: the depth ops' logits must not change bits with it);
 * - head_lanes (lib/cpu/head_lanes.h): lane a of head-lane vector j is
 *   channel j of head a, for every e it takes, and back is the identity;
 *   head_lanes_dot sums a head's e products as pairs, level by level (the
 *   column-form kernels' order), on products of many magnitudes;
 * - copy_held: n floats exactly, for whole vectors and tails. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "lib/cpu/head_lanes.h"
#include "lib/cpu/loops.h"
#include "lib/cpu/vec.h"
#include "testutil.h"

static float from_bits(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* The largest |v_expf(x) - exp(x)| / exp(x), in units of u, over the
 * floats whose bit patterns run from b0 to b1 (inclusive, one sign) in
 * steps of STEP, VL at a time */
#define STEP 251u
static double worst_exp_ulps(uint32_t b0, uint32_t b1)
{
    double worst = 0;
    float x[VL];
    int k = 0;
    for (uint32_t b = b0;; b += STEP) {
        int last = b + STEP > b1 || b + STEP < b;
        x[k++] = from_bits(last ? b1 : b);
        if (k == VL || last) {
            vf y = v_expf(v_ld(x));
            for (int l = 0; l < k; l++) {
                double e = exp((double)x[l]), err = fabs((double)y[l] - e) / e / TU_U_FLOAT;
                worst = err > worst ? err : worst;
            }
            k = 0;
        }
        if (last)
            break;
    }
    return worst;
}

Test(cpu_vec, v_expf_within_one_and_a_half_ulps_of_exp)
{
    /* -87.3 .. -0 (bit patterns from 0x80000000 up), 0 .. 88.3 */
    double w = fmax(worst_exp_ulps(0x80000000u, bits(-87.3f)), worst_exp_ulps(0, bits(88.3f)));
    cr_expect_leq(w, 1.5, "v_expf: %.3f u from exp at worst", w);
    cr_expect_gt(w, 0.0, "no error measured: the sweep did not run");
}

Test(cpu_vec, v_expf_clamps_as_fast_expf)
{
    float x[16] = {-1e30f, -200.0f, -87.31f, -87.3f, 88.3f, 88.31f, 1e30f, -INFINITY, INFINITY, 0.0f, -0.0f,
                   1.0f, -1.0f, 10.5f, -10.5f, 0.5f};
    for (int at = 0; at < 16; at += VL) {
        vf y = v_expf(v_ld(x + at));
        for (int l = 0; l < VL; l++) {
            float s = fast_expf(x[at + l]);
            cr_expect(fabsf(y[l] - s) <= 2 * TU_U_FLOAT * s, "x %g: v_expf %a, fast_expf %a", x[at + l], y[l], s);
            cr_expect(isfinite(y[l]) && y[l] > 0, "x %g: v_expf %a not a positive finite float", x[at + l], y[l]);
        }
    }
}

/* v_max (is_max) or v_min against a > b ? a : b (a < b ? a : b) */
static void ternary_lane_by_lane(int is_max)
{
    float a[16] = {1, -1, 0.0f, -0.0f, NAN, 2, NAN, -INFINITY, 3, 3, -5, 7, 1e-30f, -1e-30f, INFINITY, 0.5f};
    float b[16] = {2, -2, -0.0f, 0.0f, 1, NAN, NAN, -1, 3, -3, -4, 8, -1e-30f, 1e-30f, 0, 0.25f};
    for (int at = 0; at < 16; at += VL) {
        vf m = is_max ? v_max(v_ld(a + at), v_ld(b + at)) : v_min(v_ld(a + at), v_ld(b + at));
        for (int l = 0; l < VL; l++) {
            float x = a[at + l], y = b[at + l], s = is_max ? (x > y ? x : y) : (x < y ? x : y);
            cr_expect(bits(m[l]) == bits(s), "lane %d: %s(%g, %g) = %g, the ternary %g", at + l,
                      is_max ? "max" : "min", x, y, m[l], s);
        }
    }
}

Test(cpu_vec, v_max_is_the_scalar_ternary_lane_by_lane) { ternary_lane_by_lane(1); }
Test(cpu_vec, v_min_is_the_scalar_ternary_lane_by_lane) { ternary_lane_by_lane(0); }

/* A NaN logit stays NaN through the exp (the clamp must not turn it into
 * a bound), as fast_expf's: the step's check then sees it. */
Test(cpu_vec, v_expf_keeps_nan)
{
    float x[16];
    for (int l = 0; l < 16; l++)
        x[l] = l % 2 ? NAN : -NAN;
    for (int at = 0; at < 16; at += VL) {
        vf y = v_expf(v_ld(x + at));
        for (int l = 0; l < VL; l++) {
            cr_expect(isnan(y[l]), "lane %d: v_expf(NaN) = %a", at + l, y[l]);
            cr_expect(isnan(fast_expf(x[at + l])), "lane %d: fast_expf(NaN) = %a", at + l, fast_expf(x[at + l]));
        }
    }
}

Test(cpu_vec, v_hsums_is_v_hsum_lane_by_lane)
{
    float x[VL * VL];
    int reordered = 0; /* sums that another order would change: the test can fail */
    for (int trial = 0; trial < 64; trial++) {
        tu_fill_uniform(x, VL * VL, -1.0f, 1.0f, 17u + (unsigned)trial);
        for (int i = 0; i < VL * VL; i++) /* magnitudes 2^-12 .. 2^12 */
            x[i] = ldexpf(x[i], (int)((i * 7 + trial) % 25) - 12);
        vf v[VL];
        for (int l = 0; l < VL; l++)
            v[l] = v_ld(x + l * VL);
        vf h = v_hsums(v);
        for (int l = 0; l < VL; l++) {
            float s = v_hsum(v[l]), seq = 0.0f;
            for (int j = 0; j < VL; j++)
                seq += x[l * VL + j];
            reordered += bits(seq) != bits(s);
            cr_expect(bits(h[l]) == bits(s), "trial %d lane %d: v_hsums %a, v_hsum %a", trial, l, h[l], s);
        }
    }
    cr_expect(reordered > 0, "no sum depended on its order: the inputs cannot tell two trees apart");
}

/* Rows of d = e H floats with H = 2 VL (two groups), channel values all
 * distinct, for e = 1, 2, 4, 8 below VL: the form is a permutation, so
 * exact equality is the test. */
Test(cpu_vec, head_lanes_put_head_a_channel_j_in_lane_a_of_vector_j)
{
    for (int e = 1; e <= 8 && e < VL; e *= 2) {
        const int H = 2 * VL, d = e * H;
        float x[16 * 2 * 16], t[16 * 2 * 16], y[16 * 2 * 16];
        for (int q = 0; q < d; q++)
            x[q] = 1.0f + (float)q;
        head_lanes_row_in(x, e, H, t);
        int off = 0;
        for (int g = 0; g < H / VL; g++)
            for (int j = 0; j < e; j++)
                for (int a = 0; a < VL; a++)
                    off += t[(g * e + j) * VL + a] != x[(g * VL + a) * e + j];
        cr_expect_eq(off, 0, "e %d VL %d: %d lanes not channel j of head a", e, VL, off);
        head_lanes_row_out(t, e, H, y);
        cr_expect(memcmp(x, y, (size_t)d * sizeof(float)) == 0, "e %d VL %d: out(in(x)) is not x", e, VL);
    }
}

/* head_lanes_dot lane by lane against the scalar tree ((p0 + p1) + (p2 +
 * p3)) + .. of the products p_j = a_j x_j, on values whose products span
 * many magnitudes, so that another order (a chain of multiply-adds in
 * channel order, counted) rounds differently somewhere. */
Test(cpu_vec, head_lanes_dot_sums_pairs_level_by_level)
{
    int reordered = 0;
    for (int e = 2; e <= 8; e *= 2)
        for (int trial = 0; trial < 8; trial++) {
            vf a[8], b[8];
            for (int j = 0; j < e; j++)
                for (int l = 0; l < VL; l++) {
                    int q = (trial * 8 + j) * VL + l;
                    a[j][l] = ldexpf(1.0f + 0.3183099f * (float)((q * 37) % 101), (q * 7) % 23 - 11);
                    b[j][l] = (q % 3 ? 1.0f : -1.0f) * (1.0f + 0.1415927f * (float)((q * 53) % 89));
                }
            vf got = head_lanes_dot(a, b, e);
            for (int l = 0; l < VL; l++) {
                /* volatile: each product rounded, as the kernel's (no
                 * contraction into the sums below) */
                volatile float pr[8];
                float p[8], chain = a[0][l] * b[0][l];
                for (int j = 0; j < e; j++)
                    pr[j] = a[j][l] * b[j][l];
                for (int j = 0; j < e; j++)
                    p[j] = pr[j];
                for (int j = 1; j < e; j++)
                    chain = fmaf(a[j][l], b[j][l], chain);
                for (int w = e; w > 1; w /= 2)
                    for (int j = 0; j < w / 2; j++)
                        p[j] = p[2 * j] + p[2 * j + 1];
                reordered += bits(chain) != bits(p[0]);
                cr_expect_eq(bits(got[l]), bits(p[0]), "e %d trial %d lane %d: %a, want %a", e, trial, l,
                             got[l], p[0]);
            }
        }
    cr_expect(reordered > 0, "no dot product depended on its order: the inputs cannot tell orders apart");
}

/* copy_held: every length from 0 to 2 VL + 3 (whole vectors and a tail)
 * copies exactly those floats and writes nothing past them */
Test(cpu_vec, copy_held_copies_n_floats_and_no_more)
{
    float src[2 * 16 + 4], dst[2 * 16 + 5];
    for (int q = 0; q < 2 * VL + 4; q++)
        src[q] = 0.5f + (float)q;
    for (int n = 0; n <= 2 * VL + 3; n++) {
        for (int q = 0; q < 2 * VL + 5; q++)
            dst[q] = -1.0f;
        copy_held(dst, src, n);
        for (int q = 0; q < n; q++)
            cr_expect_eq(bits(dst[q]), bits(src[q]), "n %d: float %d", n, q);
        cr_expect_eq(dst[n], -1.0f, "n %d: wrote past the end", n);
    }
}
