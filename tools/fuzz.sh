#!/bin/sh
# Builds the fuzz harnesses of fuzz/ with clang, libFuzzer, AddressSanitizer
# and UBSan, and fuzzes each for a bounded time (docs/reliability.md,
# "Hostile inputs"; tools/test.sh runs this with 7 seconds each).
#
#   tools/fuzz.sh [SECONDS [HARNESS...]]
#
# The harnesses are built and fuzzed AR_FUZZ_JOBS at a time (default: the
# machine's cores), each on one core: the wall time is SECONDS times the
# harnesses over the jobs, not their sum.
# SECONDS defaults to 10; HARNESS is any of config, safetensors, tokens,
# token_set, metrics, csv, bpe (default: all).  Each harness starts from
# its committed seed corpus fuzz/corpus/NAME (read-only) plus a scratch
# corpus in build-fuzz/corpus/NAME that persists between runs.  A crash, an
# out-of-bounds access, a leak, undefined behaviour, a timeout or a failed
# message check stops the run; the input is kept as build-fuzz/crash-NAME-*
# and the script exits 1.  To keep a crasher as a regression test, copy it
# into fuzz/corpus/NAME/ (the test suite replays that folder).
set -eu
cd "$(dirname "$0")/.."
secs=${1:-10}
[ $# -gt 0 ] && shift
all="config safetensors tokens token_set metrics csv bpe"
harnesses=${*:-$all}
out=${AR_FUZZ_BUILD:-build-fuzz}
cc=${CLANG:-clang}
mkdir -p "$out"

jobs=${AR_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
case $jobs in '' | *[!0-9]* | 0) echo "tools/fuzz.sh: AR_FUZZ_JOBS must be a positive integer, not '$jobs'" >&2; exit 2 ;; esac
for h in $harnesses; do
    case " $all " in *" $h "*) ;; *) echo "tools/fuzz.sh: unknown harness '$h' (expected one of: $all)" >&2; exit 2 ;; esac
done

# group G of the harnesses (0 <= G < jobs), round robin
group() {
    i=0 g=
    for h in $harnesses; do
        [ $((i % jobs)) -eq "$1" ] && g="$g $h"
        i=$((i + 1))
    done
    echo "$g"
}

flags="-g -O1 -std=gnu11 -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined"
gsl_libs=$(pkg-config --libs gsl)
build() {
    h=$1
    case $h in
    config) src="formats/config.c core/config.c core/blocks.c core/error.c" libs="-lyaml" ;;
    safetensors) src="formats/safetensors.c formats/json.c core/atomic.c formats/config.c core/config.c core/blocks.c core/error.c" libs="-lyaml -lz" ;;
    tokens) src="formats/tokens.c core/atomic.c core/error.c" libs="-lz" ;;
    token_set) src="formats/token_set.c core/error.c" libs="-lz" ;;
    metrics) src="formats/metrics.c formats/json.c core/atomic.c core/error.c" libs="" ;;
    csv) src="formats/csv.c formats/json.c experiments/scaling.c experiments/sweep_grid.c core/error.c" libs="$gsl_libs -lm" ;;
    bpe)
        # the built-in GPT-2 vocabulary, compiled in as meson.build does
        "$cc" -O1 -o "$out/embed" cmd/embed.c
        "$out/embed" --string "$out/gpt2_encoder.c" ar_gpt2_encoder_json data/gpt2/encoder.json
        "$out/embed" --string "$out/gpt2_vocab.c" ar_gpt2_vocab_bpe data/gpt2/vocab.bpe
        src="formats/bpe_vocab.c formats/bpe_pretok.c formats/bpe_merge.c formats/bpe_encode.c formats/bpe_decode.c
             formats/json.c core/error.c $out/gpt2_encoder.c $out/gpt2_vocab.c"
        # -Wno-trigraphs: the merges hold '??-' (meson.build says the same)
        libs="$(pkg-config --libs libpcre2-8) -Wno-trigraphs"
        ;;
    esac
    # shellcheck disable=SC2086
    "$cc" $flags -o "$out/fuzz_$h" "fuzz/fuzz_$h.c" $src $libs
}

# fuzz one harness: prints its line, leaves 0 or 1 in $out/status-NAME
fuzz() {
    h=$1
    echo 1 >"$out/status-$h"
    mkdir -p "$out/corpus/$h"
    dict=""
    [ -f "fuzz/$h.dict" ] && dict="-dict=fuzz/$h.dict"
    start=$(date +%s)
    # shellcheck disable=SC2086
    if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        "$out/fuzz_$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
        -artifact_prefix="$out/crash-$h-" -print_final_stats=1 $dict \
        "$out/corpus/$h" "fuzz/corpus/$h" >"$out/fuzz-$h.log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/fuzz-$h.log")
        echo "fuzz $h: $(($(date +%s) - start)) s, ${runs:-?} inputs, no failure"
        echo 0 >"$out/status-$h"
    else
        echo "fuzz $h: FAILED (log: $out/fuzz-$h.log)" >&2
        grep -E "ERROR|fuzz check failed|Test unit written" "$out/fuzz-$h.log" >&2 || tail -20 "$out/fuzz-$h.log" >&2
    fi
}

# each group builds then fuzzes its harnesses in turn, the groups at once;
# a failed build leaves its harness's status at 1
for g in $(seq 0 $((jobs - 1))); do
    (
        for h in $(group "$g"); do
            echo 1 >"$out/status-$h"
            if build "$h"; then
                fuzz "$h"
            else
                echo "fuzz $h: the harness did not build" >&2
            fi
        done
    ) &
done
wait
status=0
for h in $harnesses; do
    [ "$(cat "$out/status-$h" 2>/dev/null)" = 0 ] || status=1
done
exit $status
