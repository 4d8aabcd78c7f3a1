#define _GNU_SOURCE /* nftw FTW_DEPTH, FTW_PHYS */
#include "testutil.h"

#include <criterion/criterion.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/module.h"
#include "formats/safetensors.h"
#include "lib/backend.h"

/* Every directory tu_tmpdir() made, removed when the process that made it
 * exits (Criterion runs each test in a process of its own, and exit handlers
 * run after a failed assertion too), so a suite run leaves /tmp as it found
 * it.  A child forked by a test inherits the list but not the right to
 * remove: only the maker's pid does.  ATTNRES_KEEP_TEST_DIRS=1 keeps them,
 * to look at what a failing test wrote. */
static char *made_dirs[64];
static int n_made;
static pid_t maker;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void remove_made_dirs(void)
{
    if (getpid() != maker)
        return;
    const char *keep = getenv("ATTNRES_KEEP_TEST_DIRS");
    for (int i = 0; i < n_made; i++) {
        if (!(keep && *keep && strcmp(keep, "0") != 0))
            nftw(made_dirs[i], remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        free(made_dirs[i]);
    }
    n_made = 0;
}

const char *tu_tmpdir(void)
{
    static char buf[4096];
    const char *base = getenv("TMPDIR");
    snprintf(buf, sizeof buf, "%s/attnres-test-XXXXXX", base && *base ? base : "/tmp");
    cr_assert(mkdtemp(buf) != NULL, "mkdtemp failed");
    if (maker != getpid()) { /* first directory of this process */
        maker = getpid();
        n_made = 0;
        atexit(remove_made_dirs);
    }
    if (n_made < (int)(sizeof made_dirs / sizeof *made_dirs))
        made_dirs[n_made++] = strdup(buf);
    return buf;
}

const char *tu_path(const char *dir, const char *name)
{
    static char bufs[8][4096];
    static int k;
    char *b = bufs[k++ & 7];
    snprintf(b, 4096, "%s/%s", dir, name);
    return b;
}

void tu_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f != NULL, "cannot write %s", path);
    cr_assert(fwrite(data, 1, n, f) == n);
    fclose(f);
}

char *tu_read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    size_t got = fread(b, 1, (size_t)sz, f);
    fclose(f);
    b[got] = 0;
    if (n)
        *n = got;
    return b;
}

void tu_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        double u = (double)(s >> 11) / 9007199254740992.0;
        x[i] = lo + (float)(u * (hi - lo));
    }
}

double tu_gamma(double n) { return n * TU_U_FLOAT / (1 - n * TU_U_FLOAT); }

double tu_gamma_d(double n) { return n * TU_U_DOUBLE / (1 - n * TU_U_DOUBLE); }

double tu_rel_err(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return sqrt(num) / fmax(sqrt(den), 1e-30);
}

const char *tu_golden_dir(void)
{
    static char buf[4096];
    const char *g = getenv("AR_GOLDEN_DIR");
    snprintf(buf, sizeof buf, "%s", g && *g ? g : "../shared/golden");
    struct stat st;
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/baseline/model.safetensors", buf);
    return stat(probe, &st) == 0 ? buf : NULL;
}

const char *tu_bin(void)
{
    const char *b = getenv("AR_BIN");
    return b && *b ? b : NULL;
}

const char *tu_source_dir(void)
{
    const char *b = getenv("AR_SOURCE_DIR");
    return b && *b ? b : NULL;
}

char *tu_run(const char *cmd, int *status)
{
    char full[8192];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    cr_assert(p != NULL);
    size_t cap = 4096, len = 0;
    char *out = malloc(cap);
    size_t k;
    while ((k = fread(out + len, 1, cap - len - 1, p)) > 0) {
        len += k;
        if (cap - len < 2) {
            cap *= 2;
            out = realloc(out, cap);
        }
    }
    out[len] = 0;
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

void tu_write_corpus_lines(const char *path, int lines, unsigned seed)
{
    const char *words[] = {"alpha", "beta", "gamma", "delta", "the", "and", "of", "light"};
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write '%s'", path);
    unsigned s = seed;
    for (int i = 0; i < lines; i++) {
        for (int w = 0; w < 6; w++) {
            s = s * 1103515245u + 12345u;
            fprintf(f, "%s%s", w ? " " : "", words[(s >> 16) % 8]);
        }
        fprintf(f, ".\n");
    }
    fclose(f);
}

void tu_write_corpus_text(const char *path)
{
    const char *w[] = {"in", "the", "beginning", "was", "light", "and", "darkness", "of", "waters"};
    char *buf = malloc(16384);
    size_t k = 0;
    unsigned s = 1;
    while (k < 12000) {
        s = s * 1103515245u + 12345u;
        k += (size_t)sprintf(buf + k, "%s%s", w[(s >> 16) % 9], (s >> 8) % 7 == 0 ? ".\n" : " ");
    }
    tu_write_file(path, buf, k);
    free(buf);
}

char *tu_model_bytes(const char *run, size_t *n)
{
    ar_st_file f;
    ar_err e;
    cr_assert_eq(ar_st_read(&f, tu_path(run, "model.safetensors"), &e), 0, "%s", e.msg);
    char *b = malloc(f.data_size);
    memcpy(b, f.data, f.data_size);
    *n = f.data_size;
    ar_st_free(&f);
    return b;
}

char *tu_run_bin(int *status, const char *fmt, ...)
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
    return tu_run(cmd, status);
}

void tu_expect_same_metric_values(const char *a, const char *b, const char *what, int seen[3])
{
    const char *keys[] = {"\"loss\":", "\"val_loss\":", "\"grad_norm\":"};
    for (int k = 0; k < 3; k++) {
        const char *pa = a, *pb = b;
        seen[k] = 0;
        while ((pa = strstr(pa, keys[k])) && (pb = strstr(pb, keys[k]))) {
            size_t n = strcspn(pa, ",}");
            cr_expect(strncmp(pa, pb, n) == 0, "%s: %.*s against %.*s", what, (int)n, pa, (int)strcspn(pb, ",}"), pb);
            pa += n;
            pb += n;
            seen[k]++;
        }
    }
}

const ar_backend *tu_backend_b(char *kind, char *why, size_t n)
{
    const char *env = getenv("AR_TEST_BACKEND_B");
    ar_err e = {{0}};
    const ar_backend *b = NULL;
    if (env && strcmp(env, "cpu") == 0) {
        *kind = 'c';
        return ar_backend_cpu();
    }
    if (env && strcmp(env, "emu") == 0) {
        *kind = 'e';
        const ar_backend *(*open)(ar_err *, size_t);
        *(void **)&open = ar_module_entry("libattnres-cuda-emu.so", "ATTNRES_CUDA_EMU_MODULE", "",
                                          "ar_cuda_module_open", "CUDA emulator", &e);
        b = open ? open(&e, sizeof(ar_backend)) : NULL;
    } else {
        *kind = 'g';
        b = ar_backend_cuda(&e);
    }
    if (!b)
        snprintf(why, n, "%s", e.msg);
    return b;
}
