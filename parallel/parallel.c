/* The choice of parallel.h's implementation and what the trainer needs
 * around it whichever it is. */
#include "parallel.h"

#include <stdlib.h>

#include "dp.h"
#include "pipe.h"

int ar_pipelined(const ar_config *cfg) { return cfg->parallel.pipeline > 1 || cfg->parallel.virtual_stages > 1; }

int ar_parallel_check(const ar_comm *world, const ar_config *cfg, ar_err *e)
{
    return ar_pipelined(cfg) ? ar_pipe_check(world, cfg, e) : ar_dp_check(world, &cfg->train, e);
}

int ar_parallel_comm(ar_comm **c, const ar_config *cfg, ar_err *e)
{
    /* a pipeline's messages go over MPI (pipe.h) */
    if ((*c)->size == 1 || cfg->train.device != AR_DEVICE_CUDA || ar_pipelined(cfg))
        return 0;
    ar_comm *nccl = ar_comm_nccl(e);
    if (ar_comm_agree(*c, nccl ? 0 : -1, e) != 0)
        return -1;
    *c = nccl;
    return 0;
}

int ar_parallel_model(const ar_config *cfg, int rank, const ar_backend *be, ar_model **m, ar_err *e)
{
    unsigned char *runs = ar_xcalloc((size_t)ar_cfg_sublayers(&cfg->model) + 2, 1);
    ar_model_split sp;
    ar_pipe_model_split(cfg, rank, runs, &sp);
    ar_model_cfg mc = ar_cfg_training_model(cfg);
    int rc = ar_model_create_split(m, &mc, be, cfg->train.batch_size, &sp, e);
    free(runs);
    return rc;
}

ar_parallel *ar_parallel_create(ar_comm *c, const ar_config *cfg, ar_model *m, ar_err *e)
{
    return ar_pipelined(cfg) ? ar_parallel_pipe(c, cfg, m, e) : ar_parallel_dp(c, cfg, m, e);
}

void ar_parallel_free(ar_parallel *p)
{
    if (p)
        p->ops->free(p);
}

int ar_parallel_checkpoint_opt(ar_parallel *p, const ar_adamw *o, ar_adamw *full, const ar_adamw **out,
                               ar_err *e)
{
    *out = o;
    if (p->whole_opt)
        return 0;
    size_t n = p->m->pt.total;
    float *hm = ar_xmalloc(n * sizeof(float)), *hv = ar_xmalloc(n * sizeof(float));
    int rc = p->ops->full_state(p, o, hm, hv, e);
    if (rc == 0 && full) {
        ar_adamw_init(full, p->m);
        full->muon = o->muon;
        ar_adamw_moments_from_full(full, hm, hv);
        full->t = o->t;
        *out = full;
    }
    free(hm);
    free(hv);
    return rc;
}
