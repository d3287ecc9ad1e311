#!/usr/bin/env bash
# Set up what the quick start needs (scripts/setup.sh --quick: Nsight Systems and .venv; the tests' setup adds the
# rest), then execute notebooks/quickstart.ipynb headless: it profiles a real cell with %%nsys, saves the profile
# in notebooks/nsight-profiles/, and writes notebooks/quickstart.html.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
bash scripts/setup.sh --quick
# store_widget_state=False: no ipywidgets state in the page (a headless run's profiles carry their static view
# only, timeline and tables with BokehJS inline; views/output.py).
# The offline template (nsight_magic/templates/offline) leaves out the scripts nbconvert's own template fetches
# from CDNs (require.js, MathJax, mermaid): the page reads with no network.
.venv/bin/jupyter nbconvert --to html --execute --ExecutePreprocessor.timeout=600 \
  --ExecutePreprocessor.store_widget_state=False --TemplateExporter.extra_template_basedirs=nsight_magic/templates \
  --template offline --output quickstart.html notebooks/quickstart.ipynb
echo "quick start done in $(( $(date +%s) - t0 )) s: open notebooks/quickstart.html; the saved profile:"
ls -d notebooks/nsight-profiles/quickstart-* | tail -n 1
