"""Text tests on a frame's string columns (names, kinds, domains), done once per distinct value.

The readers hand names as categoricals: a 1M-kernel report has a few hundred distinct kernel names, so a regex
or a comparison over the categories and a take by code is hundreds of times cheaper than `.astype(str)` per row.
Missing values compare as the text 'nan' (what `.astype(str)` gave).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

import numpy as np
import pandas as pd

# a frame's text column: a Series (categorical or not), its array, or an array of values
Column: TypeAlias = "pd.Series | pd.api.extensions.ExtensionArray | np.ndarray"


# up to this many distinct values a Python loop beats building a pandas string array for them; above it (NVTX
# ranges named per step, a million of them) pandas' vectorised test wins
LOOP_MAX = 4096
# a pattern looks for what a name says in its first characters: a C++ template name can run to 60 kB, and thousands
# of them searched whole by every rule took minutes
SEARCH_CHARS = 1000


def _per_value(col: Column, one: Callable[[str], bool], many: Callable[[pd.Series], Any],
               limit: int | None = None) -> np.ndarray:
    """A text test asked once per distinct value of col, as a bool array over its rows: one(text) -> bool for a
    few values, many(pandas strings) -> bools for many; `limit`: only the values' first characters are tested."""
    cat: Any = col.array if isinstance(col, pd.Series) else col
    if isinstance(getattr(cat, "dtype", None), pd.CategoricalDtype) and len(cat.categories) <= len(cat):
        # its codes are a factorization already (a few rows of a frame with many names: factorize those rows)
        codes, uniq = np.asarray(cat.codes), cat.categories
    else:
        codes, uniq = pd.factorize(pd.Series(col), sort=False)
    vals = [str(v) for v in np.asarray(uniq, dtype=object)]
    if limit is not None:
        vals = [v[:limit] for v in vals]
    vals.append("nan")
    if len(vals) <= LOOP_MAX:
        hit = np.fromiter(map(one, vals), bool, len(vals))
    else:
        hit = np.asarray(many(pd.Series(vals, dtype=object)), dtype=bool)
    return np.asarray(hit[codes])  # a missing value's code, -1, takes the last: "nan"


def contains(col: Column, pat: str | re.Pattern[str], regex: bool = True, case: bool = True) -> np.ndarray:
    """col.astype(str).str.contains(pat) as a bool array."""
    rx = pat if isinstance(pat, re.Pattern) else re.compile(pat if regex else re.escape(pat),
                                                            0 if case else re.IGNORECASE)
    return _per_value(col, lambda v: rx.search(v) is not None,
                      lambda v: v.str.contains(rx, regex=True).fillna(False), limit=SEARCH_CHARS)


# a function's parameter list in a demangled name: `normal_kernel<...>(const at::TensorBase &, double, double, T1)`
# (the function's signature, not the data's type); a lambda's own parameters (`[lambda(double) (instance 1)]`) are
# the elements it is called on and stay
_PARAMETERS = re.compile(r"(?<=[\w>])(?<!lambda)\s?\([^()]*\)")


def without_parameters(name: str) -> str:
    """A demangled name without the parameter lists of the functions it names (innermost first), so that a type
    token in it is a template argument or a lambda's element: what the kernel computes on."""
    while True:
        cut = _PARAMETERS.sub("", name)
        if cut == name:
            return name
        name = cut


def contains_in_types(col: Column, pat: str) -> np.ndarray:
    """contains(col, pat) on each name without its functions' parameter lists (without_parameters)."""
    rx = re.compile(pat)
    return _per_value(col, lambda v: rx.search(without_parameters(v)) is not None,
                      lambda v: v.map(lambda x: rx.search(without_parameters(x)) is not None), limit=SEARCH_CHARS)


def eq(col: Column, value: str) -> np.ndarray:
    """col.astype(str) == value as a bool array."""
    return _per_value(col, lambda v: v == value, lambda v: v == value)


def isin(col: Column, values: Iterable[str]) -> np.ndarray:
    """col.astype(str).isin(values) as a bool array."""
    wanted = set(values)
    return _per_value(col, lambda v: v in wanted, lambda v: v.isin(wanted))


def as_text_categories(col: pd.Series) -> pd.Series:
    """A categorical column with its categories as text (what `.astype(str)` gives each value), rows kept as codes;
    categories that would read alike as text are merged."""
    cats = col.cat.categories
    text = pd.Index(np.asarray(cats, dtype=object), dtype=object).astype(str)
    if text.equals(cats) and cats.dtype == text.dtype:
        return col
    if text.is_unique:
        return col.cat.rename_categories(text)
    return col.astype(str).astype("category")


def prefixed(prefix: str, col: pd.Series) -> pd.Series:
    """prefix + col.astype(str), per distinct value when col is a categorical (its rows stay codes)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return as_text_categories(col).cat.rename_categories(lambda c: prefix + c)
    return prefix + col.astype(str)


def as_text(col: pd.Series) -> Any:
    """col.astype(str) as an array for a frame's column: a categorical's codes kept (categories as text)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return as_text_categories(col).array
    return col.astype(str).to_numpy()


def text_codes(col: Column) -> tuple[np.ndarray, np.ndarray]:
    """(codes, texts): col.astype(str) as each row's index into texts, each distinct value made text once
    (missing: the last text, NaN)."""
    cat = pd.Categorical(col)
    text = np.array([str(c) for c in cat.categories] + [np.nan], dtype=object)
    codes = np.asarray(cat.codes)
    return np.where(codes >= 0, codes, len(text) - 1), text
