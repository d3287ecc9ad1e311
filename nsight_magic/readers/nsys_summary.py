"""Summaries with the same definitions as NVIDIA's `nsys stats` report scripts (vectorised pandas/numpy).

Definitions taken from the scripts (gpukernsum/cuda_gpu_kern_sum, gpumemtimesum, gpumemsizesum, cudaapisum,
nvtxsum, nvtxgpuproj): median of an even count is the mean of the two middle values; std is the sample standard
deviation (n - 1; 0 for one instance); pct is the share of the summed total of the rows listed.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .nsys_frames import ckey, first_match, gkey
from .nsys_sql import NULL

STAT_COLS = ("count", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "std_ns")


def grouped_stats(keys: dict[str, object], values, suffix: str = "ns", return_groups: bool = False):
    """count/total/avg/med/min/max/std of integer `values` per distinct combination of `keys` (numpy: one sort).

    Totals, min and max stay exact integers; med averages the two middle values of an even count.
    return_groups: also return each input row's output row number."""
    v = np.asarray(values, np.int64)
    codes, uniques = [], []
    gid = np.zeros(len(v), np.int64)
    for x in keys.values():
        c, u = pd.factorize(x if isinstance(x, pd.Categorical) else np.asarray(x), use_na_sentinel=False)
        c = np.asarray(c, np.int64)
        codes.append(c)
        uniques.append(np.asarray(u, dtype=object) if not isinstance(u, np.ndarray) or u.dtype == object else u)
        gid, _ = pd.factorize(gid * max(len(u), 1) + c)  # re-densify so the product never overflows
        gid = np.asarray(gid, np.int64)
    vmin = int(v.min()) if len(v) else 0
    span = int(v.max()) - vmin + 1 if len(v) else 1
    if len(v) and span * (int(gid.max()) + 1) < 2**62:
        # one int64 key: numpy's vectorised quicksort is ~3x its stable sort and ~6x lexsort; equal keys are equal
        # rows for every statistic (and any row of a group labels it), so stability buys nothing
        order = np.argsort(gid * span + (v - vmin), kind="quicksort")
    else:
        order = np.lexsort((v, gid))
    vs, gs = v[order], gid[order]
    starts = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]]) if len(vs) else np.empty(0, np.int64)
    count = np.diff(np.r_[starts, len(vs)])
    total = np.add.reduceat(vs, starts) if len(vs) else np.empty(0, np.int64)
    mid = starts + (count - 1) // 2
    med = np.where(count % 2 == 1, vs[mid], (vs[mid] + vs[np.minimum(mid + 1, len(vs) - 1)]) / 2.0)
    mean = total / count
    dev = vs - mean[gs]
    ss = np.add.reduceat(dev * dev, starts) if len(vs) else np.empty(0)
    std = np.sqrt(np.divide(ss, count - 1, out=np.zeros_like(ss), where=count > 1))  # nsys prints 0 for one
    first = order[starts]  # a row of each group, to label it
    out = {k: u[c[first]] for k, c, u in zip(keys, codes, uniques)}
    out.update({"count": count, f"total_{suffix}": total, f"avg_{suffix}": mean, f"med_{suffix}": med,
                f"min_{suffix}": vs[starts], f"max_{suffix}": vs[starts + count - 1], f"std_{suffix}": std})
    return (pd.DataFrame(out), gid) if return_groups else pd.DataFrame(out)


def with_pct(df: pd.DataFrame, total_col: str = "total_ns") -> pd.DataFrame:
    total = df[total_col].sum()
    df["pct"] = df[total_col] * 100.0 / total if total else 0.0
    return df.sort_values(total_col, ascending=False, kind="stable").reset_index(drop=True)


def empty_stats(keys: tuple[str, ...], extra: tuple[str, ...] = ("pct",)) -> pd.DataFrame:
    cols = {k: pd.Series([], dtype=object) for k in keys}
    for c in STAT_COLS + extra:
        cols[c] = pd.Series([], dtype="int64" if c in ("count", "total_ns", "min_ns", "max_ns") else "float64")
    return pd.DataFrame(cols)


NO_CALL = np.iinfo(np.int64).min  # an op without a correlation id: a key no API call has (ckey's are above it)


def op_keys(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """ckey(pid, corr) of GPU operations (raw int64 columns), NO_CALL where the correlation id is NULL."""
    key = ckey(pid, corr)
    key[np.asarray(corr) == NULL] = NO_CALL
    return key


def nvtx_projection(internal: dict, ops: dict, api: dict, maxts: int | None) -> pd.DataFrame:
    """GPU projection of NVTX ranges, as nsys's nvtxgpuproj: a GPU operation (kernel/memcpy/memset) belongs to a
    range when the runtime API call that launched it lies within the range, on the range's thread; the
    projection spans the first op start to the last op end.  Only ranges that start and end on one thread.

    internal: build_nvtx's arrays; ops: numpy arrays start_ns, end_ns and key (op_keys: the launching call's
    process and correlation id in one integer); api: start_ns, end_ns, pid, tid, correlation_id (int64, NULL where
    none).  Plain arrays, no DataFrames: with millions of calls, building and filtering frames cost as much as the
    projection.  Returns one row per range with at least one op: row (index into them), proj_start_ns,
    proj_duration_ns, gpu_ops (number of launching API calls).
    """
    cols = ["row", "proj_start_ns", "proj_duration_ns", "gpu_ops"]
    sel = internal["is_range"] & internal["same_thread"] & ~internal.get("ours", False)
    if not sel.any() or not len(ops.get("start_ns", ())) or not len(api.get("start_ns", ())):
        return pd.DataFrame({c: pd.Series([], dtype="int64") for c in cols})
    # Millions of ops: few op-long arrays live at once (each is 90 MB at 11M ops), each dropped once used; what a
    # step needs is gathered from the inputs in sorted order, not gathered unsorted and then sorted as a second copy
    ai = first_match(ckey(api["pid"], api["correlation_id"]), ops["key"])
    op_pos = np.flatnonzero(ai >= 0)
    if not len(op_pos):  # no op launched by a call of the API table
        return pd.DataFrame({c: pd.Series([], dtype="int64") for c in cols})
    ai = ai[op_pos]
    a_start = np.asarray(api["start_ns"], np.int64)[ai]
    # ops by (thread, API start): one composite int64 key and a stable sort when it fits, else lexsort
    # a hash: threads are few, calls millions (the threads' ranks sort as the threads do)
    t_rank, threads = pd.factorize(gkey(np.asarray(api["pid"])[ai], np.asarray(api["tid"])[ai]), sort=True)
    t_rank = np.asarray(t_rank, np.int64)
    lo_s, hi_s = int(a_start.min()), int(a_start.max())
    if (hi_s - lo_s + 1) * (int(t_rank.max()) + 1) < 2**62:
        key = t_rank * (hi_s - lo_s + 1)
        key += a_start
        key -= lo_s
        order = np.argsort(key, kind="stable")
        del key
    else:
        order = np.lexsort((ai, a_start, t_rank))
    ai = ai[order]  # one at a time: a tuple of them would hold every array twice
    a_start = a_start[order]
    t_rank = t_rank[order]
    op_pos = op_pos[order]
    del order
    bounds = np.flatnonzero(np.r_[True, t_rank[1:] != t_rank[:-1], True])  # each thread's ops
    b_threads = threads[t_rank[bounds[:-1]]]
    del t_rank

    rows = np.flatnonzero(sel)
    r_start = internal["start"][rows]
    r_end = internal["end"][rows]
    r_end = np.where(np.isnan(r_end), maxts if maxts is not None else np.inf, r_end)
    # a range holds ops only where some launching call starts inside it, on any thread: of millions of ranges that
    # is often a few, and the per-thread search below runs on those alone
    every_start = np.sort(a_start)
    held = np.flatnonzero(np.searchsorted(every_start, r_end, "right") > np.searchsorted(every_start, r_start, "left"))
    del every_start
    if len(held) < len(rows):
        rows, r_start, r_end = rows[held], r_start[held], r_end[held]
    del held
    r_thread = gkey(internal["pid"][rows], internal["tid"][rows])
    # per thread: ops sorted by API start; a range holds the ops in [lo, hi)
    lo = np.zeros(len(rows), np.int64)
    hi = np.zeros(len(rows), np.int64)
    for b0, b1, thread in zip(bounds[:-1], bounds[1:], b_threads):  # one iteration per thread, not per row
        m = r_thread == thread
        if m.any():
            lo[m] = b0 + np.searchsorted(a_start[b0:b1], r_start[m], "left")
            hi[m] = b0 + np.searchsorted(a_start[b0:b1], r_end[m], "right")
    del a_start
    new_call = np.r_[True, ai[1:] != ai[:-1]]
    call_no = np.cumsum(new_call)  # distinct API calls so far (1-based)
    call_start = np.flatnonzero(new_call)  # where each call's ops begin
    del new_call
    # an API call that starts inside the range but ends after it is not contained: drop its ops
    last = np.maximum(hi - 1, 0)
    crosses = (hi > lo) & (np.asarray(api["end_ns"], np.int64)[ai[last]] > r_end)
    del ai
    hi = np.where(crosses, call_start[call_no[last] - 1], hi)
    has = hi > lo
    lo, hi, rows = lo[has], hi[has], rows[has]
    # each range's first op start and last op end: the ops' times in sorted order, padded for reduceat's last bound.
    # reduceat also reduces from each hi to the next lo: taken in order of lo, those stretches add up to the ops
    # once; in the ranges' order, two threads' ranges alternate between their threads' ops (ranks in one report),
    # and each such stretch spans half of them (4.6M ranges of two ranks: 48 s)
    n = len(op_pos)
    by_lo = np.argsort(lo, kind="stable")
    idx = np.empty(2 * len(lo), np.int64)
    idx[0::2], idx[1::2] = lo[by_lo], hi[by_lo]
    idx = np.minimum(idx, n)
    padded = np.zeros(n + 1, np.int64)
    pmin = np.empty(len(lo), np.int64)
    pmax = np.empty(len(lo), np.int64)
    if len(idx):
        padded[:n] = np.asarray(ops["start_ns"], np.int64)[op_pos]
        pmin[by_lo] = np.minimum.reduceat(padded, idx)[0::2]
        padded[:n] = np.asarray(ops["end_ns"], np.int64)[op_pos]
        pmax[by_lo] = np.maximum.reduceat(padded, idx)[0::2]
    calls = call_no[hi - 1] - call_no[lo] + 1
    return pd.DataFrame({"row": rows, "proj_start_ns": pmin, "proj_duration_ns": pmax - pmin, "gpu_ops": calls})


def busy_fraction(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Fraction of each [edges[i], edges[i+1]) covered by the union of the intervals [starts, ends)."""
    if len(starts) == 0:
        return np.zeros(len(edges) - 1)
    order = np.argsort(starts, kind="stable")
    t0 = edges[0]  # relative times keep float64 exact even for epoch-based clocks
    s, e = (starts[order] - t0).astype(np.float64), (ends[order] - t0).astype(np.float64)
    run_max = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > run_max[:-1]]  # starts a new merged interval
    us = s[new]
    ue = np.maximum.reduceat(e, np.flatnonzero(new))
    covered_before = np.r_[0.0, np.cumsum(ue - us)]

    def cover(t):  # total covered time before t
        i = np.searchsorted(us, t, "right")  # number of merged intervals starting at or before t
        j = np.maximum(i - 1, 0)  # the last of them: t may lie inside it
        part = np.clip(t - us[j], 0, ue[j] - us[j])
        return np.where(i > 0, covered_before[j] + part, 0.0)

    c = cover((edges - t0).astype(np.float64))
    width = np.diff(edges).astype(np.float64)
    return np.divide(np.diff(c), width, out=np.zeros_like(width), where=width > 0)
