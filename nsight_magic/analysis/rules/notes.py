"""Notes: what would surprise a reader of the tables without being a problem."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...inside.child import CAPTURE_DOMAIN
from .common import Context, Finding, evidence, ranges_of
from .. import text as tx


def rule_nvtx_other_thread(ctx: Context) -> list[Finding]:
    """A note, not a problem: NVTX ranges whose GPU work was launched by another thread (autograd's backward runs
    on its own thread), so their GPU projection is near zero although the GPU was busy."""
    report = ctx.report
    nv = report.nvtx
    k = report.kernels
    if nv.empty or k.empty or "launch_tid" not in k:
        return []
    r = nv[(tx.eq(nv["kind"], "push_pop")) & nv["end_ns"].notna()]
    r = r[~tx.eq(r["domain"], CAPTURE_DOMAIN)]
    ks = k["start_ns"].to_numpy(np.int64)
    order = np.argsort(ks, kind="stable")
    ks = ks[order]
    kpid = k["pid"].to_numpy()[order]
    ktid = pd.array(k["launch_tid"], dtype="Int64").to_numpy(dtype=float, na_value=np.nan)[order]
    lo = np.searchsorted(ks, r["start_ns"].to_numpy(np.int64))
    hi = np.searchsorted(ks, r["end_ns"].to_numpy(np.int64))
    rpid, rtid = r["pid"].to_numpy(), r["tid"].to_numpy(dtype=float)
    # kernels inside each range: of its process (with a known launching thread), and of those its own thread's;
    # counted with prefix sums per process and per (process, thread), never range by range
    ran = np.zeros(len(r), np.int64)
    own = np.zeros(len(r), np.int64)
    for pid in np.unique(rpid):
        sel = rpid == pid
        mine = (kpid == pid) & ~np.isnan(ktid)
        c = np.concatenate(([0], np.cumsum(mine)))
        ran[sel] = c[hi[sel]] - c[lo[sel]]
        for tid in np.unique(rtid[sel]):
            s2 = sel & (rtid == tid)
            c = np.concatenate(([0], np.cumsum(mine & (ktid == tid))))
            own[s2] = c[hi[s2]] - c[lo[s2]]
    other = ran - own
    # nearly all of the kernels that ran inside came from another thread: the projection shows almost nothing
    hit = np.flatnonzero((other >= 1) & (other >= 0.8 * ran))
    if not len(hit):
        return []
    # the launching thread named per range: the lowest other thread of its process among its kernels, per
    # (process, thread) with one reduceat over the ranges' kernel slices (a sentinel closes the last slice)
    launching = np.zeros(len(hit), np.int64)
    for pid, tid in set(zip(rpid[hit].tolist(), rtid[hit].tolist())):
        g = np.flatnonzero((rpid[hit] == pid) & (rtid[hit] == tid))
        val = np.where((kpid == pid) & ~np.isnan(ktid) & (ktid != tid), ktid, np.inf)
        val = np.r_[val, np.inf]
        bounds = np.column_stack([lo[hit[g]], hi[hit[g]]]).ravel()
        launching[g] = np.minimum.reduceat(val, bounds)[::2].astype(np.int64)
    df = pd.DataFrame({"start_ns": r["start_ns"].to_numpy(np.int64)[hit],
                       "end_ns": r["end_ns"].to_numpy(np.int64)[hit],
                       "pid": rpid[hit], "tid": rtid[hit].astype(np.int64),
                       "name": np.asarray(r["label"].astype(object).to_numpy()[hit], dtype=object).astype(str),
                       "kernels_by_other_threads": other[hit].astype(np.int64), "launching_tid": launching})
    ev = evidence(df, df["name"], {"kernels_by_other_threads": df["kernels_by_other_threads"],
                                    "launching_tid": df["launching_tid"]})
    names = ", ".join(sorted(set(df["name"]))[:5])
    return [Finding(
        "nvtx_other_thread", "info", f"GPU work inside {len(ev)} NVTX range(s) was launched by another thread",
        f"The ranges {names} project almost no GPU time in the NVTX table although kernels ran while they were "
        "open: those kernels were launched by another thread (tid "
        f"{int(df['launching_tid'].iloc[0])}). PyTorch runs the backward pass on autograd's own thread, so a "
        "`backward` range pushed on the main thread owns none of the backward kernels.",
        "Read the GPU time of such ranges from the timeline or the kernels table, or annotate the backward pass "
        "per module (`%%nsys --modules`), whose backward hooks run on the autograd thread.",
        0, "a note: nothing to save", ev, ranges_of(ev))]
