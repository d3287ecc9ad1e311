"""What tracing costs the profiled program, per traced call: the correction estimates of host-paced time need.

Under nsys every traced CUDA call takes longer than in a plain run, so a CPU-bound loop runs slower in its profile:
the GPU's idle time between launches is longer than the user's plain run would have.  An estimate of what a fix
saves (fewer launches: CUDA graphs, fusion, foreach optimizers, vectorised loops) would claim that extra time too.
The estimates take off, for each traced call made while the GPU waited, what tracing added to it.

Measured with `python benchmarks/call_overhead.py` (a loop of one kind of call, timed in the process, plain and
under `nsys profile`; the minimum of 3 runs each):

    nsys 2025.3.1, H100, torch 2.11: a kernel launch (torch add_ on one element) +1.1 and +2.8 us traced with
    -t cuda (two machines), +5.3 us with -t cuda,nvtx,osrt; cudaStreamSynchronize +2.1 and +2.8 us;
    an NVTX push/pop +0.5 and +1.1 us; a traced OS call (read) +0.5 and +0.7 us.
    nsys 2022.4.2, this CPU machine: an NVTX push/pop +0.3 and +0.4 us, a read() +0.2 us.

A process the profiled one starts with exec (subprocess.run of a tool: nvidia-smi, git, a compiler) is followed
by nsys, which sets itself up in it before its first call: +20.7 ms per process (`benchmarks/call_overhead.py
--kinds spawn --calls 100`, `true`, default trace; H200 host, nsys 2025.3.1; nvidia-smi +21.7 ms there), +20.1 ms
with nsys 2022.4 on this CPU machine.  Processes forked without exec (DataLoader workers) are not followed.

A floor, not the whole cost: PyTorch makes calls the default trace does not record (a training step's backward()
about 1,600 cudaGetDevice, recorded with --cuda-trace-all-apis=true; scripts/trace_phases.py), and what tracing
adds per recorded call varied from 2.8 to 12.8 us across the planted workloads.
"""
from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pandas as pd

from ..readers.contract import NsysFrames

# microseconds added to one CUDA runtime/driver call, by whether OS runtime calls were traced as well (a CUDA call
# makes OS calls of its own, each then intercepted too)
CUDA_CALL_US = {"with_osrt": 5.3, "cuda_only": 2.0}
PROCESS_START_MS = 20.7  # a child process nsys follows: its set-up before the process's first call


def cuda_call_ns(report: NsysFrames) -> float:
    """The tracing overhead of one CUDA API call in this report's recording."""
    traced_osrt = len(report.osrt) > 0
    return 1000.0 * CUDA_CALL_US["with_osrt" if traced_osrt else "cuda_only"]


def words(report: NsysFrames) -> str:
    us = cuda_call_ns(report) / 1000
    return (f"less the {us:.1f} us nsys adds to each CUDA call made meanwhile "
            f"({'with' if us > 3 else 'without'} OS runtime tracing; benchmarks/call_overhead.py)")


def process_firsts(report: NsysFrames, skip_pids: Collection[int] = ()) -> pd.Series:
    """Each process's first recorded CUDA or OS call (by pid, sorted by time): where nsys had just set itself up
    in it (PROCESS_START_MS before).  `skip_pids`: processes to leave out (those with GPU work: the cell's,
    ranks)."""
    firsts = []
    for frame in ("osrt", "cuda_api"):
        got = report.columns(frame, ["pid", "start_ns"])
        if len(got):
            firsts.append(got.groupby("pid")["start_ns"].min())
    if not firsts:
        return pd.Series([], dtype="int64")
    first = pd.concat(firsts).groupby(level=0).min().astype(np.int64)
    return first[~first.index.isin(list(skip_pids))].sort_values(kind="stable")
