#!/usr/bin/env bash
# Set up a fresh Debian 12 machine for nsight-magic.  Idempotent: each step skips what is already there, and each
# step says how long it took.
#
#   bash scripts/setup.sh           everything the tests need: Nsight Systems (CPU profiling), Nsight Compute
#                                   (report import), Chromium (browser tests), Node.js (the JupyterLab extension is
#                                   built from labextension/ when the package is installed), and a virtual
#                                   environment .venv with the package and its test extras, PyTorch's CPU build
#   bash scripts/setup.sh --quick   what the quick start needs: Nsight Systems and .venv with the package (its
#                                   JupyterLab extension not built), nbconvert and a kernel
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = "--quick" ] && quick=1

step() {  # step LABEL COMMAND...: run it, then say how long it took
  local label=$1 t0 ms
  shift
  t0=$(date +%s%N)
  "$@"
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf 'setup: %-48s %4d.%d s\n' "$label" $((ms / 1000)) $((ms % 1000 / 100))
}

venv() {
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
}

stale_install_json() {
  # an editable install's extension build leaves install.json in the built extension's folder too; the package maps
  # labextension/install.json to the same place, and a second install would add it twice (hatchling refuses)
  rm -f nsight_magic/labextension/install.json
}

quick_packages() {
  stale_install_json
  # the package without building the JupyterLab extension (SKIP_JUPYTER_BUILDER: hatch-jupyter-builder), what
  # the quick start runs it with, and Python nvtx 0.2.10 (Debian's nsys 2022.4 records nothing from newer ones)
  SKIP_JUPYTER_BUILDER=1 .venv/bin/python -m pip install -q -e . "nvtx==0.2.10" nbconvert nbclient ipykernel
}

test_packages() {
  stale_install_json
  # builds the JupyterLab extension (hatch-jupyter-builder: jlpm install + build in labextension/, npm registry)
  # and installs it into .venv/share/jupyter/labextensions/nsight-magic
  .venv/bin/python -m pip install -q -e ".[test]"
}

torch_cpu() {
  # PyTorch for the tests of --modules/--ops/--nproc (their CPU build: this machine kind keeps the 2.13.0 CPU wheel
  # on disk, any newer release would be a CUDA build of several GB); an existing torch is kept.
  .venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install -q "torch==2.13.0"
}

kernel() {
  # notebooks run by nbclient/nbconvert use this kernel, i.e. this environment
  .venv/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
}

step "Nsight Systems (Debian non-free)" bash scripts/install-nsys-debian.sh
if [ $quick = 1 ]; then
  step "virtual environment .venv" venv
  step "nsight-magic, nbconvert, ipykernel" quick_packages
  step "Jupyter kernel" kernel
  echo "setup done (quick start): $(.venv/bin/python -c 'import nsight_magic; print("nsight_magic", nsight_magic.__version__)')"
  exit 0
fi
step "Nsight Compute (Debian non-free)" bash scripts/install-ncu-debian.sh
step "Chromium (browser tests)" bash scripts/install-browser-debian.sh
step "Node.js (the JupyterLab extension's build)" bash scripts/install-node-debian.sh
step "virtual environment .venv" venv
step "nsight-magic[test] and its JupyterLab extension" test_packages
step "PyTorch (CPU build)" torch_cpu
step "Jupyter kernel" kernel
# Chrome DevTools' trace engine, pinned by tests/trace_reader/package-lock.json: it reads the Chrome/Perfetto trace
# exports in the tests (a reader that is not ours; Perfetto's trace processor cannot be had on these machines)
step "trace reader for the export tests" npm ci --prefix tests/trace_reader --no-audit --no-fund --silent
echo "setup done: $(.venv/bin/python -c 'import nsight_magic; print("nsight_magic", nsight_magic.__version__)')"
