"""The GPU operations nsys analyze's GPU rules look at (gpu_gaps, gpu_time_util): kernels, copies and memsets that
start after 0, then nsys's CUDA overhead inside each (process, GPU) range.

Held as their start and end columns and the rows of each (process, GPU); the context and correlation ids are
taken from the frames for the rows a rule asks about (the operations around a long gap: a few), not gathered for
all (13M operations at 10M kernels: the six gathered columns were 650 MB and 0.5 s).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...readers.contract import NsysFrames

OVERHEAD_NAMES = ["CUDA profiling data flush overhead", "CUDA profiling stop overhead", "CUDA profiling overhead"]


class GpuOps:
    """start, end: int64 per operation, in the frames' order (kernels, copies, memsets), the overhead after;
    pairs: ((pid, device_id), rows) in (pid, device_id) order, rows a slice where one pair holds them all."""

    def __init__(self, report: NsysFrames) -> None:
        frames = [f for f in (report.kernels, report.memcpy, report.memset) if len(f)]  # the contract's frames
        self._parts: list[tuple[pd.DataFrame, Any]] = []  # (frame, its rows kept: a slice where all are)
        starts, ends = [], []
        for f in frames:
            s = f["start_ns"].to_numpy(np.int64)
            keep = s > 0
            rows: Any = slice(None) if keep.all() else np.flatnonzero(keep)
            self._parts.append((f, rows))
            starts.append(s[rows])
            ends.append(pd.to_numeric(f["end_ns"]).to_numpy(np.int64)[rows])
        self._n_base = sum(len(s) for s in starts)
        self._offsets = np.cumsum([0] + [len(s) for s in starts])
        self.start = np.concatenate(starts) if starts else np.empty(0, np.int64)
        self.end = np.concatenate(ends) if ends else np.empty(0, np.int64)
        del starts, ends
        # the context ids' column has a missing value somewhere: as the column's to_numpy() gives, floats then
        self._context_na = any(bool(np.asarray(f["context_id"].isna())[rows].any()) for f, rows in self._parts)
        one = self._one_pair()
        ids = None if one else (self._joined("pid"), self._joined("device_id"))
        extra = self._overhead(report, one, ids)
        self._extra_context: list[Any] = [c for _, _, s, _, c in extra for _ in range(len(s))]
        if extra:
            self.start = np.concatenate([self.start, *(s for _, _, s, _, _ in extra)])
            self.end = np.concatenate([self.end, *(e for _, _, _, e, _ in extra)])
            if ids is not None:
                ids = (np.concatenate([ids[0], *(np.full(len(s), p, np.int64) for p, _, s, _, _ in extra)]),
                       np.concatenate([ids[1], *(np.full(len(s), d, np.int64) for _, d, s, _, _ in extra)]))
        self.pairs: list[tuple[tuple[int, int], Any]] = []
        if one is not None:
            self.pairs = [(one, slice(None))] if len(self.start) else []
        elif ids is not None and len(ids[0]):
            groups = pd.DataFrame({"pid": ids[0], "device_id": ids[1]}).groupby(["pid", "device_id"], sort=True).indices
            self.pairs = [((int(p), int(d)), np.asarray(groups[(p, d)], np.intp)) for p, d in sorted(groups)]

    def __len__(self) -> int:
        return len(self.start)

    def _overhead(self, report: NsysFrames, one: tuple[int, int] | None,
                  ids: tuple[np.ndarray, np.ndarray] | None) -> list[tuple[int, int, np.ndarray, np.ndarray, Any]]:
        """nsys's own overhead inside each (process, GPU)'s range of operations (busy time of that GPU), by device
        then pid: (pid, device, starts, ends, the pair's first known context id).  one: the only pair; ids: else
        each operation's pid and device."""
        ov = report.overhead
        if not len(ov) or not self._n_base:
            return []
        ov = ov[ov["name"].astype(str).isin(OVERHEAD_NAMES).to_numpy()]
        todo: list[tuple[tuple[int, int], Any]] = []  # ((pid, device), its base rows)
        if ids is None:
            todo = [(one, slice(None))] if one is not None and len(ov) else []
        elif len(ov):
            pid, dev = ids
            for k in map(int, np.sort(pd.unique((dev << 32) | pid))):
                p, d = k & 0xFFFFFFFF, k >> 32
                todo.append(((p, d), (dev == d) & (pid == p)))
        extra = []
        for (p, d), m in todo:
            o = ov[(ov["pid"] == p) & (ov["start_ns"] > self.start[m].min()) & (ov["end_ns"] < self.end[m].max())]
            if len(o):
                extra.append((p, d, o["start_ns"].to_numpy(np.int64), o["end_ns"].to_numpy(np.int64),
                              self._first_context(m)))
        return extra

    def _one_pair(self) -> tuple[int, int] | None:
        """(pid, device_id) where every operation has the same (the usual case), else None."""
        got = set()
        for f, rows in self._parts:
            ids = [f[c].to_numpy(np.int64)[rows] for c in ("pid", "device_id")]
            if not len(ids[0]):
                continue
            if any(not (a == a[0]).all() for a in ids):
                return None
            got.add((int(ids[0][0]), int(ids[1][0])))
        return got.pop() if len(got) == 1 else None

    def _joined(self, column: str) -> np.ndarray:
        parts = [f[column].to_numpy(np.int64)[rows] for f, rows in self._parts]
        return np.concatenate(parts) if parts else np.empty(0, np.int64)

    def _frame_rows(self, i: int, at: np.ndarray) -> np.ndarray:
        """Rows of part i's frame for positions among its kept rows."""
        kept = self._parts[i][1]
        return at if isinstance(kept, slice) else kept[at]

    def _first_context(self, rows: Any) -> Any:
        """The first known context id of these base rows (slice(None): all; else a mask over them), else NA."""
        for i, (f, kept) in enumerate(self._parts):
            ctx = pd.array(f["context_id"], dtype="Int64", copy=False)
            ok = ~np.asarray(ctx.isna())[kept]
            if not isinstance(rows, slice):
                ok &= rows[self._offsets[i]:self._offsets[i + 1]]
            j = np.flatnonzero(ok)
            if len(j):
                return ctx[int(self._frame_rows(i, j[:1])[0])]
        return pd.NA

    def _gather(self, column: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Values and missing mask of a nullable id column at these base rows."""
        rows = np.asarray(rows, np.int64)
        vals, mask = np.zeros(len(rows), np.int64), np.ones(len(rows), bool)
        part = np.searchsorted(self._offsets, rows, "right") - 1
        for i, (f, _) in enumerate(self._parts):
            mine = np.flatnonzero(part == i)
            if not len(mine):
                continue
            col = pd.array(f[column], dtype="Int64", copy=False)[self._frame_rows(i, rows[mine] - self._offsets[i])]
            vals[mine] = col.to_numpy(np.int64, na_value=0)
            mask[mine] = np.asarray(col.isna())
        return vals, mask

    def _rows(self, rows: np.ndarray | slice) -> np.ndarray:
        return np.arange(len(self))[rows] if isinstance(rows, slice) else np.asarray(rows, np.int64)

    def context_ids(self, rows: np.ndarray | slice) -> np.ndarray:
        """The context ids at these rows as the whole column's to_numpy() gives them: int64, or float64 with NaN
        where the column misses one anywhere; objects where an overhead row's context is unknown."""
        rows = self._rows(rows)
        base = rows < self._n_base
        vals, mask = self._gather("context_id", rows[base])
        extra = [self._extra_context[int(r) - self._n_base] for r in rows[~base]]
        if any(v is pd.NA for v in self._extra_context):  # pandas' concat made the column objects
            out = np.empty(len(rows), object)
            out[base] = [pd.NA if m else v for v, m in zip(vals.tolist(), mask.tolist())]
            out[~base] = extra
            return out
        v, m = np.zeros(len(rows), np.int64), np.zeros(len(rows), bool)
        v[base], m[base] = vals, mask
        v[~base] = np.asarray(extra, np.int64)
        known = pd.arrays.IntegerArray(v, m)
        got: np.ndarray = known.to_numpy(np.float64, na_value=np.nan) if self._context_na else known.to_numpy(np.int64)
        return got

    def context_at(self, row: int) -> Any:
        """One row's context id as the column's .iloc gives it (np.int64, or NA)."""
        if row >= self._n_base:
            v = self._extra_context[row - self._n_base]
            return v if v is pd.NA else np.int64(v)
        vals, mask = self._gather("context_id", np.array([row]))
        return pd.NA if mask[0] else vals[0]

    def correlation_ids(self, rows: np.ndarray | slice) -> pd.arrays.IntegerArray:
        """The correlation ids at these rows (NA for the overhead's and where the operation has none)."""
        rows = self._rows(rows)
        base = rows < self._n_base
        vals, mask = np.zeros(len(rows), np.int64), np.ones(len(rows), bool)
        vals[base], mask[base] = self._gather("correlation_id", rows[base])
        return pd.arrays.IntegerArray(vals, mask)
