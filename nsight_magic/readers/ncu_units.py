"""Nsight Compute numbers and units -> base units (ns, byte, %, .../s), vectorised.

ncu prints values auto-scaled by default ("77.69 msecond", "2.25 Gbyte", "9.46 cycle/nsecond", "1.58 Ghz"),
newer versions add thousands separators ("4,963,609,951.19"), and ncu_report names units differently
("ns", "byte/s").  Everything we read goes through `to_base_units` so every source gives the same numbers.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

# Time: our base is the nanosecond (the unit ncu itself counts kernel durations in).
_TIME_NS = {
    "nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
    "second": 1e9, "s": 1e9, "sec": 1e9,
}
# A rate's denominator, as a factor that turns "X per <unit>" into "X per second".
_PER_SECOND = {
    "nsecond": 1e9, "ns": 1e9, "usecond": 1e6, "us": 1e6, "msecond": 1e3, "ms": 1e3,
    "second": 1.0, "s": 1.0, "sec": 1.0,
}
_DECIMAL_PREFIX = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY_PREFIX = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
# Counted things ncu may scale with a decimal prefix ("Kinst", "Msector").  A unit outside this list is kept as is.
_COUNTED = {
    "byte", "inst", "cycle", "sector", "sectors", "request", "warp", "thread", "block", "register", "sample",
    "wavefront", "transaction", "branches", "pass", "cluster", "SM", "instruction", "op", "flop",
}
# Longest prefix first, so that "Kibyte" is read as Ki + byte and "Kinst" as K + inst.
_PREFIXES = sorted({**_DECIMAL_PREFIX, **_BINARY_PREFIX}.items(), key=lambda kv: -len(kv[0]))


def _numerator(unit: str) -> tuple[str, float]:
    """'Gbyte' -> ('byte', 1e9); 'msecond' -> ('ns', 1e6); 'Ghz' -> ('cycle/s', 1e9); unknown -> (unit, 1)."""
    if unit in _TIME_NS:
        return "ns", _TIME_NS[unit]
    low = unit.lower()
    if low.endswith("hz") and low[:-2].upper() in ("", "K", "M", "G", "T"):
        return "cycle/s", _DECIMAL_PREFIX[low[:-2].upper()]
    for prefix, factor in _PREFIXES:
        if unit.startswith(prefix) and unit[len(prefix):] in _COUNTED:
            return unit[len(prefix):], factor
    return unit, 1.0


def base_unit(unit: str | None) -> tuple[str, float]:
    """The base unit and the factor from `unit` to it: 'Mbyte/second' -> ('byte/s', 1e6)."""
    unit = (unit or "").strip()
    if not unit or unit == "%":
        return unit, 1.0
    num, _, den = unit.partition("/")
    base, factor = _numerator(num)
    if not den:
        return base, factor
    if den in _PER_SECOND:
        if base == "ns":  # a time per time is a plain ratio
            return "ns/s", factor / 1e9 * _PER_SECOND[den]
        return f"{base}/s", factor * _PER_SECOND[den]
    return f"{base}/{den}", factor


def parse_numbers(values: pd.Series) -> pd.Series:
    """Strings such as '4,963,609,951.19', '12', 'n/a', '' -> float64 (NaN where not a number).

    Parsed once per distinct string: raw pages repeat most values (device attributes, zeros) across kernels."""
    if values.dtype.kind in "fiu":
        return values.astype("float64")
    codes, uniq = pd.factorize(values, sort=False)
    text = pd.Series(uniq, dtype="object").astype(str).str.strip().str.replace(",", "", regex=False)
    parsed = pd.to_numeric(text, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    out = np.full(len(codes), np.nan)
    ok = codes >= 0
    out[ok] = parsed[codes[ok]]
    return pd.Series(out, index=values.index)


def to_base_units(values: pd.Series, units: pd.Series) -> tuple[pd.Series, pd.Series]:
    """(values, units) in any ncu scaling -> (float values, unit names) in base units, vectorised over unique units."""
    units = units.fillna("").astype("string")
    uniq = pd.unique(units)
    table = {u: base_unit(u) for u in uniq}
    factor = units.map({u: f for u, (_, f) in table.items()}).astype("float64")
    names = units.map({u: b for u, (b, _) in table.items()}).astype("object")
    numbers = parse_numbers(values)
    return pd.Series(np.asarray(numbers) * np.asarray(factor), index=values.index), names
