/* Shared by the fuzz harnesses (fuzz_*.c).  Each harness defines
 * LLVMFuzzerTestOneInput; tools/fuzz.sh links it with libFuzzer (clang
 * -fsanitize=fuzzer,address,undefined), and fuzz/replay.c turns it into a
 * plain program that runs the committed corpus (a test of the normal
 * build, and of the sanitizer build in CI).
 *
 * The loaders are fuzzed through their real file entry points: the input
 * is written to an in-memory file (memfd) that is opened by its
 * /proc/self/fd path, so what is tested is exactly what `attnres` runs on
 * a file from disk.
 *
 * Besides "no crash, no out-of-bounds access, no leak", every harness
 * checks the project's error contract: a rejection is one non-empty line
 * that names the file. */
#ifndef AR_FUZZ_H
#define AR_FUZZ_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../core/error.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                                                  \
    do {                                                                                                       \
        if (!(cond)) {                                                                                         \
            fprintf(stderr, "fuzz check failed: %s: ", #cond);                                                 \
            fprintf(stderr, __VA_ARGS__);                                                                      \
            fputc('\n', stderr);                                                                               \
            abort();                                                                                           \
        }                                                                                                      \
    } while (0)

/* data[0..size) as file number k (0 .. FUZZ_FILES-1) of this input, for a
 * loader that reads several files: returns its path ("/proc/self/fd/N"),
 * valid until the next call with the same k. */
#define FUZZ_FILES 4
static inline const char *fuzz_as_nth_file(int k, const uint8_t *data, size_t size)
{
    static int fd[FUZZ_FILES] = {-1, -1, -1, -1};
    static char path[FUZZ_FILES][64];
    FUZZ_CHECK(k >= 0 && k < FUZZ_FILES, "file %d of at most %d", k, FUZZ_FILES);
    if (fd[k] < 0) {
        fd[k] = memfd_create("fuzz-input", MFD_CLOEXEC);
        FUZZ_CHECK(fd[k] >= 0, "memfd_create failed");
        snprintf(path[k], sizeof path[k], "/proc/self/fd/%d", fd[k]);
    }
    FUZZ_CHECK(ftruncate(fd[k], 0) == 0, "ftruncate failed");
    size_t done = 0;
    while (done < size) {
        ssize_t n = pwrite(fd[k], data + done, size - done, (off_t)done);
        FUZZ_CHECK(n > 0, "pwrite failed");
        done += (size_t)n;
    }
    return path[k];
}

/* The input as a file: returns its path, valid until the next call. */
static inline const char *fuzz_as_file(const uint8_t *data, size_t size)
{
    return fuzz_as_nth_file(0, data, size);
}

/* A rejection: one non-empty line that names the file. */
static inline void fuzz_check_message(const ar_err *e, const char *name)
{
    FUZZ_CHECK(e->msg[0] != '\0', "a rejection without a message");
    FUZZ_CHECK(strstr(e->msg, name) != NULL, "the message does not name '%s': %s", name, e->msg);
    FUZZ_CHECK(strchr(e->msg, '\n') == NULL, "the message is not one line: %s", e->msg);
}

#endif
