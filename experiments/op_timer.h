/* The op timer of `attnres bench --ops`: a copy of the CPU backend's table
 * whose compute ops add their wall time, their calls and (matrix products
 * and attention) their FLOPs to a tally, so a step's time can be split by op
 * and the gap between the achieved rate and the sgemm ceiling named by op
 * (attnres-bench(1) OPS).
 *
 * Only the CPU backend: a device backend's ops return before their work is
 * done, so host-side times say nothing of it.  One timer per process: the
 * wrapped entries tally into the one set by ar_op_timer_into. */
#ifndef AR_OP_TIMER_H
#define AR_OP_TIMER_H

#include "../lib/backend.h"

/* The timed ops, in lib/backend.h's order (memory, device and thread
 * entries are not timed). */
typedef enum {
    AR_OP_ZERO, AR_OP_COPY, AR_OP_ADD, AR_OP_SCALE, AR_OP_SUMSQ,
    AR_OP_EMBEDDING_FWD, AR_OP_EMBEDDING_BWD,
    AR_OP_RMSNORM_FWD, AR_OP_RMSNORM_BWD,
    AR_OP_MATMUL_FWD, AR_OP_MATMUL_BWD,
    AR_OP_ROPE_FWD, AR_OP_ROPE_BWD,
    AR_OP_ATTENTION_FWD, AR_OP_ATTENTION_BWD,
    AR_OP_ROPE_FWD_AT, AR_OP_ATTENTION_DECODE, AR_OP_MATVEC_FWD,
    AR_OP_SWIGLU_FWD, AR_OP_SWIGLU_BWD,
    AR_OP_DEPTH_ATTN_FWD, AR_OP_DEPTH_ATTN_BWD,
    AR_OP_DEPTH_FWD_INTER, AR_OP_DEPTH_FWD_MERGE, AR_OP_DEPTH_BWD_INTRA, AR_OP_DEPTH_BWD_INTER,
    AR_OP_DEPTH_MIX_FWD, AR_OP_DEPTH_MIX_BWD, AR_OP_DEPTH_MIX_CDOT, AR_OP_DEPTH_MIX_BWD_CHUNK,
    AR_OP_WSUM_FWD, AR_OP_WSUM_BWD, AR_OP_WMIX_FWD, AR_OP_WMIX_BWD,
    AR_OP_XENT_FWD, AR_OP_XENT_BWD,
    AR_OP_ADAMW,
    AR_OP_COUNT
} ar_op_id;

/* What the wrapped ops did since the tally was cleared. */
typedef struct {
    double seconds[AR_OP_COUNT];
    double flops[AR_OP_COUNT]; /* counted FLOPs (matmul, matvec, attention; 0 elsewhere) */
    long calls[AR_OP_COUNT];
} ar_op_tally;

/* The op's name as in lib/backend.h ("matmul_fwd"). */
const char *ar_op_name(int op);

/* inner (the CPU backend) with every compute op timed into the tally last
 * given to ar_op_timer_into; NULL where inner is not the CPU backend. */
const ar_backend *ar_op_timer(const ar_backend *inner);

/* Where the wrapped ops tally from now on (NULL: nowhere). */
void ar_op_timer_into(ar_op_tally *t);

/* Counted FLOPs, the formula's (docs/reference.md §6.2) per op:
 *   linear out = x W^T (N x in -> N x outd): 2 N in outd forward; the
 *     backward 2 N in outd for dW and as much again for dx when it is wanted;
 *   attention, B sequences of T, nh heads of hd: 4 B nh T^2 hd forward
 *     (q k^T and att v, the full square as the formula counts it) and twice
 *     that backward, so that a layer's attention is 12 d T per token. */
double ar_op_flops_matmul(int N, int in, int outd, int with_dx, int backward);
double ar_op_flops_attention(int B, int T, int nh, int hd, int backward);

#endif
