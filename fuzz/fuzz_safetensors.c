/* The safetensors loader (formats/safetensors.c), and what a checkpoint
 * load does with an accepted file: read every F32 tensor with its own
 * shape, and the config and step of the metadata. */
#include "fuzz.h"

#include "../formats/config.h"
#include "../formats/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_as_file(data, size);
    ar_st_file f;
    ar_err e = {{0}};
    if (ar_st_read(&f, path, &e) != 0) {
        fuzz_check_message(&e, path);
        FUZZ_CHECK(f.n == 0 && f.t == NULL && f.data == NULL, "a failed read left data behind");
        return 0;
    }
    FUZZ_CHECK(8 + f.data_size <= size, "data area of %llu bytes in a %zu-byte file",
               (unsigned long long)f.data_size, size);
    for (int i = 0; i < f.n; i++) {
        const ar_st_tensor *t = &f.t[i];
        FUZZ_CHECK(t->begin <= t->end && t->end <= f.data_size, "tensor '%s' outside the data area", t->name);
        FUZZ_CHECK(ar_st_find(&f, t->name) != NULL, "tensor '%s' not found by name", t->name);
        if (strcmp(t->dtype, "F32") != 0)
            continue;
        float *dst = malloc((size_t)(t->end - t->begin) + 4);
        FUZZ_CHECK(ar_st_get_f32(&f, t->name, t->shape, t->ndim, dst, &e) == 0, "%s", e.msg);
        FUZZ_CHECK(memcmp(dst, f.data + t->begin, (size_t)(t->end - t->begin)) == 0, "copy differs");
        free(dst);
        int64_t wrong[AR_ST_MAX_DIMS] = {0};
        memcpy(wrong, t->shape, sizeof wrong);
        wrong[0] += 1;
        if (t->ndim > 0) {
            FUZZ_CHECK(ar_st_get_f32(&f, t->name, wrong, t->ndim, NULL, &e) != 0, "wrong shape accepted");
            fuzz_check_message(&e, path);
        }
    }
    /* A checkpoint's metadata: the resolved config and the step. */
    const char *y = ar_st_meta(&f, "config");
    if (y) {
        ar_config c;
        ar_config_defaults(&c);
        char name[128];
        snprintf(name, sizeof name, "%s[config]", path);
        if (ar_config_parse(&c, y, strlen(y), name, &e) != 0)
            fuzz_check_message(&e, name);
    }
    (void)ar_st_meta(&f, "step");
    ar_st_free(&f);
    return 0;
}
