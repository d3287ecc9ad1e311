#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# our package's bytecode, written once (0.7 CPU-s): an editable install has none, and where PYTHONDONTWRITEBYTECODE
# is set no process writes it, so each of the suite's few hundred Python processes compiled what it imported
# (0.2 CPU-s for a kernel that draws a profile); a later edit makes Python compile the changed file again
.venv/bin/python -m compileall -q nsight_magic benchmarks tests/*.py
# the type checker first ([tool.mypy] in pyproject.toml: analysis/ and views/ strict, the rest but its listed debts)
.venv/bin/python -m mypy
# three workers (pytest-xdist) on two cores, a test module per worker at a time: with two, both were at times
# waiting on nsys, a kernel or Chromium and the cores idle; four idled less, and nsys 2022.4 failed in each of
# three runs with them (docs/setup-and-tests.md); tests/conftest.py keeps the workers' temporary folders and processes apart
# modules with real processes first (tests/conftest.py's pytest_collection_modifyitems; xdist would order them by
# their number of tests), so that no long one is left for the end
exec .venv/bin/python -m pytest -ra --durations=15 -n "${NSIGHT_MAGIC_TEST_WORKERS:-3}" --dist loadfile \
  --no-loadscope-reorder "$@"
