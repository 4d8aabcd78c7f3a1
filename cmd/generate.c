/* attnres generate: sampling from a checkpoint with a key/value cache
 * (lib/decode.h, run/generate.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../formats/bpe.h"
#include "../formats/json.h"
#include "../lib/decode.h"
#include "../run/generate.h"
#include "cmds.h"
#include "options.h"

static const char *usage =
    "attnres generate RUN|MODEL.safetensors [--prompt TEXT | --prompt-file FILE | --prompt-ids LIST] "
    "[--truncate] [--tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--prefill-chunk C] "
    "[--threads N] [--json]";

/* How tokens are read and written: bytes (vocab: bytes), GPT-2's BPE
 * (vocabulary 50257, formats/bpe.h), or ids (any other vocabulary: no
 * tokenizer). */
typedef enum { VOC_BYTES, VOC_GPT2, VOC_IDS } vocab_kind;

#define GPT2_VOCAB 50257
#define GPT2_EOT 50256 /* <|endoftext|> */

static const char *vocab_name(vocab_kind v) { return v == VOC_BYTES ? "bytes" : v == VOC_GPT2 ? "gpt2" : "ids"; }

typedef struct {
    vocab_kind voc;
    const ar_bpe *bpe; /* VOC_GPT2 */
    int json;
    int32_t *ids;      /* the generated tokens */
    long n, cap;
} sink;

/* The bytes of token tok into out (room for 256), their count. */
static int token_bytes(const sink *s, int32_t tok, char *out)
{
    if (s->voc == VOC_BYTES) {
        out[0] = (char)tok;
        return 1;
    }
    int n = ar_bpe_token_bytes(s->bpe, tok, out, 256);
    return n < 0 ? 0 : n > 256 ? 256 : n;
}

/* realloc or exit, as ar_xmalloc */
static void *grow(void *p, size_t bytes)
{
    void *q = realloc(p, bytes);
    if (!q) {
        cli_error("out of memory (%zu bytes)", bytes);
        exit(AR_EXIT_FAIL);
    }
    return q;
}

/* After each sampled token: stream it (bytes as they are, ids one per
 * line), or keep it for the JSON object. */
static void emit(int32_t tok, void *ud)
{
    sink *s = ud;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 256;
        s->ids = grow(s->ids, (size_t)s->cap * sizeof *s->ids);
    }
    s->ids[s->n++] = tok;
    if (s->json)
        return;
    if (s->voc == VOC_IDS) {
        printf("%d\n", (int)tok);
    } else {
        char b[256];
        fwrite(b, 1, (size_t)token_bytes(s, tok, b), stdout);
    }
    fflush(stdout);
}

/* Bytes b[0..n) as JSON-safe UTF-8: a byte that does not begin or
 * continue a valid UTF-8 sequence becomes U+FFFD.  malloc'd. */
static char *utf8_text(const unsigned char *ids, long n)
{
    char *out = ar_xmalloc((size_t)n * 3 + 1);
    size_t k = 0;
    for (long i = 0; i < n;) {
        unsigned c = ids[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        int ok = len > 0 && i + len <= n;
        for (int j = 1; ok && j < len; j++)
            ok = ((unsigned)ids[i + j] >> 6) == 2;
        if (ok && len > 1) { /* overlong forms, surrogates, beyond U+10FFFF */
            unsigned c1 = (unsigned)ids[i + 1];
            ok = !(len == 2 && c < 0xc2) && !(len == 3 && c == 0xe0 && c1 < 0xa0) &&
                 !(len == 3 && c == 0xed && c1 >= 0xa0) && !(len == 4 && c == 0xf0 && c1 < 0x90) &&
                 !(len == 4 && (c > 0xf4 || (c == 0xf4 && c1 >= 0x90)));
        }
        if (!ok) {
            memcpy(out + k, "\xef\xbf\xbd", 3);
            k += 3;
            i++;
            continue;
        }
        for (int j = 0; j < len; j++)
            out[k++] = (char)ids[i + j];
        i += len;
    }
    out[k] = 0;
    return out;
}

/* --prompt-ids: non-negative integers separated by commas or spaces. */
static int parse_ids(const char *v, int32_t **ids, long *n)
{
    long cap = 16;
    *ids = ar_xmalloc((size_t)cap * sizeof **ids);
    *n = 0;
    for (const char *p = v;;) {
        while (*p == ',' || *p == ' ')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',' && *end != ' '))
            return cli_usage_error(usage, "'--prompt-ids' expects token ids (integers >= 0) separated by commas, "
                                   "got '%s'", v);
        if (*n == cap)
            *ids = grow(*ids, (size_t)(cap *= 2) * sizeof **ids);
        (*ids)[(*n)++] = (int32_t)x;
        p = end;
    }
    return 0;
}

/* A number >= 0 (--temperature) or in (0, 1] (--top-p). */
static int parse_number(const char *opt, const char *s, double lo, int lo_open, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < lo || (lo_open && v == lo) || v > hi)
        return cli_usage_error(usage, "'%s' expects a number %s %g%s, got '%s'", opt, lo_open ? ">" : ">=", lo,
                               hi < INFINITY ? " and <= 1" : "", s);
    *out = v;
    return 0;
}

/* The prompt file's bytes (malloc'd), or NULL with e set. */
static unsigned char *read_file(const char *path, long *n, ar_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        ar_fail(e, "'%s': cannot open the prompt file: %s", path, ar_strerror(errno));
        return NULL;
    }
    long cap = 4096;
    unsigned char *b = ar_xmalloc((size_t)cap);
    *n = 0;
    size_t got;
    while ((got = fread(b + *n, 1, (size_t)(cap - *n), f)) > 0)
        if ((*n += (long)got) == cap)
            b = grow(b, (size_t)(cap *= 2));
    int bad = ferror(f), err = errno;
    fclose(f);
    if (bad) {
        free(b);
        ar_fail(e, "'%s': cannot read the prompt file: %s", path, ar_strerror(err));
        return NULL;
    }
    return b;
}

typedef struct {
    const char *text, *file, *ids; /* at most one given */
    int32_t *id;                   /* --prompt-ids parsed */
    long nid;
    int truncate;
} prompt_opts;

/* The prompt as token ids for a model of vocabulary voc / V and context T:
 * the text or file as bytes (VOC_BYTES) or through GPT-2's BPE
 * (VOC_GPT2), or the ids given; empty or not given: one start token ("\n"
 * for bytes, <|endoftext|> for GPT-2, id 0 otherwise).  Longer than T: an
 * error, or its last T tokens with --truncate (*cut gets how many were
 * dropped). */
static int prompt_tokens(const prompt_opts *po, const sink *s, int V, int T, int32_t **out, long *n,
                         long *cut, ar_err *e)
{
    *out = NULL;
    *n = *cut = 0;
    if (po->ids) {
        *out = ar_xmalloc((size_t)(po->nid ? po->nid : 1) * sizeof **out);
        memcpy(*out, po->id, (size_t)po->nid * sizeof **out);
        *n = po->nid;
        for (long i = 0; i < *n; i++)
            if ((*out)[i] >= V)
                return ar_fail(e, "'--prompt-ids': token id %d is not below the model's vocabulary size %d",
                               (int)(*out)[i], V);
    } else if (po->text || po->file) {
        const char *opt = po->text ? "--prompt" : "--prompt-file";
        if (s->voc == VOC_IDS)
            return ar_fail(e, "'%s': a model with a vocabulary of %d tokens has no tokenizer (only bytes and "
                           "GPT-2's %d): give the prompt as token ids with '--prompt-ids'", opt, V, GPT2_VOCAB);
        long len = 0;
        unsigned char *b = po->text ? (unsigned char *)ar_xstrdup(po->text) : read_file(po->file, &len, e);
        if (!b)
            return -1;
        if (po->text)
            len = (long)strlen(po->text);
        if (s->voc == VOC_GPT2) {
            size_t nn = 0;
            int rc = ar_bpe_encode(s->bpe, (const char *)b, (size_t)len, out, &nn, e);
            free(b);
            if (rc != 0)
                return ar_wrap(e, "'%s'", po->text ? "--prompt" : po->file);
            *n = (long)nn;
        } else {
            *out = ar_xmalloc((size_t)(len ? len : 1) * sizeof **out);
            for (long i = 0; i < len; i++)
                (*out)[i] = b[i];
            *n = len;
            free(b);
        }
    }
    if (*n == 0) {
        free(*out);
        *out = ar_xmalloc(sizeof **out);
        (*out)[0] = s->voc == VOC_BYTES ? '\n' : s->voc == VOC_GPT2 ? GPT2_EOT : 0;
        *n = 1;
    }
    if (*n > T) {
        if (!po->truncate)
            return ar_fail(e, "'%s': the prompt is %ld tokens, longer than the model's context of %d "
                           "(model.seq_len); '--truncate' keeps its last %d",
                           po->ids ? "--prompt-ids" : po->text ? "--prompt" : po->file, *n, T, T);
        *cut = *n - T;
        memmove(*out, *out + *cut, (size_t)T * sizeof **out);
        *n = T;
    }
    return 0;
}

typedef struct {
    long tokens;
    double temperature, top_p;
    int top_k, chunk, json, seeded;
    uint64_t seed;
} gen_opts;

static void print_json(const char *ckpt, long step, const ar_config *cfg, vocab_kind voc, const gen_opts *g,
                       int chunk, long cut, const ar_gen_stats *st, const sink *s)
{
    ar_jw w;
    ar_jw_init(&w);
    ar_jw_obj_begin(&w);
    ar_jw_key(&w, "checkpoint");
    ar_jw_str(&w, ckpt);
    ar_jw_key(&w, "step");
    ar_jw_int(&w, step);
    ar_jw_key(&w, "residual");
    ar_jw_str(&w, ar_res_kind_name(cfg->model.residual.kind));
    ar_jw_key(&w, "vocab");
    ar_jw_str(&w, vocab_name(voc));
    ar_jw_key(&w, "seq_len");
    ar_jw_int(&w, cfg->model.seq_len);
    ar_jw_key(&w, "prompt_tokens");
    ar_jw_int(&w, st->prompt_tokens);
    ar_jw_key(&w, "truncated");
    ar_jw_int(&w, cut);
    ar_jw_key(&w, "generated");
    ar_jw_int(&w, st->generated);
    ar_jw_key(&w, "tokens");
    ar_jw_arr_begin(&w);
    for (long i = 0; i < s->n; i++)
        ar_jw_int(&w, s->ids[i]);
    ar_jw_arr_end(&w);
    if (voc != VOC_IDS) {
        unsigned char *b = ar_xmalloc((size_t)s->n * 256 + 1);
        long nb = 0;
        for (long i = 0; i < s->n; i++)
            nb += token_bytes(s, s->ids[i], (char *)b + nb);
        char *t = utf8_text(b, nb);
        ar_jw_key(&w, "text");
        ar_jw_str(&w, t);
        free(t);
        free(b);
    }
    ar_jw_key(&w, "temperature");
    ar_jw_num(&w, g->temperature);
    ar_jw_key(&w, "top_k");
    ar_jw_int(&w, g->top_k);
    ar_jw_key(&w, "top_p");
    ar_jw_num(&w, g->top_p);
    ar_jw_key(&w, "seed");
    ar_jw_int(&w, (long long)g->seed);
    ar_jw_key(&w, "prefill_chunk");
    ar_jw_int(&w, chunk);
    ar_jw_key(&w, "slides");
    ar_jw_int(&w, st->slides);
    ar_jw_key(&w, "prefill_s");
    ar_jw_num(&w, st->prefill_s);
    ar_jw_key(&w, "prefill_tokens_per_s");
    ar_jw_num(&w, st->prefill_s > 0 ? (double)st->prompt_tokens / st->prefill_s : NAN);
    ar_jw_key(&w, "decode_s");
    ar_jw_num(&w, st->decode_s);
    ar_jw_key(&w, "decode_tokens_per_s");
    ar_jw_num(&w, st->decode_s > 0 ? (double)st->generated / st->decode_s : NAN);
    ar_jw_key(&w, "kv_cache_bytes");
    ar_jw_int(&w, (long long)ar_decode_kv_cache_bytes(&cfg->model, cfg->model.seq_len));
    ar_jw_key(&w, "depth_cache_reps");
    ar_jw_int(&w, ar_decode_depth_reps(&cfg->model));
    ar_jw_key(&w, "depth_cache_bytes");
    ar_jw_int(&w, (long long)ar_decode_depth_cache_bytes(&cfg->model, chunk));
    ar_jw_obj_end(&w);
    printf("%s\n", w.s);
    ar_jw_free(&w);
}

/* The command's own options and the checkpoint into *ckpt, po and g; 0, or
 * -1 after the usage error. */
static int parse_args(cli_opts *so, const char **ckpt, prompt_opts *po, gen_opts *g)
{
    int nprompt = 0;
    for (const char *a, *v; (a = cli_opts_next(so, &v));) {
        long seed;
        if (!strcmp(a, "--prompt"))
            po->text = v, nprompt++;
        else if (!strcmp(a, "--prompt-file"))
            po->file = v, nprompt++;
        else if (!strcmp(a, "--prompt-ids"))
            po->ids = v, nprompt++;
        else if (!strcmp(a, "--truncate"))
            po->truncate = 1;
        else if (!strcmp(a, "--json"))
            g->json = 1;
        else if (!strcmp(a, "--tokens")) {
            if (cli_parse_long(a, v, 1, &g->tokens) != 0)
                return -1;
        } else if (!strcmp(a, "--temperature")) {
            if (parse_number(a, v, 0, 0, INFINITY, &g->temperature) != 0)
                return -1;
        } else if (!strcmp(a, "--top-p")) {
            if (parse_number(a, v, 0, 1, 1, &g->top_p) != 0)
                return -1;
        } else if (!strcmp(a, "--top-k")) {
            if (cli_parse_int(a, v, 0, &g->top_k) != 0)
                return -1;
        } else if (!strcmp(a, "--prefill-chunk")) {
            if (cli_parse_int(a, v, 1, &g->chunk) != 0)
                return -1;
        } else if (!strcmp(a, "--seed")) {
            if (cli_parse_long(a, v, 0, &seed) != 0)
                return -1;
            g->seed = (uint64_t)seed;
            g->seeded = 1;
        } else if (cli_opts_argument(so, a, ckpt) != 0)
            return -1;
    }
    if (so->bad)
        return -1;
    if (!*ckpt) {
        cli_usage_error(usage, "missing the checkpoint (a run directory or a .safetensors file)");
        return -1;
    }
    if (nprompt > 1) {
        cli_usage_error(usage, "give the prompt once: '--prompt', '--prompt-file' or '--prompt-ids'");
        return -1;
    }
    if (po->ids && parse_ids(po->ids, &po->id, &po->nid) != 0) /* a usage matter: before loading */
        return -1;
    return 0;
}

int cmd_generate(int argc, char **argv)
{
    const char *ckpt = NULL;
    prompt_opts po = {0};
    gen_opts g = {.tokens = 256, .temperature = 1.0, .top_p = 1.0, .chunk = 64};
    int rc = AR_EXIT_USAGE;
    ar_err e = {{0}};
    static const char *const own[] = {"--prompt", "--prompt-file", "--prompt-ids", "--tokens", "--temperature",
                                      "--top-k", "--top-p", "--seed", "--prefill-chunk", NULL};
    cli_opts so;
    cli_opts_init(&so, usage, CLI_THREADS, own, argc, argv);
    if (parse_args(&so, &ckpt, &po, &g) != 0)
        goto done;
    if (!g.seeded)
        g.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    rc = AR_EXIT_FAIL;
    const ar_backend *be = ar_backend_cpu();
    be->set_threads(so.threads >= 0 ? so.threads : 0);
    ar_config cfg;
    long step = 0;
    ar_model *m = NULL;
    ar_decoder *dec = NULL;
    ar_sampler *smp = NULL;
    ar_bpe *bpe = NULL;
    int32_t *prompt = NULL;
    long np = 0, cut = 0;
    sink s = {.json = g.json};
    if (ar_gen_load(ckpt, be, g.chunk, &cfg, &m, &step, &e) != 0)
        goto fail;
    int T = cfg.model.seq_len, chunk = g.chunk < T ? g.chunk : T;
    s.voc = cfg.model.vocab_bytes ? VOC_BYTES : cfg.model.vocab == GPT2_VOCAB ? VOC_GPT2 : VOC_IDS;
    if (s.voc == VOC_GPT2 && !(bpe = ar_bpe_load(NULL, NULL, &e)))
        goto fail;
    s.bpe = bpe;
    if (prompt_tokens(&po, &s, cfg.model.vocab, T, &prompt, &np, &cut, &e) != 0 ||
        ar_decoder_create(&dec, m, chunk, T, &e) != 0)
        goto fail;
    ar_sample_cfg sc = {.temperature = g.temperature, .top_k = g.top_k, .top_p = g.top_p, .seed = g.seed};
    smp = ar_sampler_create(&sc, cfg.model.vocab);
    ar_gen_stats st;
    if (ar_generate(dec, smp, prompt, np, g.tokens, emit, &s, &st, &e) != 0)
        goto fail;
    if (g.json)
        print_json(ckpt, step, &cfg, s.voc, &g, chunk, cut, &st, &s);
    rc = AR_EXIT_OK;
    goto cleanup;
fail:
    cli_error("%s", e.msg);
cleanup:
    ar_sampler_free(smp);
    ar_bpe_free(bpe);
    ar_decoder_free(dec);
    ar_model_free(m);
    free(prompt);
    free(s.ids);
done:
    free(po.id);
    cli_opts_free(&so);
    return rc;
}
