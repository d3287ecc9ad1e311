#!/usr/bin/env bash
# Set up a fresh Debian 12 machine for nsight-magic: Nsight Systems (CPU profiling), Nsight Compute (report
# import), Chromium (browser tests), Node.js (the JupyterLab extension is built from labextension/ when the package
# is installed), and a virtual environment .venv with the package and its test extras.
# Idempotent: each step skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-nsys-debian.sh
bash scripts/install-ncu-debian.sh
bash scripts/install-browser-debian.sh
bash scripts/install-node-debian.sh
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# builds the JupyterLab extension (hatch-jupyter-builder: jlpm install + build in labextension/, npm registry) and
# installs it into .venv/share/jupyter/labextensions/nsight-magic
.venv/bin/python -m pip install -q -e ".[test]"
# PyTorch for the tests of --modules/--nproc (their CPU build: this machine kind keeps the 2.13.0 CPU wheel on disk,
# any newer release would be a CUDA build of several GB); an existing torch is kept.
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install -q "torch==2.13.0"
# Notebooks run by nbclient/nbconvert use this kernel, i.e. this environment.
.venv/bin/python -m ipykernel install --sys-prefix --name python3 >/dev/null
echo "setup done: $(.venv/bin/python -c 'import nsight_magic; print("nsight_magic", nsight_magic.__version__)')"
