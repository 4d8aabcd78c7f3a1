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
#include "../../core/error.h"
#include "../../core/module.h"
#include "../backend.h"

#ifndef AR_HAVE_CUDA
#define AR_HAVE_CUDA 0
#endif
#ifndef AR_CUDA_MODULE_INSTALL
#define AR_CUDA_MODULE_INSTALL ""
#endif

int ar_cuda_built(void) { return AR_HAVE_CUDA; }

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
    const ar_backend *(*open)(ar_err *, size_t);
    *(void **)&open = ar_module_entry("libattnres-cuda.so", "ATTNRES_CUDA_MODULE", AR_CUDA_MODULE_INSTALL,
                                      "ar_cuda_module_open", "cuda backend", e);
    /* the module stays loaded: its table and device state live there */
    return open ? (be = open(e, sizeof(ar_backend))) : NULL;
}
