#include "machine.h"

#include "../lib/backend.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#ifdef AR_HAVE_OPENBLAS_INFO
/* OpenBLAS's own (cblas.h declares them there, not in every CBLAS). */
char *openblas_get_config(void);
char *openblas_get_corename(void);
#endif
#ifdef AR_BLAS_BLIS
/* BLIS's own (blis.h; arch_t is an enum): its version, and the kernel set
 * ("zen3", "haswell") it chose for this CPU at load time */
char *bli_info_get_version_str(void);
int bli_arch_query_id(void);
char *bli_arch_string(int id);
#endif

/* s[0..len) with the blanks at both ends left out, into buf[n]. */
static void copy_trimmed(char *buf, size_t n, const char *s, size_t len)
{
    while (len && isspace((unsigned char)*s))
        s++, len--;
    while (len && isspace((unsigned char)s[len - 1]))
        len--;
    snprintf(buf, n, "%.*s", (int)len, s);
}

void ar_machine_cpu(const char *cpuinfo, char *buf, size_t n)
{
    if (!n)
        return;
    snprintf(buf, n, "unknown");
    FILE *f = fopen(cpuinfo ? cpuinfo : "/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        char key[64];
        copy_trimmed(key, sizeof key, line, (size_t)(colon - line));
        if (strcmp(key, "model name") != 0)
            continue;
        char name[sizeof line];
        copy_trimmed(name, sizeof name, colon + 1, strlen(colon + 1));
        if (name[0])
            snprintf(buf, n, "%s", name);
        break;
    }
    fclose(f);
}

const char *ar_machine_blas_core(void)
{
#ifdef AR_BLAS_BLIS
    const char *arch = bli_arch_string(bli_arch_query_id());
    if (arch && arch[0])
        return arch;
#endif
#ifdef AR_HAVE_OPENBLAS_INFO
    const char *core = openblas_get_corename();
    if (core && core[0])
        return core;
#endif
    return NULL;
}

void ar_machine_blas(char *buf, size_t n)
{
    if (!n)
        return;
    snprintf(buf, n, "unknown BLAS");
#ifdef AR_BLAS_BLIS
    const char *core = ar_machine_blas_core();
    snprintf(buf, n, "BLIS %s%s%s", bli_info_get_version_str(), core ? " " : "", core ? core : "");
#endif
#ifdef AR_HAVE_OPENBLAS_INFO
    /* "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the first two words */
    const char *cfg = openblas_get_config();
    size_t len = 0;
    if (cfg && strncmp(cfg, "OpenBLAS", 8) == 0) {
        len = 8;
        while (cfg[len] == ' ')
            len++;
        while (cfg[len] && !isspace((unsigned char)cfg[len]))
            len++;
    } else {
        cfg = "OpenBLAS";
        len = 8;
    }
    const char *core = ar_machine_blas_core();
    char name[96];
    copy_trimmed(name, sizeof name, cfg, len);
    snprintf(buf, n, "%s%s%s", name, core ? " " : "", core ? core : "");
#endif
    /* the small products' library, and the large forward and dx products'
     * where another runs them, whose kernels also depend on the CPU */
    const char *others[] = {ar_cpu_small_products(), ar_cpu_large_products()};
    for (int i = 0; i < 2; i++)
        if (others[i]) {
            size_t used = strlen(buf);
            snprintf(buf + used, n - used, " + %s", others[i]);
        }
}

void ar_machine_build(char *buf, size_t n)
{
    if (!n)
        return;
#if defined(__x86_64__) || defined(__i386__)
#if defined(__AVX512F__)
    const char *isa = "avx512f";
#elif defined(__AVX2__)
    const char *isa = "avx2";
#elif defined(__AVX__)
    const char *isa = "avx";
#else
    const char *isa = "sse2";
#endif
#ifdef __FMA__
    const char *fma = " fma";
#else
    const char *fma = "";
#endif
#ifdef __x86_64__
    snprintf(buf, n, "x86-64 %s%s", isa, fma);
#else
    snprintf(buf, n, "x86 %s%s", isa, fma);
#endif
#elif defined(__aarch64__)
    snprintf(buf, n, "aarch64");
#else
    snprintf(buf, n, "unknown");
#endif
}

void ar_machine_describe(ar_machine *m)
{
    ar_machine_cpu(NULL, m->cpu, sizeof m->cpu);
    ar_machine_blas(m->blas, sizeof m->blas);
    ar_machine_build(m->build, sizeof m->build);
}

void ar_machine_json(ar_jw *w, const ar_machine *m)
{
    ar_jw_key(w, "cpu");
    ar_jw_str(w, m->cpu);
    ar_jw_key(w, "blas");
    ar_jw_str(w, m->blas);
    ar_jw_key(w, "build");
    ar_jw_str(w, m->build);
}
