/* The one-process communicator and what every communicator shares
 * (comm.h). */
#include "comm.h"

#include <stdlib.h>
#include <string.h>

#include "watchdog.h"
#include "../core/module.h"
#include "../lib/backend.h"

static int self_p2p(ar_comm *c, int peer, ar_err *e)
{
    (void)c;
    return ar_fail(e, "internal error: a one-process run has no rank %d to exchange with", peer);
}

static int self_isend(ar_comm *c, const void *buf, size_t bytes, int peer, int tag, ar_comm_req *r, ar_err *e)
{
    (void)buf, (void)bytes, (void)tag, (void)r;
    return self_p2p(c, peer, e);
}

static int self_irecv(ar_comm *c, void *buf, size_t bytes, int peer, int tag, ar_comm_req *r, ar_err *e)
{
    (void)buf, (void)bytes, (void)tag, (void)r;
    return self_p2p(c, peer, e);
}

static int self_test(ar_comm *c, ar_comm_req *r, int *done, ar_err *e)
{
    (void)c, (void)r, (void)e;
    *done = 1;
    return 0;
}

static int self_bcast(ar_comm *c, void *buf, size_t bytes, int root, ar_err *e)
{
    (void)c, (void)buf, (void)bytes, (void)root, (void)e;
    return 0;
}

static int self_allgather(ar_comm *c, const void *in, void *out, size_t bytes, ar_err *e)
{
    (void)c, (void)e;
    if (out != in)
        memmove(out, in, bytes);
    return 0;
}

static int self_sum(ar_comm *c, double *x, size_t n, ar_err *e)
{
    (void)c, (void)x, (void)n, (void)e;
    return 0;
}

static void self_finalize(ar_comm *c) { (void)c; }

static int self_split(ar_comm *c, int color, int key, ar_comm **out, ar_err *e)
{
    (void)color, (void)key, (void)e;
    *out = c;
    return 0;
}

static int self_sum_floats(ar_comm *c, float *x, size_t n, ar_err *e)
{
    (void)c, (void)x, (void)n, (void)e;
    return 0;
}

static void self_release(ar_comm *c) { (void)c; }

static const ar_comm_ops self_ops = {
    .name = "self",
    .isend = self_isend,
    .irecv = self_irecv,
    .test = self_test,
    .bcast = self_bcast,
    .allgather = self_allgather,
    .sum_doubles = self_sum,
    .finalize = self_finalize,
    .split = self_split,
    .sum_floats = self_sum_floats,
    .release = self_release,
};

static ar_comm self_comm = {.rank = 0, .size = 1, .local_rank = 0, .ops = &self_ops};
static ar_comm *world;

ar_comm *ar_comm_self(void) { return &self_comm; }

ar_comm *ar_comm_world(void) { return world ? world : &self_comm; }

int ar_comm_launched(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        if (getenv(vars[i]))
            return 1;
    return 0;
}

int ar_comm_waitall(ar_comm *c, ar_comm_req *r, int n, ar_err *e)
{
    int rc = 0;
    ar_watchdog_arm("a wait for messages");
    for (int i = 0; i < n && rc == 0; i++) {
        int done = 0;
        while (rc == 0 && r[i].h && !done)
            rc = c->ops->test(c, &r[i], &done, e) != 0 ? -1 : 0;
        if (rc == 0)
            r[i].h = NULL;
    }
    ar_watchdog_disarm();
    return rc;
}

int ar_comm_agree(ar_comm *c, int rc, ar_err *e)
{
    if (c->size == 1)
        return rc;
    /* each rank's flag and message, so every rank ends with the message of
     * the first rank that failed */
    typedef struct {
        int failed;
        char msg[sizeof e->msg];
    } verdict;
    verdict mine = {.failed = rc != 0}, *all = ar_xcalloc((size_t)c->size, sizeof *all);
    if (rc != 0)
        memcpy(mine.msg, e->msg, sizeof mine.msg);
    ar_err ce = {{0}};
    if (c->ops->allgather(c, &mine, all, sizeof mine, &ce) != 0) {
        free(all);
        if (rc == 0)
            *e = ce;
        return -1;
    }
    int bad = -1;
    for (int r = 0; r < c->size && bad < 0; r++)
        if (all[r].failed)
            bad = r;
    if (bad > 0)
        ar_fail(e, "rank %d: %s", bad, all[bad].msg);
    else if (bad == 0)
        memcpy(e->msg, all[0].msg, sizeof e->msg);
    free(all);
    return bad < 0 ? 0 : -1;
}

int ar_comm_bcast_floats(ar_comm *c, const ar_backend *be, float *x, size_t n, int root, ar_err *e)
{
    if (c->size == 1 || n == 0)
        return 0;
    float *h = ar_xmalloc(n * sizeof(float));
    if (c->rank == root)
        be->download(h, x, n * sizeof(float));
    int rc = c->ops->bcast(c, h, n * sizeof(float), root, e);
    if (rc == 0 && c->rank != root)
        be->upload(x, h, n * sizeof(float));
    free(h);
    return rc;
}

#ifndef AR_HAVE_MPI
ar_comm *ar_comm_mpi_init(int *argc, char ***argv, ar_err *e)
{
    (void)argc, (void)argv;
    ar_fail(e, "this attnres was built without MPI (meson setup -Dmpi=enabled needs Open MPI: "
               "tools/install-deps.sh installs it), so it cannot run under mpirun");
    return NULL;
}
#endif

#ifndef AR_NCCL_MODULE_INSTALL
#define AR_NCCL_MODULE_INSTALL ""
#endif

ar_comm *ar_comm_nccl(ar_err *e)
{
    static ar_comm *nccl;
    if (nccl)
        return nccl;
#ifndef AR_HAVE_NCCL
    ar_fail(e, "data parallelism on GPUs needs NCCL, and this attnres was built without it (meson finds NCCL "
               "with the CUDA toolkit and Open MPI): run it with '--device cpu', or in one process");
    return NULL;
#else
    if (!world) {
        ar_fail(e, "NCCL needs the ranks of an mpirun launch");
        return NULL;
    }
    ar_comm *(*open)(ar_comm *, ar_err *);
    *(void **)&open = ar_module_entry("libattnres-nccl.so", "ATTNRES_NCCL_MODULE", AR_NCCL_MODULE_INSTALL,
                                      "ar_nccl_module_open", "nccl communicator", e);
    return open ? (nccl = open(world, e)) : NULL;
#endif
}

/* set by comm_mpi.c */
void ar_comm_set_world(ar_comm *c);
void ar_comm_set_world(ar_comm *c) { world = c; }
