/* The MPI communicator (comm.h): MPI_COMM_WORLD of an mpirun launch, with
 * errors returned (MPI_ERRORS_RETURN) and reported with the rank. */
#ifdef AR_HAVE_MPI
#include <limits.h>
#include <stdio.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "watchdog.h"

void ar_comm_set_world(ar_comm *c);

/* MPI_COMM_WORLD, or a split of it (impl holds its MPI_Comm) */
static MPI_Comm mc(const ar_comm *c) { return c->impl ? *(MPI_Comm *)c->impl : MPI_COMM_WORLD; }

static int mpi_fail(ar_comm *c, int code, const char *what, ar_err *e)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error %d", code);
    return ar_fail(e, "rank %d of %d: %s failed: %s", c->rank, c->size, what, msg);
}

/* MPI counts are ints: larger messages go as multiples of a 1 MiB type */
static int counted(size_t bytes, int *count, MPI_Datatype *type)
{
    static MPI_Datatype mib = MPI_DATATYPE_NULL;
    if (bytes <= INT_MAX) {
        *count = (int)bytes;
        *type = MPI_BYTE;
        return 0;
    }
    if (bytes % (1u << 20) || bytes / (1u << 20) > INT_MAX)
        return -1;
    if (mib == MPI_DATATYPE_NULL) {
        MPI_Type_contiguous(1 << 20, MPI_BYTE, &mib);
        MPI_Type_commit(&mib);
    }
    *count = (int)(bytes >> 20);
    *type = mib;
    return 0;
}

static int too_big(ar_comm *c, size_t bytes, ar_err *e)
{
    return ar_fail(e, "rank %d: a message of %zu bytes is more than MPI counts (2 GiB, or whole MiB beyond)",
                   c->rank, bytes);
}

/* A nonblocking send (send) or receive of bytes with peer. */
static int post(ar_comm *c, int send, void *buf, size_t bytes, int peer, int tag, ar_comm_req *r, ar_err *e)
{
    int n;
    MPI_Datatype t;
    if (counted(bytes, &n, &t) != 0)
        return too_big(c, bytes, e);
    MPI_Request *q = malloc(sizeof *q);
    int rc = send ? MPI_Isend(buf, n, t, peer, tag, mc(c), q)
                  : MPI_Irecv(buf, n, t, peer, tag, mc(c), q);
    if (rc != MPI_SUCCESS) {
        free(q);
        return mpi_fail(c, rc, send ? "MPI_Isend" : "MPI_Irecv", e);
    }
    r->h = q;
    return 0;
}

static int mpi_isend(ar_comm *c, const void *buf, size_t bytes, int peer, int tag, ar_comm_req *r, ar_err *e)
{
    return post(c, 1, (void *)buf, bytes, peer, tag, r, e);
}

static int mpi_irecv(ar_comm *c, void *buf, size_t bytes, int peer, int tag, ar_comm_req *r, ar_err *e)
{
    return post(c, 0, buf, bytes, peer, tag, r, e);
}

static int mpi_test(ar_comm *c, ar_comm_req *r, int *done, ar_err *e)
{
    *done = 1;
    if (!r->h)
        return 0;
    int rc = MPI_Test(r->h, done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
        return mpi_fail(c, rc, "MPI_Test", e);
    if (*done) {
        free(r->h);
        r->h = NULL;
    }
    return 0;
}

static int mpi_bcast(ar_comm *c, void *buf, size_t bytes, int root, ar_err *e)
{
    int n;
    MPI_Datatype t;
    if (counted(bytes, &n, &t) != 0)
        return too_big(c, bytes, e);
    ar_watchdog_arm("MPI_Bcast");
    int rc = MPI_Bcast(buf, n, t, root, mc(c));
    ar_watchdog_disarm();
    return rc == MPI_SUCCESS ? 0 : mpi_fail(c, rc, "MPI_Bcast", e);
}

static int mpi_allgather(ar_comm *c, const void *in, void *out, size_t bytes, ar_err *e)
{
    if (bytes > INT_MAX)
        return too_big(c, bytes, e);
    ar_watchdog_arm("MPI_Allgather");
    int rc = MPI_Allgather(in == out ? MPI_IN_PLACE : in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE,
                           mc(c));
    ar_watchdog_disarm();
    return rc == MPI_SUCCESS ? 0 : mpi_fail(c, rc, "MPI_Allgather", e);
}

/* Only ever used where each entry is non-zero on one rank at most, so the
 * order MPI adds in cannot change a bit (x + 0 = x). */
static int mpi_sum(ar_comm *c, double *x, size_t n, ar_err *e)
{
    if (n > INT_MAX)
        return too_big(c, n * sizeof(double), e);
    ar_watchdog_arm("MPI_Allreduce");
    int rc = MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_DOUBLE, MPI_SUM, mc(c));
    ar_watchdog_disarm();
    return rc == MPI_SUCCESS ? 0 : mpi_fail(c, rc, "MPI_Allreduce", e);
}

static void mpi_finalize(ar_comm *c)
{
    (void)c;
    int done = 0;
    MPI_Finalized(&done);
    if (!done)
        MPI_Finalize();
}

static const ar_comm_ops mpi_ops;

static int mpi_split(ar_comm *c, int color, int key, ar_comm **out, ar_err *e)
{
    MPI_Comm *sub = malloc(sizeof *sub);
    int rc = MPI_Comm_split(mc(c), color, key, sub);
    if (rc != MPI_SUCCESS) {
        free(sub);
        return mpi_fail(c, rc, "MPI_Comm_split", e);
    }
    MPI_Comm_set_errhandler(*sub, MPI_ERRORS_RETURN);
    ar_comm *n = calloc(1, sizeof *n);
    MPI_Comm_rank(*sub, &n->rank);
    MPI_Comm_size(*sub, &n->size);
    n->local_rank = c->local_rank;
    n->ops = &mpi_ops;
    n->impl = sub;
    *out = n;
    return 0;
}

/* Float sums for the data-parallel replicas of a pipeline stage: MPI's
 * order of adds is its own (the pipelined run matches one process within
 * a tolerance, not bit for bit: pipe.h). */
static int mpi_sum_floats(ar_comm *c, float *x, size_t n, ar_err *e)
{
    while (n > 0) {
        int k = n > (size_t)INT_MAX ? INT_MAX : (int)n;
        ar_watchdog_arm("MPI_Allreduce");
        int rc = MPI_Allreduce(MPI_IN_PLACE, x, k, MPI_FLOAT, MPI_SUM, mc(c));
        ar_watchdog_disarm();
        if (rc != MPI_SUCCESS)
            return mpi_fail(c, rc, "MPI_Allreduce", e);
        x += k;
        n -= (size_t)k;
    }
    return 0;
}

static void mpi_release(ar_comm *c)
{
    if (!c || !c->impl)
        return;
    int done = 0;
    MPI_Finalized(&done);
    if (!done)
        MPI_Comm_free((MPI_Comm *)c->impl);
    free(c->impl);
    free(c);
}

static const ar_comm_ops mpi_ops = {
    .name = "mpi",
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .test = mpi_test,
    .bcast = mpi_bcast,
    .allgather = mpi_allgather,
    .sum_doubles = mpi_sum,
    .finalize = mpi_finalize,
    .split = mpi_split,
    .sum_floats = mpi_sum_floats,
    .release = mpi_release,
};

/* The same world in NCCL's way (comm.h: group, add, sync), for the tests:
 * the send and the receive of a group go out together when it closes, and
 * complete there, so every request is done at once and an add that follows
 * a receive finds its data, as NCCL's stream order guarantees on a GPU.
 * Chosen by ATTNRES_TEST_STREAM_ORDER=1: the MPI tests then run dp.c's
 * NCCL path, all but the NCCL calls. */
typedef struct {
    int n;
    struct {
        int send;
        void *buf;
        size_t bytes;
        int peer, tag;
    } op[2];
} pending_group;
static pending_group grp;

static int ord_queue(ar_comm *c, int send, void *buf, size_t bytes, int peer, int tag, ar_comm_req *r, ar_err *e)
{
    r->h = NULL;
    if (grp.n == 2)
        return ar_fail(e, "rank %d: more than a send and a receive in one exchange", c->rank);
    grp.op[grp.n].send = send;
    grp.op[grp.n].buf = buf;
    grp.op[grp.n].bytes = bytes;
    grp.op[grp.n].peer = peer;
    grp.op[grp.n++].tag = tag;
    return 0;
}

static int ord_isend(ar_comm *c, const void *buf, size_t bytes, int peer, int tag, ar_comm_req *r, ar_err *e)
{
    return ord_queue(c, 1, (void *)buf, bytes, peer, tag, r, e);
}

static int ord_irecv(ar_comm *c, void *buf, size_t bytes, int peer, int tag, ar_comm_req *r, ar_err *e)
{
    return ord_queue(c, 0, buf, bytes, peer, tag, r, e);
}

static int ord_group(ar_comm *c, int begin, ar_err *e)
{
    if (begin) {
        grp.n = 0;
        return 0;
    }
    ar_comm_req q[2] = {{NULL}, {NULL}};
    int rc = 0;
    for (int i = 0; i < grp.n && rc == 0; i++)
        rc = post(c, grp.op[i].send, grp.op[i].buf, grp.op[i].bytes, grp.op[i].peer, grp.op[i].tag, &q[i], e);
    grp.n = 0;
    return rc == 0 ? ar_comm_waitall(c, q, 2, e) : -1;
}

static void ord_add(ar_comm *c, float *y, const float *x, size_t n)
{
    (void)c;
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

static int ord_sync(ar_comm *c, ar_err *e)
{
    (void)c, (void)e;
    return 0;
}

static const ar_comm_ops ordered_ops = {
    .name = "mpi-stream-order",
    .isend = ord_isend,
    .irecv = ord_irecv,
    .test = mpi_test,
    .bcast = mpi_bcast,
    .allgather = mpi_allgather,
    .sum_doubles = mpi_sum,
    .finalize = mpi_finalize,
    .split = mpi_split,
    .sum_floats = mpi_sum_floats,
    .release = mpi_release,
    .group = ord_group,
    .add = ord_add,
    .sync = ord_sync,
};

ar_comm *ar_comm_mpi_init(int *argc, char ***argv, ar_err *e)
{
    static ar_comm world;
    int provided, rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) {
        ar_fail(e, "MPI_Init failed (error %d)", rc);
        return NULL;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &world.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world.size);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world.rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &world.local_rank);
    MPI_Comm_free(&local);
    const char *order = getenv("ATTNRES_TEST_STREAM_ORDER");
    world.ops = order && strcmp(order, "1") == 0 ? &ordered_ops : &mpi_ops;
    ar_comm_set_world(&world);
    return &world;
}
#endif
