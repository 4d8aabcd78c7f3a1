#!/bin/sh
# The README's second command (and CI's): install, build, run the whole test
# suite; then the file-format tests again under AddressSanitizer and UBSan.
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
    meson test -C build-asan --print-errorlogs --num-processes 2 json safetensors config data cli
