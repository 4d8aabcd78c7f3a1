#!/bin/sh
# Proves, without a GPU, that the bundle of tools/gpu-bundle.sh misses no
# library: in a bare Debian 12 root made with debootstrap (minbase: no -dev
# packages, none of attnres's libraries), tools/gpu-check.sh --cpu unpacks
# the bundle, resolves every bundled binary's libraries (only the CUDA
# module's cuBLAS may be missing: the GPU machine has it), runs the test
# executables with the CPU as both backends, and trains a few CPU steps of
# the quick-start model.  The root is kept in build-gpu-root/ and reused.
#
#   tools/gpu-bundle.sh && tools/gpu-bundle-proof.sh      (as root)
set -eu
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
    echo "tools/gpu-bundle-proof.sh: run as root (debootstrap, chroot)" >&2
    exit 1
fi
[ -s .gpu/attnres-gpu.tar.xz ] || {
    echo "tools/gpu-bundle-proof.sh: no .gpu/attnres-gpu.tar.xz: run tools/gpu-bundle.sh first" >&2
    exit 1
}
command -v debootstrap >/dev/null 2>&1 || apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
root=$(pwd)/build-gpu-root
if [ ! -x "$root/bin/sh" ]; then
    rm -rf "$root"
    # xz-utils: to unpack the bundle, as the GPU machine's image can
    debootstrap --variant=minbase --include=xz-utils bookworm "$root" http://deb.debian.org/debian >/dev/null
fi
# what must not be there: the libraries attnres adds to Debian's base
# (libpcre2-8 is in every Debian: grep needs it)
for l in libopenblas.so.0 libyaml-0.so.2 libgsl.so.27 libcairo.so.2 libcriterion.so.3; do
    if chroot "$root" /sbin/ldconfig -p | grep -q "$l"; then
        echo "tools/gpu-bundle-proof.sh: the bare root has $l: not a proof" >&2
        exit 1
    fi
done
rm -rf "$root/w"
mkdir -p "$root/w/tools" "$root/w/.gpu"
cp tools/gpu-check.sh "$root/w/tools/"
cp -r configs "$root/w/"
cp .gpu/attnres-gpu.tar.xz "$root/w/.gpu/"
mkdir -p "$root/proc"
mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
trap 'umount "$root/proc" 2>/dev/null || true' EXIT
status=0
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root OUT=/w/out TMPDIR=/tmp \
    /bin/sh /w/tools/gpu-check.sh --cpu || status=$?
mkdir -p build-gpu-check
cp "$root/w/out/"* build-gpu-check/ 2>/dev/null || true
if [ $status -eq 0 ]; then
    echo "tools/gpu-bundle-proof.sh: the bundle's CPU checks pass in a bare Debian 12 root (logs: build-gpu-check/)"
else
    echo "tools/gpu-bundle-proof.sh: the bundle's CPU checks failed in the bare root (logs: build-gpu-check/)" >&2
fi
exit $status
