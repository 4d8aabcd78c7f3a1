/* Exact resume, the scaffolding the tests of it share: run a trains a
 * config straight through; run b trains the same config, is stopped by the
 * interrupt flag (ar_train saves a checkpoint and returns) and resumes to
 * the end; the two model.safetensors must hold the same bytes.  Each part is
 * its own call, so that a test can check more between them (the stopped
 * run's files, a resume that must be refused). */
#ifndef AR_TEST_RESUMEUTIL_H
#define AR_TEST_RESUMEUTIL_H

#include "core/config.h"
#include "core/error.h"
#include "run/train.h"

typedef struct {
    char corpus[2048]; /* tu_write_corpus_lines(corpus, 400, 1) */
    char a[4200];      /* the run straight through */
    char b[4200];      /* the run stopped and resumed */
} tu_resume;

/* A fresh directory (tu_tmpdir) holding the corpus, and the two runs'
 * paths in it. */
void tu_resume_init(tu_resume *x);
/* Trains c into x->a; asserts that ar_train succeeds. */
void tu_resume_straight(const tu_resume *x, const ar_config *c, ar_train_result *r);
/* Trains c into x->b, raising the interrupt flag when progress reports
 * step `at` (progress comes at logged steps: c's train.log_every must log
 * it); asserts that ar_train succeeds.  Where it stopped is r's, for the
 * caller to check. */
void tu_resume_stop(const tu_resume *x, const ar_config *c, long at, ar_train_result *r);
/* Resumes x->b with c, without progress or interrupt: ar_train's status. */
int tu_resume_continue(const tu_resume *x, const ar_config *c, ar_train_result *r, ar_err *e);
/* Asserts that x->a's and x->b's weights have the same size and expects
 * them to be the same bytes (tu_model_bytes). */
void tu_resume_expect_same_weights(const tu_resume *x);

#endif
