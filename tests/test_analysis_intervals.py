"""Interval arithmetic (analysis/intervals.py) on small cases whose answers are known by hand."""
from __future__ import annotations

import numpy as np

from nsight_magic.analysis import intervals as iv


def test_contains_is_membership_in_the_union_half_open():
    ranges = iv.union([10, 0, 15, 40], [20, 5, 30, 50])  # [0, 5) [10, 30) [40, 50)
    assert ranges[0].tolist() == [0, 10, 40] and ranges[1].tolist() == [5, 30, 50]
    at = np.array([-1, 0, 4.5, 5, 9, 10, 29, 30, 45, 50, 99])
    assert iv.contains(ranges, at).tolist() == [False, True, True, False, False, True, True, False, True, False,
                                                False]
    assert iv.contains(iv.EMPTY, at).tolist() == [False] * len(at)
    assert iv.total(ranges) == 5 + 20 + 10
