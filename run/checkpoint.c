#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/atomic.h"
#include "../formats/config.h"
#include "../formats/safetensors.h"
#include "machine.h"

#ifndef AR_VERSION
#define AR_VERSION "0.0.0"
#endif

void ar_ckpt_model_path(const char *path, char *out, size_t n)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(out, n, "%s/model.safetensors", path);
    else
        snprintf(out, n, "%s", path);
}

/* Downloads a device buffer region into a fresh host array. */
static float *to_host(const ar_backend *be, const float *dev, size_t n)
{
    float *h = ar_xmalloc(n * sizeof(float));
    be->download(h, dev, n * sizeof(float));
    return h;
}

/* Safetensors entries for every parameter, into t[0..n), reading from host
 * copy `base`, names prefixed by prefix. */
static void entries_for(const ar_model *m, const float *base, const char *prefix, char (*names)[128],
                        ar_st_entry *t)
{
    for (int i = 0; i < m->pt.n; i++) {
        const ar_param *p = &m->pt.p[i];
        snprintf(names[i], 128, "%s%s", prefix, p->name);
        t[i] = (ar_st_entry){.name = names[i], .dtype = "F32", .ndim = p->ndim,
                             .shape = {p->shape[0], p->shape[1]}, .data = base + p->offset};
    }
}

/* The safetensors entry of parameter i, as entries_for. */
static void entries_for_one(const ar_model *m, int i, const float *base, const char *prefix, char *name,
                            ar_st_entry *t)
{
    const ar_param *p = &m->pt.p[i];
    snprintf(name, 128, "%s%s", prefix, p->name);
    *t = (ar_st_entry){.name = name, .dtype = "F32", .ndim = p->ndim, .shape = {p->shape[0], p->shape[1]},
                       .data = base + p->offset};
}

static int write_params(const char *file, const ar_model *m, const float *dev, const char *prefix,
                        const char *const *meta, ar_err *e)
{
    float *host = to_host(m->be, dev, m->pt.total);
    char(*names)[128] = ar_xcalloc((size_t)m->pt.n, sizeof *names);
    ar_st_entry *t = ar_xcalloc((size_t)m->pt.n, sizeof *t);
    entries_for(m, host, prefix, names, t);
    int rc = ar_st_write(file, t, m->pt.n, meta, e);
    free(t);
    free(names);
    free(host);
    return rc;
}

/* Writes the optimizer state into one file: "m.<name>" and "v.<name>"
 * (AdamW's moments), and with Muon "muon.<name>" (the momentum buffer) in
 * their place for the matrices Muon updates; m. first, then v., then
 * muon., each in parameter-table order. */
static int write_optim(const char *file, const ar_model *m, const ar_adamw *o, const char *const *meta,
                       ar_err *e)
{
    int n = m->pt.n, k = 0;
    float *hm = to_host(m->be, o->m, m->pt.total), *hv = to_host(m->be, o->v, m->pt.total);
    char(*names)[128] = ar_xcalloc((size_t)2 * n, sizeof *names);
    ar_st_entry *all = ar_xcalloc((size_t)2 * n, sizeof *all);
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < n; i++) {
            int muon = o->muon && ar_muon_param(m, i);
            if (muon != (pass == 2))
                continue;
            entries_for_one(m, i, pass == 1 ? hv : hm, pass == 0 ? "m." : pass == 1 ? "v." : "muon.", names[k],
                            &all[k]);
            k++;
        }
    int rc = ar_st_write(file, all, k, meta, e);
    free(all);
    free(names);
    free(hm);
    free(hv);
    return rc;
}

static int fill_text(FILE *f, void *ud)
{
    size_t n = strlen(ud);
    return fwrite(ud, 1, n, f) == n ? 0 : -1;
}

static int write_text_atomic(const char *path, const char *text, ar_err *e)
{
    return ar_write_atomic(path, fill_text, (void *)text, e);
}

ar_ckpt_state ar_ckpt_state_at(const ar_config *cfg, long step)
{
    ar_ckpt_state st = {.step = step, .rng_seed = cfg->train.seed,
                        .data_position = step * (long)cfg->train.grad_accum};
    return st;
}

/* The first non-finite element of a parameter-shaped device buffer:
 * returns the parameter index (-1: all finite) and the element. */
static int first_nonfinite(const ar_model *m, const float *dev, size_t *elem, float *val)
{
    if (isfinite(m->be->sumsq(dev, m->pt.total)))
        return -1;
    float *h = to_host(m->be, dev, m->pt.total);
    int found = -1;
    for (int i = 0; i < m->pt.n && found < 0; i++) {
        const ar_param *p = &m->pt.p[i];
        for (size_t j = 0; j < p->numel; j++)
            if (!isfinite(h[p->offset + j])) {
                found = i;
                *elem = j;
                *val = h[p->offset + j];
                break;
            }
    }
    free(h);
    return found;
}

static int refuse_nonfinite(const char *dir, const ar_model *m, const float *dev, const char *prefix, long step,
                            ar_err *e)
{
    size_t j = 0;
    float v = 0;
    int i = first_nonfinite(m, dev, &j, &v);
    if (i < 0)
        return 0;
    return ar_fail_kind(e, AR_ERR_KEPT,
                        "not saving step %ld in '%s': tensor '%s%s' holds a non-finite value (%s at element %zu); "
                        "the checkpoint already there is kept",
                        step, dir, prefix, m->pt.p[i].name, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf", j);
}

int ar_ckpt_save_state(const char *dir, const ar_config *cfg, ar_model *m, const ar_adamw *opt,
                       const ar_ckpt_state *st, ar_err *e)
{
    char path[AR_PATH_MAX + 64], prev[AR_PATH_MAX + 64], stepbuf[32], tbuf[32];
    char seedbuf[32], posbuf[32], badbuf[32], thrbuf[32], ntokbuf[32], crcbuf[16];
    if (refuse_nonfinite(dir, m, m->params, "", st->step, e) != 0 ||
        (opt && (refuse_nonfinite(dir, m, opt->m, "m.", st->step, e) != 0 ||
                 refuse_nonfinite(dir, m, opt->v, "v.", st->step, e) != 0)))
        return -1;
    char *yaml = ar_config_to_yaml(cfg);
    snprintf(stepbuf, sizeof stepbuf, "%ld", st->step);
    snprintf(seedbuf, sizeof seedbuf, "%" PRIu64, st->rng_seed);
    snprintf(posbuf, sizeof posbuf, "%ld", st->data_position);
    snprintf(badbuf, sizeof badbuf, "%ld", st->bad_steps);
    snprintf(thrbuf, sizeof thrbuf, "%d", st->threads);
    snprintf(ntokbuf, sizeof ntokbuf, "%ld", st->data_tokens);
    snprintf(crcbuf, sizeof crcbuf, "%08" PRIx32, st->data_fingerprint);
    int rc = 0;
    snprintf(path, sizeof path, "%s/config.yaml", dir);
    rc = write_text_atomic(path, yaml, e);
    if (rc == 0 && opt) {
        /* Keep the optimizer state that matches the model file currently on
         * disk until the new model file has replaced it. */
        snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
        snprintf(prev, sizeof prev, "%s/optimizer.prev.safetensors", dir);
        unlink(prev);
        if (link(path, prev) != 0 && errno != ENOENT)
            rc = ar_fail(e, "cannot keep '%s' as '%s': %s", path, prev, ar_strerror(errno));
        snprintf(tbuf, sizeof tbuf, "%ld", opt->t);
        /* "optimizer" is written for Muon only: a file without it is AdamW's */
        const char *meta[] = {"step", stepbuf, "adam_t", tbuf, "attnres_version", AR_VERSION,
                              opt->muon ? "optimizer" : NULL, "muon", NULL};
        if (rc == 0)
            rc = write_optim(path, m, opt, meta, e);
    }
    if (rc == 0) {
        ar_machine mach;
        ar_machine_describe(&mach);
        const char *meta[] = {"config", yaml, "step", stepbuf, "attnres_version", AR_VERSION,
                              "rng_seed", seedbuf, "data_position", posbuf, "bad_steps", badbuf,
                              "threads", thrbuf, "data_tokens", ntokbuf, "data_fingerprint", crcbuf,
                              "cpu", mach.cpu, "blas", mach.blas, "build", mach.build, NULL};
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        rc = write_params(path, m, m->params, "", meta, e);
    }
    free(yaml);
    return rc;
}

int ar_ckpt_save(const char *dir, const ar_config *cfg, ar_model *m, const ar_adamw *opt, long step,
                 ar_err *e)
{
    ar_ckpt_state st = ar_ckpt_state_at(cfg, step);
    return ar_ckpt_save_state(dir, cfg, m, opt, &st, e);
}

/* ------------------------------------------------------------------ */
/* checkpoints/step-N                                                  */

/* Removes a folder of plain files (a step-N checkpoint). */
static int remove_folder(const char *path, ar_err *e)
{
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOENT ? 0 : ar_fail(e, "cannot remove '%s': %s", path, ar_strerror(errno));
    struct dirent *de;
    char f[AR_PATH_MAX + 600];
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            snprintf(f, sizeof f, "%s/%s", path, de->d_name);
            unlink(f);
        }
    closedir(d);
    if (rmdir(path) != 0 && errno != ENOENT)
        return ar_fail(e, "cannot remove '%s': %s", path, ar_strerror(errno));
    return 0;
}

/* "step-123" -> 123; -1 for anything else. */
static long step_of(const char *name)
{
    if (strncmp(name, "step-", 5) != 0 || !name[5] || strspn(name + 5, "0123456789") != strlen(name + 5) ||
        strlen(name + 5) > 15)
        return -1;
    return atol(name + 5);
}

static int cmp_long_desc(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x < y) - (x > y);
}

/* Keeps the `keep` newest step-N folders at or below `step`. */
static int prune(const char *ck, long step, int keep, ar_err *e)
{
    DIR *d = opendir(ck);
    if (!d)
        return errno == ENOENT ? 0 : ar_fail(e, "cannot read '%s': %s", ck, ar_strerror(errno));
    long *steps = NULL;
    size_t n = 0, cap = 0;
    int changed = 0, rc = 0;
    char path[AR_PATH_MAX + 600];
    struct dirent *de;
    while ((de = readdir(d))) {
        long s = step_of(de->d_name);
        int stale_tmp = strncmp(de->d_name, ".step-", 6) == 0;
        if (stale_tmp || s > step) {
            snprintf(path, sizeof path, "%s/%s", ck, de->d_name);
            if (remove_folder(path, e) != 0)
                rc = -1;
            changed = 1;
        } else if (s >= 0) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                long *ns = realloc(steps, cap * sizeof *ns);
                if (!ns)
                    ar_xmalloc((size_t)-1);
                steps = ns;
            }
            steps[n++] = s;
        }
    }
    closedir(d);
    if (n > 1)
        qsort(steps, n, sizeof *steps, cmp_long_desc);
    for (size_t i = (size_t)keep; i < n && rc == 0; i++) {
        snprintf(path, sizeof path, "%s/step-%ld", ck, steps[i]);
        rc = remove_folder(path, e);
        changed = 1;
    }
    free(steps);
    if (rc == 0 && changed)
        rc = ar_sync_dir(ck, e);
    return rc;
}

int ar_ckpt_keep(const char *dir, long step, int keep, ar_err *e)
{
    char ck[AR_PATH_MAX + 64], tmp[AR_PATH_MAX + 128], fin[AR_PATH_MAX + 128];
    char src[AR_PATH_MAX + 64], dst[AR_PATH_MAX + 192];
    snprintf(ck, sizeof ck, "%s/checkpoints", dir);
    if (keep <= 0)
        return prune(ck, step, 0, e);
    snprintf(tmp, sizeof tmp, "%s/.step-%ld.tmp", ck, step);
    snprintf(fin, sizeof fin, "%s/step-%ld", ck, step);
    if (ar_mkdir_p(ck, e) != 0 || remove_folder(tmp, e) != 0)
        return ar_wrap(e, "cannot keep checkpoint '%s'", fin);
    if (mkdir(tmp, 0777) != 0)
        return ar_fail(e, "cannot keep checkpoint '%s': cannot create '%s': %s", fin, tmp, ar_strerror(errno));
    const char *files[] = {"model.safetensors", "optimizer.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/%s", dir, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", tmp, files[i]);
        if (i == 1 && access(src, F_OK) != 0)
            continue;
        if (ar_link_or_copy(src, dst, e) != 0) {
            remove_folder(tmp, NULL);
            return ar_wrap(e, "cannot keep checkpoint '%s'", fin);
        }
    }
    if (ar_sync_dir(tmp, e) != 0 || remove_folder(fin, e) != 0) {
        remove_folder(tmp, NULL);
        return ar_wrap(e, "cannot keep checkpoint '%s'", fin);
    }
    if (rename(tmp, fin) != 0) {
        int err = errno;
        remove_folder(tmp, NULL);
        return ar_fail(e, "cannot keep checkpoint '%s': cannot rename '%s' to it: %s", fin, tmp, ar_strerror(err));
    }
    if (ar_sync_dir(ck, e) != 0)
        return -1;
    return prune(ck, step, keep, e);
}

int ar_ckpt_save_grads(const char *file, ar_model *m, ar_err *e)
{
    const char *meta[] = {"attnres_version", AR_VERSION, NULL};
    return write_params(file, m, m->grads, "", meta, e);
}

static int parse_step(const ar_st_file *f, long *step, ar_err *e)
{
    const char *s = ar_st_meta(f, "step");
    char *end;
    if (!s)
        return ar_fail(e, "'%s': metadata has no 'step'", f->path);
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end || v < 0)
        return ar_fail(e, "'%s': metadata 'step' is '%s', expected a non-negative integer", f->path, s);
    *step = v;
    return 0;
}

static int config_from(const ar_st_file *f, ar_config *cfg, long *step, ar_err *e)
{
    const char *y = ar_st_meta(f, "config");
    if (!y)
        return ar_fail(e, "'%s': metadata has no 'config' (not an attnres checkpoint?)", f->path);
    ar_config_defaults(cfg);
    /* A checkpoint of query: input always names its stabilisers; one
     * without them predates them and trained the plain form.  Any other
     * query keeps the defaults, as a config file would. */
    ar_residual_cfg *r = &cfg->model.residual, defaults = *r;
    ar_config_plain_query(r);
    char name[AR_PATH_MAX + 32];
    snprintf(name, sizeof name, "%s[config]", f->path);
    if (ar_config_parse(cfg, y, strlen(y), name, e) != 0)
        return -1;
    if (r->query != AR_QUERY_INPUT) {
        r->query_scale = defaults.query_scale;
        r->query_norm = defaults.query_norm;
        r->query_gate = defaults.query_gate;
        r->query_lr_scale = defaults.query_lr_scale;
    }
    if (step && parse_step(f, step, e) != 0)
        return -1;
    return 0;
}

/* An optional integer metadata entry. */
static int meta_long(const ar_st_file *f, const char *key, long *out, ar_err *e)
{
    const char *s = ar_st_meta(f, key);
    if (!s)
        return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*s == 0 || *end || errno || v < 0)
        return ar_fail(e, "'%s': metadata '%s' is '%.40s', expected a non-negative integer", f->path, key, s);
    *out = v;
    return 0;
}

int ar_ckpt_read_state(const char *file, ar_config *cfg, ar_ckpt_state *st, ar_err *e)
{
    ar_st_file f;
    if (ar_st_read(&f, file, e) != 0)
        return -1;
    long step = 0, thr = 0;
    int rc = config_from(&f, cfg, &step, e);
    if (rc == 0) {
        *st = ar_ckpt_state_at(cfg, step);
        const char *seed = ar_st_meta(&f, "rng_seed"), *crc = ar_st_meta(&f, "data_fingerprint");
        char *end;
        if (seed) {
            errno = 0;
            unsigned long long x = strtoull(seed, &end, 10);
            if (!*seed || *end || errno || *seed == '-')
                rc = ar_fail(e, "'%s': metadata 'rng_seed' is '%.40s', expected an unsigned integer", f.path, seed);
            st->rng_seed = (uint64_t)x;
        }
        if (rc == 0 && crc) {
            unsigned long x = strtoul(crc, &end, 16);
            if (strlen(crc) != 8 || *end)
                rc = ar_fail(e, "'%s': metadata 'data_fingerprint' is '%.40s', expected 8 hex digits", f.path,
                             crc);
            st->data_fingerprint = (uint32_t)x;
            st->has_data_fingerprint = 1;
        }
        if (rc == 0)
            rc = meta_long(&f, "data_position", &st->data_position, e);
        if (rc == 0)
            rc = meta_long(&f, "bad_steps", &st->bad_steps, e);
        if (rc == 0)
            rc = meta_long(&f, "data_tokens", &st->data_tokens, e);
        if (rc == 0 && (rc = meta_long(&f, "threads", &thr, e)) == 0)
            st->threads = thr > 1 << 20 ? 0 : (int)thr;
        const char *cpu = ar_st_meta(&f, "cpu"), *blas = ar_st_meta(&f, "blas"), *build = ar_st_meta(&f, "build");
        snprintf(st->machine.cpu, sizeof st->machine.cpu, "%s", cpu ? cpu : "");
        snprintf(st->machine.blas, sizeof st->machine.blas, "%s", blas ? blas : "");
        snprintf(st->machine.build, sizeof st->machine.build, "%s", build ? build : "");
    }
    ar_st_free(&f);
    return rc;
}

int ar_ckpt_read_config(const char *path, ar_config *cfg, long *step, ar_err *e)
{
    char file[AR_PATH_MAX + 32];
    ar_ckpt_model_path(path, file, sizeof file);
    ar_st_file f;
    if (ar_st_read(&f, file, e) != 0)
        return -1;
    int rc = config_from(&f, cfg, step, e);
    ar_st_free(&f);
    return rc;
}

/* Copies every parameter from f (tensor names prefixed by prefix) into the
 * device buffer dev; extra tensors in f are an error. */
static int load_params(const ar_st_file *f, ar_model *m, float *dev, const char *prefix, int strict,
                       ar_err *e)
{
    float *host = ar_xcalloc(m->pt.total, sizeof(float));
    int rc = 0;
    for (int i = 0; i < m->pt.n && rc == 0; i++) {
        const ar_param *p = &m->pt.p[i];
        char name[160];
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        rc = ar_st_get_f32(f, name, p->shape, p->ndim, host + p->offset, e);
    }
    size_t plen = strlen(prefix);
    for (int i = 0; i < f->n && rc == 0 && strict; i++) {
        const char *nm = f->t[i].name;
        if (strncmp(nm, prefix, plen) != 0 || ar_params_find(&m->pt, nm + plen) < 0)
            rc = ar_fail(e, "'%s': unexpected tensor '%s' for a model of kind '%s'", f->path, nm,
                         ar_res_kind_name(m->cfg.residual.kind));
    }
    if (rc == 0)
        m->be->upload(dev, host, m->pt.total * sizeof(float));
    free(host);
    return rc;
}

int ar_ckpt_load_weights(const char *file, ar_model *m, ar_err *e)
{
    ar_st_file f;
    if (ar_st_read(&f, file, e) != 0)
        return -1;
    int rc = load_params(&f, m, m->params, "", 1, e);
    ar_st_free(&f);
    return rc;
}

int ar_ckpt_load_model(const char *path, const ar_backend *be, int max_batch, ar_config *cfg,
                       ar_model **mp, long *step, ar_err *e)
{
    char file[AR_PATH_MAX + 32];
    ar_ckpt_model_path(path, file, sizeof file);
    ar_st_file f;
    if (ar_st_read(&f, file, e) != 0)
        return -1;
    long st = 0;
    int rc = config_from(&f, cfg, &st, e);
    if (rc == 0)
        rc = ar_model_create(mp, &cfg->model, be, max_batch, e);
    if (rc == 0 && (rc = load_params(&f, *mp, (*mp)->params, "", 1, e)) != 0) {
        ar_model_free(*mp);
        *mp = NULL;
    }
    if (step)
        *step = st;
    ar_st_free(&f);
    return rc;
}

/* The optimizer state of f into o: every parameter's m. and v. tensors,
 * or, for the matrices Muon updates (o->muon), its muon. tensor into m. */
static int load_optim_tensors(const ar_st_file *f, ar_model *m, ar_adamw *o, ar_err *e)
{
    float *hm = ar_xcalloc(m->pt.total, sizeof(float)), *hv = ar_xcalloc(m->pt.total, sizeof(float));
    int rc = 0;
    for (int i = 0; i < m->pt.n && rc == 0; i++) {
        const ar_param *p = &m->pt.p[i];
        char name[160];
        if (o->muon && ar_muon_param(m, i)) {
            snprintf(name, sizeof name, "muon.%s", p->name);
            rc = ar_st_get_f32(f, name, p->shape, p->ndim, hm + p->offset, e);
            continue;
        }
        snprintf(name, sizeof name, "m.%s", p->name);
        rc = ar_st_get_f32(f, name, p->shape, p->ndim, hm + p->offset, e);
        snprintf(name, sizeof name, "v.%s", p->name);
        if (rc == 0)
            rc = ar_st_get_f32(f, name, p->shape, p->ndim, hv + p->offset, e);
    }
    if (rc == 0) {
        m->be->upload(o->m, hm, m->pt.total * sizeof(float));
        m->be->upload(o->v, hv, m->pt.total * sizeof(float));
    }
    free(hm);
    free(hv);
    return rc;
}

static int try_optim(const char *file, ar_model *m, ar_adamw *o, long step, int *matched, ar_err *e)
{
    ar_st_file f;
    *matched = 0;
    if (access(file, F_OK) != 0)
        return 0;
    if (ar_st_read(&f, file, e) != 0)
        return -1;
    long st = -1;
    int rc = parse_step(&f, &st, e);
    if (rc == 0 && st == step) {
        const char *t = ar_st_meta(&f, "adam_t"), *kind = ar_st_meta(&f, "optimizer");
        const char *want = o->muon ? "muon" : "adamw";
        if (!kind)
            kind = "adamw";
        if (strcmp(kind, want) != 0)
            rc = ar_fail(e, "'%s' holds the state of optimizer %s, and 'train.optimizer' is %s: a run resumes "
                            "with the optimizer it was trained with",
                         file, kind, want);
        o->t = t ? atol(t) : step;
        if (rc == 0)
            rc = load_optim_tensors(&f, m, o, e);
        *matched = rc == 0;
    }
    ar_st_free(&f);
    return rc;
}

int ar_ckpt_load_optim(const char *dir, ar_model *m, ar_adamw *opt, long step, ar_err *e)
{
    const char *names[] = {"optimizer.safetensors", "optimizer.prev.safetensors"};
    for (int i = 0; i < 2; i++) {
        char file[AR_PATH_MAX + 64];
        int matched;
        snprintf(file, sizeof file, "%s/%s", dir, names[i]);
        if (try_optim(file, m, opt, step, &matched, e) != 0)
            return -1;
        if (matched)
            return 0;
    }
    return ar_fail(e, "'%s': no optimizer state for step %ld (expected optimizer.safetensors with "
                      "metadata step %ld)", dir, step, step);
}
