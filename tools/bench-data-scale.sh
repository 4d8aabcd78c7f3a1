#!/bin/sh
# Training memory against the data's size (BENCHMARKS.md, "Data at scale"):
# 50 steps of configs/bench-small.yaml on GB_TOTAL GB of uint16 token shards
# and on one 10 MB shard, in one process and under mpirun -np 2: peak RSS
# (the largest process), the time to the first step, tokens/s.
#
#   tools/bench-data-scale.sh [BUILD_DIR [WORK_DIR [GB_TOTAL]]]
#
# The shards hold random ids below 256 (model.vocab 256, so the model is
# bench-small's); WORK_DIR (default /tmp/attnres-data-scale) keeps them
# between runs.  Run it on a quiet machine.
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
work=${2:-/tmp/attnres-data-scale}
gb=${3:-9}
bin=$build/attnres
[ -x "$bin" ] || { echo "tools/bench-data-scale.sh: no '$bin': build first" >&2; exit 1; }
mkdir -p "$work/big"

# One shard of n random ids below 256 (uint16, llm.c's header), written once.
make_shard() {
    [ -s "$2" ] && return 0
    python3 - "$1" "$2" <<'EOF'
import os, struct, sys
n, path = int(sys.argv[1]), sys.argv[2]
header = struct.pack("<3i", 20240520, 1, n) + bytes(4 * 253)
body = bytearray(2 * n)
body[0::2] = os.urandom(n)
with open(path + ".tmp", "wb") as f:
    f.write(header)
    f.write(body)
os.replace(path + ".tmp", path)
EOF
}
per=100000000 # tokens a shard, as llm.c
shards=$(( (gb * 1000000000 + 2 * per - 1) / (2 * per) ))
make_shard $per "$work/shard.bin"
i=1
while [ $i -le $shards ]; do
    f=$(printf '%s/big/train_%06d.bin' "$work" $i)
    [ -s "$f" ] || cp "$work/shard.bin" "$f"
    i=$((i + 1))
done
make_shard 5000000 "$work/small.bin"
make_shard 200000 "$work/val.bin"
echo "data: $(du -sh "$work/big" | cut -f1) in $shards shards; small: $(du -h "$work/small.bin" | cut -f1)"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"

# Runs one training; prints peak RSS (KiB, the largest process), seconds to
# the first step's line, and tok/s of the final line.
measure() {
    python3 - "$@" <<'EOF'
import re, resource, subprocess, sys, time
t0 = time.time()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
first, toks, log = None, None, []
for line in p.stdout:
    log.append(line)
    if first is None and re.search(r"step +1/", line): # under mpirun, a terminal's redrawn line
        first = time.time() - t0
    if line.startswith("done:"):
        toks = line.rsplit(",", 1)[1].split()[0]
p.wait()
if p.returncode:
    sys.stderr.write("".join(log))
    sys.exit(p.returncode)
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"{rss / 1024:8.1f} MiB  first step {first:6.2f} s  {toks:>6} tok/s")
EOF
}
common="configs/bench-small.yaml --set model.vocab=256 --set data.val=$work/val.bin --set train.steps=50
        --set train.batch_size=8 --set train.grad_accum=2
        --set train.warmup=5 --set train.eval_every=0 --set train.final_eval_windows=8 --set train.log_every=1
        --set train.save_every=0 --force"
mpi="env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -x OMP_NUM_THREADS=1 -np 2"
for set in small big; do
    data=$work/small.bin
    [ $set = big ] && data="$work/big"
    printf '1 process, %-5s ' $set
    # shellcheck disable=SC2086
    measure "$bin" train $common --set data.train="$data" --threads 2 --out "$work/run-$set-1"
    printf '2 ranks,   %-5s ' $set
    # shellcheck disable=SC2086
    measure $mpi "$bin" train $common --set data.train="$data" --threads 1 --out "$work/run-$set-2"
done
