#!/bin/sh
# The README's second command (and CI's): install, build, run the whole test
# suite; then everything but the suites that draw figures (plot, scaling,
# sweep: fontconfig keeps caches that LeakSanitizer reports) again under
# AddressSanitizer and UBSan.
set -eu
cd "$(dirname "$0")/.."
tools/install-deps.sh
meson setup build-test --reconfigure >/dev/null 2>&1 || meson setup build-test >/dev/null
meson compile -C build-test
meson test -C build-test --print-errorlogs --num-processes 2
meson setup build-asan -Db_sanitize=address,undefined -Dbuildtype=debugoptimized --reconfigure >/dev/null 2>&1 ||
    meson setup build-asan -Db_sanitize=address,undefined -Dbuildtype=debugoptimized >/dev/null
meson compile -C build-asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 \
    meson test -C build-asan --print-errorlogs --num-processes 2 json safetensors config data cli csv ops depth model train
# One closing tally of the Criterion test cases of the main run.
grep -h 'Synthesis: Tested' build-test/meson-logs/testlog.txt |
    sed -E 's/.*Passing: ([0-9]+) \| Failing: ([0-9]+) \| Crashing: ([0-9]+).*/\1 \2 \3/' |
    awk '{p += $1; f += $2 + $3} END {printf "tests: %d passed, %d failed\n", p, f}'
