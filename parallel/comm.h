/* The processes of a data-parallel run and the one way they talk.
 *
 * A communicator is P ranks with point-to-point messages that do not block
 * (what the deterministic reduction of parallel/dp.c is built from) and two
 * small collectives on host memory for control data (the config, losses,
 * norms, decisions).  One interface, three implementations:
 *   self   one process, P = 1: nothing to send (the default)
 *   mpi    Open MPI, started by mpirun (parallel/comm_mpi.c)
 *   nccl   point-to-point between GPUs, control data over MPI
 *          (parallel/comm_nccl.c; compiled, never run: no GPU so far)
 * so that the MPI tests exercise every line of the reduction but the calls
 * that move bytes.  Buffers of isend/irecv live where the model's backend
 * keeps its tensors (host memory for the CPU backend). */
#ifndef AR_COMM_H
#define AR_COMM_H

#include <stddef.h>

#include "../core/error.h"

typedef struct ar_comm ar_comm;

/* One outstanding send or receive. */
typedef struct {
    void *h;
} ar_comm_req;

typedef struct {
    const char *name;
    /* nonblocking point-to-point; tag separates concurrent exchanges */
    int (*isend)(ar_comm *c, const void *buf, size_t bytes, int peer, int tag, ar_comm_req *r, ar_err *e);
    int (*irecv)(ar_comm *c, void *buf, size_t bytes, int peer, int tag, ar_comm_req *r, ar_err *e);
    /* *done = 1 once r has completed (r is then released) */
    int (*test)(ar_comm *c, ar_comm_req *r, int *done, ar_err *e);
    /* host-memory collectives: buf of root to every rank; each rank's
     * `bytes` of in into out at rank * bytes; sum of doubles */
    int (*bcast)(ar_comm *c, void *buf, size_t bytes, int root, ar_err *e);
    int (*allgather)(ar_comm *c, const void *in, void *out, size_t bytes, ar_err *e);
    int (*sum_doubles)(ar_comm *c, double *x, size_t n, ar_err *e);
    void (*finalize)(ar_comm *c);
    /* Pipeline parallelism (parallel/pipe.c): the ranks of this communicator
     * with the same color as a communicator of their own, ranked by key
     * (MPI_Comm_split; *out is freed with release); and x (n floats of
     * the backend's memory) summed over the ranks, in place
     * (MPI_Allreduce).  NULL where the communicator has no such ways. */
    int (*split)(ar_comm *c, int color, int key, ar_comm **out, ar_err *e);
    int (*sum_floats)(ar_comm *c, float *x, size_t n, ar_err *e);
    void (*release)(ar_comm *c);
    /* NCCL's way, where MPI's are NULL: the sends, receives and adds of an
     * exchange queue on the device in order (so an exchange may be queued
     * before the one it depends on has run; the requests are NULL), a send
     * and a receive with one peer must be issued as one group, and sync
     * waits for everything queued. */
    int (*group)(ar_comm *c, int begin, ar_err *e);
    void (*add)(ar_comm *c, float *y, const float *x, size_t n); /* y += x in the queue's order */
    int (*sync)(ar_comm *c, ar_err *e);
} ar_comm_ops;

struct ar_comm {
    int rank, size;
    int local_rank; /* among the ranks of this host (picks a GPU) */
    const ar_comm_ops *ops;
    void *impl;
};

/* The one-process communicator. */
ar_comm *ar_comm_self(void);

/* Whether this process was started by an MPI launcher (mpirun sets
 * OMPI_COMM_WORLD_SIZE, or PMI_SIZE / PMIX_RANK for others). */
int ar_comm_launched(void);

/* The world of an MPI launch: MPI_Init and MPI_COMM_WORLD, errors returned
 * rather than aborting.  NULL with e set when this build has no MPI. */
ar_comm *ar_comm_mpi_init(int *argc, char ***argv, ar_err *e);

/* The communicator of this process: the MPI world once ar_comm_mpi_init
 * has run, else self. */
ar_comm *ar_comm_world(void);

/* The GPUs of the world's ranks, one each (chosen by local rank), joined
 * by NCCL (ncclGetUniqueId on rank 0, MPI_Bcast) for the gradient's
 * exchanges; control data still goes over MPI.  It lives in a module of
 * its own, libattnres-nccl.so, loaded here on first use, so attnres starts
 * without the CUDA libraries.  NULL with e set where it was not built or
 * cannot start. */
ar_comm *ar_comm_nccl(ar_err *e);

/* Waits for every request (done ones may be passed again: h is NULL). */
int ar_comm_waitall(ar_comm *c, ar_comm_req *r, int n, ar_err *e);

/* Every rank's rc (0 or -1) to every rank: -1 if any failed, and then
 * every rank holds the message of the first rank that failed, as
 * "rank R: <message>" for R > 0 (so rank 0 alone needs to print it). */
int ar_comm_agree(ar_comm *c, int rc, ar_err *e);

/* n floats of backend memory from root to every rank (staged through the
 * host). */
struct ar_backend;
int ar_comm_bcast_floats(ar_comm *c, const struct ar_backend *be, float *x, size_t n, int root, ar_err *e);

#endif
