/* GPT-2's byte-level BPE (formats/bpe.h), two ways:
 *
 *   - the whole input as text, encoded with the built-in GPT-2 vocabulary:
 *     every id is in the vocabulary, decoding gives back the input byte
 *     for byte (bpe.h promises it for any bytes, valid UTF-8 or not), and
 *     encoding is a function of the text alone (a second encode, appended
 *     to the first, gives the same ids);
 *   - where the input holds the line "%%merges", a vocabulary of its own:
 *
 *         encoder.json's bytes \n%%merges\n vocab.bpe's bytes [\n%%text\n text]
 *
 *     loaded from those two files, which must either load or fail with a
 *     one-line message naming one of them; a vocabulary that loads
 *     encodes the text (the whole input where there is no "%%text" line)
 *     under the same checks.
 *
 * ar_bpe_load reads files only, so the two go through fuzz_as_nth_file. */
#include "fuzz.h"

#include "../formats/bpe.h"

#define MERGES_SEP "\n%%merges\n"
#define TEXT_SEP "\n%%text\n"

static const uint8_t *find(const uint8_t *s, size_t n, const char *sep)
{
    size_t k = strlen(sep);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(s + i, sep, k) == 0)
            return s + i;
    return NULL;
}

/* Encode, check every id, decode, compare; then once more appended. */
static void round_trip(const ar_bpe *b, const uint8_t *text, size_t len, const char *what)
{
    ar_err e = {{0}};
    int32_t *ids = NULL;
    size_t n = 0;
    FUZZ_CHECK(ar_bpe_encode(b, (const char *)text, len, &ids, &n, &e) == 0, "%s: encoding failed: %s", what,
               e.msg);
    FUZZ_CHECK(len == 0 || (n >= 1 && n <= len), "%s: %zu ids for %zu bytes", what, n, len);
    int vocab = ar_bpe_vocab_size(b);
    char *back = malloc(len + 1);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < vocab, "%s: id %ld at %zu, vocabulary %d", what, (long)ids[i], i, vocab);
        int k = ar_bpe_token_bytes(b, ids[i], back + at, len - at);
        FUZZ_CHECK(k >= 1, "%s: id %ld at %zu has no bytes", what, (long)ids[i], i);
        FUZZ_CHECK((size_t)k <= len - at, "%s: decoding runs past the text's %zu bytes at id %zu", what, len, i);
        at += (size_t)k;
    }
    FUZZ_CHECK(at == len && memcmp(back, text, len) == 0, "%s: decoding gives %zu bytes, not the text's %zu",
               what, at, len);
    size_t n1 = n;
    FUZZ_CHECK(ar_bpe_encode(b, (const char *)text, len, &ids, &n, &e) == 0, "%s: encoding again failed: %s",
               what, e.msg);
    FUZZ_CHECK(n == 2 * n1 && (n1 == 0 || memcmp(ids, ids + n1, n1 * sizeof *ids) == 0),
               "%s: the second encoding differs from the first", what);
    free(back);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* loaded once: 50257 tokens and 50000 merges per input would be most
     * of the time */
    static ar_bpe *gpt2;
    if (!gpt2) {
        ar_err e = {{0}};
        gpt2 = ar_bpe_load(NULL, NULL, &e);
        FUZZ_CHECK(gpt2 != NULL, "the built-in GPT-2 vocabulary does not load: %s", e.msg);
    }
    round_trip(gpt2, data, size, "GPT-2");

    const uint8_t *m = find(data, size, MERGES_SEP);
    if (!m)
        return 0;
    const uint8_t *merges = m + strlen(MERGES_SEP), *end = data + size;
    const uint8_t *t = find(merges, (size_t)(end - merges), TEXT_SEP);
    const uint8_t *text = t ? t + strlen(TEXT_SEP) : data;
    size_t text_len = t ? (size_t)(end - text) : size;
    const char *enc = fuzz_as_nth_file(0, data, (size_t)(m - data));
    const char *mer = fuzz_as_nth_file(1, merges, (size_t)((t ? t : end) - merges));
    ar_err e = {{0}};
    ar_bpe *b = ar_bpe_load(enc, mer, &e);
    if (!b) {
        FUZZ_CHECK(e.msg[0] != '\0', "a rejection without a message");
        FUZZ_CHECK(strstr(e.msg, enc) || strstr(e.msg, mer), "the message names neither file: %s", e.msg);
        FUZZ_CHECK(strchr(e.msg, '\n') == NULL, "the message is not one line: %s", e.msg);
        return 0;
    }
    round_trip(b, text, text_len, "the input's vocabulary");
    ar_bpe_free(b);
    return 0;
}
