/* The backend a config or command line names (train.device, --device). */
#include <string.h>

#include "../core/error.h"
#include "backend.h"

const ar_backend *ar_backend_open(const char *device, int bf16, ar_err *e)
{
    const ar_backend *be;
    if (!device || strcmp(device, "cpu") == 0) {
        be = ar_backend_cpu();
    } else if (strcmp(device, "cuda") == 0) {
        /* its message says why: no CUDA build, no usable device */
        if (!(be = ar_backend_cuda(e))) {
            ar_wrap(e, "'train.device' cuda");
            return NULL;
        }
    } else {
        ar_fail(e, "'train.device' expects one of cpu|cuda, got '%s'", device);
        return NULL;
    }
    /* Every backend starts in fp32; the flag is process-wide, so it is set
     * both ways. */
    if (be->set_bf16(bf16 ? 1 : 0) != 0) {
        ar_fail(e, "'train.precision' bf16 needs 'train.device' cuda (the %s backend computes in fp32)",
                be->name);
        return NULL;
    }
    return be;
}
