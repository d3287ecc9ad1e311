"""Profilers: the cell in a process under Nsight Systems or Nsight Compute, one skeleton for every path.

    prepare (prepare.py)  -> capture -> collect -> export (nsys.py / ncu.py)
    cold nsys: a fresh process under `nsys profile`; warm nsys (session.py): a worker started once under
    `nsys launch`, each cell recorded by `nsys start` / `nsys stop`; ncu: always a fresh process (no attach).
"""
from __future__ import annotations

from .ncu import run_ncu
from .nsys import finish_nsys, run_nsys, write_report_cache
from .prepare import prepare
from .process import RunFailed, RunResult, child_environment

__all__ = ["run_nsys", "run_ncu", "RunResult", "RunFailed", "child_environment", "prepare", "finish_nsys",
           "write_report_cache"]
