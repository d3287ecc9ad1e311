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
    codes, uniq = distinct(col)  # a categorical's codes are a factorization already
    vals = [str(v) for v in uniq]
    if limit is not None:
        vals = [v[:limit] for v in vals]
    vals.append("nan")
    if len(vals) <= LOOP_MAX:
        hit = np.fromiter(map(one, vals), bool, len(vals))
    else:
        hit = np.asarray(many(pd.Series(vals, dtype=object)), dtype=bool)
    return np.asarray(hit[codes])  # a missing value's code, -1, takes the last: "nan"


def contains(col: Column, pat: str | re.Pattern[str], regex: bool = True, case: bool = True,
             twins: tuple[str, str] | None = None) -> np.ndarray:
    """col.astype(str).str.contains(pat) as a bool array.  twins: (narrow, broad), pat in RE2's dialect no broader
    and no narrower than it, for Arrow to search millions of distinct values in C++ (emit_nvtx's NVTX names):
    a value narrow finds is in, one broad misses is out, and Python's `re` decides the rest."""
    rx = pat if isinstance(pat, re.Pattern) else re.compile(pat if regex else re.escape(pat),
                                                            0 if case else re.IGNORECASE)

    def one(v: str) -> bool:
        return rx.search(v) is not None

    def many(v: pd.Series) -> Any:
        if twins is None:
            return v.str.contains(rx, regex=True).fillna(False)
        import pyarrow as pa
        import pyarrow.compute as pc

        try:
            texts = pa.array(v.to_numpy(object), type=pa.string())
        except (UnicodeError, pa.ArrowException):  # a lone surrogate: no UTF-8 for Arrow
            return v.str.contains(rx, regex=True).fillna(False)
        hit = np.asarray(pc.match_substring_regex(texts, twins[0]), bool)
        ask = np.flatnonzero(np.asarray(pc.match_substring_regex(texts, twins[1]), bool) & ~hit)
        hit[ask] = [one(x) for x in v.to_numpy(object)[ask].tolist()]
        return hit

    return _per_value(col, one, many, limit=SEARCH_CHARS)


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


def per_value(col: Column, test: Callable[[str], bool]) -> np.ndarray:
    """test(text) over col.astype(str) as a bool array, asked once per distinct value (whole values)."""
    return _per_value(col, test, lambda v: v.map(test))


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


def distinct(col: Column) -> tuple[np.ndarray, np.ndarray]:
    """(codes, values): each row's index into the distinct values its rows hold (-1: missing) and those values as
    an object array: a categorical's own codes, narrowed to the categories its rows use (the rows of a few NVTX
    ranges keep the categories of millions), anything else factorized."""
    cat: Any = col.array if isinstance(col, pd.Series) else col
    if not isinstance(getattr(cat, "dtype", None), pd.CategoricalDtype):
        codes, uniq = pd.factorize(pd.Series(col), sort=False)
        return np.asarray(codes, np.int64), np.asarray(uniq, dtype=object)
    codes = np.asarray(cat.codes, np.int64)
    used = np.zeros(len(cat.categories) + 1, bool)
    used[codes] = True  # a missing value's -1 marks the spare last slot
    keep = np.flatnonzero(used[:-1])
    values = np.asarray(cat.categories, dtype=object)
    if len(keep) == len(values):
        return codes, values
    new = np.full(len(values) + 1, -1, np.int64)
    new[keep] = np.arange(len(keep))
    return new[codes], values[keep]


# Python's `\s` (str patterns), spelled out for RE2, whose `\s` is ASCII's
PY_SPACE = r"\x09-\x0d\x1c-\x20\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}"


def extract(col: Column, rx: re.Pattern[str], arrow_rx: str) -> tuple[np.ndarray, dict[str, Any]]:
    """rx.match(text) over the distinct values of col (rx: named groups, anchored with ^ and $):
    (codes: each row's index into the values, a missing one's the text 'nan'; groups: each named group's text per
    value as an Arrow string array, '' where the group or the whole match is missing).

    Arrow matches the values in C++ with RE2 (millions of distinct NVTX names, such as emit_nvtx's, whose op_id
    numbers every call: Python's `re` took seconds).  `arrow_rx` is rx in RE2's dialect and no broader: ASCII
    digits, Python's whitespace spelled out (PY_SPACE), and no newline anywhere, since Python's `$` matches before
    a last one too.  A value it leaves unmatched goes to rx, so every group is what rx gives."""
    import pyarrow as pa
    import pyarrow.compute as pc

    codes, values = distinct(col)
    names = list(rx.groupindex)
    texts = np.append(values, "nan")  # a missing value reads 'nan'
    codes = np.where(codes >= 0, codes, len(texts) - 1)
    try:
        arrow = pa.array(texts, type=pa.string())
    except (pa.ArrowTypeError, pa.ArrowInvalid):  # values other than text (numbers): as `.astype(str)` has them
        texts = np.array([str(v) for v in texts], dtype=object)
        arrow = pa.array(texts, type=pa.string())
    got = pc.extract_regex(arrow, arrow_rx)
    groups = {g: pc.fill_null(pc.struct_field(got, [got.type.get_field_index(g)]), "") for g in names}
    missed = np.flatnonzero(~np.asarray(got.is_valid(), bool))
    found = [(i, m) for i in missed.tolist() if (m := rx.match(texts[i])) is not None]
    if found:  # what RE2 leaves to Python's `re` (a trailing newline, a Unicode digit): rare
        at = np.array([i for i, _ in found], np.int64)
        for g in names:
            each = np.asarray(groups[g].to_numpy(zero_copy_only=False), dtype=object)
            each[at] = [m.group(g) or "" for _, m in found]
            groups[g] = pa.array(each, type=pa.string())
    return codes, groups


def arrow_text(values: Any) -> Any:
    """An Arrow string array as a frame's text column (pandas' own string array over it: no Python string per row)."""
    return pd.array(values, dtype="str")
