"""The steps of a cell (its training or inference loop), found in the NVTX ranges whatever their names.

A step range is a user NVTX range that repeats (at least MIN_STEPS times) on the thread that runs the cell, at the
outermost level where ranges repeat; digits in names are ignored ("iteration 3" and "iteration 4" are one step
range "iteration #").  Among such ranges the one covering most of the loop is taken.  A step is the time from one
step range's start to the next one's (what happens between two ranges, such as the next batch being loaded, belongs
to the step that waits for it); the last step ends at its range's end.

The steady state is every step but the first (warm-up: allocations, cuDNN/cuBLAS set-up, first-call compilation):
analysis.bottleneck judges it, and scales what it finds by steps / steady steps to the whole loop.  The time
before the first step is start-up (building the model, initialising NCCL, starting DataLoader workers).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..inside.marks import CAPTURE_DOMAIN
from . import text as tx
from .frame_memo import report_memo
from ..readers.contract import NsysFrames

MIN_STEPS = 3
# NVTX ranges nsight-magic adds itself (--lines, --ops) are no structure of the user's loop, nor are the operator
# ranges frameworks emit (PyTorch's emit_nvtx and nsys --pytorch: "aten::mm, seq = 7, sizes = [...]")
ANNOTATION_DOMAINS = ("cell lines", "nsight-magic ops")
# ... nor are the ranges libraries put around their own calls (CUB/Thrust's "CCCL:cub::DeviceReduce::Sum", NCCL's)
LIBRARY_DOMAINS = ("CCCL", "NCCL")
FRAMEWORK_OPS = r"^(?:aten|autograd|prim|c10d|cudnn|cublas|nccl|torch|triton)::|, seq = |^Autograd::"


@dataclass(frozen=True)
class Steps:
    """The steps of one process: starts/ends of its step ranges (sorted), and which range they are."""

    pid: int
    tid: int
    name: str              # the step range's name pattern (digits as '#'), e.g. "iteration #"
    starts: np.ndarray
    ends: np.ndarray

    @property
    def count(self) -> int:
        return len(self.starts)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Each step from its range's start to the next one's start (the last to its range's end)."""
        return self.starts, np.r_[self.starts[1:], self.ends[-1]] if self.count else self.ends

    def steady(self) -> tuple[int, int] | None:
        """(start, end) of the steady state: from the second step's start to the last step's end."""
        if self.count < 2:
            return None
        return int(self.starts[1] if self.count >= MIN_STEPS else self.starts[0]), int(self.ends[-1])

    @property
    def steady_count(self) -> int:
        return self.count - 1 if self.count >= MIN_STEPS else self.count


def user_ranges(report: NsysFrames) -> pd.DataFrame:
    """Closed NVTX ranges of the user's (not nsight-magic's cell range, --lines or --ops ranges, nor those of
    frameworks and libraries)."""
    nv = report.nvtx
    if nv.empty:
        return nv
    return nv[_user_rows(nv)]


def _user_rows(nv: pd.DataFrame) -> np.ndarray:
    """user_ranges' rows of the NVTX frame, as a bool per row."""
    # tests per distinct domain and name (categoricals), not per row
    keep: np.ndarray = ~tx.eq(nv["kind"], "mark") & nv["end_ns"].notna().to_numpy() \
        & ~tx.isin(nv["domain"], (CAPTURE_DOMAIN,) + ANNOTATION_DOMAINS + LIBRARY_DOMAINS) \
        & ~tx.contains(nv["name"], FRAMEWORK_OPS, regex=True, twins=(FRAMEWORK_OPS, FRAMEWORK_OPS))  # RE2 alike
    return keep


def cell_threads(report: NsysFrames) -> dict[int, int]:
    """pid -> the thread that runs the cell: the one holding nsight-magic's cell range, else the thread that made
    most CUDA API calls, else the one with most NVTX ranges.  Found once per report (the steps and the rules ask:
    0.5 s a time over 13M calls and 2.6M ranges)."""
    memo = report_memo(report)
    if "cell_threads" not in memo:
        memo["cell_threads"] = _cell_threads(report)
    return dict(memo["cell_threads"])


def _cell_threads(report: NsysFrames) -> dict[int, int]:
    out: dict[int, int] = {}
    nv = report.nvtx
    if not nv.empty:
        ours = nv[tx.eq(nv["domain"], CAPTURE_DOMAIN) & ~tx.eq(nv["kind"], "mark")]
        for pid, tid in zip(ours["pid"], ours["tid"]):
            out.setdefault(int(pid), int(tid))
    for frame in (report.columns("cuda_api", ["pid", "tid"]), nv):
        for pid, tid in _busiest_first(frame):
            out.setdefault(pid, tid)
    return out


def _busiest_first(frame: pd.DataFrame) -> list[tuple[int, int]]:
    """The (pid, tid) pairs of a frame's rows, the most frequent first (ties by pid, tid): one count over an
    integer key, not a groupby of a million rows; and over runs of rows of one thread (a thread's calls come
    together), not over every row (13M calls hashed took 2 s)."""
    known = frame["pid"].notna().to_numpy() & frame["tid"].notna().to_numpy()
    if not known.any():
        return []
    rows = slice(None) if known.all() else known  # the columns as they are where every row has both (13M calls)
    pid = frame["pid"].to_numpy()[rows].astype(np.int64, copy=False)
    tid = frame["tid"].to_numpy()[rows].astype(np.int64, copy=False)
    key = np.left_shift(pid, 32)  # the one new array: the key made in place
    key |= tid & 0xFFFFFFFF
    del pid, tid
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])  # where a run of one thread's rows begins
    at, keys = pd.factorize(key[first], sort=False)
    n = np.bincount(at, weights=np.diff(np.r_[first, len(key)]), minlength=len(keys)).astype(np.int64)
    keys = np.asarray(keys, np.int64)
    order = np.lexsort((keys, -n))
    return [(int(k >> 32), int(k & 0xFFFFFFFF)) for k in keys[order]]


def stem(labels: pd.Series) -> pd.Series:
    """Range names with their numbers as '#': the k-th instance of "step 3" is one of "step #".  A categorical,
    each distinct name rewritten once (a million ranges of a thousand names: no string per row)."""
    # the names these rows hold (a thread's few step ranges keep the categories of millions of emit_nvtx ranges)
    cat = pd.Categorical(labels).remove_unused_categories()
    names = np.array([str(c) for c in cat.categories], dtype=object)
    stems = pd.Series(names, dtype=object).str.replace(r"\d+", "#", regex=True).to_numpy(object)
    codes, uniq = pd.factorize(stems)
    rows = np.where(cat.codes >= 0, codes[np.maximum(cat.codes, 0)] if len(codes) else -1, -1)  # a range without
    return pd.Series(pd.Categorical.from_codes(rows, categories=pd.Index(uniq, dtype=object)),  # a name: NA
                     index=labels.index)


def find_steps(report: NsysFrames) -> dict[int, Steps]:
    """pid -> Steps, for every process whose cell thread has a repeated outermost user range.  Found once per
    report: the diagnosis, the ranks, GPU memory and the gate ask (3 s a time over a --pytorch run's 4.8M
    ranges)."""
    memo = report_memo(report)
    if "steps" not in memo:
        memo["steps"] = _find_steps(report)
    return dict(memo["steps"])


def _find_steps(report: NsysFrames) -> dict[int, Steps]:
    nv = report.nvtx
    if nv.empty:
        return {}
    keep = _user_rows(nv)
    if not keep.any():
        return {}
    # the columns the steps need, and rows copied only where some are left out (3M ranges of one thread: none)
    rng = _rows(nv[["pid", "tid", "label", "depth", "start_ns", "end_ns"]], keep)
    threads = cell_threads(report)
    out = {}
    pids = rng["pid"].to_numpy(np.int64)
    for pid in np.unique(pids).tolist():
        g = _rows(rng, pids == pid)
        tid = threads.get(int(pid))
        if tid is not None:
            g = _rows(g, (g["tid"] == tid).to_numpy(bool))
        found = _steps_of(g)
        if found is not None:
            name, starts, ends = found
            out[int(pid)] = Steps(int(pid), int(g["tid"].iloc[0]) if tid is None else tid, name, starts, ends)
    return out


def _rows(frame: pd.DataFrame, keep: np.ndarray) -> pd.DataFrame:
    """frame[keep], the frame itself where every row is kept (no copy of millions of rows)."""
    return frame if keep.all() else frame[keep]


def _steps_of(g: pd.DataFrame) -> tuple[str, np.ndarray, np.ndarray] | None:
    if g.empty:
        return None
    st = stem(g["label"])
    counts = st.value_counts()
    repeated = counts[counts >= MIN_STEPS].index
    if not len(repeated):
        repeated = counts[counts >= 2].index
    if not len(repeated):
        return None
    is_rep = st.isin(repeated).to_numpy()
    cand, cst = _rows(g, is_rep), _rows(st, is_rep)
    depth = cand.groupby(cst)["depth"].min()
    outer = depth[depth == depth.min()].index
    best, best_key = None, None
    # each candidate's rows at its depth, by start (ties in the frame's order), as positions: no copy of the rows
    # (3M ranges of a few names)
    c_depth, c_start = cand["depth"].to_numpy(np.int64), cand["start_ns"].to_numpy(np.int64)
    for name in outer:  # a few candidate names
        idx = np.flatnonzero((cst == name).to_numpy(bool, na_value=False) & (c_depth == depth[name]))
        idx = idx[np.argsort(c_start[idx], kind="stable")]
        starts = c_start[idx]
        ends = cand["end_ns"].iloc[idx].astype(np.int64).to_numpy()
        key = (int(ends.max() - starts.min()), len(idx))  # the loop it spans, then how many steps
        if best_key is None or key > best_key:
            best, best_key = (str(name), starts, ends), key
    return best
