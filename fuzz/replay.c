/* Runs a fuzz harness over files and directories of inputs without
 * libFuzzer: `replay_NAME fuzz/corpus/NAME` is the regression test of the
 * committed corpus (crashers found by fuzzing are added there).  Built by
 * the normal build with any compiler, so the sanitizer build of the test
 * suite runs it too. */
#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open '%s'\n", path);
        return -1;
    }
    size_t cap = 4096, n = 0, k;
    unsigned char *buf = malloc(cap);
    while ((k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap)
            buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv)
{
    int files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: no such file or directory '%s'\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i]) != 0)
                return 1;
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *de;
        char **names = NULL;
        size_t nn = 0;
        while (d && (de = readdir(d))) {
            if (de->d_name[0] == '.')
                continue;
            names = realloc(names, (nn + 1) * sizeof *names);
            names[nn] = malloc(strlen(argv[i]) + strlen(de->d_name) + 2);
            sprintf(names[nn++], "%s/%s", argv[i], de->d_name);
        }
        if (d)
            closedir(d);
        qsort(names, nn, sizeof *names, by_name);
        for (size_t j = 0; j < nn; j++) {
            if (run_file(names[j]) != 0)
                return 1;
            files++;
            free(names[j]);
        }
        free(names);
    }
    if (files == 0) {
        fprintf(stderr, "replay: no inputs\n");
        return 1;
    }
    printf("replay: %d inputs, no failure\n", files);
    return 0;
}
