#!/usr/bin/env bash
# Install Debian 12's Nsight Compute 2022.3 (non-free) so that `ncu --import R.ncu-rep --csv ...` and ncu's
# error paths can be exercised on a CPU-only machine (ncu cannot profile without a GPU).
# Idempotent: does nothing when `ncu --version` already works.
set -euo pipefail
if command -v ncu >/dev/null 2>&1 && ncu --version >/dev/null 2>&1; then
  echo "ncu already installed: $(ncu --version | tail -n 1)"
  exit 0
fi
sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
bash "$(dirname "$0")/enable-debian-nonfree.sh"
# About 230 MB download, 400 MB installed (the GUI comes with it; we only use the CLI).
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  nsight-compute nsight-compute-target >/dev/null
echo "installed: $(ncu --version | tail -n 1)"
