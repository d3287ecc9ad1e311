"""Columns that hold one value: kept as that value, not as a row-long array.

A frame of millions of rows often has columns with a single value: the process and GPU of a one-GPU run, an idle
category no gap has (no OS calls traced, no allocator calls), the window flag of gaps that are all inside it. numpy
can show one value as a read-only array of any length without memory (a zero stride: `np.broadcast_to`), and pandas
frames take such arrays as they are, so the column reads, compares, sums and takes as before and costs nothing to
hold (13M gaps: 99 MB per int64 column).

Such an array is read-only: pandas writes into a column's array on an edit of the frame (`df.loc[i, c] = v`) unless
another Series shares it (copy-on-write then copies first). A frame users get keeps every such column in a Series
its owner holds (readers/nsys.py, `_lend`); the analysis's own frames are never edited in place."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


def constant(value: Any, n: int, dtype: Any = None) -> np.ndarray:
    """`value` repeated n times, as a read-only array that holds it once."""
    return np.broadcast_to(np.asarray(value, dtype), (n,))


def compacted(a: np.ndarray) -> np.ndarray:
    """`a`, or the same values held once where they are all equal (a plain numpy array of integers or booleans;
    others come back as they are: floats' 0.0 and -0.0 compare equal, NaN unequal)."""
    if not isinstance(a, np.ndarray) or a.ndim != 1 or len(a) < 2 or a.dtype.kind not in "biu":
        return a
    if a.strides[0] == 0 or (a == a[0]).all():
        return constant(a[0], len(a), a.dtype)
    return a


def one_value(x: Any) -> Any:
    """compacted() for a frame's column: a numpy array, or a nullable integer array (its values and its mask);
    anything else as it is."""
    if isinstance(x, pd.arrays.IntegerArray):
        data, mask = x._data, x._mask  # noqa: SLF001 - pandas' documented constructor takes them back
        d, m = compacted(data), compacted(mask)
        return x if d is data and m is mask else pd.arrays.IntegerArray(d, m)
    return compacted(x)


def held_value(x: Any) -> Any:
    """The value of a column of one value held once (a Series, a numpy array or a nullable integer array: as
    compacted() or constant() made it; pd.NA where every row is missing), read without a pass over its rows; None
    for any other column."""
    if isinstance(x, pd.Series):
        x = x.array if isinstance(x.array, pd.arrays.IntegerArray) else x.to_numpy()
    if isinstance(x, pd.arrays.IntegerArray):
        data, mask = x._data, x._mask  # noqa: SLF001 - as one_value reads them
        if held_value(data) is None or held_value(mask) is None:
            return None
        return pd.NA if mask[0] else data[0]
    if isinstance(x, np.ndarray) and x.ndim == 1 and len(x) and x.strides[0] == 0:
        return x[0]
    return None

