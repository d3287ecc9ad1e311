#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# three workers (pytest-xdist) on two cores, a test module per worker at a time: with two, both were at times
# waiting on nsys, a kernel or Chromium and the cores idle; four idled less, and nsys 2022.4 failed in each of
# three runs with them (docs/setup-and-tests.md); tests/conftest.py keeps the workers' temporary folders and processes apart
exec .venv/bin/python -m pytest -ra --durations=15 -n "${NSIGHT_MAGIC_TEST_WORKERS:-3}" --dist loadfile "$@"
