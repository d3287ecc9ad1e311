"""The n largest of many values without sorting them all: a finding's evidence and the longest gaps are a few
thousand rows of millions."""
from __future__ import annotations

import numpy as np


def largest(values: np.ndarray, n: int) -> np.ndarray:
    """Positions of the n largest values, largest first, ties in their order: what
    `np.argsort(-values, kind="stable")[:n]` gives, with a partition and a sort of the candidates only (integers;
    other values are sorted whole)."""
    v = np.asarray(values)
    if v.dtype.kind == "u":  # negated below: as signed
        v = v.astype(np.int64)
    if n >= len(v) or v.dtype.kind != "i":
        return np.argsort(-v, kind="stable")[:max(n, 0)]
    if n <= 0:
        return np.zeros(0, np.intp)
    nth = np.partition(v, len(v) - n)[len(v) - n]  # the n-th largest: every value above it, and ties, may be kept
    rows = np.flatnonzero(v >= nth)
    return rows[np.argsort(-v[rows], kind="stable")][:n]
