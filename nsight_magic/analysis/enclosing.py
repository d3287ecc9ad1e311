"""Which user NVTX range was open around an event: `Enclosing` (per thread, innermost first), and `emitted()`, the
test that tells PyTorch's emit_nvtx operator ranges from the user's own.  Shared by the rules and analysis.ops."""
from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..inside.marks import CAPTURE_DOMAIN
from ..inside.ops import OPS_DOMAIN
from . import intervals as I
from .frame_memo import report_memo
from . import text as tx
from ..readers.contract import NsysFrames

EMITTED_TAG = r", (?:seq|op_id) = \d+"


def emitted(nv: pd.DataFrame) -> np.ndarray:
    """The NVTX rows that are PyTorch's emit_nvtx ranges (default domain, ', seq = N' / ', op_id = N' in the name)."""
    if nv.empty:
        return np.zeros(0, bool)
    names = nv["name"]
    return np.asarray(tx.contains(names, EMITTED_TAG, regex=True) & names.notna().to_numpy()
                      & nv["domain"].isna().to_numpy())


class Enclosing:
    """The innermost user NVTX range (our own cell range and --ops operator ranges excluded) open on a thread at a
    time, for many events; only=(domain, ...): the innermost range of those domains instead."""

    def __init__(self, report: NsysFrames, exclude_domains: tuple[str, ...] = (), only: tuple[str, ...] = ()) -> None:
        nv = report.nvtx
        if len(nv):
            keep = ~tx.eq(nv["kind"], "mark")
            if only:
                keep &= tx.isin(nv["domain"], only)
            else:  # PyTorch's emit_nvtx ranges are operators too, not the user's
                keep &= ~tx.isin(nv["domain"], (CAPTURE_DOMAIN, OPS_DOMAIN, *exclude_domains)) & ~emitted(nv)
            # the five columns used, then the rows: the frame's other columns are not copied (3M ranges)
            nv = nv[["start_ns", "end_ns", "pid", "tid", "name" if only else "label"]][keep]
        # (pid, tid) -> its ranges' starts, ends, parents (intervals.nest) and labels, by start
        self.threads: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
        if len(nv):
            end = pd.to_numeric(nv["end_ns"], errors="coerce").fillna(np.iinfo(np.int64).max)
            # a range's label ("Domain:name"); the name alone where one domain was asked for
            self._index(nv.assign(end_ns=end.astype(np.int64)), tx.text_array(nv["name" if only else "label"]))

    @classmethod
    def from_ranges(cls, ranges: pd.DataFrame, labels: npt.ArrayLike) -> Enclosing:
        """The innermost of the given ranges (start_ns, end_ns, pid, tid) open at a time, named by `labels`."""
        me = cls.__new__(cls)
        me.threads = {}
        me._index(ranges, np.asarray(labels, dtype=object))
        return me

    def _index(self, ranges: pd.DataFrame, labels: np.ndarray) -> None:
        s_all = ranges["start_ns"].to_numpy(np.int64)
        e_all = ranges["end_ns"].to_numpy(np.int64)
        for (pid, tid), idx in ranges.groupby(["pid", "tid"], sort=False).indices.items():  # threads: a few
            s = s_all[idx]
            if len(s) > 1 and not bool((s[1:] > s[:-1]).all()):  # ties or disorder: by start, the longest first
                o = idx[np.lexsort((-(e_all[idx] - s), s))]
                s = s_all[o]
            else:  # the frame comes by start: one thread's rows, distinct starts, are in order already
                o = idx
            e = e_all[o]
            _, parent = I.nest(s, e)
            self.threads[(int(pid), int(tid))] = (s, e, parent, labels[o])

    @classmethod
    def of(cls, report: NsysFrames, only: tuple[str, ...] = ()) -> Enclosing:
        """The report's Enclosing, built once per report and `only`: several rules ask, and with --ops the
        operator ranges number hundreds of thousands."""
        cache = report_memo(report).setdefault("enclosing", {})
        if only not in cache:
            cache[only] = cls(report, only=only)
        got: Enclosing = cache[only]
        return got

    def __call__(self, pid: npt.ArrayLike, tid: npt.ArrayLike, t: npt.ArrayLike) -> np.ndarray:
        at = np.asarray(t, np.int64)
        out = np.full(len(at), None, dtype=object)
        pids = np.asarray(pid, dtype=float)
        tids = np.asarray(pd.array(tid, dtype="Int64").to_numpy(dtype=float, na_value=np.nan))
        for (p, th), (s, e, parent, label) in self.threads.items():
            m = np.flatnonzero((pids == p) & (tids == th))
            if not len(m):
                continue
            cand = I.innermost(s, e, parent, at[m])
            ok = cand >= 0
            out[m[ok]] = label[cand[ok]]
        return out
