"""The runner: cell -> profile folder -> profiler + profiled process -> report files (nsight_magic.profilers).

Kept as the name the README, the command line and user code import from:
`from nsight_magic.run import run_nsys`.  What these runners return opens its report as the facade
(`result.open()` is an NsysReport / NcuReport, as `nsight_magic.open_report` gives it).
"""
from __future__ import annotations

from . import profilers
from .options import NsysOptions, RunOptions
from .profilers import (Recording, RunFailed, RunResult, child_environment, finish_nsys, prepare,
                        write_report_cache)
from .profilers.process import RUN_ID_ENV

__all__ = ["run_nsys", "run_ncu", "record_nsys", "record_ncu", "Recording", "RunResult", "RunFailed",
           "child_environment", "prepare", "finish_nsys", "write_report_cache", "RUN_ID_ENV"]


def open_report(path):
    """nsight_magic.report.open_report, imported when a result is opened: the facade brings analysis and views
    (0.4 s of imports), which the record stage, where the cell waits, does not need."""
    from .report import open_report as open_facade

    return open_facade(path)


def record_nsys(cell: str, opts: NsysOptions = NsysOptions(), **kw) -> Recording:
    """Record `cell` (or `script`) under Nsight Systems (profilers.record_nsys); .finish() gives the RunResult."""
    rec = profilers.record_nsys(cell, opts, **kw)
    rec.opener = open_report
    return rec


def record_ncu(cell: str, opts: RunOptions, ncu_opts, **kw) -> Recording:
    """Record the kernels of `cell` with Nsight Compute (profilers.record_ncu); .finish() gives the RunResult."""
    rec = profilers.record_ncu(cell, opts, ncu_opts, **kw)
    rec.opener = open_report
    return rec


def run_nsys(cell: str, opts: NsysOptions = NsysOptions(), **kw) -> RunResult:
    """Profile `cell` (or `script`) under Nsight Systems and wait for its report: record_nsys(...).finish().
    Works without IPython: the command line and the tests call it; the magic runs the finish in the background."""
    return record_nsys(cell, opts, **kw).finish()


def run_ncu(cell: str, opts: RunOptions, ncu_opts, **kw) -> RunResult:
    """Profile the kernels of `cell` with Nsight Compute and wait for the report: record_ncu(...).finish()."""
    return record_ncu(cell, opts, ncu_opts, **kw).finish()
