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
EMITTED_TWINS = (r", (?:seq|op_id) = [0-9]", r", (?:seq|op_id) = .")  # text.contains: ASCII digits; any character


def emitted(nv: pd.DataFrame) -> np.ndarray:
    """The NVTX rows that are PyTorch's emit_nvtx ranges (default domain, ', seq = N' / ', op_id = N' in the name)."""
    if nv.empty:
        return np.zeros(0, bool)
    names = nv["name"]
    return np.asarray(tx.contains(names, EMITTED_TAG, regex=True, twins=EMITTED_TWINS) & names.notna().to_numpy()
                      & nv["domain"].isna().to_numpy())


class Enclosing:
    """The innermost user NVTX range (our own cell range and --ops operator ranges excluded) open on a thread at a
    time, for many events; only=(domain, ...): the innermost range of those domains instead."""

    def __init__(self, report: NsysFrames, exclude_domains: tuple[str, ...] = (), only: tuple[str, ...] = ()) -> None:
        nv = report.nvtx
        # (pid, tid) -> its ranges' starts, ends, parents (intervals.nest), by start, and each one's label as an
        # index into an array of texts
        self.threads: dict[tuple[int, int], tuple[np.ndarray, ...]] = {}
        if not len(nv):
            return
        keep = ~tx.eq(nv["kind"], "mark")
        if only:
            keep &= tx.isin(nv["domain"], only)
        else:  # PyTorch's emit_nvtx ranges are operators too, not the user's
            keep &= ~tx.isin(nv["domain"], (CAPTURE_DOMAIN, OPS_DOMAIN, *exclude_domains)) & ~emitted(nv)
        keep = np.asarray(keep, bool)
        rows = None if keep.all() else np.flatnonzero(keep)
        if rows is not None and not len(rows):
            return

        def kept(a: np.ndarray) -> np.ndarray:  # the column's kept rows, as positions: no frame copied (3M ranges)
            return a if rows is None else a[rows]

        # a range's label ("Domain:name"); the name alone where one domain was asked for: each text made once
        codes, texts = tx.text_codes(nv["name" if only else "label"])
        end = nv["end_ns"].to_numpy(np.int64, na_value=np.iinfo(np.int64).max)
        self._index(kept(nv["start_ns"].to_numpy(np.int64)), kept(end), kept(nv["pid"].to_numpy(np.int64)),
                    kept(nv["tid"].to_numpy(np.int64)), kept(codes), texts)

    @classmethod
    def from_ranges(cls, ranges: pd.DataFrame, labels: npt.ArrayLike) -> Enclosing:
        """The innermost of the given ranges (start_ns, end_ns, pid, tid) open at a time, named by `labels`."""
        me = cls.__new__(cls)
        me.threads = {}
        if len(ranges):
            me._index(ranges["start_ns"].to_numpy(np.int64), ranges["end_ns"].to_numpy(np.int64),
                      ranges["pid"].to_numpy(np.int64), ranges["tid"].to_numpy(np.int64),
                      np.arange(len(ranges)), np.asarray(labels, dtype=object))
        return me

    def _index(self, s_all: np.ndarray, e_all: np.ndarray, pid: np.ndarray, tid: np.ndarray, codes: np.ndarray,
               texts: np.ndarray) -> None:
        """Each thread's ranges by start (ties: the longest first), their parents, and their labels (codes into
        texts)."""
        threads = pd.DataFrame({"pid": pid, "tid": tid}, copy=False).groupby(["pid", "tid"], sort=False).indices
        for (p, t), idx in threads.items():  # threads: a few
            s = s_all[idx]
            if len(s) > 1 and not bool((s[1:] > s[:-1]).all()):  # ties or disorder: by start, the longest first
                o = idx[np.lexsort((-(e_all[idx] - s), s))]
                s = s_all[o]
            else:  # the rows come by start: one thread's rows, distinct starts, are in order already
                o = idx
            e = e_all[o]
            _, parent = I.nest(s, e)
            self.threads[(int(p), int(t))] = (s, e, parent, codes[o], texts)

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
        for (p, th), (s, e, parent, codes, texts) in self.threads.items():
            m = np.flatnonzero((pids == p) & (tids == th))
            if not len(m):
                continue
            cand = I.innermost(s, e, parent, at[m])
            ok = cand >= 0
            out[m[ok]] = texts[codes[cand[ok]]]
        return out
