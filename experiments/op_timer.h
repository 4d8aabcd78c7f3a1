/* The op timer of `attnres bench --ops`: a copy of a backend's table
 * whose compute ops add their wall time, their calls and (matrix products
 * and attention) their FLOPs to a tally, so a step's time can be split by op
 * and the gap between the achieved rate and the ceiling named by op
 * (attnres-bench(1) OPS).
 *
 * A device backend's ops return before their work is done: there each
 * timed op waits for the device before its first clock read and after its
 * call (be->sync; the CPU's is a no-op), so its time is the device's for
 * that op, launches included, and the step runs slower than untimed, with
 * the host never ahead of the device.  While no tally is set the entries
 * forward untimed and unsynchronised.  One timer per process: the wrapped
 * entries tally into the one set by ar_op_timer_into. */
#ifndef AR_OP_TIMER_H
#define AR_OP_TIMER_H

#include "../lib/backend.h"

/* The timed ops: the zero entry, then lib/ops.def's in its order (the
 * memory, device and thread entries are not timed).  AR_OP_<name>. */
typedef enum {
    AR_OP_zero,
#define AR_OP(ret, name, params, args, uses) AR_OP_##name,
#include "../lib/ops.def"
#undef AR_OP
    AR_OP_COUNT
} ar_op_id;

/* What the wrapped ops did since the tally was cleared. */
typedef struct {
    double seconds[AR_OP_COUNT];
    double flops[AR_OP_COUNT]; /* counted FLOPs (lib/ops.def's FLOPS: matmul, matvec,
                                * attention; 0 elsewhere) */
    long calls[AR_OP_COUNT];
    double wall;  /* the timed steps' wall time, and their count, where the */
    long steps;   /* tally is of steps timed apart from the paired rounds (a device's) */
} ar_op_tally;

/* The op's name as in lib/ops.def ("matmul_fwd"; "zero"). */
const char *ar_op_name(int op);

/* inner with every compute op timed into the tally last given to
 * ar_op_timer_into. */
const ar_backend *ar_op_timer(const ar_backend *inner);

/* Where the wrapped ops tally from now on (NULL: nowhere). */
void ar_op_timer_into(ar_op_tally *t);

#endif
