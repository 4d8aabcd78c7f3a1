#!/bin/sh
# Writes the King James Bible, one verse a line (4,137,850 bytes of ASCII),
# to data/kjv.txt: the default training corpus; and its last 5% to
# data/kjv-val.txt.  The text comes from Debian's
# bible-kjv package (tools/install-deps.sh installs it).
set -eu
out=${1:-data/kjv.txt}
if ! command -v bible >/dev/null 2>&1; then
    echo "tools/get-data.sh: the 'bible' program is missing; run tools/install-deps.sh (as root) or apt-get install bible-kjv" >&2
    exit 1
fi
mkdir -p "$(dirname "$out")"
bible -l30000 'gen1:1-rev22:21' | sed -nE 's/^ +[0-9]+ //p' > "$out.tmp"
size=$(wc -c < "$out.tmp")
if [ "$size" -lt 4000000 ]; then
    echo "tools/get-data.sh: expected about 4.1 MB of text, got $size bytes" >&2
    rm -f "$out.tmp"
    exit 1
fi
mv "$out.tmp" "$out"
# The held-out tail: the same bytes as training's validation split at the
# default val_fraction 0.05 (the last floor(0.05 n) bytes), for attnres eval.
val="${out%.txt}-val.txt"
tail -c $((size / 20)) "$out" > "$val.tmp" && mv "$val.tmp" "$val"
echo "wrote $out ($size bytes) and $val ($((size / 20)) bytes, its last 5%)"
