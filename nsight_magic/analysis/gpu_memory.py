"""What GPU memory did during the cell (issue 48): the peak per device and what was live there, growth per step,
the failure of a cell that ran out, and how much the caching allocator held that it could not use.

Read from `report.gpu_memory` (readers/gpu_memory.py).  Allocation sites are summarised as the Python samples'
stacks are (analysis/python_code.py: "line 5 › forward (torch/nn/modules/linear.py)"), so that the memory tab and
the findings name the user's own line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

from ..readers.contract import NsysFrames
from ..readers.python_samples import cell_first_line_of, frame_kinds, read_code_files, shown_files
from .frame_memo import report_memo
from .python_code import stack_info
from .steps import find_steps, user_ranges
from ..readers.gpu_memory import GpuMemory

TOP_SITES = 10
DEVICE_COLUMNS = ("device_id", "capacity", "peak_bytes", "peak_ns", "peak_allocated", "peak_allocated_ns",
                  "peak_reserved", "held_before", "end_allocated", "steps", "growth_per_step", "steps_to_full",
                  "free_when_grown", "oom_ns", "oom_asked", "oom_free", "source")


@dataclass
class MemorySummary:
    """devices: one row per device (DEVICE_COLUMNS; NaN where not known); live: per device, what was live at the
    peak (or at the failure) grouped by where it was allocated: device_id, site, line (the cell's, -1 outside),
    blocks, bytes, nvtx (the innermost user range open when most of them were allocated); growth: per device and
    step, torch's allocated bytes at the step's end."""
    devices: pd.DataFrame
    live: pd.DataFrame
    growth: pd.DataFrame
    sources: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return bool(self.devices.empty)


def empty_summary(settings: dict[str, Any] | None = None) -> MemorySummary:
    return MemorySummary(pd.DataFrame(columns=list(DEVICE_COLUMNS)), _live_frame([]), _growth_frame([]), (),
                         dict(settings or {}))


def memory_summary(report: NsysFrames) -> MemorySummary:
    """The summary of report.gpu_memory (empty when the report has no memory record); computed once per report
    (the view's GPU memory tab and the memory findings both ask)."""
    memo = report_memo(report)
    if "memory_summary" not in memo:
        memo["memory_summary"] = _memory_summary(report)
    summary: MemorySummary = memo["memory_summary"]
    return summary


def _memory_summary(report: NsysFrames) -> MemorySummary:
    mem = report.gpu_memory
    if mem is None:  # the contract's "none can be recorded"
        return empty_summary()
    if mem.empty:
        return empty_summary(mem.settings)
    labels, lines = _site_labels(mem, report.path.parent)
    steps = _step_ends(report)
    rows, live, growth = [], [], []
    tl = mem.timeline
    for device, g in tl.groupby("device_id", sort=True):
        torch_rows = g[g["source"] == "torch"]
        nsys_rows = g[g["source"] == "nsys"]
        row: dict[str, Any] = {k: np.nan for k in DEVICE_COLUMNS}
        row.update(device_id=int(device), capacity=mem.capacity.get(int(device), np.nan),
                   source="torch" if len(torch_rows) else "nsys")
        use = torch_rows if len(torch_rows) else nsys_rows
        i = int(use["bytes"].to_numpy().argmax())
        row.update(peak_bytes=float(use["bytes"].iloc[i]), peak_ns=float(use["start_ns"].iloc[i]))
        at = None
        if len(torch_rows):
            a = torch_rows["allocated"].to_numpy()
            j = int(a.argmax())
            at = float(torch_rows["start_ns"].iloc[j])
            row.update(peak_allocated=float(a[j]), peak_allocated_ns=at,
                       peak_reserved=float(torch_rows["reserved"].max()),
                       held_before=float(mem.held_before.get(int(device), np.nan)), end_allocated=float(a[-1]),
                       free_when_grown=_free_when_grown(torch_rows))
        # growth per step from either record: torch's allocated bytes, else the device memory nsys saw allocated
        # (--cuda-memory-usage: the allocator's segments, so growth shows in their sizes)
        g_rows = _growth(torch_rows, steps, "allocated") if len(torch_rows) else _growth(nsys_rows, steps, "bytes")
        if len(g_rows) >= 3:
            d = np.diff(g_rows["allocated"].to_numpy(float))
            per = float(np.median(d))
            row.update(steps=len(g_rows), growth_per_step=per)
            cap = row["capacity"]
            if per > 0 and np.isfinite(cap):
                row["steps_to_full"] = max(0.0, (cap - float(g_rows["allocated"].iloc[-1])) / per)
            growth.append(g_rows.assign(device_id=int(device)))
        oom = mem.ooms[mem.ooms["device_id"] == device]
        if len(oom):
            o = oom.iloc[0]
            row.update(oom_ns=float(o["start_ns"]), oom_asked=float(o["size"]), oom_free=float(o["device_free"]))
            at = float(o["start_ns"]) if np.isfinite(o["start_ns"]) else at
        rows.append(row)
        if at is not None:
            live.append(_live_at(mem, int(device), at, labels, lines, report))
    devices = pd.DataFrame(rows, columns=list(DEVICE_COLUMNS))
    return MemorySummary(devices, pd.concat(live, ignore_index=True) if live else _live_frame([]),
                         pd.concat(growth, ignore_index=True) if growth else _growth_frame([]), mem.sources,
                         mem.settings)


# ---- parts ------------------------------------------------------------------------------------------------------

def _site_labels(mem: GpuMemory, folder: Path | None) -> tuple[np.ndarray, np.ndarray]:
    """Per stack of the history: its summary and the cell's line (python_code.stack_info, on the same frames)."""
    if not mem.stacks:
        return np.empty(0, object), np.empty(0, np.int64)
    index: dict[tuple[str, str], int] = {}
    frames: list[tuple[str, str, int]] = []
    stacks: list[np.ndarray] = []
    lines: list[np.ndarray] = []
    for st in mem.stacks:
        ids, ln = [], []
        for name, file, line in st:
            key = (file, name)
            if key not in index:
                index[key] = len(frames)
                frames.append((name, file, line))
            ids.append(index[key])
            ln.append(line)
        stacks.append(np.asarray(ids, np.int32))
        lines.append(np.asarray(ln, np.int32))
    fr = pd.DataFrame(frames, columns=["function", "file", "first_line"])
    code = read_code_files(folder) if folder is not None else {}
    fr["kind"] = frame_kinds(fr["file"], code)
    fr["file"] = shown_files(fr["file"], code)
    first = cell_first_line_of(folder, code) if folder is not None else 1
    ps = SimpleNamespace(frames=fr, stacks=stacks, lines=lines, cell_first_line=first)
    info = stack_info(ps)
    return info.label, info.cell_line


def _step_ends(report: NsysFrames) -> np.ndarray:
    """The end of each step of the cell's loop (the process with the most steps), empty without steps."""
    try:
        found = find_steps(report)
    except Exception:  # noqa: BLE001 - memory without steps
        return np.empty(0)
    if not found:
        return np.empty(0)
    s = max(found.values(), key=lambda x: x.count)
    return s.ends.astype(float)


def _growth(rows: pd.DataFrame, ends: np.ndarray, col: str) -> pd.DataFrame:
    """What `col` (bytes in use) was at each step's end: the last event at or before it."""
    if not len(ends) or not len(rows) or rows["start_ns"].isna().all():
        return _growth_frame([])
    t = rows["start_ns"].to_numpy(float)
    a = rows[col].to_numpy(float)
    k = np.searchsorted(t, ends, side="right") - 1   # the last event at or before each step's end
    ok = k >= 0
    return pd.DataFrame({"step": np.arange(len(ends))[ok], "end_ns": ends[ok], "allocated": a[k[ok]]})


def _free_when_grown(torch_rows: pd.DataFrame) -> float:
    """The most the allocator held free in its segments at a moment it reserved more from the driver: memory it
    could not use for the request (fragmentation), NaN when it never grew."""
    r = torch_rows["reserved"].to_numpy(float)
    a = torch_rows["allocated"].to_numpy(float)
    if len(r) < 2:
        return np.nan
    grew = np.flatnonzero(np.diff(r) > 0) + 1
    if not len(grew):
        return np.nan
    return float(np.max(r[grew - 1] - a[grew - 1]))


def _live_at(mem: GpuMemory, device: int, t: float, labels: np.ndarray, lines: np.ndarray,
             report: NsysFrames) -> pd.DataFrame:
    b = mem.blocks[mem.blocks["device_id"] == device]
    live = b[(b["alloc_ns"] <= t) & ~(b["free_ns"] <= t)]
    if live.empty:
        return _live_frame([])
    st = live["stack"].to_numpy(np.int64)
    live = live.assign(site=[labels[s] if 0 <= s < len(labels) else "?" for s in st],
                       line=[int(lines[s]) if 0 <= s < len(lines) else -1 for s in st],
                       nvtx=_ranges_at(report, live["alloc_ns"].to_numpy(float)))
    g = live.groupby(["site", "line"], sort=False).agg(blocks=("size", "size"), bytes=("size", "sum")).reset_index()
    # the NVTX range that holds most of a site's bytes (blocks made outside any range count as '')
    top = live.groupby(["site", "line", "nvtx"], sort=False)["size"].sum().reset_index()
    top = top.sort_values("size", ascending=False, kind="stable").drop_duplicates(["site", "line"])
    g = g.merge(top[["site", "line", "nvtx"]], on=["site", "line"], how="left")
    g = g.sort_values("bytes", ascending=False, kind="stable").head(TOP_SITES)
    g["device_id"] = device
    return g[["device_id", "site", "line", "blocks", "bytes", "nvtx"]].reset_index(drop=True)


def _ranges_at(report: NsysFrames, t: np.ndarray) -> np.ndarray:
    """Per time, the user NVTX range open then that began last (the innermost where they nest; '' when none)."""
    out = np.full(len(t), "", object)
    try:
        r = user_ranges(report)
    except Exception:  # noqa: BLE001 - memory without ranges
        return out
    if r.empty or not len(t):
        return out
    r = r.sort_values("start_ns", kind="stable")
    starts = r["start_ns"].to_numpy(np.int64)
    ends = pd.to_numeric(r["end_ns"], errors="coerce").fillna(np.inf).to_numpy(float)
    label = r["label"].astype(str).to_numpy(object)
    i = np.searchsorted(starts, np.nan_to_num(t, nan=-1.0), side="right") - 1
    ok = (i >= 0) & np.isfinite(t)
    ok[ok] &= ends[i[ok]] >= t[ok]
    out[ok] = label[i[ok]]
    return out


def _live_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["device_id", "site", "line", "blocks", "bytes", "nvtx"])


def _growth_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["step", "end_ns", "allocated", "device_id"])
