"""What analysis and views may read of a report: the contract between the readers and the floors above them.

`NsysFrames` is what the analysis reads (the event frames, the capture span, a few columns of a frame without
building it, the optional records); `NsysTables` adds the summaries the views' tables show.  `readers.nsys.NsysData`
implements both; a test's fake is built by tests/fakes.py, which checks it against `FRAME_COLUMNS`.  Every frame
holds at least its `FRAME_COLUMNS`, also when the report lacks its table (an empty frame with those columns).
`NcuFrames` is an Nsight Compute report (`readers.ncu.NcuData`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol, TypeAlias, runtime_checkable

import pandas as pd
from typing_extensions import TypeIs

from .capture_span import CaptureSpan
from .nsys_schema import frame_columns

EVENT_FRAMES = ("kernels", "memcpy", "memset", "graphs", "cuda_api", "osrt", "sync", "overhead", "cublas", "cudnn",
                "nvtx")
TABLE_FRAMES = ("threads", "processes", "gpus")
FRAME_COLUMNS: dict[str, tuple[str, ...]] = {f: frame_columns(f) for f in EVENT_FRAMES + TABLE_FRAMES}


class Meta(Protocol):
    """readers.nsys.ReportMeta as the analysis reads it."""

    @property
    def nsys_version(self) -> str | None: ...

    @property
    def start_ns(self) -> int: ...

    @property
    def end_ns(self) -> int: ...

    @property
    def duration_ns(self) -> int: ...

    @property
    def span_source(self) -> str: ...

    @property
    def tables(self) -> tuple[str, ...]: ...  # the export's tables ("OSRT_API": OS runtime calls were traced)


@runtime_checkable
class NsysFrames(Protocol):
    """An Nsight Systems report as analysis reads it.  Frames: one row per event, sorted by start_ns, integer *_ns
    times on the report's clock, columns as FRAME_COLUMNS."""

    tool: str                                        # "nsys" (an Nsight Compute report's data says "ncu")
    path: Path

    @property
    def meta(self) -> Meta: ...                      # version, capture span (made when first asked for)

    @property
    def time_span(self) -> CaptureSpan: ...          # the capture span, the timeline's origin and axis end

    @property
    def kernels(self) -> pd.DataFrame: ...

    @property
    def memcpy(self) -> pd.DataFrame: ...

    @property
    def memset(self) -> pd.DataFrame: ...

    @property
    def graphs(self) -> pd.DataFrame: ...

    @property
    def cuda_api(self) -> pd.DataFrame: ...

    @property
    def osrt(self) -> pd.DataFrame: ...

    @property
    def sync(self) -> pd.DataFrame: ...

    @property
    def overhead(self) -> pd.DataFrame: ...

    @property
    def cublas(self) -> pd.DataFrame: ...

    @property
    def cudnn(self) -> pd.DataFrame: ...

    @property
    def nvtx(self) -> pd.DataFrame: ...

    @property
    def threads(self) -> pd.DataFrame: ...

    @property
    def processes(self) -> pd.DataFrame: ...

    @property
    def gpus(self) -> pd.DataFrame: ...

    @property
    def ranks_by_pid(self) -> dict[int, tuple[int, int]]: ...   # pid -> (rank, world size) of a distributed job

    @property
    def python_samples(self): ...        # readers.python_samples.PythonSamples, or None where none can be recorded

    @property
    def gpu_memory(self): ...            # readers.gpu_memory.GpuMemory, or None where none can be recorded

    @property
    def gpu_metrics(self): ...           # readers.gpu_metrics.GpuMetrics, empty (with nsys's reason) when none

    @property
    def subject(self) -> str: ...        # what was profiled, as the words about it say: "the cell", "the script"

    def columns(self, frame: str, cols: list[str]) -> pd.DataFrame: ...   # a few columns, decoded as the frame's

    def prefetch(self, *frames: str) -> None: ...   # a hint: these frames will be read (a reader may start them)


@runtime_checkable
class NsysTables(NsysFrames, Protocol):
    """NsysFrames plus the summaries that the views' tables show (equal to `nsys stats`' reports)."""

    def kernel_summary(self, base: bool = False, by_launch: bool = False, by: str | None = None) -> pd.DataFrame: ...

    def memcpy_summary(self, by: str | None = None) -> pd.DataFrame: ...

    def cuda_api_summary(self, by: str | None = None) -> pd.DataFrame: ...

    def nvtx_summary(self, by: str | None = None) -> pd.DataFrame: ...

    def nvtx_gpu_projection(self) -> pd.DataFrame: ...


class NcuFrames(Protocol):
    """An Nsight Compute report as analysis and views read it (readers.ncu.NcuData): one row per profiled kernel,
    the rules' results per kernel, every metric per kernel."""

    tool: str                                        # "ncu"
    path: Path
    source: str                                      # what it was read from: "ncu-rep", "csv-raw" or "csv-details"
    kernels: pd.DataFrame
    rules: pd.DataFrame

    @property
    def metrics(self) -> pd.DataFrame: ...


Report: TypeAlias = "NsysTables | NcuFrames"   # an opened report of either tool (its `tool` says which)


def is_ncu(report: Report) -> TypeIs[NcuFrames]:
    return report.tool == "ncu"


def is_nsys(report: Report) -> TypeIs[NsysTables]:
    return report.tool == "nsys"


def missing_columns(frame: str, df: pd.DataFrame) -> list[str]:
    """The contract's columns of `frame` that `df` lacks."""
    return [c for c in FRAME_COLUMNS[frame] if c not in df.columns]
