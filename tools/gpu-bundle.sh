#!/bin/sh
# Packs everything tools/gpu-check.sh needs on a lent GPU machine, which has
# the CUDA driver, cuBLAS, cuDNN and NCCL (the CUDA toolkit, or the pip
# nvidia-* packages beside its PyTorch) but none of Debian's libraries that
# attnres links, and no network:
#
#   .gpu/attnres-gpu.tar.xz    (git-ignored; carry ".gpu" with the checkout)
#     bin/      attnres, libattnres-cuda.so (found next to attnres), the
#               test executables test_backend_ops and test_backend_train,
#               and bench_gemm_cuda
#     lib/      every shared library those load that is not glibc, the CUDA
#               driver, cuBLAS, cuDNN or NCCL (found with ldd)
#     lib-fallback/  libstdc++ and libgcc_s: used only where the machine
#               has none, since cuBLAS may need the machine's newer ones
#     data/     the quick-start corpus (data/kjv.txt, data/kjv-val.txt)
#     peer/     torch_peer.py, where ../shared/tools has it
#     MANIFEST  the commit, the build, and every library's origin
#
# The build is a release build for any x86-64 (-Dnative=false: the GPU
# machine's CPU is not this one's), with the CUDA backend and without MPI
# (one process). The bundle and the checkout together must stay under the
# device tool's 64 MiB; the script checks this.
#
#   tools/gpu-bundle.sh            (as root on Debian 12, like tools/test.sh)
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
if [ "$(id -u)" -eq 0 ]; then
    tools/install-deps.sh
fi
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null 2>&1; then
    PATH=$PATH:/usr/local/cuda/bin
    export PATH
fi
command -v nvcc >/dev/null 2>&1 || {
    echo "tools/gpu-bundle.sh: nvcc not found (the CUDA toolkit: /usr/local/cuda/bin)" >&2
    exit 1
}
opts="-Dbuildtype=release -Dnative=false -Dcuda=enabled -Dmpi=disabled -Dtests=true"
# shellcheck disable=SC2086
meson setup build-gpu $opts --reconfigure >/dev/null 2>&1 || meson setup build-gpu $opts >/dev/null
meson compile -C build-gpu attnres:executable attnres-cuda test_backend_ops test_backend_train bench_gemm_cuda
[ -s data/kjv.txt ] && [ -s data/kjv-val.txt ] || tools/get-data.sh

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
b=$stage/attnres-gpu
mkdir -p "$b/bin" "$b/lib" "$b/lib-fallback" "$b/data" "$b/peer"
cp build-gpu/attnres build-gpu/libattnres-cuda.so build-gpu/tests/test_backend_ops \
    build-gpu/tests/test_backend_train build-gpu/bench_gemm_cuda "$b/bin/"
cp data/kjv.txt data/kjv-val.txt "$b/data/"
peer=../shared/tools/torch_peer.py
if [ -f "$peer" ]; then
    cp "$peer" "$b/peer/"
else
    echo "tools/gpu-bundle.sh: no $peer: the bundle leaves out the PyTorch peer (its stage will be skipped)" >&2
fi

# What the GPU machine provides itself: glibc, the CUDA driver, cuBLAS,
# cuDNN, NCCL (and the kernel's vDSO).
provided() {
    case $1 in
    linux-vdso.so.* | ld-linux-x86-64.so.* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | \
        librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | \
        libcuda.so.* | libcublas.so.* | libcublasLt.so.* | libcudnn*.so.* | libnccl.so.*) return 0 ;;
    esac
    return 1
}
{
    echo "attnres GPU bundle"
    echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), meson options: $opts"
    echo "libraries (soname <- where it came from):"
} > "$b/MANIFEST"
for f in "$b"/bin/*; do
    ldd "$f" | awk '/=>/ { print $1, $3 } !/=>/ { n = split($1, p, "/"); print p[n], "" }'
done | sort -u | while read -r name path; do
    provided "$name" && continue
    if [ -z "$path" ] || [ "$path" = "not" ]; then
        echo "tools/gpu-bundle.sh: $name is needed but not found here (ldd)" >&2
        exit 1
    fi
    case $name in
    libstdc++.so.* | libgcc_s.so.*) dest=lib-fallback ;;
    *) dest=lib ;;
    esac
    cp -L "$path" "$b/$dest/$name"
    echo "  $dest/$name <- $path" >> "$b/MANIFEST"
done

mkdir -p .gpu
tar -C "$stage" -cf - attnres-gpu | xz -T0 -6 > .gpu/attnres-gpu.tar.xz.tmp
mv .gpu/attnres-gpu.tar.xz.tmp .gpu/attnres-gpu.tar.xz
bundle=$(stat -c %s .gpu/attnres-gpu.tar.xz)
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s}')
total=$((bundle + tree))
limit=$((64 * 1024 * 1024))
awk -v b="$bundle" -v t="$tree" 'BEGIN { m = 1048576
    printf "tools/gpu-bundle.sh: .gpu/attnres-gpu.tar.xz %.1f MiB + the checkout %.1f MiB = %.1f MiB of 64\n", b / m, t / m, (b + t) / m }'
if [ "$total" -gt "$limit" ]; then
    echo "tools/gpu-bundle.sh: over the device tool's 64 MiB" >&2
    exit 1
fi
echo "run it on a lent GPU: device run, command 'tools/gpu-check.sh', carry ['.gpu'], timeout_s 560"
