#!/usr/bin/env bash
# One whole GPU check per device call (see scripts/gpu_check.py).  Run on the lent GPU machine with the carried
# folders .devlib (libdw/libelf for Nsight Systems' importer, from ../shared/device/lib) and .whl (wheels the
# image lacks: ipykernel, ipywidgets, bokeh, nbclient, nvtx...; see README "GPU check").
#   bash scripts/gpu-check.sh [--only nsys,capture,ncu] [--overhead]
#   bash scripts/gpu-check.sh --pytest [PYTEST ARGS]   the GPU test tier (tests/gpu/, assertions; .whl carries pytest)
set -uo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.devlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64:/usr/local/cuda/bin:$PATH
export OUT=${OUT:-$PWD/gpu-check-out} PYTHONUNBUFFERED=1
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD
export JUPYTER_PATH=/tmp/site/share/jupyter
python3 -m ipykernel install --prefix /tmp/site --name python3 >/dev/null
if [ "${1:-}" = --pytest ]; then  # the GPU tier: what the sections below print, asserted
  shift
  nvidia-smi -L; nsys --version; ncu --version | tail -n 1
  exec python3 -m pytest -p no:cacheprovider -q -rs --junitxml="$OUT/gpu-tests.xml" tests/gpu "$@"
fi
overhead=0; args=()
for a in "$@"; do [ "$a" = --overhead ] && overhead=1 || args+=("$a"); done
nvidia-smi -L; nsys --version; ncu --version | tail -n 1
python3 -m nsight_magic.cli doctor
python3 scripts/gpu_check.py "${args[@]}"
if [ $overhead = 1 ]; then
  python3 benchmarks/overhead.py --workload torch --repeat 3 --work-s 5 2>&1 | grep -E "run |bare|%%nsys|ratio|trace="
  python3 benchmarks/overhead.py --workload torch --repeat 3 --work-s 5 --capture all 2>&1 | grep -E "bare|%%nsys|ratio"
fi
