#!/usr/bin/env bash
# Make Debian 12's Nsight Systems 2022.4 (non-free) work on a fresh machine: profiles CPU processes
# (NVTX, OS runtime) without a GPU. Idempotent: does nothing when `nsys` already runs.
# See ../shared/nsys-on-cpu.md for what was measured.
set -euo pipefail
if command -v nsys >/dev/null 2>&1 && nsys --version >/dev/null 2>&1 \
   && [ -e /usr/lib/x86_64-linux-gnu/libssh.so ]; then
  echo "nsys already installed: $(nsys --version)"
  exit 0
fi
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
bash "$(dirname "$0")/enable-debian-nonfree.sh"
# libssh-dev provides the unversioned libssh.so that the QdstrmImporter loads; without it
# nsys leaves only a .qdstrm behind.
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  nsight-systems nsight-systems-target libssh-dev >/dev/null
echo "installed: $(nsys --version)"
