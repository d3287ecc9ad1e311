"""Notes: what would surprise a reader of the tables without being a problem."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...child import CAPTURE_DOMAIN
from .common import Context, Finding, evidence, ranges_of


def rule_nvtx_other_thread(ctx: Context) -> list[Finding]:
    """A note, not a problem: NVTX ranges whose GPU work was launched by another thread (autograd's backward runs
    on its own thread), so their GPU projection is near zero although the GPU was busy."""
    report = ctx.report
    nv = report.nvtx
    k = report.kernels
    if nv.empty or k.empty or "launch_tid" not in k:
        return []
    r = nv[(nv["kind"].astype(str) == "push_pop") & nv["end_ns"].notna()]
    r = r[~r["domain"].astype(str).eq(CAPTURE_DOMAIN).to_numpy()]
    ks = k["start_ns"].to_numpy(np.int64)
    order = np.argsort(ks, kind="stable")
    ks = ks[order]
    kpid = k["pid"].to_numpy()[order]
    ktid = pd.array(k["launch_tid"], dtype="Int64").to_numpy(dtype=float, na_value=np.nan)[order]
    rows = []
    for row in r.itertuples():  # ranges of the user's: tens to thousands
        lo, hi = np.searchsorted(ks, row.start_ns), np.searchsorted(ks, int(row.end_ns))
        ran = (kpid[lo:hi] == row.pid) & ~np.isnan(ktid[lo:hi])
        other = ran & (ktid[lo:hi] != row.tid)
        # nearly all of the kernels that ran inside came from another thread: the projection shows almost nothing
        if other.sum() >= 1 and other.sum() >= 0.8 * ran.sum():
            rows.append((row.start_ns, int(row.end_ns), row.pid, row.tid, str(row.label), int(other.sum()),
                         int(np.unique(ktid[lo:hi][other])[0])))
    if not rows:
        return []
    df = pd.DataFrame(rows, columns=["start_ns", "end_ns", "pid", "tid", "name", "kernels_by_other_threads",
                                     "launching_tid"])
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
