/* The op timer (op_timer.h): each op of a backend's table (lib/ops.def, and
 * the zero entry) wrapped in a wait for the device and a clock read before,
 * and the same after, while a tally is set. */
#include "op_timer.h"

#include "../core/clock.h"

static const ar_backend *inner;
static ar_backend table;
static ar_op_tally *tally;

static void count(int op, double t0, double flops)
{
    if (!tally)
        return;
    tally->seconds[op] += ar_now_s() - t0;
    tally->flops[op] += flops;
    tally->calls[op]++;
}

/* The words of lib/ops.def's "uses": only FLOPS counts here. */
#define DEV(p, n)
#define DEV_OPT(p, n)
#define DEV_IF(c, p, n)
#define LIST(l, len, n)
#define LIST_OPT(l, len, n)
#define ATT_STATE(p, B, T, nh)
#define HOST(p)
#define HOST_ARRAY(v, len)
#define EACH(i, len, words)
#define WHEN(c, words)
#define FLOPS(x) flops = (x);

/* w_<op>: untimed while no tally is set; else the op between two clock
 * reads, each after a wait for the device, tallied with its counted FLOPs
 * (taken from the arguments before the call) */
#define CALL_void(call)                                                                            \
    call;                                                                                          \
    inner->sync();                                                                                 \
    count(op, t0, flops);
#define CALL_double(call)                                                                          \
    double r = call;                                                                               \
    inner->sync();                                                                                 \
    count(op, t0, flops);                                                                          \
    return r;
#define AR_OP(ret, name, params, args, uses)                                                       \
    static ret w_##name params                                                                     \
    {                                                                                              \
        if (!tally)                                                                                \
            return inner->name args;                                                               \
        const int op = AR_OP_##name;                                                               \
        double flops = 0;                                                                          \
        uses inner->sync();                                                                        \
        double t0 = ar_now_s();                                                                    \
        CALL_##ret(inner->name args)                                                               \
    }
#include "../lib/ops.def"
#undef AR_OP

/* zero is a memory entry, not an op, but timed as one */
static void w_zero(void *p, size_t b)
{
    if (!tally) {
        inner->zero(p, b);
        return;
    }
    inner->sync();
    double t0 = ar_now_s();
    inner->zero(p, b);
    inner->sync();
    count(AR_OP_zero, t0, 0);
}

static const char *const names[AR_OP_COUNT] = {
    "zero",
#define AR_OP(ret, name, params, args, uses) #name,
#include "../lib/ops.def"
#undef AR_OP
};

const char *ar_op_name(int op) { return op >= 0 && op < AR_OP_COUNT ? names[op] : "?"; }

void ar_op_timer_into(ar_op_tally *t) { tally = t; }

const ar_backend *ar_op_timer(const ar_backend *be)
{
    inner = be;
    table = *be;
    table.zero = w_zero;
#define AR_OP(ret, name, params, args, uses) table.name = w_##name;
#include "../lib/ops.def"
#undef AR_OP
    return &table;
}
