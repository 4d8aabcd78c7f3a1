#!/bin/sh
# The README's second command (and CI's): install, build, run the whole test
# suite; then the whole suite again under AddressSanitizer, LeakSanitizer and
# UBSan (tools/lsan.supp lists the caches fontconfig never frees), built
# for any x86-64 (-Dnative=false: our own loops without FMA or wide
# vectors), with every linear-layer product on OpenBLAS (-Dcpu_gemm=openblas
# -Dblis_products=disabled, where the main build runs the small ones on
# libxsmm and, on an AMD CPU, the large forward and dx ones on BLIS), and run with
# OpenBLAS's Sandybridge kernel (AVX without FMA), so that one machine
# checks the suite's bounds under a second build, both product libraries
# and a second BLAS kernel (all but the suite 'network', test_multihost,
# whose subject is the network between hosts, not memory); then the
# tests whose results go through the CBLAS once more on a build with
# BLIS under every product (-Dblas=blis -Dcpu_gemm=openblas); then a
# short bounded fuzz run of every fuzz harness (tools/fuzz.sh, clang and
# libFuzzer, 7 seconds each, one a core); then the README's first command,
# tools/quickstart.sh, shortened to 60 steps, on the test build, into build-test/quickstart,
# checking that it leaves every file it promises.  The main build compiles the CUDA backend
# where the toolkit is installed (its tests skip without a GPU; without one,
# for sm_90 only); the sanitizer build leaves it out (nvcc does not take
# -fsanitize).
# A failing test run does not stop the script: every stage runs, the
# failed ones are listed at the end, and the exit status is 1.
set -eu
cd "$(dirname "$0")/.."
tools/install-deps.sh
# the CUDA toolkit's usual place, where it is installed but not on PATH
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null 2>&1; then
    PATH=$PATH:/usr/local/cuda/bin
    export PATH
fi
t0=$(date +%s)
took() {
    echo "tools/test.sh: $1 took $(($(date +%s) - t0)) s"
    t0=$(date +%s)
}
# Without a GPU to run it, the CUDA backend is only compiled (its tests
# skip): for one architecture, sm_90, into PTX alone (no ptxas), which
# takes about a third of the time of machine code for the default two.
test_opts=
if ! nvidia-smi -L >/dev/null 2>&1; then
    test_opts="-Dgpu_arch=90 -Dgpu_machine_code=false"
fi
# shellcheck disable=SC2086
meson setup build-test $test_opts --reconfigure >/dev/null 2>&1 || meson setup build-test $test_opts >/dev/null
meson compile -C build-test
took "the build"
failed=
meson test -C build-test --print-errorlogs --num-processes 2 || failed="$failed main"
took "the tests"
# -g1: line tables only, all a sanitizer's stack trace reads (full -g took
# about a quarter of the build's time); -O1: the instrumented CPU kernels
# compile in a third of -O2's time (lib/cpu/mixer_cpu.c 8 s against 24)
# and the tests run as fast (206 s against 194-209 at -O2, Zen 3)
asan_opts="-Db_sanitize=address,undefined -Dbuildtype=debugoptimized -Doptimization=1 -Dc_args=-g1 -Dcuda=disabled -Dnative=false -Dcpu_gemm=openblas -Dblis_products=disabled"
# shellcheck disable=SC2086
meson setup build-asan $asan_opts --reconfigure >/dev/null 2>&1 || meson setup build-asan $asan_opts >/dev/null
meson compile -C build-asan
took "the sanitizer build"
OPENBLAS_CORETYPE=Sandybridge \
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    LSAN_OPTIONS="suppressions=$(pwd)/tools/lsan.supp:print_suppressions=0" \
    meson test -C build-asan --print-errorlogs --num-processes 2 --no-suite network || failed="$failed sanitizers"
took "the sanitizer tests"
# The products' other CBLAS (-Dblas=blis), every product on it
# (-Dcpu_gemm=openblas leaves libxsmm out): the tests of the products,
# of the model and training on them, of GSL's fits (its cblas), of the
# guard backend (nothing read outside an op's buffers) and of bench's
# naming of the library; the rest of the suite runs the same paths at
# other shapes, and compiling only these keeps the stage short.  One test
# at a time: BLIS's threads spin at
# their barriers, and two tests of two threads each on two cores took
# minutes instead of seconds.
blis_tests="matmul_cpu ops depth_cpu model train optim_muon scaling residual_variants model_head device_discipline bench"
blis_opts="-Dblas=blis -Dcpu_gemm=openblas -Dcuda=disabled"
# shellcheck disable=SC2086
meson setup build-blis $blis_opts --reconfigure >/dev/null 2>&1 || meson setup build-blis $blis_opts >/dev/null
# shellcheck disable=SC2086
meson compile -C build-blis attnres $(for t in $blis_tests; do echo "test_$t"; done)
# shellcheck disable=SC2086
meson test -C build-blis --no-rebuild --print-errorlogs --num-processes 1 $blis_tests || failed="$failed blis"
took "the BLIS build and its tests"
tools/fuzz.sh 7 || failed="$failed fuzzers"
took "the fuzzers"
# The README's first command, as a user runs it but shorter.
qs=build-test/quickstart
if QUICKSTART_STEPS=60 QUICKSTART_OUT=$qs QUICKSTART_BUILD=build-test tools/quickstart.sh; then
    before=$failed
    for f in model.safetensors optimizer.safetensors config.yaml metrics.jsonl loss.png dynamics.png depth_attn.png eval.txt; do
        if [ ! -s "$qs/$f" ]; then
            echo "tools/test.sh: tools/quickstart.sh left no $qs/$f" >&2
            failed="$failed quickstart"
        fi
    done
    grep -q '^bits/byte' "$qs/eval.txt" 2>/dev/null || {
        echo "tools/test.sh: $qs/eval.txt holds no evaluation" >&2
        failed="$failed quickstart"
    }
    [ "$failed" = "$before" ] && echo "quick start: every output present in $qs"
else
    failed="$failed quickstart"
fi
took "the quick start"
# One closing tally of the Criterion test cases of the main run.
grep -h 'Synthesis: Tested' build-test/meson-logs/testlog.txt |
    sed -E 's/.*Passing: ([0-9]+) \| Failing: ([0-9]+) \| Crashing: ([0-9]+).*/\1 \2 \3/' |
    awk '{p += $1; f += $2 + $3} END {printf "tests: %d passed, %d failed\n", p, f}'
if [ -n "$failed" ]; then
    # what failed, by name, where the end of a long log shows it: each
    # test program whose status was not 0 (or 77, skipped) and each
    # Criterion case that failed or crashed
    for d in build-test build-asan build-blis; do
        log=$d/meson-logs/testlog.txt
        [ -f "$log" ] || continue
        awk -v d="$d" '/^test: / {sub(/^test: +/, ""); t = $0}
            /^result: / && !/exit status (0|77)$/ {sub(/^result: +/, ""); print "tools/test.sh: " d ": " t ": " $0}' "$log" >&2
        grep -h -E '^\[(FAIL|CRASH)\]|Assertion Failed' "$log" | sed "s|^|tools/test.sh: $d: |" | head -40 >&2
    done
    echo "tools/test.sh: these runs failed:$failed (their logs: build-test/meson-logs, build-asan/meson-logs, build-blis/meson-logs)" >&2
    exit 1
fi
