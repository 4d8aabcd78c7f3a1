/* The token-file loader (formats/tokens.c): text, gzip text and llm.c
 * token files, told apart by content. */
#include "fuzz.h"

#include "../formats/tokens.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_as_file(data, size);
    ar_tokens t;
    ar_err e = {{0}};
    if (ar_tokens_load(&t, path, &e) != 0) {
        fuzz_check_message(&e, path);
        FUZZ_CHECK(t.tok == NULL && t.n == 0, "a failed load left tokens behind");
        return 0;
    }
    FUZZ_CHECK(t.n > 0, "an accepted file with no tokens");
    int32_t mx = -1;
    for (size_t i = 0; i < t.n; i++) {
        FUZZ_CHECK(t.tok[i] >= 0, "negative token %ld at %zu", (long)t.tok[i], i);
        FUZZ_CHECK(!t.is_bytes || t.tok[i] < 256, "byte token %ld at %zu", (long)t.tok[i], i);
        if (t.tok[i] > mx)
            mx = t.tok[i];
    }
    FUZZ_CHECK(mx == t.max_token, "max_token %ld, largest token %ld", (long)t.max_token, (long)mx);
    ar_tokens_free(&t);
    return 0;
}
