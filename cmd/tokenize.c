/* attnres tokenize: text -> an llm.c token file of GPT-2 BPE ids, and back
 * (--decode).  The tokenizer is formats/bpe.h; the token files are
 * formats/tokens.h's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "../core/atomic.h"
#include "../formats/bpe.h"
#include "../formats/tokens.h"
#include "cmds.h"
#include "options.h"

static const char *usage =
    "attnres tokenize [--vocab encoder.json --merges vocab.bpe] (IN... -o OUT.bin | --decode IN.bin [-o OUT.txt])";

/* The whole of a text file, gzip-compressed or not (zlib reads plain files
 * as they are); malloc'd, or NULL with e set. */
static char *read_text(const char *path, size_t *len, ar_err *e)
{
    errno = 0;
    gzFile g = gzopen(path, "rb");
    if (!g) {
        ar_fail(e, "cannot read '%s': %s", path, errno ? ar_strerror(errno) : "cannot open");
        return NULL;
    }
    size_t cap = 1 << 20, n = 0;
    char *s = ar_xmalloc(cap);
    int k;
    do {
        if (cap - n < (1u << 20)) {
            cap *= 2;
            char *t = realloc(s, cap);
            if (!t)
                ar_xmalloc((size_t)-1); /* aborts with the out-of-memory message */
            s = t;
        }
        k = gzread(g, s + n, 1u << 20);
        if (k > 0)
            n += (size_t)k;
    } while (k > 0);
    int code;
    const char *msg = gzerror(g, &code);
    if (k < 0 || (code != Z_OK && code != Z_STREAM_END)) {
        if (code == Z_ERRNO)
            ar_fail(e, "cannot read '%s': %s", path, ar_strerror(errno));
        else
            ar_fail(e, "'%s': corrupt gzip data: %s", path, msg);
        gzclose(g);
        free(s);
        return NULL;
    }
    gzclose(g);
    *len = n;
    return s;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Each input encoded on its own, the ids one after another.  The time
 * reported is that of encoding alone (not reading, loading or writing). */
static int encode_files(const ar_bpe *b, const char *const *in, int nin, const char *out, ar_err *e)
{
    int32_t *ids = NULL;
    size_t n = 0, bytes = 0;
    double secs = 0;
    int rc = 0;
    for (int i = 0; i < nin && rc == 0; i++) {
        size_t len;
        char *text = read_text(in[i], &len, e);
        if (!text) {
            rc = -1;
            break;
        }
        double t0 = now();
        if (ar_bpe_encode(b, text, len, &ids, &n, e) != 0)
            rc = ar_wrap(e, "'%s'", in[i]);
        secs += now() - t0;
        bytes += len;
        free(text);
    }
    if (rc == 0 && n == 0 && nin == 1)
        rc = ar_fail(e, "'%s' holds no text: a token file needs at least one token", in[0]);
    else if (rc == 0 && n == 0)
        rc = ar_fail(e, "the %d inputs hold no text: a token file needs at least one token", nin);
    /* uint16 ids where the vocabulary fits them, as llm.c writes GPT-2's */
    int u32 = ar_bpe_vocab_size(b) > 65536;
    if (rc == 0)
        rc = ar_tokens_write_llmc(out, ids, n, u32, e);
    if (rc == 0)
        printf("%s: %zu tokens (uint%d) from %zu bytes, %.3f bytes/token, encoded in %.3f s (%.1f MB/s)\n", out, n,
               u32 ? 32 : 16, bytes, (double)bytes / (double)n, secs, secs > 0 ? 1e-6 * (double)bytes / secs : 0.0);
    free(ids);
    return rc;
}

typedef struct {
    const char *s;
    size_t n;
} text_body;

static int fill_text(FILE *f, void *ud)
{
    const text_body *t = ud;
    return fwrite(t->s, 1, t->n, f) == t->n ? 0 : -1;
}

/* A token file back to its bytes, to out (NULL: standard output).  Every
 * id is checked before anything is written. */
static int decode_file(const ar_bpe *b, const char *in, const char *out, ar_err *e)
{
    ar_tokens t;
    if (ar_tokens_load(&t, in, e) != 0)
        return -1;
    int rc = 0;
    char *text = NULL;
    size_t n = 0, cap = 0;
    if (t.is_bytes)
        rc = ar_fail(e, "'%s' is not a token file (it has no llm.c header, magic %d or %d)", in, AR_LLMC_MAGIC_U16,
                     AR_LLMC_MAGIC_U32);
    for (size_t i = 0; i < t.n && rc == 0; i++) {
        char piece[256];
        int k = ar_bpe_token_bytes(b, t.tok[i], piece, sizeof piece);
        if (k < 0) {
            rc = ar_fail(e, "'%s': token %zu is %ld, outside the vocabulary (ids 0..%d)", in, i, (long)t.tok[i],
                         ar_bpe_vocab_size(b) - 1);
            break;
        }
        if (n + (size_t)k > cap) {
            cap = cap ? 2 * cap : 1 << 20;
            while (n + (size_t)k > cap)
                cap *= 2;
            char *s = realloc(text, cap);
            if (!s)
                ar_xmalloc((size_t)-1);
            text = s;
        }
        if ((size_t)k <= sizeof piece)
            memcpy(text + n, piece, (size_t)k);
        else /* longer than any GPT-2 token: ask again with room */
            ar_bpe_token_bytes(b, t.tok[i], text + n, (size_t)k);
        n += (size_t)k;
    }
    if (rc == 0 && out) {
        text_body body = {text, n};
        rc = ar_write_atomic(out, fill_text, &body, e);
    } else if (rc == 0 && (fwrite(text, 1, n, stdout) != n || fflush(stdout) != 0)) {
        rc = ar_fail(e, "cannot write the standard output: %s", ar_strerror(errno));
    }
    free(text);
    ar_tokens_free(&t);
    return rc;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *vocab = NULL, *merges = NULL, *out = NULL;
    const char **in = ar_xcalloc((size_t)argc + 1, sizeof *in);
    int nin = 0, decode = 0, rc = AR_EXIT_USAGE;
    ar_err e = {{0}};
    ar_bpe *b = NULL;
    static const char *const own[] = {"--vocab", "--merges", "-o", NULL};
    cli_opts so;
    cli_opts_init(&so, usage, CLI_OUT, own, argc, argv);
    for (const char *a, *v; (a = cli_opts_next(&so, &v));) {
        if (!strcmp(a, "--vocab"))
            vocab = v;
        else if (!strcmp(a, "--merges"))
            merges = v;
        else if (!strcmp(a, "-o"))
            so.out = v;
        else if (!strcmp(a, "--decode"))
            decode = 1;
        else if (cli_opts_argument(&so, a, &in[nin]) != 0)
            goto done;
        else
            nin++;
    }
    out = so.out;
    if (so.bad)
        goto done;
    if (!vocab != !merges) {
        cli_usage_error(usage, "'%s' needs '%s' too (an encoder.json and its vocab.bpe go together)",
                        vocab ? "--vocab" : "--merges", vocab ? "--merges" : "--vocab");
        goto done;
    }
    if (nin == 0) {
        cli_usage_error(usage, "missing the input file%s", decode ? " (a token file)" : "s (text)");
        goto done;
    }
    if (decode && nin > 1) {
        cli_usage_error(usage, "'--decode' takes one token file, got %d files", nin);
        goto done;
    }
    if (!decode && !out) {
        cli_usage_error(usage, "missing '-o OUT.bin' (the token file to write)");
        goto done;
    }
    rc = AR_EXIT_FAIL;
    if (!(b = ar_bpe_load(vocab, merges, &e)))
        goto fail;
    if (decode ? decode_file(b, in[0], out, &e) : encode_files(b, in, nin, out, &e))
        goto fail;
    rc = AR_EXIT_OK;
    goto done;
fail:
    cli_error("%s", e.msg);
done:
    ar_bpe_free(b);
    free(in);
    cli_opts_free(&so);
    return rc;
}
