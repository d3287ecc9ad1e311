#!/usr/bin/env bash
# Set up (scripts/setup.sh), then execute notebooks/quickstart.ipynb headless: it profiles a real cell with
# %%nsys, saves the profile in notebooks/nsight-profiles/, and writes notebooks/quickstart.html.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/jupyter nbconvert --to html --execute --ExecutePreprocessor.timeout=600 \
  --output quickstart.html notebooks/quickstart.ipynb
echo "quick start done: open notebooks/quickstart.html; the saved profile:"
ls -d notebooks/nsight-profiles/quickstart-* | tail -n 1
