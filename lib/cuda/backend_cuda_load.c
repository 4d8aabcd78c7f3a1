/* ar_backend_cuda: the CUDA backend lives in a module of its own,
 * libattnres-cuda.so (the .cu files of lib/cuda, linked against cudart and cuBLAS),
 * loaded with dlopen on first use.  So attnres and its tests start without
 * loading the CUDA libraries (hundreds of MiB, each Criterion test is a new
 * process), and a binary built with CUDA still runs where no driver or
 * toolkit is installed, on the CPU backend.
 *
 * The module is looked for, in order, at
 *   $ATTNRES_CUDA_MODULE                     (a path, for tests and odd installs)
 *   <dir of the executable>/libattnres-cuda.so, and ../ of it  (the build tree:
 *                                            attnres in build/, tests in build/tests/)
 *   AR_CUDA_MODULE_INSTALL                   (meson's libdir/attnres, set at build time) */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../core/error.h"
#include "../backend.h"

#ifndef AR_HAVE_CUDA
#define AR_HAVE_CUDA 0
#endif
#ifndef AR_CUDA_MODULE_INSTALL
#define AR_CUDA_MODULE_INSTALL ""
#endif

#define MODULE_NAME "libattnres-cuda.so"

int ar_cuda_built(void) { return AR_HAVE_CUDA; }

/* Candidate paths into cand (at most 4); returns how many. */
static int candidates(char cand[][PATH_MAX + 32])
{
    int n = 0;
    const char *env = getenv("ATTNRES_CUDA_MODULE");
    if (env && *env) { /* the user's choice, and only it */
        snprintf(cand[n++], PATH_MAX + 32, "%s", env);
        return n;
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(cand[n++], PATH_MAX + 32, "%s/" MODULE_NAME, exe);
            snprintf(cand[n++], PATH_MAX + 32, "%s/../" MODULE_NAME, exe);
        }
    }
    if (*AR_CUDA_MODULE_INSTALL)
        snprintf(cand[n++], PATH_MAX + 32, "%s/" MODULE_NAME, AR_CUDA_MODULE_INSTALL);
    return n;
}

const ar_backend *ar_backend_cuda(ar_err *e)
{
    static const ar_backend *be;
    if (be)
        return be;
    if (!AR_HAVE_CUDA) {
        ar_fail(e, "'cuda' is not available: this attnres was built without the CUDA toolkit "
                   "(rebuild with 'meson setup -Dcuda=enabled' where nvcc and cuBLAS are installed)");
        return NULL;
    }
    static char cand[4][PATH_MAX + 32];
    int n = candidates(cand);
    void *h = NULL;
    const char *tried = NULL, *why = NULL;
    for (int i = 0; i < n && !h; i++) {
        if (access(cand[i], F_OK) != 0)
            continue;
        tried = cand[i];
        /* RTLD_LOCAL: the module's copy of core/error.c stays its own */
        if (!(h = dlopen(cand[i], RTLD_NOW | RTLD_LOCAL)))
            why = dlerror();
    }
    if (!h) {
        if (tried)
            ar_fail(e, "cannot load the cuda backend '%s': %s", tried, why ? why : "unknown error");
        else if (getenv("ATTNRES_CUDA_MODULE") && *getenv("ATTNRES_CUDA_MODULE"))
            ar_fail(e, "cannot load the cuda backend '%s' (from ATTNRES_CUDA_MODULE): no such file", cand[0]);
        else
            ar_fail(e, "cannot find the cuda backend '" MODULE_NAME "' next to the executable or in '%s' "
                       "(set ATTNRES_CUDA_MODULE to its path)", AR_CUDA_MODULE_INSTALL);
        return NULL;
    }
    const ar_backend *(*open)(ar_err *, size_t);
    *(void **)&open = dlsym(h, "ar_cuda_module_open");
    if (!open) {
        ar_fail(e, "'%s' is not an attnres cuda module: %s", tried, dlerror());
        dlclose(h);
        return NULL;
    }
    /* the module stays loaded: its table and device state live there */
    return be = open(e, sizeof(ar_backend));
}
