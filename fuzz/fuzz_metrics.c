/* The metrics.jsonl reader (formats/metrics.c, formats/json.c). */
#include "fuzz.h"

#include "../formats/metrics.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_as_file(data, size);
    ar_json **rows;
    int n;
    ar_err e = {{0}};
    if (ar_metrics_read(path, &rows, &n, &e) != 0) {
        fuzz_check_message(&e, path);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        FUZZ_CHECK(rows[i] && rows[i]->type == AR_JSON_OBJ, "row %d is not an object", i);
        (void)ar_json_get(rows[i], "step");
        (void)ar_json_get(rows[i], "depth_attn");
    }
    ar_metrics_free(rows, n);
    return 0;
}
