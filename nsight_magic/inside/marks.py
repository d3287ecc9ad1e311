"""What the profiled process writes and the notebook's side reads: the contract between the two sides, in one place.

The NVTX domain and marks of nsight-magic's own (readers find the cell's capture by them), the clock mark the Python
sampler places its samples by, the exit codes of the child, and the environment variables a recording passes to the
profiled process.  Constants only: importing this module runs nothing of the child's.
"""
from __future__ import annotations

CAPTURE_DOMAIN = "nsight-magic"          # the NVTX domain of the range pushed around a profiled cell, and our marks
OWN_START_MARK, OWN_END_MARK = "process start", "process end"  # readers.capture_span reads them
# marked as the cell's range closes, with the range's own length: where nsys dropped the range's push (the first
# milliseconds after `nsys start` in a process that had started CUDA, seen with nsys 2025.3), its start is known
CELL_END_MARK = "cell ended after"
CLOCK_MARK = "nsight-magic clock "       # inside/python_samples.py: "nsight-magic clock N", N its monotonic clock

EXIT_CELL_ERROR, EXIT_SETUP_ERROR, EXIT_STATE_ERROR = 1, 3, 4  # the child's exit codes

# A cold run gives nsys a private TMPDIR (its raw stream goes there and is removed after the run); the user's own
# TMPDIR travels in this variable ('' when it was unset) and is put back before any of the cell's code runs.
USER_TMPDIR_ENV = "NSIGHT_MAGIC_USER_TMPDIR"
# Every process of a warm session carries its id (processes are found, stopped and their files removed by it).
SESSION_ID_ENV = "NSIGHT_MAGIC_SESSION_ID"
