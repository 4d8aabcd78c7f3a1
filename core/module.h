/* Optional parts of attnres that link large libraries (the CUDA backend,
 * NCCL) live in modules of their own, loaded with dlopen on first use, so
 * attnres and its tests start without those libraries. */
#ifndef AR_MODULE_H
#define AR_MODULE_H

#include "error.h"

/* Opens module `file` (e.g. "libattnres-cuda.so"), looking, in order, at
 *   $env_var                              (a path: the user's choice, and only it)
 *   <dir of the executable>/file, and ../  (the build tree: attnres in build/,
 *                                          tests in build/tests/)
 *   install_dir/file                      (meson's libdir/attnres; "" = none)
 * with RTLD_LOCAL (its own copy of core/error.c stays its own), and returns
 * its symbol `entry`.  It stays loaded.  NULL with e set ("cannot load the
 * WHAT '...': ..."), what naming the module for people. */
void *ar_module_entry(const char *file, const char *env_var, const char *install_dir, const char *entry,
                      const char *what, ar_err *e);

#endif
