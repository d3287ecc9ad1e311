"""L2 <-> device-memory traffic per kernel, per NVTX range and per module (pure: DataFrames in, DataFrames out).

The seeds' finding: plot each module's L2<->DRAM transfer size against its kernels' duration to see which modules
are memory-bound.  Input is `NcuData.kernels`; a kernel's module is the innermost range of its NVTX path
("step 3/encoder/attn" -> module path "step 3/encoder/attn", label "attn").
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

NO_RANGE = "(no NVTX range)"
SUMS = ("duration_ns", "l2_dram_bytes", "dram_bytes_read", "dram_bytes_write")
KERNEL_COLUMNS = ("id", "short_name", "nvtx", "module", "duration_ns", "l2_dram_bytes", "dram_bytes_read",
                  "dram_bytes_write", "dram_gbps")
RANGE_COLUMNS = ("nvtx", "module", "kernels", *SUMS, "dram_gbps", "bytes_pct", "duration_pct")


def _gbps(nbytes: pd.Series, ns: pd.Series) -> pd.Series:
    """Achieved L2<->DRAM bandwidth in GB/s (bytes per ns); NaN where the duration is missing or zero."""
    return nbytes / ns.where(ns > 0)


def _per_unique(values: pd.Series, fn: Callable[[str], object]) -> pd.Series:
    """Apply a string function once per distinct value (a million kernels share a few hundred NVTX paths)."""
    codes, uniq = pd.factorize(values.fillna("").astype(str), sort=False)
    return pd.Series(np.asarray([fn(u) for u in uniq], dtype=object)[codes], index=values.index)


def _paths(nvtx: pd.Series, depth: int | None) -> pd.Series:
    def cut(p: str) -> str:
        p = "/".join(p.split("/")[:depth]) if depth is not None else p
        return p or NO_RANGE

    return _per_unique(nvtx, cut)


def _leaf(path: pd.Series) -> pd.Series:
    return _per_unique(path, lambda p: p.rsplit("/", 1)[-1])


def kernel_transfers(kernels: pd.DataFrame) -> pd.DataFrame:
    """One row per kernel: its NVTX path, module, duration, L2<->DRAM bytes (total, read, write) and GB/s."""
    k = kernels
    nvtx = _paths(k["nvtx"], None)
    out = pd.DataFrame({
        "id": k["id"], "short_name": k["short_name"], "nvtx": nvtx, "module": _leaf(nvtx),
        **{c: k[c].astype("float64") for c in SUMS},
    })
    out["dram_gbps"] = _gbps(out["l2_dram_bytes"], out["duration_ns"])
    return out[list(KERNEL_COLUMNS)].reset_index(drop=True)


def _prefix_rows(per_path: pd.DataFrame) -> pd.DataFrame:
    """Repeat each row once per range on its path ('a/b/c' -> 'a', 'a/b', 'a/b/c'): run on the per-path sums, so
    it costs rows x depth of the distinct paths, not of the kernels."""
    prefixes = [[u] if u == NO_RANGE else ["/".join(parts[: i + 1]) for i in range(len(parts))]
                for parts, u in ((u.split("/"), u) for u in per_path["nvtx"])]
    counts = np.array([len(p) for p in prefixes], dtype=np.int64)
    out = per_path.iloc[np.repeat(np.arange(len(per_path)), counts)].reset_index(drop=True)
    out["nvtx"] = [p for ps in prefixes for p in ps]
    return out


def range_transfers(kernels: pd.DataFrame, depth: int | None = None, inclusive: bool = False) -> pd.DataFrame:
    """Kernels summed per NVTX range path.

    depth: cut paths to that many levels (None = full path: per innermost range, i.e. per module).
    inclusive: a range also counts the kernels of the ranges nested in it (a kernel then counts for every
    enclosing range, so the shares add up to more than 100 %).  Sorted by transfer bytes, largest first."""
    k = kernel_transfers(kernels)
    k["nvtx"] = _paths(kernels["nvtx"], depth)
    # sum(min_count=1): a range whose kernels all lack a metric stays NaN instead of becoming 0
    g = k.groupby("nvtx", sort=False)
    out = g[list(SUMS)].sum(min_count=1)
    out.insert(0, "kernels", g.size())
    out = out.reset_index()
    if inclusive:
        g = _prefix_rows(out).groupby("nvtx", sort=False)
        out = g[["kernels", *SUMS]].sum(min_count=1).reset_index()
    out.insert(1, "module", _leaf(out["nvtx"]))
    out["dram_gbps"] = _gbps(out["l2_dram_bytes"], out["duration_ns"])
    for col, share in (("l2_dram_bytes", "bytes_pct"), ("duration_ns", "duration_pct")):
        total = k[col].sum(min_count=1)
        out[share] = out[col] / total * 100 if pd.notna(total) and total > 0 else np.nan
    out = out.sort_values(["l2_dram_bytes", "duration_ns"], ascending=False, na_position="last", kind="stable")
    return out[list(RANGE_COLUMNS)].reset_index(drop=True)


def module_scatter(kernels: pd.DataFrame, depth: int | None = None) -> pd.DataFrame:
    """Points of the transfer-bytes-vs-duration scatter: one per module (range path) with both numbers known."""
    r = range_transfers(kernels, depth)
    return r.dropna(subset=["l2_dram_bytes", "duration_ns"]).reset_index(drop=True)
