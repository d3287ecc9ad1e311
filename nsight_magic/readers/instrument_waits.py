"""OS calls that our own instruments caused, apart from the program's (issue 61: our waits are never the user's).

The Python sampler (inside/python_samples.py) takes the GIL for each pass over the threads.  Meanwhile the
program's threads that want it wait, and nsys records those waits as the OS runtime calls CPython's GIL is made of
(a condition wait, a mutex lock).  `python benchmarks/sampler_waits.py` (a CPU training loop of 200 steps, 3.2-4.1
s, on this 2-core machine): the main thread waited 277-408 ms in such calls with samples, 0.2-0.4 ms without;
7.9-8.5 ms of them are left to the program once the sampler's are taken out, and the verdict's blocked share is 2%
with samples against 1% without (10-13% with samples before).  Left in, those waits read "the thread waits in OS
calls for N%: data loading".

A wait is ours when it is one of those calls, on a thread of the sampler's process, and either at least half of
it lies within a pass (widened by PAD_NS each side: the GIL is requested up to a switch interval before the pass
begins, and the waiting thread wakes some microseconds after it ends), or it began within a pass and ended at most
GRACE_NS after it (the thread asked for the GIL back while we held it; on a loaded machine it is woken late: under
the test suite's three workers waits of 1 ms after a 0.1 ms pass were seen), or whenever it ended if that pass saw
no other thread of the program (then nothing else of it could take the GIL before the waiting thread).  Such a
pass counts from when the sampler's sleep ended (its `lead`): it asked for the GIL then, and only the cell's thread
could be waiting.  The sampler's own thread's calls are ours too.  A long wait of the program (its own lock, a pool
of workers, another Python thread holding the GIL after us) that a pass happens to cross stays the program's.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

GIL_CALLS = r"^pthread_(?:cond_(?:timed|clock)?wait|mutex_(?:timed|clock)?lock)"
PAD_NS = 200_000
GRACE_NS = 2_000_000
SHARE = 0.5


def instrument_rows(osrt: pd.DataFrame, passes: pd.DataFrame, sampler_threads=frozenset()) -> np.ndarray:
    """A boolean mask over `osrt`'s rows: the calls our sampler caused (or made)."""
    n = len(osrt)
    ours = np.zeros(n, bool)
    if n == 0 or (passes.empty and not sampler_threads):
        return ours
    pid = osrt["pid"].to_numpy(np.int64)
    tid = osrt["tid"].to_numpy(np.int64)
    for p, t in sampler_threads:
        ours |= (pid == p) & (tid == t)
    if passes.empty:
        return ours
    gil = osrt["name"].astype(str).str.contains(GIL_CALLS, regex=True).to_numpy(bool)
    start = osrt["start_ns"].to_numpy(np.int64)
    end = pd.to_numeric(osrt["end_ns"], errors="coerce").fillna(osrt["start_ns"]).to_numpy(np.int64)
    for p, g in passes.groupby("pid"):
        sel = np.flatnonzero(gil & (pid == p) & ~ours)
        if not len(sel):
            continue
        g = g.sort_values("start_ns", kind="stable")
        ps, pe = g["start_ns"].to_numpy(np.int64) - PAD_NS, g["end_ns"].to_numpy(np.int64) + PAD_NS
        alone = g["alone"].to_numpy(bool) if "alone" in g else np.zeros(len(g), bool)
        ws, we = _merged(ps, pe)
        covered = _covered_before(ws, we, end[sel]) - _covered_before(ws, we, start[sel])
        i = np.searchsorted(ps, start[sel], side="right") - 1  # the last pass begun before the wait
        j = np.clip(i, 0, None)
        began = (i >= 0) & (start[sel] < np.maximum.accumulate(pe)[j])
        # woken soon after, or whenever the OS woke it if nothing else of the program could hold the GIL then
        woken = (end[sel] <= pe[j] + GRACE_NS) | alone[j]
        ours[sel] = (covered >= SHARE * np.maximum(end[sel] - start[sel], 1)) | (began & woken)
    return ours


def _merged(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Overlapping intervals joined: disjoint, sorted by start."""
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum.accumulate(e[order])
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > e[:-1]
    last = np.append(np.flatnonzero(new)[1:] - 1, len(s) - 1)  # each joined interval's last member
    return s[new], e[last]


def _covered_before(ws: np.ndarray, we: np.ndarray, x: np.ndarray) -> np.ndarray:
    """For each x, the total length of the (disjoint, sorted) windows that lies before x."""
    full = np.concatenate([[0], np.cumsum(we - ws)])
    i = np.searchsorted(ws, x, side="right")  # windows that start at or before x
    last = np.maximum(i - 1, 0)
    inside = np.where(i > 0, np.clip(x - ws[last], 0, we[last] - ws[last]), 0)
    return full[last] + inside
