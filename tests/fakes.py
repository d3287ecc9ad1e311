"""Test reports made of DataFrames, checked against the readers' contract (nsight_magic.readers.contract): the one
factory every test that hands a made-up report to analysis or views uses.

    rep = nsys_fake(kernels=frame("kernels", start_ns=[...], end_ns=[...], name=[...]))

`frame(name, **columns)` fills the contract's columns it is not given with NA; `nsys_fake` fills the frames it is
not given with empty ones and refuses a frame that lacks a contract column (a fake that would pass a test the
reader's data could fail).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from nsight_magic.readers.capture_span import CaptureSpan
from nsight_magic.readers.contract import FRAME_COLUMNS, NsysFrames, missing_columns
from nsight_magic.readers.gpu_metrics import empty_metrics


@dataclass
class FakeMeta:
    start_ns: int
    end_ns: int
    duration_ns: int
    nsys_version: str | None = "test"
    schema_version: str | None = "test"
    span_source: str = "events"
    span_note: str | None = None
    utc_start_ns: int | None = None
    tables: tuple[str, ...] = ()


def frame(kind: str, /, **columns) -> pd.DataFrame:
    """A frame of the contract's `kind` with these columns (lists, arrays or scalars) and NA in the others; a
    column the contract does not know is kept (a test may need one of its own)."""
    df = pd.DataFrame(columns) if any(not pd.api.types.is_scalar(v) for v in columns.values()) else \
        pd.DataFrame(columns, index=[0] if columns else [])
    for c in FRAME_COLUMNS[kind]:
        if c not in df:
            df[c] = pd.NA
    return df[list(FRAME_COLUMNS[kind]) + [c for c in df.columns if c not in FRAME_COLUMNS[kind]]]


class FakeNsys:
    """An NsysFrames made of DataFrames in memory (see the module docstring)."""

    tool = "nsys"

    def __init__(self, frames: dict[str, pd.DataFrame], meta: FakeMeta, path: Path, ranks_by_pid: dict,
                 python_samples, gpu_memory):
        self._frames = frames
        self.meta = meta
        self.path = path
        self.ranks_by_pid = ranks_by_pid
        self.python_samples = python_samples
        self.gpu_memory = gpu_memory
        self.gpu_metrics = empty_metrics()
        self.subject = "the cell"

    def __setattr__(self, name, value):
        if name in FRAME_COLUMNS:  # a test that swaps a frame in goes through the same check
            self._frames[name] = _checked(name, value)
        else:
            super().__setattr__(name, value)

    def __getattr__(self, name):
        frames = self.__dict__.get("_frames", {})
        if name in frames:
            return frames[name]
        raise AttributeError(name)

    @property
    def time_span(self) -> CaptureSpan:
        m = self.meta
        ends = [pd.to_numeric(f["end_ns"], errors="coerce").max() for f in self._frames.values()
                if "end_ns" in f and len(f)]
        last = max([int(e) for e in ends if pd.notna(e)] + [m.end_ns])
        return CaptureSpan(m.start_ns, m.end_ns, m.span_source, None, m.start_ns, last)

    def columns(self, frame: str, cols: list[str]) -> pd.DataFrame:
        return self._frames[frame][cols]

    def prefetch(self, *frames: str) -> None:
        pass


def _checked(name: str, df: pd.DataFrame) -> pd.DataFrame:
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"fake report: {name} must be a DataFrame, not {type(df).__name__}")
    missing = missing_columns(name, df)
    if missing:
        raise ValueError(f"fake report: {name} lacks the contract's columns {missing} (build it with "
                         f"tests.fakes.frame({name!r}, ...))")
    return df


def nsys_fake(*, start_ns: int = 0, end_ns: int | None = None, duration_ns: int | None = None,
              span_source: str = "events", path: str | Path = "fake/report.sqlite", ranks_by_pid: dict | None = None,
              python_samples=None, gpu_memory=None, **frames: pd.DataFrame) -> FakeNsys:
    """A fake Nsight Systems report of these frames (the others empty); end_ns defaults to the last event's end."""
    unknown = set(frames) - set(FRAME_COLUMNS)
    if unknown:
        raise TypeError(f"fake report: no frame named {sorted(unknown)}; the contract has {sorted(FRAME_COLUMNS)}")
    full = {n: _checked(n, frames[n]) if n in frames else frame(n) for n in FRAME_COLUMNS}
    if end_ns is None:
        ends = [pd.to_numeric(f["end_ns"], errors="coerce").max() for f in full.values() if "end_ns" in f and len(f)]
        end_ns = max([int(e) for e in ends if pd.notna(e)] + [start_ns])
    meta = FakeMeta(start_ns, end_ns, duration_ns if duration_ns is not None else end_ns - start_ns,
                    span_source=span_source)
    rep = FakeNsys(full, meta, Path(path), ranks_by_pid or {}, python_samples, gpu_memory)
    assert isinstance(rep, NsysFrames)
    return rep
