/* What the tests run under mpirun share (test_dp.c: data parallelism,
 * test_pipe.c: pipeline parallelism). */
#ifndef AR_TEST_MPIUTIL_H
#define AR_TEST_MPIUTIL_H

/* The attnres binary (skips the test where AR_BIN is not set). */
const char *mu_bin(void);

/* Skips the test where this build has no MPI or mpirun is missing. */
void mu_need_mpi(void);

/* mpirun as root needs the first two; --oversubscribe lets 4 ranks share 2
 * cores.  Under AddressSanitizer the ranks skip the leak check: Open MPI
 * keeps what it allocates until exit, from code LeakSanitizer cannot unwind
 * (attnres's own leaks are checked by every one-process test). */
#define MPIRUN                                                                                           \
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "     \
    "mpirun --oversubscribe -x OMP_NUM_THREADS=1 -x ASAN_OPTIONS=detect_leaks=0 -np "

/* mpirun for a job that is to fail: when a rank exits non-zero, mpirun
 * aborts the job and waits odls_base_sigkill_timeout (1 s) for the other
 * ranks before it kills them, even where every rank has already exited;
 * 0 skips that wait (a second a refusal).  Not for jobs whose ranks are to
 * end on a signal of their own (SIGINT, a killed rank): they get the wait. */
#define MPIRUN_REFUSED "OMPI_MCA_odls_base_sigkill_timeout=0 " MPIRUN

/* Runs a shell command in dir; returns its output (malloc'd). */
char *mu_sh(const char *dir, int *st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A fresh directory holding corpus.txt. */
const char *mu_setup_dir(void);

/* The values of key in a metrics file, in order (up to cap). */
int mu_metric_values(const char *file, const char *key, double *out, int cap);

/* The tensors' bytes of two safetensors files are the same. */
void mu_same_tensors(const char *a, const char *b, const char *what);

/* Every tensor of b within rel of a's: ||b - a|| <= rel ||a|| (L2, a
 * tensor of zeros: max |b| <= rel); the largest ratio seen is returned. */
double mu_close_tensors(const char *a, const char *b, double rel, const char *what);

#endif
