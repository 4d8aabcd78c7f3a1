/* Error kinds (core/error.h): ar_fail, ar_fail_kind and ar_wrap, and the
 * kind of the checkpoint's refusal to save non-finite weights, which
 * training tells apart from the other failures of a save. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include "core/config.h"
#include "core/error.h"
#include "lib/backend.h"
#include "lib/model.h"
#include "run/checkpoint.h"
#include "testutil.h"

Test(error, zero_initialised_is_other)
{
    ar_err e = {{0}};
    cr_expect_eq(e.kind, AR_ERR_OTHER);
    cr_expect_str_eq(e.msg, "");
}

Test(error, fail_kind_sets_the_kind_and_fail_resets_it)
{
    ar_err e = {{0}};
    cr_expect_eq(ar_fail_kind(&e, AR_ERR_NOT_FOUND, "'%s' not found", "x.txt"), -1);
    cr_expect_eq(e.kind, AR_ERR_NOT_FOUND);
    cr_expect_str_eq(e.msg, "'x.txt' not found");
    /* a new message replaces the old one, kind included */
    cr_expect_eq(ar_fail(&e, "something else"), -1);
    cr_expect_eq(e.kind, AR_ERR_OTHER);
    cr_expect_str_eq(e.msg, "something else");
    /* a message is one line, whatever its kind */
    ar_fail_kind(&e, AR_ERR_FORMAT, "a\nb");
    cr_expect_str_eq(e.msg, "a?b");
    cr_expect_eq(e.kind, AR_ERR_FORMAT);
    /* no ar_err: nothing to fill, still -1 */
    cr_expect_eq(ar_fail_kind(NULL, AR_ERR_IO, "x"), -1);
}

Test(error, wrap_keeps_the_kind)
{
    ar_err e = {{0}};
    ar_fail_kind(&e, AR_ERR_BAD_VALUE, "unknown variant 'nope'");
    ar_wrap(&e, "depth %d", 4);
    ar_wrap(&e, "study");
    cr_expect_str_eq(e.msg, "study: depth 4: unknown variant 'nope'");
    cr_expect_eq(e.kind, AR_ERR_BAD_VALUE);
    ar_fail(&e, "plain");
    ar_wrap(&e, "context");
    cr_expect_eq(e.kind, AR_ERR_OTHER);
}

Test(error, errno_kind)
{
    cr_expect_eq(ar_errno_kind(ENOENT), AR_ERR_NOT_FOUND);
    cr_expect_eq(ar_errno_kind(ENOTDIR), AR_ERR_NOT_FOUND);
    cr_expect_eq(ar_errno_kind(EACCES), AR_ERR_IO);
    cr_expect_eq(ar_errno_kind(ENOSPC), AR_ERR_IO);
}

/* A tiny model on the CPU backend. */
static ar_model *tiny_model(ar_config *c)
{
    ar_config_defaults(c);
    c->model.d_model = 8;
    c->model.n_layer = 1;
    c->model.n_head = 2;
    c->model.d_ff = 8;
    c->model.seq_len = 4;
    ar_model *m;
    ar_err e = {{0}};
    cr_assert_eq(ar_model_create(&m, &c->model, ar_backend_cpu(), 1, &e), 0, "%s", e.msg);
    ar_model_init(m, 1);
    return m;
}

/* Training adds "the checkpoint in DIR (step N) is kept" to a failed save
 * unless the error is AR_ERR_KEPT, whose message already says so. */
Test(error, checkpoint_refusing_non_finite_weights_is_kept)
{
    const char *dir = tu_tmpdir();
    ar_config c;
    ar_model *m = tiny_model(&c);
    ar_err e = {{0}};
    cr_assert_eq(ar_ckpt_save(dir, &c, m, NULL, 1, &e), 0, "%s", e.msg);
    m->params[0] = NAN;
    cr_assert_neq(ar_ckpt_save(dir, &c, m, NULL, 2, &e), 0);
    cr_expect_eq(e.kind, AR_ERR_KEPT, "%s", e.msg);
    cr_expect(strstr(e.msg, "the checkpoint already there is kept"), "%s", e.msg);
    /* a save that fails otherwise (here: no such directory) is not */
    m->params[0] = 0;
    cr_assert_neq(ar_ckpt_save(tu_path(dir, "no/such/dir"), &c, m, NULL, 3, &e), 0);
    cr_expect_neq(e.kind, AR_ERR_KEPT, "%s", e.msg);
    ar_model_free(m);
}
