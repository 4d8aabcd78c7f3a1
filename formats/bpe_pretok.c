/* Pre-tokenisation: GPT-2's regex cuts the text into the pieces that merge
 * on their own (bpe.h gives the pattern and why \s is spelled out).  PCRE2
 * with UTF and UCP, JIT where it has one. */
#include <string.h>

#include "bpe_internal.h"

/* GPT-2's regex with \s spelled as the White_Space property (bpe.h). */
#define WS "\\p{White_Space}"
static const char gpt2_pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|" WS
                                   "+(?![^" WS "])|" WS "+";

/* Anchored: a match starts where the last piece ended, never further on. */
int bpe_pattern_compile(ar_bpe *b, ar_err *e)
{
    int code;
    PCRE2_SIZE at;
    b->re = pcre2_compile((PCRE2_SPTR)gpt2_pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &code, &at, NULL);
    if (!b->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return ar_fail(e, "GPT-2's pre-tokenisation pattern: PCRE2 at %zu: %s", (size_t)at, (const char *)msg);
    }
    /* without JIT (a build or a CPU that lacks it) the interpreter matches */
    b->jit = pcre2_jit_compile(b->re, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

/* The length of the well-formed UTF-8 sequence at s[0..n) (Unicode's
 * Table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF), or
 * 0 where none starts. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    size_t len;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, lo = c == 0xE0 ? 0xA0 : lo, hi = c == 0xED ? 0x9F : hi;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, lo = c == 0xF0 ? 0x90 : lo, hi = c == 0xF4 ? 0x8F : hi;
    else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t k = 2; k < len; k++)
        if (s[k] < 0x80 || s[k] > 0xBF)
            return 0;
    return len;
}

/* What the pattern sees: the text itself where it is valid UTF-8, else a
 * copy (malloc'd, into *copy) in which every byte that belongs to no
 * well-formed sequence is INVALID_AS, so that pre-tokenisation takes it for
 * a symbol, [^\s\p{L}\p{N}]: a byte that is no character is neither a
 * letter, a number nor a space.  Byte offsets are the same in both, so the
 * pieces found in the view cut the text itself.  This also makes the view
 * valid UTF-8, which PCRE2_NO_UTF_CHECK (and the JIT, which never checks)
 * requires. */
#define INVALID_AS '!'
static const char *pattern_view(const char *text, size_t len, char **copy)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    *copy = NULL;
    while (i < len) {
        size_t k = s[i] < 0x80 ? 1 : utf8_seq(s + i, len - i);
        if (k == 0) {
            if (!*copy) {
                *copy = ar_xmalloc(len);
                memcpy(*copy, text, len);
            }
            (*copy)[i] = INVALID_AS;
            k = 1;
        }
        i += k;
    }
    return *copy ? *copy : text;
}

void bpe_pieces_begin(bpe_pieces *p, const ar_bpe *b, const char *text, size_t len)
{
    p->md = pcre2_match_data_create_from_pattern(b->re, NULL);
    if (!p->md)
        ar_xmalloc((size_t)-1);
    p->view = (PCRE2_SPTR)pattern_view(text, len, &p->copy);
    p->len = len;
}

int bpe_pieces_next(const ar_bpe *b, bpe_pieces *p, size_t pos, size_t *end, ar_err *e)
{
    int r = b->jit ? pcre2_jit_match(b->re, p->view, p->len, pos, 0, p->md, NULL)
                   : pcre2_match(b->re, p->view, p->len, pos, PCRE2_NO_UTF_CHECK, p->md, NULL);
    if (r < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(r, msg, sizeof msg);
        return ar_fail(e, "pre-tokenising at byte %zu: PCRE2: %s", pos, (const char *)msg);
    }
    /* Every character is a letter, a number, White_Space or else in the
     * symbol class, each of which has a one-or-more alternative: so a match
     * starts at every position and is never empty, and the pieces tile the
     * text.  Anything else is a bug, reported rather than looped on. */
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(p->md);
    if (ov[0] != pos || ov[1] <= pos)
        return ar_fail(e, "pre-tokenising at byte %zu: the pattern skipped or matched nothing", pos);
    *end = ov[1];
    return 0;
}

void bpe_pieces_end(bpe_pieces *p)
{
    pcre2_match_data_free(p->md);
    free(p->copy);
}
