#include "mpiutil.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "testutil.h"

const char *mu_bin(void)
{
    const char *b = tu_bin();
    if (!b)
        cr_skip_test("AR_BIN is not set");
    return b;
}

void mu_need_mpi(void)
{
    const char *m = getenv("AR_MPI");
    if (!m || strcmp(m, "1") != 0)
        cr_skip_test("this build has no MPI (meson -Dmpi)");
    int st;
    free(tu_run("command -v mpirun", &st));
    if (st != 0)
        cr_skip_test("mpirun is not installed (tools/install-deps.sh installs Open MPI)");
    /* Each test program's jobs keep their Open MPI session directories in a
     * directory of its own: two mpiruns of two programs started at once,
     * both creating /tmp/ompi.HOST.UID, can fail in Open MPI 4.1's
     * orte_session_dir ("mkdir ... File exists"), as CI saw.  TMPDIR, not
     * the orte_tmpdir_base parameter, which mpirun hands to every daemon:
     * tools/netns-hosts.sh gives each of its hosts a TMPDIR of its own
     * under the caller's, for the same race between a job's daemons. */
    static char base[4096];
    if (!base[0]) {
        snprintf(base, sizeof base, "%s", tu_tmpdir());
        setenv("TMPDIR", base, 1);
    }
}

char *mu_sh(const char *dir, int *st, const char *fmt, ...)
{
    char body[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' || exit 1; %s", dir, body);
    return tu_run(cmd, st);
}

const char *mu_setup_dir(void)
{
    const char *dir = tu_tmpdir();
    tu_write_corpus_text(tu_path(dir, "corpus.txt"));
    return dir;
}

int mu_metric_values(const char *file, const char *key, double *out, int cap)
{
    char *m = tu_read_file(file, NULL);
    cr_assert(m, "cannot read %s", file);
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    int k = 0;
    for (const char *p = m; k < cap && (p = strstr(p, pat)); p += strlen(pat))
        out[k++] = strtod(p + strlen(pat), NULL);
    free(m);
    return k;
}

void mu_same_tensors(const char *a, const char *b, const char *what)
{
    ar_st_file fa, fb;
    ar_err e;
    cr_assert_eq(ar_st_read(&fa, a, &e), 0, "%s", e.msg);
    cr_assert_eq(ar_st_read(&fb, b, &e), 0, "%s", e.msg);
    cr_assert_eq(fa.n, fb.n, "%s: %d and %d tensors", what, fa.n, fb.n);
    for (int i = 0; i < fa.n; i++) {
        const ar_st_tensor *ta = &fa.t[i], *tb = ar_st_find(&fb, ta->name);
        cr_assert(tb, "%s: '%s' missing", what, ta->name);
        uint64_t n = ta->end - ta->begin;
        cr_assert_eq(n, tb->end - tb->begin);
        cr_expect(memcmp(fa.data + ta->begin, fb.data + tb->begin, n) == 0,
                  "%s: tensor '%s' differs between %s and %s", what, ta->name, a, b);
    }
    ar_st_free(&fa);
    ar_st_free(&fb);
}

double mu_close_tensors(const char *a, const char *b, double rel, const char *what)
{
    ar_st_file fa, fb;
    ar_err e;
    cr_assert_eq(ar_st_read(&fa, a, &e), 0, "%s", e.msg);
    cr_assert_eq(ar_st_read(&fb, b, &e), 0, "%s", e.msg);
    cr_assert_eq(fa.n, fb.n, "%s: %d and %d tensors", what, fa.n, fb.n);
    double worst = 0;
    for (int i = 0; i < fa.n; i++) {
        const ar_st_tensor *ta = &fa.t[i], *tb = ar_st_find(&fb, ta->name);
        cr_assert(tb, "%s: '%s' missing", what, ta->name);
        uint64_t n = (ta->end - ta->begin) / sizeof(float);
        cr_assert_eq(n * sizeof(float), tb->end - tb->begin);
        const float *x = (const float *)(fa.data + ta->begin), *y = (const float *)(fb.data + tb->begin);
        double dd = 0, aa = 0, mx = 0;
        for (uint64_t j = 0; j < n; j++) {
            double d = (double)y[j] - x[j];
            dd += d * d;
            aa += (double)x[j] * x[j];
            if (fabs(y[j]) > mx)
                mx = fabs(y[j]);
        }
        double r = aa > 0 ? sqrt(dd / aa) : mx;
        if (!(r <= worst))
            worst = r;
        cr_expect(r <= rel, "%s: tensor '%s' of %s is %.3g away from %s's (relative L2; tolerance %g)", what,
                  ta->name, b, r, a, rel);
    }
    ar_st_free(&fa);
    ar_st_free(&fb);
    return worst;
}
