#!/bin/sh
# The README's first command: install, build, fetch the corpus, and train the
# quick-start Block AttnRes model (about 10 minutes on 2 cores), leaving the
# run with its figures in runs/quickstart.
set -eu
cd "$(dirname "$0")/.."
tools/install-deps.sh
meson setup build --reconfigure >/dev/null 2>&1 || meson setup build >/dev/null
meson compile -C build attnres
tools/get-data.sh
rm -rf runs/quickstart
build/attnres train configs/quickstart.yaml --out runs/quickstart
build/attnres eval runs/quickstart --data data/kjv-val.txt
