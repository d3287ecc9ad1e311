"""Notes: what would surprise a reader of the tables without being a problem."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...inside.marks import CAPTURE_DOMAIN
from .common import Context, Finding, evidence, ranges_of
from .. import intervals as I
from .. import text as tx


def rule_nvtx_other_thread(ctx: Context) -> list[Finding]:
    """A note, not a problem: NVTX ranges whose GPU work was launched by another thread (autograd's backward runs
    on its own thread), so their GPU projection is near zero although the GPU was busy."""
    report = ctx.report
    nv = report.nvtx
    k = report.kernels
    if nv.empty or k.empty or "launch_tid" not in k:
        return []
    # the closed push/pop ranges, less our own cell range: the five columns used, then the rows
    keep = tx.eq(nv["kind"], "push_pop") & nv["end_ns"].notna().to_numpy() & ~tx.eq(nv["domain"], CAPTURE_DOMAIN)
    r = nv[["start_ns", "end_ns", "pid", "tid", "label"]][keep]
    ks = k["start_ns"].to_numpy(np.int64)
    # the frame comes by start (the readers' contract): gathered in that order only where it does not
    order: np.ndarray | slice = slice(None) if len(ks) < 2 or bool((ks[1:] >= ks[:-1]).all()) else \
        np.argsort(ks, kind="stable")
    ks = ks[order]
    kpid = k["pid"].to_numpy()[order]
    ktid = pd.array(k["launch_tid"], dtype="Int64").to_numpy(dtype=float, na_value=np.nan)[order]
    lo = np.searchsorted(ks, r["start_ns"].to_numpy(np.int64))
    hi = np.searchsorted(ks, r["end_ns"].to_numpy(np.int64))
    held = np.flatnonzero(hi > lo)  # only a range that some kernel starts inside can be one: of millions, a few
    if len(held) < len(r):
        r, lo, hi = r.iloc[held], lo[held], hi[held]
    del held
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


def rule_gpu_metrics(ctx: Context) -> list[Finding]:
    """A note from the GPU's own counters (nsys --gpu-metrics-devices): what bounds the kernels while they run
    (analysis/gpu_metrics.py), over the cell and in each top-level NVTX range that ran kernels; without metrics,
    nothing."""
    from ..gpu_metrics import read_metrics

    report = ctx.report
    gm = report.gpu_metrics
    if gm.empty and gm.problem:
        span = report.time_span
        ev = evidence(pd.DataFrame({"start_ns": [span.start_ns], "end_ns": [span.end_ns]}), "GPU metrics")
        title, _, rest = gm.problem.partition(": ")
        return [Finding("gpu_metrics", "info", title, gm.problem + ".", rest, 0, "a note", ev, ranges_of(ev))]
    if gm.empty:
        return []
    span = report.time_span
    busy: dict[int, I.Intervals] = {}  # each device's busy intervals, computed once for the whole and every range
    whole = read_metrics(report, (span.start_ns, span.end_ns), busy)
    if not whole:
        return []
    lines = []
    nv = report.nvtx
    if not nv.empty:
        r = nv[~tx.eq(nv["kind"], "mark") & nv["end_ns"].notna() & ~tx.eq(nv["domain"], CAPTURE_DOMAIN)]
        if "nesting_level" in r:
            r = r[pd.to_numeric(r["nesting_level"], errors="coerce").fillna(0).to_numpy() == 0]
        for label, g in list(r.groupby(r["label"].astype(str), sort=False))[:8]:
            a, b = int(g["start_ns"].min()), int(pd.to_numeric(g["end_ns"]).max())
            for m in read_metrics(report, (a, b), busy):
                if m.busy_ns >= 0.01 * max(b - a, 1):
                    lines.append(f"'{label}' (GPU {m.device_id}, {m.busy_ns / 1e6:,.1f} ms of GPU work): {m.words}.")
    top = max(whole, key=lambda m: m.busy_ns)
    ev = evidence(pd.DataFrame({"start_ns": [span.start_ns], "end_ns": [span.end_ns]}), "GPU metrics")
    return [Finding(
        "gpu_metrics", "info", f"GPU metrics: {top.words.split(': ', 1)[-1].split(' (')[0]}",
        " ".join(f"GPU {m.device_id}, over {m.busy_ns / 1e6:,.1f} ms of its kernels and copies: {m.words}."
                 for m in whole) + (" By NVTX range: " + " ".join(lines) if lines else ""),
        SUGGESTION.get(top.kind, ""), 0, "a note: the counters say what bounds the kernels, not what a fix saves",
        ev, ranges_of(ev))]


SUGGESTION = {
    "memory": "Move fewer bytes: fuse elementwise chains (torch.compile), keep activations in bf16/fp16, avoid "
              "copies that only reshape; Nsight Compute (%%ncu) on the top kernels shows their memory workload.",
    "latency": "Give the SMs more independent work: larger batches, fused kernels, fewer dependent steps; %%ncu's "
               "warp-state sections show what the warps wait on.",
    "few_sms": "Launch fewer, larger kernels: batch small operations, fuse them (torch.compile), CUDA graphs for "
               "many tiny launches.",
    "tensor": "The tensor cores are near their peak: faster math needs lower precision (fp8 where accuracy "
              "allows) or less of it (smaller models, sparsity).",
    "compute": "The SMs compute on their other pipes: matrix work on tensor cores (bf16/TF32), fewer fp32/fp64 "
               "operations.",
}


def rule_cuda_graphs(ctx: Context) -> list[Finding]:
    """CUDA graphs recorded as whole launches (nsys's --cuda-graph-trace=graph): their kernels are not in the report,
    so neither the kernel tables nor the kernel advice see where that GPU time goes.  With node tracing (our
    default) the kernels are listed, each with its graph launch's correlation id."""

    report = ctx.report
    g = report.graphs
    if g.empty:
        return []
    end = pd.to_numeric(g["end_ns"], errors="coerce").fillna(g["start_ns"]).to_numpy(np.int64)
    hidden = I.union(g["start_ns"].to_numpy(np.int64), end)
    k = report.kernels
    parts = [hidden]
    if len(k):
        parts.append(I.union(k["start_ns"].to_numpy(np.int64), pd.to_numeric(k["end_ns"]).to_numpy(np.int64)))
    busy = I.union(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    hidden_ns, busy_ns = I.total(hidden), max(I.total(busy), 1)
    share = 100.0 * hidden_ns / busy_ns
    ev = evidence(g.assign(end_ns=end), "CUDA graph launch")
    return [Finding(
        "cuda_graphs", "low" if share >= 20 else "info",
        f"CUDA graphs hide their kernels: {len(g):,} graph launches, {hidden_ns / 1e6:,.1f} ms of GPU time "
        f"({share:.0f}% of the GPU's busy time)",
        "nsys recorded each CUDA graph launch as one interval (--cuda-graph-trace=graph, its default): the kernels "
        "inside are not in this report, so the kernel tables, the kernel classes and the advice on kernels see only "
        "the kernels launched outside graphs (torch.compile's mode='reduce-overhead' and CUDA-graph training or "
        "inference loops run most of their work inside).",
        "Record it again with node tracing: %%nsys does by default (--cuda-graph-trace=node; 6% more GPU time for "
        "graph replays on the H100); elsewhere pass --cuda-graph-trace=node to nsys profile.",
        0, "a note: what the graphs' kernels cost is not in this report", ev, ranges_of(ev))]
