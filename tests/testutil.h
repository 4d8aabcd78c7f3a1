/* Shared helpers for the Criterion tests. */
#ifndef AR_TESTUTIL_H
#define AR_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* A fresh empty directory under $TMPDIR (or /tmp); path is static storage
 * valid until the next call. */
const char *tu_tmpdir(void);
/* Joins dir/name into a static buffer (rotating among 8 buffers). */
const char *tu_path(const char *dir, const char *name);
/* Writes bytes to a file; aborts the test on failure. */
void tu_write_file(const char *path, const void *data, size_t n);
/* Reads a whole file (malloc'd, NUL-terminated); *n gets the size. */
char *tu_read_file(const char *path, size_t *n);

/* The data area of RUN/model.safetensors (every tensor's bytes, in the
 * file's order; malloc'd), for bytewise comparisons of two runs. */
char *tu_model_bytes(const char *run, size_t *n);

/* Training text a byte model learns quickly: `lines` lines of six words
 * from an 8-word vocabulary, drawn by an LCG seeded with seed. */
void tu_write_corpus_lines(const char *path, int lines, unsigned seed);
/* About 12 KB of words from a 9-word vocabulary, sentences ended by ".\n". */
void tu_write_corpus_text(const char *path);

/* Deterministic pseudo-random fill: uniform in [lo, hi). */
void tu_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed);

/* Tolerances from the arithmetic.  Two code paths that compute the same
 * float sum of n terms in different orders (another BLAS kernel, another
 * split over threads, rows in chunks, a fused loop, FMA or not) each lie
 * within gamma(n) * sum |terms| of the exact sum, so they differ by at most
 * 2 gamma(n) * sum |terms|, where gamma(n) = n u / (1 - n u) and u is the
 * unit roundoff: 2^-24 for float, 2^-53 for double (Higham, Accuracy and
 * Stability of Numerical Algorithms, 2nd ed., section 3.1).  A test that
 * compares two such paths names its sums' lengths and the magnitudes they
 * add, and builds its bound from these. */
#define TU_U_FLOAT 0x1p-24
#define TU_U_DOUBLE 0x1p-53
double tu_gamma(double n);   /* float */
double tu_gamma_d(double n); /* double */

/* ||a-b|| / max(||b||, tiny) in double. */
double tu_rel_err(const float *a, const float *b, size_t n);

/* The golden folder ($AR_GOLDEN_DIR, default ../shared/golden) or NULL if
 * it is absent (tests then skip). */
const char *tu_golden_dir(void);
/* Path of the attnres binary ($AR_BIN) or NULL. */
const char *tu_bin(void);
/* Source tree root ($AR_SOURCE_DIR) or NULL. */
const char *tu_source_dir(void);

/* Runs a shell command, capturing stdout+stderr (malloc'd) and the exit
 * status (-1 when killed by a signal). */
char *tu_run(const char *cmd, int *status);
/* tu_run of the attnres binary with the arguments fmt formats (skips the
 * test where AR_BIN is not set). */
char *tu_run_bin(int *status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Expects the "loss", "val_loss" and "grad_norm" values of two
 * metrics.jsonl texts to be the same strings, in order (the lines' timings
 * may differ); seen[k] gets how many of key k were compared. */
void tu_expect_same_metric_values(const char *a, const char *b, const char *what, int seen[3]);

/* Backend B of the comparison tests (test_backend_ops, test_backend_train),
 * by $AR_TEST_BACKEND_B: "cpu", the CPU backend again (*kind 'c'); "emu",
 * lib/cuda's kernels on the CPU through the CUDA emulator, the module
 * libattnres-cuda-emu.so built beside the tests (tests/cuda_emu; *kind
 * 'e'); otherwise the CUDA backend (*kind 'g').  NULL with why (n bytes)
 * set where it is not usable.  The emulator must load where it is asked
 * for: a test then fails instead of skipping (tu_need_backend_b). */
struct ar_backend;
const struct ar_backend *tu_backend_b(char *kind, char *why, size_t n);
/* Skips the test without backend B, but fails it where B is the emulator. */
#define tu_need_backend_b(b, kind, why)                                               \
    do {                                                                              \
        if (!(b)) {                                                                   \
            if ((kind) == 'e')                                                        \
                cr_assert_fail("the CUDA emulator did not load: %s", why);            \
            cr_skip_test("no CUDA backend to compare with: %s", why);                 \
        }                                                                             \
    } while (0)

#endif
