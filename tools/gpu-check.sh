#!/bin/sh
# Checks and measures the CUDA backend on a lent GPU machine, from the
# bundle tools/gpu-bundle.sh made (.gpu/attnres-gpu.tar.xz), with nothing
# installed there.  One call of the device tool:
#
#   command 'tools/gpu-check.sh', carry ['.gpu'], timeout_s 560
#
# Stages, each under its own time limit so that one hang cannot cost the
# lease and every finished stage's results come back:
#   info       nvidia-smi, the driver and CUDA versions, where each library
#              was found, every bundled binary's libraries resolved
#   ops        tests/test_backend_ops: every op, forward and backward, CUDA
#              against the CPU on the same random inputs
#   train      tests/test_backend_train: baseline, Full, Block and bf16
#              trained on both backends
#   quickstart the quick-start model, 200 steps from the same seed with
#              --device cuda and on the CPU: the losses compared
#   bench      attnres bench configs/bench-gpt2-small.yaml --device cuda
#              --precision bf16 --ops, baseline, Block (N = 8) and Full,
#              with every op's time (the fused attention's among them)
#              from steps of their own
#   gemm       bench_gemm_cuda at bench-gpt2-small's shape: the linear
#              layers' products on cuBLAS with fp32 operands (the backend's
#              bf16 mode), bf16 operands, bf16 throughout
#   peer       the PyTorch peer on the same GPU under torch.compile:
#              torch_peer.py 16 gpt2-small compile 5 cuda (on an H200
#              baseline and Block compiled and ran in 160 s, Full not)
#   profile    Nsight Compute (ncu, where the machine has it) on one
#              Block N = 8 training step: speed of light, occupancy,
#              launch and warp-state sections of the first forward
#              kernels (attention, depth mixing, cross-entropy) and of the
#              first backward ones (attention, depth), for what to do next
#   sanitize   compute-sanitizer (where the machine has it): racecheck on
#              the attention and depth tests, memcheck on every op's test;
#              what the CUDA emulator cannot show (last: its time is not
#              yet known)
# It writes $OUT/summary.json (each stage: status, seconds, its numbers),
# $OUT/check.log (everything) and $OUT/logs.tar.gz (one log per stage):
# three files, as the device tool brings back at most 8.  The last lines
# it prints are the summary.
#
#   GPU_CHECK_STAGES="ops bench"  only the stages named (info always runs):
#                              for a second call on a lease's last minutes
#   tools/gpu-check.sh --cpu   the same bundle without a GPU: info (no
#                              nvidia-smi), the test executables with the
#                              CPU as both backends, and a few CPU training
#                              steps; tools/gpu-bundle-proof.sh runs this in
#                              a bare Debian root
set -u
cd "$(dirname "$0")/.."
root=$(pwd)
mode=gpu
[ "${1:-}" = "--cpu" ] && mode=cpu
for st in ${GPU_CHECK_STAGES:-}; do
    case $st in
    ops | train | quickstart | bench | gemm | peer | sanitize | profile) ;;
    *)
        echo "tools/gpu-check.sh: GPU_CHECK_STAGES: unknown stage '$st' (expected some of: ops train quickstart bench gemm peer sanitize profile)" >&2
        exit 2
        ;;
    esac
done
OUT=${OUT:-$root/build-gpu-check}
mkdir -p "$OUT"
log=$OUT/check.log
: > "$log"
logs=$OUT/logs
rm -rf "$logs"
mkdir -p "$logs"
summary=$logs/summary.tmp
: > "$summary"
say() { echo "$*" | tee -a "$log"; }

tarball=$root/.gpu/attnres-gpu.tar.xz
if [ ! -s "$tarball" ]; then
    say "tools/gpu-check.sh: no $tarball: run tools/gpu-bundle.sh here first, then carry '.gpu'"
    exit 1
fi
b=${TMPDIR:-/tmp}/attnres-gpu
rm -rf "$b"
tar -C "${TMPDIR:-/tmp}" -xJf "$tarball" || { say "tools/gpu-check.sh: cannot unpack $tarball"; exit 1; }

# Libraries: the bundle's own first; cuBLAS (and the driver, cuDNN, NCCL)
# from the machine: the toolkit's lib64, else the pip nvidia-* packages
# beside its PyTorch; libstdc++ and libgcc_s from the bundle only where
# the machine has none.
cublas_dir=
for d in ${CUDA_HOME:-} /usr/local/cuda /usr/local/cuda-13.0 /usr/local/cuda/targets/x86_64-linux; do
    for sub in lib64 lib; do
        [ -n "$d" ] && ls "$d/$sub"/libcublas.so.1* >/dev/null 2>&1 && { cublas_dir=$d/$sub; break 2; }
    done
done
if [ -z "$cublas_dir" ] && command -v python3 >/dev/null 2>&1; then
    sp=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)
    for s in $sp; do
        f=$(find "$s/nvidia" -name 'libcublas.so.1*' 2>/dev/null | head -n 1)
        [ -n "$f" ] && { cublas_dir=$(dirname "$f"); break; }
    done
fi
ldp=$b/lib
[ -n "$cublas_dir" ] && ldp=$ldp:$cublas_dir
ldconfig -p 2>/dev/null | grep -q 'libstdc++\.so\.6 ' || ldp=$ldp:$b/lib-fallback
LD_LIBRARY_PATH=$ldp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
bin=$b/bin

# stage NAME LIMIT_S COMMAND...: runs it with its log in $logs/NAME.log and
# notes status and seconds for the summary.
stage() {
    name=$1 limit=$2
    shift 2
    case " ${GPU_CHECK_STAGES:-$name} " in
    *" $name "*) ;;
    *)
        say "=== $name: not asked for (GPU_CHECK_STAGES)"
        return 0
        ;;
    esac
    say "=== $name (limit ${limit}s): $*"
    t0=$(date +%s)
    timeout -k 10 "$limit" "$@" > "$logs/$name.log" 2>&1
    rc=$?
    t1=$(date +%s)
    cat "$logs/$name.log" >> "$log"
    case $rc in
    0) st=ok ;;
    124 | 137) st=timeout ;;
    *) st=failed ;;
    esac
    # on the GPU a skipped comparison means the CUDA backend did not run
    if [ "$mode" = gpu ] && [ $st = ok ] && grep -q '\[SKIP\]' "$logs/$name.log"; then
        st=skipped-tests
    fi
    say "=== $name: $st (exit $rc) in $((t1 - t0)) s"
    printf '%s %s %s\n' "$name" "$st" "$((t1 - t0))" >> "$summary"
}

info() {
    echo "bundle: $(head -n 3 "$b/MANIFEST" | tail -n 2 | tr '\n' ' ')"
    echo "machine: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
    if [ "$mode" = gpu ]; then
        timeout 30 nvidia-smi || return 1
        timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
        command -v nvcc >/dev/null 2>&1 && nvcc --version | tail -n 2
    fi
    echo "cuBLAS from: ${cublas_dir:-not found}"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    bad=0
    for f in "$bin"/*; do
        echo "--- ldd $(basename "$f")"
        ldd "$f" | tee "$logs/ldd.tmp"
        # without a GPU only the CUDA module's cuBLAS may be missing
        missing=$(grep 'not found' "$logs/ldd.tmp" | awk '{print $1}')
        for m in $missing; do
            case $mode:$m in
            cpu:libcublas.so.* | cpu:libcublasLt.so.*) echo "($m: from the GPU machine)" ;;
            *) echo "MISSING: $m for $(basename "$f")"; bad=1 ;;
            esac
        done
    done
    rm -f "$logs/ldd.tmp"
    return $bad
}
say "=== info"
t0=$(date +%s)
info > "$logs/info.log" 2>&1
rc=$?
cat "$logs/info.log" >> "$log"
printf 'info %s %s\n' "$([ $rc -eq 0 ] && echo ok || echo failed)" "$(($(date +%s) - t0))" >> "$summary"
say "=== info: exit $rc"

threads=$(nproc)
corpus="--set data.train=$b/data/kjv.txt"
if [ "$mode" = gpu ]; then
    stage ops 100 "$bin/test_backend_ops" --jobs 1 --verbose
    stage train 100 "$bin/test_backend_train" --jobs 1 --verbose
    qs="$bin/attnres train configs/quickstart.yaml $corpus --set train.steps=200 --set train.log_every=10 --force"
    stage quickstart 120 sh -c "$qs --device cuda --out $b/qs-cuda && $qs --device cpu --threads $threads --out $b/qs-cpu"
    stage bench 110 "$bin/attnres" bench configs/bench-gpt2-small.yaml --device cuda --precision bf16 \
        --variants baseline,block8,full --steps 3 --warmup 1 --repeat 3 --ops --json
    stage gemm 60 "$bin/bench_gemm_cuda" 768 2048 16 1024 12 50304
    if [ -f "$b/peer/torch_peer.py" ]; then
        stage peer 200 env PYTHONUNBUFFERED=1 python3 "$b/peer/torch_peer.py" 16 gpt2-small compile 5 cuda
    else
        say "=== peer: skipped (the bundle holds no torch_peer.py)"
        printf 'peer skipped 0\n' >> "$summary"
    fi
    ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
    if [ -n "$ncu" ]; then
        one="$bin/attnres bench configs/bench-gpt2-small.yaml --device cuda --precision bf16 --variants block8"
        one="$one --steps 1 --warmup 0 --repeat 1"
        sections="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats"
        stage profile 90 sh -c "$ncu --target-processes all $sections -c 8 \
            -k regex:'flash_fwd_mma|inter_fwd_kernel|merge_kernel|xent_fwd' $one && \
            $ncu --target-processes all $sections -c 12 -k regex:'flash_bwd|intra_bwd|inter_bwd' $one"
    else
        say "=== profile: skipped (no ncu on this machine)"
        printf 'profile skipped 0\n' >> "$summary"
    fi
    # what the emulator cannot show: races between a GPU's warps, and
    # out-of-bounds or uninitialised device memory
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -n 1)
    if [ -n "$cs" ]; then
        stage sanitize 120 sh -c "$cs --tool racecheck --error-exitcode 9 $bin/test_backend_ops --jobs 1 \
            --filter 'backend_ops/@(attention|matmul_bf16|depth_two_phase)' && \
            $cs --tool memcheck --error-exitcode 9 $bin/test_backend_ops --jobs 1 \
            --filter 'backend_ops/!(cuda_module_loads_where_built)'"
    else
        say "=== sanitize: skipped (no compute-sanitizer on this machine)"
        printf 'sanitize skipped 0\n' >> "$summary"
    fi
else
    # the CUDA module cannot load without the GPU machine's cuBLAS: that
    # one test is the GPU run's
    stage ops 300 env AR_TEST_BACKEND_B=cpu OMP_NUM_THREADS=2 "$bin/test_backend_ops" --jobs 1 \
        --filter 'backend_ops/!(cuda_module_loads_where_built)'
    stage train 300 env AR_TEST_BACKEND_B=cpu OMP_NUM_THREADS=2 "$bin/test_backend_train" --jobs 1
    stage quickstart 120 "$bin/attnres" train configs/quickstart.yaml $corpus --set train.steps=5 \
        --set train.log_every=1 --threads 2 --force --out "$b/qs-cpu"
fi

# The summary: each stage's status and time, the tests' counts, the
# quick start's losses on both devices, bench's numbers.
python_summary=$(cat <<'EOF'
import json, os, re, sys
out, logs, b, mode = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
s = {"mode": mode, "stages": {}}
for line in open(os.path.join(logs, "summary.tmp")):
    name, st, secs = line.split()
    s["stages"][name] = {"status": st, "seconds": int(secs)}
def log(name):
    p = os.path.join(logs, name + ".log")
    return open(p, errors="replace").read() if os.path.exists(p) else ""
for name in ("ops", "train"):
    m = re.findall(r"Synthesis: Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)", log(name))
    if m and name in s["stages"]:
        t, p, f, c = map(int, m[-1])
        s["stages"][name].update(tested=t, passing=p, failing=f, crashing=c,
                                 skipped=len(re.findall(r"\[SKIP\]", log(name))))
def losses(run):
    p = os.path.join(b, run, "metrics.jsonl")
    if not os.path.exists(p):
        return {}
    r = {}
    for line in open(p):
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if "loss" in j and "step" in j:
            r[j["step"]] = j["loss"]
    return r
if "quickstart" in s["stages"]:
    g, c = losses("qs-cuda"), losses("qs-cpu")
    q = s["stages"]["quickstart"]
    q["cpu_last_loss"] = c[max(c)] if c else None
    if g:
        q["cuda_last_loss"] = g[max(g)]
        common = sorted(set(g) & set(c))
        if common:
            q["max_rel_diff"] = max(abs(g[k] - c[k]) / abs(c[k]) for k in common)
            q["steps_compared"] = len(common)
if "bench" in s["stages"]:
    try:
        j = json.loads(log("bench").strip().splitlines()[-1])
        s["stages"]["bench"]["json"] = j
    except (ValueError, IndexError):
        pass
if "gemm" in s["stages"]:
    s["stages"]["gemm"]["lines"] = log("gemm").splitlines()
if "peer" in s["stages"]:
    s["stages"]["peer"]["lines"] = [l for l in log("peer").splitlines() if "tok/s" in l]
json.dump(s, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(json.dumps({k: v["status"] for k, v in s["stages"].items()}))
EOF
)
if command -v python3 >/dev/null 2>&1; then
    python3 -c "$python_summary" "$OUT" "$logs" "$b" "$mode" | tee -a "$log"
else
    say "(no python3: the summary is in $OUT/logs.tar.gz, logs/summary.tmp)"
fi
say "=== summary (stage status seconds)"
cat "$summary" | tee -a "$log"
rc=0
grep -qvE ' (ok|skipped) ' "$summary" && rc=1
tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$logs"
exit $rc
