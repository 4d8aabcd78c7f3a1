/* The exact-resume scaffolding (resumeutil.h). */
#include "resumeutil.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

void tu_resume_init(tu_resume *x)
{
    const char *dir = tu_tmpdir();
    snprintf(x->corpus, sizeof x->corpus, "%s/corpus.txt", dir);
    snprintf(x->a, sizeof x->a, "%s/a", dir);
    snprintf(x->b, sizeof x->b, "%s/b", dir);
    tu_write_corpus_lines(x->corpus, 400, 1);
}

void tu_resume_straight(const tu_resume *x, const ar_config *c, ar_train_result *r)
{
    ar_err e = {{0}};
    ar_train_opts o = {.out_dir = x->a};
    cr_assert_eq(ar_train(c, &o, r, &e), 0, "%s", e.msg);
}

/* The interrupt flag, raised by the progress callback at the step ud
 * points to. */
static volatile sig_atomic_t stop_flag;
static void stop_at(const ar_progress *p, void *ud)
{
    if (p->step == *(const long *)ud)
        stop_flag = 1;
}

void tu_resume_stop(const tu_resume *x, const ar_config *c, long at, ar_train_result *r)
{
    ar_err e = {{0}};
    stop_flag = 0;
    ar_train_opts o = {.out_dir = x->b, .progress = stop_at, .ud = &at, .interrupt = &stop_flag};
    cr_assert_eq(ar_train(c, &o, r, &e), 0, "%s", e.msg);
}

int tu_resume_continue(const tu_resume *x, const ar_config *c, ar_train_result *r, ar_err *e)
{
    ar_train_opts o = {.out_dir = x->b, .resume = 1};
    return ar_train(c, &o, r, e);
}

void tu_resume_expect_same_weights(const tu_resume *x)
{
    size_t na, nb;
    char *ta = tu_model_bytes(x->a, &na), *tb = tu_model_bytes(x->b, &nb);
    cr_assert_eq(na, nb);
    cr_expect(memcmp(ta, tb, na) == 0, "resumed weights differ from the uninterrupted run");
    free(ta);
    free(tb);
}
