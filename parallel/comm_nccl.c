/* The NCCL communicator (comm.h), built as the module libattnres-nccl.so
 * where meson finds NCCL, the CUDA runtime and MPI.  The gradient's
 * exchanges (parallel/dp.c) go GPU to GPU with ncclSend/ncclRecv, grouped per
 * exchange, on a stream of their own; the adds of a reduce-scatter are
 * cuBLAS saxpy calls on the same stream, so a whole bucket's exchanges are
 * queued at once and run in order.  Control data (the config, losses,
 * norms, decisions) goes over the MPI world, which bootstraps NCCL:
 * ncclGetUniqueId on rank 0, MPI_Bcast, ncclCommInitRank, one GPU per
 * rank chosen by its rank among the ranks of its host.
 *
 * Never run: no GPU has been lent to this project yet.  Everything above
 * the calls that move bytes is the code the MPI tests run. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <stdlib.h>

#include "../core/error.h"
#include "comm.h"

typedef struct {
    ar_comm *mpi;
    ncclComm_t nc;
    cudaStream_t stream;
    cublasHandle_t blas;
} nccl_state;

static nccl_state *S(ar_comm *c) { return c->impl; }

static int nccl_fail(ar_comm *c, const char *what, ncclResult_t r, ar_err *e)
{
    return ar_fail(e, "rank %d of %d: %s failed: %s", c->rank, c->size, what, ncclGetErrorString(r));
}

static int cuda_fail(ar_comm *c, const char *what, cudaError_t r, ar_err *e)
{
    return ar_fail(e, "rank %d of %d: %s failed: %s", c->rank, c->size, what, cudaGetErrorString(r));
}

/* Queued on the stream: nothing to wait for per request (sync waits). */
static int nccl_isend(ar_comm *c, const void *buf, size_t bytes, int peer, int tag, ar_comm_req *r, ar_err *e)
{
    (void)tag; /* NCCL pairs a peer's sends and receives in the order they are queued */
    r->h = NULL;
    ncclResult_t rc = ncclSend(buf, bytes, ncclChar, peer, S(c)->nc, S(c)->stream);
    return rc == ncclSuccess ? 0 : nccl_fail(c, "ncclSend", rc, e);
}

static int nccl_irecv(ar_comm *c, void *buf, size_t bytes, int peer, int tag, ar_comm_req *r, ar_err *e)
{
    (void)tag;
    r->h = NULL;
    ncclResult_t rc = ncclRecv(buf, bytes, ncclChar, peer, S(c)->nc, S(c)->stream);
    return rc == ncclSuccess ? 0 : nccl_fail(c, "ncclRecv", rc, e);
}

static int nccl_test(ar_comm *c, ar_comm_req *r, int *done, ar_err *e)
{
    (void)c, (void)r, (void)e;
    *done = 1;
    return 0;
}

static int nccl_group(ar_comm *c, int begin, ar_err *e)
{
    ncclResult_t rc = begin ? ncclGroupStart() : ncclGroupEnd();
    return rc == ncclSuccess ? 0 : nccl_fail(c, begin ? "ncclGroupStart" : "ncclGroupEnd", rc, e);
}

static void nccl_add(ar_comm *c, float *y, const float *x, size_t n)
{
    const float one = 1.0f;
    /* n fits an int: a bucket's half is at most one transformer block */
    cublasSaxpy(S(c)->blas, (int)n, &one, x, 1, y, 1);
}

static int nccl_sync(ar_comm *c, ar_err *e)
{
    cudaError_t rc = cudaStreamSynchronize(S(c)->stream);
    return rc == cudaSuccess ? 0 : cuda_fail(c, "cudaStreamSynchronize (NCCL exchanges)", rc, e);
}

/* control data: the MPI world's */
static int nccl_bcast(ar_comm *c, void *buf, size_t bytes, int root, ar_err *e)
{
    return S(c)->mpi->ops->bcast(S(c)->mpi, buf, bytes, root, e);
}

static int nccl_allgather(ar_comm *c, const void *in, void *out, size_t bytes, ar_err *e)
{
    return S(c)->mpi->ops->allgather(S(c)->mpi, in, out, bytes, e);
}

static int nccl_sum(ar_comm *c, double *x, size_t n, ar_err *e)
{
    return S(c)->mpi->ops->sum_doubles(S(c)->mpi, x, n, e);
}

static void nccl_finalize(ar_comm *c)
{
    nccl_state *s = S(c);
    ncclCommDestroy(s->nc);
    cublasDestroy(s->blas);
    cudaStreamDestroy(s->stream);
    s->mpi->ops->finalize(s->mpi);
}

static const ar_comm_ops nccl_ops = {
    .name = "nccl",
    .isend = nccl_isend,
    .irecv = nccl_irecv,
    .test = nccl_test,
    .bcast = nccl_bcast,
    .allgather = nccl_allgather,
    .sum_doubles = nccl_sum,
    .finalize = nccl_finalize,
    .group = nccl_group,
    .add = nccl_add,
    .sync = nccl_sync,
};

/* The module's entry (ar_comm_nccl loads it): the NCCL communicator over
 * the ranks of mpi, or NULL with e set. */
__attribute__((visibility("default"))) ar_comm *ar_nccl_module_open(ar_comm *mpi, ar_err *e);
ar_comm *ar_nccl_module_open(ar_comm *mpi, ar_err *e)
{
    static ar_comm c;
    static nccl_state s;
    c = (ar_comm){.rank = mpi->rank, .size = mpi->size, .local_rank = mpi->local_rank, .ops = &nccl_ops,
                  .impl = &s};
    s.mpi = mpi;
    /* this rank's GPU, stream and cuBLAS; then every rank learns whether
     * all of them have theirs, before the collective NCCL start, so that
     * one rank's failure cannot leave the others waiting */
    int ndev = 0, here = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess)
        cuda_fail(&c, "cudaGetDeviceCount", ce, e);
    else if (mpi->local_rank >= ndev)
        ar_fail(e, "rank %d is rank %d of its host, which has %d GPU%s: start at most one rank per GPU", mpi->rank,
                mpi->local_rank, ndev, ndev == 1 ? "" : "s");
    else if ((ce = cudaSetDevice(mpi->local_rank)) != cudaSuccess ||
             (ce = cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking)) != cudaSuccess)
        cuda_fail(&c, "cudaSetDevice / cudaStreamCreate", ce, e);
    else if (cublasCreate(&s.blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(s.blas, s.stream) != CUBLAS_STATUS_SUCCESS)
        ar_fail(e, "rank %d: cuBLAS could not start for the NCCL exchanges", mpi->rank);
    else
        here = 1;
    int *all = calloc((size_t)mpi->size, sizeof(int));
    ar_err ge = {{0}};
    int gathered = all && mpi->ops->allgather(mpi, &here, all, sizeof here, &ge) == 0;
    int bad = -1;
    for (int r = 0; gathered && r < mpi->size && bad < 0; r++)
        if (!all[r])
            bad = r;
    free(all);
    if (!gathered || bad >= 0) {
        if (here) /* the failing rank keeps its own message */
            ar_fail(e, "rank %d could not start its GPU for NCCL%s%s", bad, gathered ? "" : ": ", gathered ? "" : ge.msg);
        return NULL;
    }
    ncclUniqueId id;
    ncclResult_t rc = ncclSuccess;
    if (mpi->rank == 0)
        rc = ncclGetUniqueId(&id);
    int ok = rc == ncclSuccess;
    /* the id from rank 0, and whether rank 0 had one */
    if (mpi->ops->bcast(mpi, &ok, sizeof ok, 0, e) != 0 || mpi->ops->bcast(mpi, &id, sizeof id, 0, e) != 0)
        return NULL;
    if (!ok) {
        nccl_fail(&c, "ncclGetUniqueId on rank 0", rc, e);
        return NULL;
    }
    if ((rc = ncclCommInitRank(&s.nc, mpi->size, id, mpi->rank)) != ncclSuccess) {
        nccl_fail(&c, "ncclCommInitRank", rc, e);
        return NULL;
    }
    return &c;
}
