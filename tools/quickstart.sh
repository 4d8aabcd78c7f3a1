#!/bin/sh
# The README's first command: install, build, fetch the corpus, train the
# quick-start Block AttnRes model (about 7 minutes on 2 cores) and evaluate
# it on the held-out tail of the corpus, leaving the run, its figures and
# the evaluation in runs/quickstart.
#
# Three knobs, from the environment (CI uses them, to run the same path in
# about a minute; tools/test.sh):
#   QUICKSTART_STEPS=N   train N steps instead of the config's 2000
#   QUICKSTART_OUT=DIR   the run directory (default runs/quickstart)
#   QUICKSTART_BUILD=DIR the meson build directory (default build; CI
#                        gives its test build, already compiled)
#
# A second run starts the quick start over in the same directory
# (attnres train --force).
set -eu
cd "$(dirname "$0")/.."
out=${QUICKSTART_OUT:-runs/quickstart}
steps=${QUICKSTART_STEPS:-}
case $steps in
'' | *[!0-9]* | 0*)
    if [ -n "$steps" ]; then
        echo "tools/quickstart.sh: QUICKSTART_STEPS expects a positive integer, got '$steps'" >&2
        exit 2
    fi ;;
esac
tools/install-deps.sh
build=${QUICKSTART_BUILD:-build}
meson setup "$build" --reconfigure >/dev/null 2>&1 || meson setup "$build" >/dev/null
# attnres:executable: the binary, not the static library of the same name
meson compile -C "$build" attnres:executable
tools/get-data.sh
set -- --out "$out" --force
[ -n "$steps" ] && set -- "$@" --set "train.steps=$steps"
"$build/attnres" train configs/quickstart.yaml "$@"
"$build/attnres" eval "$out" --data data/kjv-val.txt > "$out/eval.txt.tmp"
mv "$out/eval.txt.tmp" "$out/eval.txt"
cat "$out/eval.txt"
echo "quick start done: the run, its figures and the evaluation (eval.txt) are in '$out'"
