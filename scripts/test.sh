#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# two workers (pytest-xdist), a test module per worker at a time: most end-to-end tests wait on nsys, kernels and
# Chromium rather than on the CPU (tests/conftest.py keeps the workers' temporary folders and processes apart)
exec .venv/bin/python -m pytest -ra --durations=15 -n "${NSIGHT_MAGIC_TEST_WORKERS:-2}" --dist loadfile "$@"
