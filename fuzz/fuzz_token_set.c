/* Token sets (formats/token_set.c): the input as a one-file set, opened
 * (header and size validated, the shard mapped or inflated), then read
 * whole with a vocabulary limit, checked and fingerprinted. */
#include "fuzz.h"

#include "../formats/token_set.h"

#define LIMIT 50257 /* GPT-2's vocabulary: some ids of uint16 and uint32 shards fall outside */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_as_file(data, size);
    ar_err e = {{0}};
    ar_token_set *ts = ar_token_set_open(path, &e);
    if (!ts) {
        fuzz_check_message(&e, path);
        FUZZ_CHECK(e.kind == AR_ERR_FORMAT || e.kind == AR_ERR_IO, "an open error of kind %d: %s", (int)e.kind,
                   e.msg);
        return 0;
    }
    size_t n = ar_token_set_count(ts);
    FUZZ_CHECK(n > 0, "an accepted set with no tokens");
    FUZZ_CHECK(ar_token_set_shards(ts) == 1, "%d shards from one file", ar_token_set_shards(ts));
    FUZZ_CHECK(ar_token_set_shard_first(ts, 1) == n, "shard end %zu, count %zu", ar_token_set_shard_first(ts, 1), n);
    ar_token_format fmt = ar_token_set_format(ts);
    int32_t *tok = malloc(n * sizeof *tok);
    FUZZ_CHECK(tok != NULL, "out of memory");

    /* without a limit: every id is read, or one above INT32_MAX refused */
    int32_t mx = -1;
    int whole = ar_token_set_read(ts, 0, n, 0, tok, &e);
    if (whole == 0) {
        for (size_t i = 0; i < n; i++) {
            FUZZ_CHECK(tok[i] >= 0, "negative token %ld at %zu", (long)tok[i], i);
            FUZZ_CHECK(fmt != AR_TOKENS_TEXT || tok[i] < 256, "byte token %ld at %zu", (long)tok[i], i);
            FUZZ_CHECK(fmt != AR_TOKENS_U16 || tok[i] < 65536, "uint16 token %ld at %zu", (long)tok[i], i);
            if (tok[i] > mx)
                mx = tok[i];
        }
        int32_t cmx = -2;
        FUZZ_CHECK(ar_token_set_check(ts, 0, &cmx, NULL, NULL, &e) == 0, "check refused what read took: %s", e.msg);
        FUZZ_CHECK(cmx == mx, "check's largest id %ld, read's %ld", (long)cmx, (long)mx);
    } else {
        FUZZ_CHECK(fmt == AR_TOKENS_U32, "a %s shard refused on reading: %s", ar_token_format_name(fmt), e.msg);
        fuzz_check_message(&e, path);
    }

    /* with a limit: the first id not below it, named in the shard */
    e = (ar_err){{0}};
    if (ar_token_set_read(ts, 0, n, LIMIT, tok, &e) == 0) {
        FUZZ_CHECK(whole == 0 && mx < LIMIT, "the limit let id %ld through", (long)mx);
    } else {
        FUZZ_CHECK(e.kind == AR_ERR_FORMAT, "a limit error of kind %d: %s", (int)e.kind, e.msg);
        FUZZ_CHECK(whole != 0 || mx >= LIMIT, "the limit refused ids all below it: %s", e.msg);
        fuzz_check_message(&e, path);
    }

    /* beyond the end: refused */
    FUZZ_CHECK(ar_token_set_read(ts, n, 1, 0, tok, &e) != 0, "a read past the end");
    FUZZ_CHECK(ar_token_set_fingerprint(ts) == ar_token_set_fingerprint(ts), "the fingerprint changes");
    free(tok);
    ar_token_set_free(ts);
    return 0;
}
