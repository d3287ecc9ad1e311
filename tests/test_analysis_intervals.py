"""Interval arithmetic (analysis/intervals.py) on small cases whose answers are known by hand."""
from __future__ import annotations

import numpy as np
import pytest

from nsight_magic.analysis import intervals as iv


def test_contains_is_membership_in_the_union_half_open():
    ranges = iv.union([10, 0, 15, 40], [20, 5, 30, 50])  # [0, 5) [10, 30) [40, 50)
    assert ranges[0].tolist() == [0, 10, 40] and ranges[1].tolist() == [5, 30, 50]
    at = np.array([-1, 0, 4.5, 5, 9, 10, 29, 30, 45, 50, 99])
    assert iv.contains(ranges, at).tolist() == [False, True, True, False, False, True, True, False, True, False,
                                                False]
    assert iv.contains(iv.EMPTY, at).tolist() == [False] * len(at)
    assert iv.total(ranges) == 5 + 20 + 10


def _nested(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n push/pop ranges of one thread (ties and empty ranges included), sorted by start, the longest first."""
    t, stack, starts, ends = 0, [], [], []
    while len(starts) < n or stack:
        if len(starts) < n and (not stack or rng.random() < 0.55):
            stack.append(len(starts))
            starts.append(t)
            ends.append(None)
        else:
            ends[stack.pop()] = t
        t += int(rng.integers(0, 3))  # 0: several events at one time
    s, e = np.array(starts, np.int64), np.array(ends, np.int64)
    o = np.lexsort((s - e, s))
    return s[o], e[o]


@pytest.mark.parametrize("seed", range(5))
def test_nesting_equals_a_scan_of_the_ranges_before(seed):
    """nest(): a range's depth is the non-empty ranges before it still open at its start, its parent the innermost
    of them; an empty range's parent is the innermost non-empty range open at its start."""
    rng = np.random.default_rng(seed)
    s, e = _nested(rng, 300)
    depth, parent = iv.nest(s, e)
    full = e > s
    for i in range(len(s)):
        if full[i]:
            open_ = np.flatnonzero(full[:i] & (e[:i] > s[i]))
        else:
            open_ = np.flatnonzero(full & (s <= s[i]) & (e > s[i]))
        want = int(open_.max()) if len(open_) else -1
        assert parent[i] == want, i
        assert depth[i] == (len(open_) if full[i] else (depth[want] + 1 if want >= 0 else 0)), i


@pytest.mark.parametrize("seed", range(6))
def test_the_gaps_a_set_meets_are_those_it_overlaps(seed):
    rng = np.random.default_rng(seed)
    # disjoint gaps in order (as intervals.gaps makes them), empty ones and shared ends included
    edges = np.sort(rng.integers(0, 10_000, 2 * int(rng.integers(1, 400))))
    gs, ge = edges[::2], edges[1::2]
    k = int(rng.integers(0, 6)) if seed else 400
    stretches = iv.union(*(np.sort(rng.integers(-50, 10_050, (2, k)), axis=0)))
    want = iv.overlap(stretches, gs, ge)
    at, part = iv.meeting(stretches, gs, ge)
    got = np.zeros(len(gs), np.int64)
    got[at] = part
    assert got.tolist() == want.tolist()
    assert (part > 0).all()
    if isinstance(at, slice):  # every gap met
        assert (want > 0).all()
    else:
        assert at.tolist() == np.flatnonzero(want > 0).tolist()
    assert iv.meeting(iv.EMPTY, gs, ge)[1].tolist() == []
    whole = (np.array([-1]), np.array([20_000]))
    full = ge > gs
    at, part = iv.meeting(whole, gs[full], ge[full])
    assert at == slice(None) and part.tolist() == (ge[full] - gs[full]).tolist()


@pytest.mark.parametrize("seed", range(8))
def test_gaps_are_what_the_set_leaves_of_the_span(seed):
    rng = np.random.default_rng(seed)
    busy = iv.union(*np.sort(rng.integers(0, 1_000, (2, int(rng.integers(0, 60)))), axis=0))
    lo, hi = sorted(rng.integers(-20, 1_020, 2).tolist())
    if seed == 0:
        lo, hi = 5, 5  # an empty span
    gs, ge = iv.gaps(busy, lo, hi)
    free = np.ones(hi - lo, bool)  # each nanosecond of [lo, hi) by hand
    for a, b in zip(*busy):
        free[max(a, lo) - lo:max(min(b, hi) - lo, 0)] = False
    edges = np.flatnonzero(np.diff(np.r_[0, free.astype(np.int8), 0]))
    assert gs.tolist() == (edges[::2] + lo).tolist() and ge.tolist() == (edges[1::2] + lo).tolist()


@pytest.mark.parametrize("seed", range(5))
def test_the_union_of_all_is_that_of_one_kind_and_the_rest_less_it(seed):
    # the diagnosis's busy time: the kernels' union, and the copies' less it, merged (touching ones included)
    rng = np.random.default_rng(seed)
    n = 3000
    s = rng.integers(0, 50_000, n)
    e = s + rng.integers(0, 40, n)  # some empty, many touching or overlapping
    kind = rng.random(n) < 0.7
    a = iv.union(s[kind], e[kind])
    rest = iv.subtract(iv.union(s[~kind], e[~kind]), a)
    merged = iv.union(np.r_[a[0], rest[0]], np.r_[a[1], rest[1]])
    whole = iv.union(s, e)
    assert merged[0].tolist() == whole[0].tolist() and merged[1].tolist() == whole[1].tolist()
    assert len(whole[0]) > 100
