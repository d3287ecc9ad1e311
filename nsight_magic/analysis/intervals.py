"""Interval arithmetic on numpy arrays (ns): unions, differences and coverage, without a Python loop per event.

Busy time is always an interval union (two kernels running at once are busy once), never a sum of durations.
An interval set is a pair (starts, ends) of int64 arrays, sorted and disjoint once it went through union().
"""
from __future__ import annotations

from typing import TypeAlias

import numpy as np
import numpy.typing as npt

Intervals: TypeAlias = "tuple[np.ndarray, np.ndarray]"  # (starts, ends), int64 ns

EMPTY: Intervals = (np.empty(0, np.int64), np.empty(0, np.int64))


def union(starts: npt.ArrayLike, ends: npt.ArrayLike) -> Intervals:
    """The union of [start, end) intervals, as sorted disjoint intervals (empty ones dropped)."""
    s = np.asarray(starts, np.int64)
    e = np.asarray(ends, np.int64)
    keep = e > s
    if not keep.all():  # no copy where none is empty (the usual case: a million kernels)
        s, e = s[keep], e[keep]
    del keep
    if not len(s):
        return EMPTY
    if len(s) > 1 and not (s[1:] >= s[:-1]).all():  # the readers' frames come sorted by start: no sort then
        o = np.argsort(s, kind="stable")
        s, e = s[o], e[o]
    run = np.maximum.accumulate(e)
    new = np.empty(len(s), bool)  # where an interval starts after all before it ended
    new[0] = True
    np.greater(s[1:], run[:-1], out=new[1:])
    del run
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx)


def total(iv: Intervals) -> int:
    s, e = iv
    return int((e - s).sum()) if len(s) else 0


def clip(iv: Intervals, lo: int, hi: int) -> Intervals:
    """A disjoint interval set cut to [lo, hi)."""
    s, e = iv
    s2, e2 = np.maximum(s, lo), np.minimum(e, hi)
    keep = e2 > s2
    return s2[keep], e2[keep]


def covered(iv: Intervals, at: npt.ArrayLike) -> np.ndarray:
    """For each time in `at`: how much of the disjoint set `iv` lies before it (a cumulative coverage function)."""
    s, e = iv
    t = np.asarray(at, np.int64)
    if not len(s):
        return np.zeros(len(t), np.int64)
    cum = np.r_[0, np.cumsum(e - s)]
    # three arrays the size of `at`, worked in place: a diagnosis asks this of 13M gaps at a time
    kind = np.result_type(cum.dtype, e.dtype, t.dtype)  # what `prev - (e[last] - t)` would give
    k = np.searchsorted(s, t, "right")  # intervals starting at or before t
    out = cum[k].astype(kind, copy=False)  # their full lengths ...
    none = k == 0
    k -= 1
    k[none] = 0
    over = e[k].astype(kind, copy=False)  # ... minus what the last of them has after t
    del k
    over -= t
    np.maximum(over, 0, out=over)
    over[none] = 0
    out -= over
    return np.asarray(out)


def contains(iv: Intervals, at: npt.ArrayLike) -> np.ndarray:
    """For each time in `at`: whether it lies inside the disjoint set `iv` (some [start, end))."""
    s, e = iv
    t = np.asarray(at)
    if not len(s):
        return np.zeros(len(t), bool)
    k = np.searchsorted(s, t, "right") - 1  # the last interval begun by then
    return np.asarray((k >= 0) & (t < e[np.maximum(k, 0)]))


def overlap(iv: Intervals, starts: npt.ArrayLike, ends: npt.ArrayLike) -> np.ndarray:
    """How much of the disjoint set `iv` lies inside each [start, end)."""
    out = covered(iv, ends)
    out -= covered(iv, starts)
    np.maximum(out, 0, out=out)
    return out


def meeting(iv: Intervals, starts: npt.ArrayLike, ends: npt.ArrayLike) -> tuple[np.ndarray | slice, np.ndarray]:
    """Of disjoint intervals in order [starts, ends) (one GPU's idle gaps), those the disjoint set `iv` covers some
    of: their positions (slice(None) where that is every one) and how much of each it covers, as overlap() has it.
    Found from iv's bounds searched among them: a few stretches against 13M gaps look only at the gaps they meet."""
    s, e = iv
    gs, ge = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
    if not len(s) or not len(gs):
        return np.empty(0, np.intp), np.zeros(0, np.int64)
    lo = np.searchsorted(ge, s, "right")  # each interval of iv meets the intervals lo..hi-1
    hi = np.searchsorted(gs, e, "left")
    lo = np.maximum(lo, np.r_[0, np.maximum.accumulate(hi)[:-1]])  # one that two of iv's meet, taken once
    n = np.maximum(hi - lo, 0)
    total = int(n.sum())
    at: np.ndarray | slice
    if total == len(gs):
        at, part = slice(None), overlap(iv, gs, ge)
    else:
        at = np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(total)
        part = overlap(iv, gs[at], ge[at])
    hit = part > 0
    if not hit.all():
        at = np.flatnonzero(hit) if isinstance(at, slice) else at[hit]
        part = part[hit]
    return at, part


def within(rows: np.ndarray | slice, at: np.ndarray | slice) -> np.ndarray | slice:
    """Positions `at` of a subset `rows` (slice(None): every row; else positions) as positions of the whole: what
    meeting() found among some rows' intervals, as rows of their frame."""
    return at if isinstance(rows, slice) else rows[at]


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """a minus b, both disjoint sets: the parts of a that b does not cover."""
    a_s, a_e = a
    b_s, b_e = b
    if not len(a_s) or not len(b_s):
        return a
    # the complement of b, then intersect: boundaries of a and b merged in one sweep
    cut_s = np.r_[np.iinfo(np.int64).min, b_e]
    cut_e = np.r_[b_s, np.iinfo(np.int64).max]
    return intersect(a, (cut_s, cut_e))


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """The intersection of two disjoint sets."""
    a_s, a_e = a
    b_s, b_e = b
    if not len(a_s) or not len(b_s):
        return EMPTY
    # for each interval of a, the intervals of b that can overlap it
    lo = np.searchsorted(b_e, a_s, "right")
    hi = np.searchsorted(b_s, a_e, "left")
    n = np.maximum(hi - lo, 0)
    if not n.sum():
        return EMPTY
    ai = np.repeat(np.arange(len(a_s)), n)
    first = np.repeat(np.cumsum(n) - n, n)             # where each a-interval's run of pairs begins
    bi = np.repeat(lo, n) + (np.arange(len(ai)) - first)
    s = np.maximum(a_s[ai], b_s[bi])
    e = np.minimum(a_e[ai], b_e[bi])
    keep = e > s
    return s[keep], e[keep]


def gaps(iv: Intervals, lo: int, hi: int) -> Intervals:
    """The parts of [lo, hi) that the disjoint set `iv` leaves uncovered.  The set's intervals inside [lo, hi) are a
    run of it (it is in order): each gap is made once, in place, rather than through clipped copies (13M)."""
    s, e = iv
    i0, i1 = int(np.searchsorted(e, lo, "right")), int(np.searchsorted(s, hi, "left"))  # those that meet it
    n = max(i1 - i0, 0)
    gs, ge = np.empty(n + 1, np.int64), np.empty(n + 1, np.int64)
    gs[0], ge[n] = lo, hi
    gs[1:], ge[:n] = e[i0:i0 + n], s[i0:i0 + n]
    if n:  # the first and last of them cut at [lo, hi)'s ends
        ge[0], gs[n] = max(ge[0], lo), min(gs[n], hi)
    keep = ge > gs
    if keep.all():
        return gs, ge
    return gs[keep], ge[keep]


def nest(starts: npt.ArrayLike, ends: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Ranges of one thread that nest (push/pop), sorted by start and, at equal starts, longest first: each one's
    depth (ranges open around it) and parent (index of the innermost of them, -1 for none), without a loop per
    range.  Empty ranges hold nothing: their parent is the range open around their start."""
    s = np.asarray(starts, np.int64)
    e = np.asarray(ends, np.int64)
    n = len(s)
    full = np.flatnonzero(e > s)
    if not len(full):
        return np.zeros(n, np.int64), np.full(n, -1, np.int64)
    every = len(full) == n  # no empty range: the full ranges' depths and parents are the answer, no copies
    fs, fe = (s, e) if every else (s[full], e[full])
    # ranges before i still open at its start: i minus those that ended by then (nested: they began before it);
    # in place: millions of ranges make each temporary tens of MB
    d = np.searchsorted(np.sort(fe), fs, "right")
    np.subtract(np.arange(len(full)), d, out=d)
    np.maximum(d, 0, out=d)
    p = np.full(len(full), -1, np.int64)
    for level in range(1, int(d.max()) + 1):  # once per nesting level
        outer = np.flatnonzero(d == level - 1)
        inner = np.flatnonzero(d == level)
        if len(outer) and len(inner):
            k = np.searchsorted(outer, inner) - 1
            p[inner] = np.where(k >= 0, outer[np.maximum(k, 0)], -1)
    if every:
        return d, p
    depth = np.zeros(n, np.int64)
    parent = np.full(n, -1, np.int64)
    depth[full] = d
    parent[full] = np.where(p >= 0, full[np.maximum(p, 0)], -1)
    empty = np.flatnonzero(e <= s)
    inside = innermost(fs, fe, p, s[empty])
    parent[empty] = np.where(inside >= 0, full[np.maximum(inside, 0)], -1)
    depth[empty] = np.where(inside >= 0, d[np.maximum(inside, 0)] + 1, 0)
    return depth, parent


def innermost(starts: npt.ArrayLike, ends: npt.ArrayLike, parent: np.ndarray, at: npt.ArrayLike) -> np.ndarray:
    """For each time in `at`: the index of the innermost of nest()'s ranges open then (-1: none)."""
    s = np.asarray(starts, np.int64)
    e = np.asarray(ends, np.int64)
    t = np.asarray(at, np.int64)
    cand = np.searchsorted(s, t, "right") - 1  # the latest range begun by then ...
    for _ in range(256):  # ... or, while it has ended, the one around it
        ended = (cand >= 0) & (e[np.maximum(cand, 0)] <= t)
        if not ended.any():
            break
        cand = np.where(ended, parent[np.maximum(cand, 0)], cand)
    return cand
