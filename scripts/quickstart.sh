#!/usr/bin/env bash
# Set up (scripts/setup.sh), then execute notebooks/quickstart.ipynb headless: it profiles a real cell with
# %%nsys, saves the profile in notebooks/nsight-profiles/, and writes notebooks/quickstart.html.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# store_widget_state=False: with widget state saved, nbconvert draws widgets with a script from a CDN (nothing
# shows offline); without it, each report falls back to its static HTML (timeline and tables, BokehJS inline).
.venv/bin/jupyter nbconvert --to html --execute --ExecutePreprocessor.timeout=600 \
  --ExecutePreprocessor.store_widget_state=False --output quickstart.html notebooks/quickstart.ipynb
echo "quick start done: open notebooks/quickstart.html; the saved profile:"
ls -d notebooks/nsight-profiles/quickstart-* | tail -n 1
