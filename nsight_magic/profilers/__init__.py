"""Profilers: the cell in a process under Nsight Systems or Nsight Compute, one skeleton for every path, in two
stages with a seam between them:

    record (blocks the notebook's cell)          prepare (prepare.py) -> the cell runs under the profiler until
                                                 its code has finished and its --return values are back
    finish (in the background: nsight_magic.background)   the profiler writes its report -> import -> export

    record_nsys / record_ncu -> Recording;  Recording.finish() -> RunResult;  run_nsys / run_ncu: both at once.
    cold nsys: a fresh process under `nsys profile` (process.ChildRun); warm nsys (session.py): a worker started
    once under `nsys launch` (ahead of the first cell, by prewarm), each cell recorded by `nsys start` /
    `nsys stop`; ncu: always a fresh process (no attach).  In place (inplace.py, inplace_ncu.py) the kernel itself
    is recorded.  recorder.py: one Recorder interface over all of them (a CellRequest in, the Recording out).
"""
from __future__ import annotations

from .ncu import record_ncu, run_ncu
from .nsys import finish_nsys, record_nsys, run_nsys, write_report_cache
from .prepare import prepare
from .process import Recording, RunFailed, RunResult, child_environment

__all__ = ["record_nsys", "record_ncu", "run_nsys", "run_ncu", "Recording", "RunResult", "RunFailed",
           "child_environment", "prepare", "finish_nsys", "write_report_cache"]
