/* GPT-2's byte-level BPE tokenizer (Radford et al. 2019, OpenAI's
 * encoder.py; the same ids as tiktoken's "gpt2" encoding).
 *
 * Encoding text:
 *   1. Pre-tokenisation: GPT-2's regex cuts the text into pieces,
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      leftmost first, with \s = Unicode White_Space (as in Python's regex
 *      module and tiktoken; PCRE2's own \s also takes U+180E, so the
 *      property is spelled out).  PCRE2 with UTF and UCP, JIT where it has
 *      one.
 *   2. Each piece's bytes become byte tokens (every byte b is the token
 *      whose encoder.json key is the character bytes_to_unicode(b)), and
 *      the adjacent pair of lowest rank in vocab.bpe (its line number) is
 *      merged, leftmost first, until no pair has a rank.
 * Invalid UTF-8 is kept, never dropped or replaced: for pre-tokenisation
 * each byte that belongs to no well-formed UTF-8 sequence counts as a
 * symbol, one of [^\s\p{L}\p{N}] (it is neither a letter, a number nor a
 * space), and its piece is merged from its bytes as in step 2.  So decoding
 * the ids always gives back the text, byte for byte.  (tiktoken's byte
 * entry, Encoding._encode_bytes, agrees up to the first invalid byte, then
 * merges the last piece before it and everything after it as one piece,
 * without the regex; attnres-tokenize(1) says where the two differ.)
 * "<|endoftext|>" in the text is ordinary text (tiktoken's
 * encode_ordinary).
 *
 * An ar_bpe is read-only once loaded: several threads may encode with it at
 * once (each call keeps its own cache of pieces already merged). */
#ifndef AR_BPE_H
#define AR_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"

typedef struct ar_bpe ar_bpe;

/* Loads encoder.json (token -> id; keys in the byte-level alphabet) and
 * vocab.bpe (an optional "#version" line, then one merge "A B" a line, by
 * rank).  encoder_json / vocab_bpe NULL: the built-in GPT-2 files
 * (data/gpt2/, compiled in).  Errors name the file and what is wrong: bad
 * JSON, an id that is not an integer in 0..2^24-1 or is given twice, a key
 * outside the byte-level alphabet, a missing byte token, a merge line that
 * is not two tokens, a merge whose tokens (or their concatenation) are
 * missing from the encoder, a merge given twice. */
ar_bpe *ar_bpe_load(const char *encoder_json, const char *vocab_bpe, ar_err *e);
void ar_bpe_free(ar_bpe *b);

/* The largest id + 1 (50257 for GPT-2). */
int ar_bpe_vocab_size(const ar_bpe *b);

/* Appends the ids of text[0..len) to *ids (realloc'd; *ids NULL and *n 0
 * start a new array) and adds their count to *n.  0, or -1 with e set (a
 * PCRE2 matching failure; nothing is appended then). */
int ar_bpe_encode(const ar_bpe *b, const char *text, size_t len, int32_t **ids, size_t *n, ar_err *e);

/* The bytes of token id (GPT-2's byte-level decoding) into out, at most
 * cap of them; returns their full count (as snprintf: a result above cap
 * means out holds a prefix), or -1 for an id outside the vocabulary.
 * GPT-2's longest token has 128 bytes. */
int ar_bpe_token_bytes(const ar_bpe *b, int32_t id, char *out, size_t cap);

#endif
