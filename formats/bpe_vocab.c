/* Loading a GPT-2 vocabulary: encoder.json (token -> id) and vocab.bpe (the
 * merges by rank), from files or the copies compiled in.  Tokens are named
 * in the byte-level alphabet, so every name is first turned back into the
 * bytes it stands for; after loading, only ids and bytes remain. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "bpe_internal.h"
#include "json.h"

/* data/gpt2/encoder.json and vocab.bpe, compiled in (meson.build, cmd/embed.c) */
extern const char ar_gpt2_encoder_json[];
extern const char ar_gpt2_vocab_bpe[];
#define BUILTIN_ENCODER "built-in data/gpt2/encoder.json"
#define BUILTIN_MERGES "built-in data/gpt2/vocab.bpe"

/* ------------------------------------------------------------ the alphabet */

/* GPT-2's bytes_to_unicode: the printable bytes ! .. ~, 0xA1 .. 0xAC and
 * 0xAE .. 0xFF stand for themselves; the other 68 become U+0100 + n, n
 * counting them in byte order.  So every key of encoder.json is printable
 * and each of its characters is one byte. */
#define N_ALPHABET (256 + 68)
static void byte_alphabet(int byte_of_cp[N_ALPHABET])
{
    int n = 0;
    for (int cp = 0; cp < N_ALPHABET; cp++)
        byte_of_cp[cp] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_of_cp[printable ? b : 256 + n++] = b;
    }
}

/* The bytes a key stands for, into out (cap >= strlen(s): each character
 * is at least one UTF-8 byte and gives one byte).  The length, or -1 at the
 * first character outside the alphabet (its code point in *bad). */
static long key_bytes(const int byte_of_cp[N_ALPHABET], const char *s, size_t len, unsigned char *out,
                      unsigned *bad)
{
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    long n = 0;
    while (p < end) {
        unsigned cp = *p;
        int extra = cp < 0x80 ? 0 : cp < 0xE0 ? 1 : cp < 0xF0 ? 2 : 3;
        if (extra) /* well formed: the JSON parser checked the UTF-8 */
            cp &= 0x3Fu >> extra;
        for (int k = 1; k <= extra && p + k < end; k++)
            cp = cp << 6 | (p[k] & 0x3Fu);
        p += 1 + extra;
        if (cp >= N_ALPHABET || byte_of_cp[cp] < 0) {
            *bad = cp;
            return -1;
        }
        out[n++] = (unsigned char)byte_of_cp[cp];
    }
    return n;
}

/* ------------------------------------------------------------ files */

/* A whole file, NUL-terminated (malloc'd). */
static char *read_file(const char *path, size_t *len, ar_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        ar_fail(e, "cannot read '%s': %s", path, ar_strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *s = ar_xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            s = bpe_xrealloc(s, cap);
        }
        size_t k = fread(s + n, 1, cap - 1 - n, f);
        n += k;
        if (k == 0)
            break;
    }
    int bad = ferror(f);
    int err = errno;
    fclose(f);
    if (bad) {
        free(s);
        ar_fail(e, "cannot read '%s': %s", path, ar_strerror(err));
        return NULL;
    }
    s[n] = 0;
    *len = n;
    return s;
}

/* ------------------------------------------------------------ encoder.json */

/* Token bytes -> id, needed only while loading: vocab.bpe names tokens by
 * their text. */
typedef struct {
    size_t *slot; /* id + 1, 0 = empty */
    size_t mask;
} tok_index;

static size_t *index_slot(const ar_bpe *b, const tok_index *x, const unsigned char *s, size_t n)
{
    for (size_t i = bpe_fnv1a(s, n) & x->mask;; i = (i + 1) & x->mask) {
        size_t v = x->slot[i];
        if (v == 0)
            return &x->slot[i];
        int32_t id = (int32_t)(v - 1);
        if ((size_t)b->tok_len[id] == n && memcmp(b->tok_bytes + b->tok_off[id], s, n) == 0)
            return &x->slot[i];
    }
}

static int32_t index_find(const ar_bpe *b, const tok_index *x, const unsigned char *s, size_t n)
{
    size_t v = *index_slot(b, x, s, n);
    return v ? (int32_t)(v - 1) : -1;
}

/* encoder.json -> the token table and its index.  Ids may have gaps (the
 * table is indexed by id, so a gap costs a slot, and ids are bounded by
 * MAX_IDS), never repeats; every byte needs a token of its own, since any
 * text starts as byte tokens. */
static int load_encoder(ar_bpe *b, const char *text, size_t len, const char *path, tok_index *x, ar_err *e)
{
    ar_json *j = ar_json_parse(text, len, e);
    if (!j)
        return ar_wrap(e, "'%s'", path);
    int rc = -1, byte_of_cp[N_ALPHABET];
    byte_alphabet(byte_of_cp);
    if (j->type != AR_JSON_OBJ || j->n == 0) {
        ar_fail(e, "'%s': expected a JSON object of tokens and their ids", path);
        goto done;
    }
    int max_id = -1;
    size_t total = 0;
    for (int i = 0; i < j->n; i++) {
        const ar_json *v = &j->items[i];
        if (v->type != AR_JSON_NUM || !v->is_int || v->inum < 0 || v->inum >= MAX_IDS) {
            ar_fail(e, "'%s': token '%s': the id must be an integer in 0..%d", path, j->keys[i], MAX_IDS - 1);
            goto done;
        }
        if (v->inum > max_id)
            max_id = (int)v->inum;
        total += strlen(j->keys[i]);
    }
    b->vocab = max_id + 1;
    b->tok_off = ar_xcalloc((size_t)b->vocab, sizeof *b->tok_off);
    b->tok_len = ar_xmalloc((size_t)b->vocab * sizeof *b->tok_len);
    for (int id = 0; id < b->vocab; id++)
        b->tok_len[id] = -1;
    b->tok_bytes = ar_xmalloc(total + 1);
    x->mask = bpe_pow2_at_least(2 * (size_t)j->n) - 1;
    x->slot = ar_xcalloc(x->mask + 1, sizeof *x->slot);
    size_t at = 0;
    for (int i = 0; i < j->n; i++) {
        const char *key = j->keys[i];
        int id = (int)j->items[i].inum;
        unsigned bad = 0;
        long n = key_bytes(byte_of_cp, key, strlen(key), b->tok_bytes + at, &bad);
        if (n < 0) {
            ar_fail(e, "'%s': token '%s' (id %d) has U+%04X, outside GPT-2's byte-level alphabet", path, key, id,
                    bad);
            goto done;
        }
        if (n == 0) {
            ar_fail(e, "'%s': the empty token (id %d)", path, id);
            goto done;
        }
        if (b->tok_len[id] >= 0) {
            ar_fail(e, "'%s': id %d is given twice (to '%s' and to a token before it)", path, id, key);
            goto done;
        }
        b->tok_off[id] = at;
        b->tok_len[id] = (int32_t)n;
        /* distinct keys are distinct bytes (the alphabet is one to one), so
         * the slot is a free one */
        *index_slot(b, x, b->tok_bytes + at, (size_t)n) = (size_t)id + 1;
        at += (size_t)n;
    }
    for (int c = 0; c < 256; c++) {
        unsigned char byte = (unsigned char)c;
        b->byte_id[c] = index_find(b, x, &byte, 1);
        if (b->byte_id[c] < 0) {
            int cp = 0;
            while (byte_of_cp[cp] != c)
                cp++;
            ar_fail(e, "'%s': the token of byte 0x%02X (U+%04X) is missing: every byte needs one", path, c, cp);
            goto done;
        }
    }
    rc = 0;
done:
    ar_json_free(j);
    return rc;
}

/* ------------------------------------------------------------ vocab.bpe */

/* One token of a merge line: its id, or -1 after the error. */
static int32_t merge_token(const ar_bpe *b, const tok_index *x, const int byte_of_cp[N_ALPHABET], const char *s,
                           size_t n, unsigned char *buf, const char *path, int line, const char *enc_path,
                           ar_err *e)
{
    unsigned bad = 0;
    long k = key_bytes(byte_of_cp, s, n, buf, &bad);
    if (k < 0)
        return ar_fail(e, "'%s':%d: token '%.*s' has U+%04X, outside GPT-2's byte-level alphabet", path, line,
                       (int)n, s, bad);
    int32_t id = index_find(b, x, buf, (size_t)k);
    if (id < 0)
        return ar_fail(e, "'%s':%d: token '%.*s' is missing from the encoder '%s'", path, line, (int)n, s,
                       enc_path);
    return id;
}

/* vocab.bpe -> the pair table: merge line r (from 0, after an optional
 * "#version" line) has rank r, and A B merges into the token of A's bytes
 * followed by B's, which encoder.json must hold. */
static int load_merges(ar_bpe *b, const char *text, size_t len, const char *path, const tok_index *x,
                       const char *enc_path, ar_err *e)
{
    int byte_of_cp[N_ALPHABET];
    byte_alphabet(byte_of_cp);
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    /* at most half full: one merge per line at most */
    b->pair_mask = bpe_pow2_at_least(2 * (lines + 1)) - 1;
    b->pairs = ar_xcalloc(b->pair_mask + 1, sizeof *b->pairs);
    unsigned char *buf = ar_xmalloc(len + 1);
    int rc = -1, line = 0;
    int32_t rank = 0;
    for (size_t at = 0; at < len;) {
        const char *s = text + at;
        size_t n = strcspn(s, "\n"); /* text is NUL-terminated; a NUL byte ends the line early */
        if (at + n < len && s[n] != '\n') {
            ar_fail(e, "'%s':%d: a NUL byte", path, line + 1);
            goto done;
        }
        at += n + 1;
        line++;
        if (n && s[n - 1] == '\r')
            n--;
        if (line == 1 && n >= 8 && memcmp(s, "#version", 8) == 0)
            continue;
        const char *sp = memchr(s, ' ', n);
        if (!sp || sp == s || sp == s + n - 1 || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1))) {
            ar_fail(e, "'%s':%d: expected a merge of two tokens 'A B', found '%.*s'", path, line, (int)n, s);
            goto done;
        }
        size_t na = (size_t)(sp - s), nb = n - na - 1;
        int32_t l = merge_token(b, x, byte_of_cp, s, na, buf, path, line, enc_path, e);
        int32_t r = l < 0 ? -1 : merge_token(b, x, byte_of_cp, sp + 1, nb, buf, path, line, enc_path, e);
        if (r < 0)
            goto done;
        size_t nl = (size_t)b->tok_len[l], nr = (size_t)b->tok_len[r];
        memcpy(buf, b->tok_bytes + b->tok_off[l], nl);
        memcpy(buf + nl, b->tok_bytes + b->tok_off[r], nr);
        int32_t m = index_find(b, x, buf, nl + nr);
        if (m < 0) {
            ar_fail(e, "'%s':%d: merge '%.*s': the merged token '%.*s%.*s' is missing from the encoder '%s'", path,
                    line, (int)n, s, (int)na, s, (int)nb, sp + 1, enc_path);
            goto done;
        }
        uint64_t key = bpe_pair_key(l, r);
        pair_slot *slot = bpe_pair_probe(b, key);
        if (slot->key) {
            ar_fail(e, "'%s':%d: merge '%.*s' is given twice (first as rank %ld)", path, line, (int)n, s,
                    (long)slot->rank);
            goto done;
        }
        *slot = (pair_slot){key, rank++, m};
    }
    rc = 0;
done:
    free(buf);
    return rc;
}

/* ------------------------------------------------------------ the API */

ar_bpe *ar_bpe_load(const char *encoder_json, const char *vocab_bpe, ar_err *e)
{
    ar_bpe *b = ar_xcalloc(1, sizeof *b);
    char *enc_text = NULL, *merge_text = NULL;
    size_t enc_len, merge_len;
    const char *enc_path = encoder_json ? encoder_json : BUILTIN_ENCODER;
    const char *merge_path = vocab_bpe ? vocab_bpe : BUILTIN_MERGES;
    tok_index x = {0};
    int rc = -1;
    const char *et = ar_gpt2_encoder_json, *mt = ar_gpt2_vocab_bpe;
    if (encoder_json && !(et = enc_text = read_file(encoder_json, &enc_len, e)))
        goto done;
    if (vocab_bpe && !(mt = merge_text = read_file(vocab_bpe, &merge_len, e)))
        goto done;
    if (!encoder_json)
        enc_len = strlen(et);
    if (!vocab_bpe)
        merge_len = strlen(mt);
    rc = load_encoder(b, et, enc_len, enc_path, &x, e);
    if (rc == 0)
        rc = load_merges(b, mt, merge_len, merge_path, &x, enc_path, e);
    if (rc == 0)
        rc = bpe_pattern_compile(b, e);
done:
    free(x.slot);
    free(enc_text);
    free(merge_text);
    if (rc != 0) {
        ar_bpe_free(b);
        return NULL;
    }
    return b;
}

void ar_bpe_free(ar_bpe *b)
{
    if (!b)
        return;
    free(b->tok_off);
    free(b->tok_len);
    free(b->tok_bytes);
    free(b->pairs);
    pcre2_code_free(b->re);
    free(b);
}
