/* Decoding: GPT-2's byte-level tokens are byte strings, so an id's text is
 * its bytes as loaded, and the ids of any text give back that text. */
#include <string.h>

#include "bpe_internal.h"

int ar_bpe_vocab_size(const ar_bpe *b)
{
    return b->vocab;
}

int ar_bpe_token_bytes(const ar_bpe *b, int32_t id, char *out, size_t cap)
{
    if (id < 0 || id >= b->vocab || b->tok_len[id] < 0)
        return -1;
    size_t n = (size_t)b->tok_len[id];
    memcpy(out, b->tok_bytes + b->tok_off[id], n < cap ? n : cap);
    return (int)n;
}
