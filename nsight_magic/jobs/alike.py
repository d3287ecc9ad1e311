"""Ranks that spend their time alike, so that one diagnosis stands for each group.

The ranks of a data-parallel job run the same kernels, copies, CUDA calls and NVTX ranges for about as long; their
findings are the same.  A rank's signature is the time of each kernel name, copy kind, CUDA API call and NVTX range
in its summaries (already home after the first tier).  Two ranks are alike when, for each of the four, the time
spent differently (sum of |a - b| over its names) is at most ALIKE of the larger one's total: the four are compared
apart, so that a kernel time 20% longer is not hidden by the CUDA calls' and ranges' larger totals.  Totals below
FLOOR of the typical capture count as FLOOR there (a few microseconds of copies more is not another rank).  Groups
are made greedily from the most typical rank (nearest the ranks' median) outwards; the first rank of a group is its
representative.  The straggler is always diagnosed on its own: the job's findings say what it does differently.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

ALIKE = 0.10   # at most this share of each kind of activity's time spent differently
FLOOR = 0.01   # of the typical capture: the least total a kind of activity is compared against

SOURCES = {"kernel": ["name"], "memcpy": ["operation", "kind"], "cuda_api": ["name"], "nvtx": ["range", "name"]}


def signatures(results) -> pd.DataFrame:
    """Ranks x (source, activity): the total ns of each summary row (kernel name, copy kind, API call, NVTX range);
    columns are a MultiIndex whose first level is the source.  One long frame of every rank's rows, pivoted once
    (a Series per rank, aligned by pandas, took 80 ms for 24 ranks)."""
    parts = []
    for r in results:
        for which, keys in SOURCES.items():
            s = r.summaries.get(which)
            if s is None or not len(s) or "total_ns" not in s:
                continue
            k = [c for c in keys if c in s]
            label = np.full(len(s), "", object)
            if k:  # the key columns joined by spaces, column by column (a row-wise join took 15 ms a rank)
                joined = s[k[0]].astype(str)
                for c in k[1:]:
                    joined = joined + " " + s[c].astype(str)
                label = joined.to_numpy(object)
            parts.append(pd.DataFrame({"rank": r.rank, "source": which, "label": label,
                                       "ns": s["total_ns"].to_numpy(float)}))
    ranks = pd.Index([r.rank for r in results])
    if not parts:
        return pd.DataFrame(index=ranks, columns=pd.MultiIndex.from_arrays([[], []]), dtype=float)
    sig = pd.concat(parts, ignore_index=True).groupby(["rank", "source", "label"])["ns"].sum() \
        .unstack(["source", "label"], fill_value=0.0)
    return sig.reindex(ranks.unique(), fill_value=0.0)


def distance(m: np.ndarray, v: np.ndarray, sources: np.ndarray, floor: float) -> np.ndarray:
    """Per row of m against v: the largest share, over the sources, of time spent differently."""
    out = np.zeros(len(m))
    for s in np.unique(sources):
        c = sources == s
        a, b = m[:, c], v[c]
        out = np.maximum(out, np.abs(a - b).sum(axis=1) / np.maximum(np.maximum(a.sum(axis=1), b.sum()), floor))
    return out


def groups(results, always: tuple[int, ...] = (), seeds: tuple[int, ...] = ()) -> dict[int, list[int]]:
    """representative rank -> the ranks it stands for (itself first), over every rank of `results`; each rank of
    `always` (the straggler) represents only itself; the ranks of `seeds` (diagnosed already) represent a group
    before any other rank is chosen."""
    ranks = [r.rank for r in results]
    if not ranks:
        return {}
    sig = signatures(results).reindex(ranks).fillna(0.0)
    m = sig.to_numpy(float)
    sources = np.asarray(sig.columns.get_level_values(0), object) if len(sig.columns) else np.empty(0, object)
    floor = max(FLOOR * float(np.median([r.span[1] - r.span[0] for r in results])), 1.0)
    typical = distance(m, np.median(m, axis=0), sources, floor)
    out: dict[int, list[int]] = {int(r): [int(r)] for r in ranks if r in always}
    reps = [ranks.index(s) for s in seeds if s in ranks and s not in out]  # rows: the seeds, then the most typical
    out.update({int(ranks[i]): [int(ranks[i])] for i in reps})
    for i in np.argsort(typical, kind="stable"):
        rank = int(ranks[i])
        if rank in out:
            continue
        near = np.flatnonzero(distance(m[reps], m[i], sources, floor) <= ALIKE) if reps else []
        if len(near):
            out[int(ranks[reps[near[0]]])].append(rank)
        else:
            reps.append(i)
            out[rank] = [rank]
    return out
