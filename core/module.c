#include "module.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Candidate paths into cand (at most 4); returns how many. */
static int candidates(const char *file, const char *env_var, const char *install_dir, char cand[][PATH_MAX + 64])
{
    int n = 0;
    const char *env = getenv(env_var);
    if (env && *env) {
        snprintf(cand[n++], PATH_MAX + 64, "%s", env);
        return n;
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(cand[n++], PATH_MAX + 64, "%s/%s", exe, file);
            snprintf(cand[n++], PATH_MAX + 64, "%s/../%s", exe, file);
        }
    }
    if (*install_dir)
        snprintf(cand[n++], PATH_MAX + 64, "%s/%s", install_dir, file);
    return n;
}

void *ar_module_entry(const char *file, const char *env_var, const char *install_dir, const char *entry,
                      const char *what, ar_err *e)
{
    /* "cuda backend" -> "cuda": the kind of module a wrong file is not */
    char module_kind[64];
    snprintf(module_kind, sizeof module_kind, "%.*s", (int)strcspn(what, " "), what);
    static char cand[4][PATH_MAX + 64];
    int n = candidates(file, env_var, install_dir, cand);
    void *h = NULL;
    const char *tried = NULL, *why = NULL;
    for (int i = 0; i < n && !h; i++) {
        if (access(cand[i], F_OK) != 0)
            continue;
        tried = cand[i];
        if (!(h = dlopen(cand[i], RTLD_NOW | RTLD_LOCAL)))
            why = dlerror();
    }
    if (!h) {
        if (tried)
            ar_fail(e, "cannot load the %s '%s': %s", what, tried, why ? why : "unknown error");
        else if (getenv(env_var) && *getenv(env_var))
            ar_fail(e, "cannot load the %s '%s' (from %s): no such file", what, cand[0], env_var);
        else
            ar_fail(e, "cannot find the %s '%s' next to the executable or in '%s' (set %s to its path)", what, file,
                    install_dir, env_var);
        return NULL;
    }
    void *sym = dlsym(h, entry);
    if (!sym) {
        ar_fail(e, "'%s' is not an attnres %s module: %s", tried, module_kind, dlerror());
        dlclose(h);
    }
    return sym;
}
