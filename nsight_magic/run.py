"""The runner: cell -> profile folder -> profiler + profiled process -> report files (nsight_magic.profilers).

Kept as the name the README, the command line and user code import from:
`from nsight_magic.run import run_nsys`.
"""
from __future__ import annotations

from .profilers import (Recording, RunFailed, RunResult, child_environment, finish_nsys, prepare, record_ncu,
                        record_nsys, run_ncu, run_nsys, write_report_cache)
from .profilers.process import RUN_ID_ENV

__all__ = ["run_nsys", "run_ncu", "record_nsys", "record_ncu", "Recording", "RunResult", "RunFailed",
           "child_environment", "prepare", "finish_nsys", "write_report_cache", "RUN_ID_ENV"]
