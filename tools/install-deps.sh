#!/bin/sh
# Installs attnres's build and test dependencies from Debian 12 (run as root).
# OpenBLAS is the OpenMP build: it shares one thread pool with attnres's own
# OpenMP loops (the pthread build would oversubscribe the cores).
set -eu
here=$(dirname "$0")
export DEBIAN_FRONTEND=noninteractive
if [ "$(id -u)" -ne 0 ]; then
    echo "tools/install-deps.sh: run as root (it calls apt-get)" >&2
    exit 1
fi
apt-get update -qq
# shellcheck disable=SC2046
apt-get install -y -qq --no-install-recommends $(cat "$here/debian-packages.txt") >/dev/null
# If the pthread OpenBLAS is also present, it wins the alternatives; remove it.
if dpkg -s libopenblas0-pthread >/dev/null 2>&1; then
    apt-get remove -y -qq libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread >/dev/null
fi
