#!/bin/sh
# The floors of the code (docs/developers.md, "Map of the code"), checked over every
# #include "..." of the source tree:
#
#     core <- formats, lib <- viz <- parallel <- run <- experiments <- cmd
#
# A file may include its own floor and those below it; formats and lib are
# side by side and include neither each other.  The compute library (lib/)
# also stays pure compute: no prints, exits, processes or files.  The
# build checks the same direction for calls (meson.build, floor_check_*).
#
#   tools/check-floors.sh [SOURCE_DIR]
set -eu
cd "${1:-$(dirname "$0")/..}"
status=0
for f in $(find core formats lib viz parallel run experiments cmd -name '*.[ch]' -o -name '*.cu' | sort); do
    floor=${f%%/*}
    case $floor in
    core) may="core" ;;
    formats) may="core formats" ;;
    lib) may="core lib" ;;
    viz) may="core formats lib viz" ;;
    parallel) may="core formats lib viz parallel" ;;
    run) may="core formats lib viz parallel run" ;;
    experiments) may="core formats lib viz parallel run experiments" ;;
    cmd) may="core formats lib viz parallel run experiments cmd" ;;
    esac
    dir=$(dirname "$f")
    for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
        # resolve against the including file's folder
        path=$(realpath -m --relative-to=. "$dir/$inc")
        [ -e "$path" ] || continue # generated in the build folder (man_pages.c)
        target=${path%%/*}
        case " $may " in
        *" $target "*) ;;
        *)
            echo "tools/check-floors.sh: $f includes $inc ($path): floor '$floor' may use only: $may" >&2
            status=1
            ;;
        esac
    done
done
# lib/: no prints, exits, processes or files.  An allocation failure
# aborts, as ar_xmalloc does; the one exception is the CUDA module's fatal
# device error, ar_cuda_die in lib/cuda/backend_cuda.cu, left out here.
bad=$(for f in $(find lib -name '*.[ch]' -o -name '*.cu' | sort); do
    awk -v f="$f" '/^extern "C" void ar_cuda_die\(/ { skip = 1 }
        !skip { print f ":" FNR ": " $0 }
        skip && /^}/ { skip = 0 }' "$f"
done | grep -E ': .*(^|[^a-z_])(printf|fprintf|puts|fputs|exit|fork|fopen|popen|system|mkdir|unlink|rename)[[:space:]]*\(' || true)
if [ -n "$bad" ]; then
    echo "tools/check-floors.sh: the compute library (lib/) prints, exits, forks or touches files:" >&2
    echo "$bad" >&2
    status=1
fi
[ $status -eq 0 ] && echo "floors: every #include points down; lib/ is compute only"
exit $status
