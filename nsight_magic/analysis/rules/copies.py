"""Copies: pageable and synchronous copies, synchronous memsets (twins of `nsys analyze`), copies serialised with
the kernels of their stream (ours).

Their time at stake is the copies' time the kernels did not hide in the steady state (the breakdown's `copy`
category), plus, for synchronous copies, the GPU's idle time after they returned (`sync`): overlapped copies
save nothing.  A copy that is both pageable and serialised is one cause: serialized_copy keeps only the copies
cuda_memcpy_async does not already count.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from .. import text as tx
from ..bottleneck import INPUT_MIN_BYTES
from .common import (Claims, Context, Enclosing, Finding, Found, api_of, estimate_words, evidence, like, pair_sums,
                     ranges_of, size_words, where_words, with_operator)
from ...readers.contract import NsysFrames


def _copies_flagged(report: NsysFrames, api_pattern: str, keep: Callable[[pd.DataFrame], np.ndarray]) -> pd.DataFrame:
    m = report.memcpy
    if m.empty:
        return m
    sel = m[keep(m)]
    a = api_of(sel, report.cuda_api)
    hit = like(a["api_name"], api_pattern)  # (a categorical: the pattern is tested once per name)
    sel = sel.assign(api_name=a["api_name"].array, api_tid=a["api_tid"].to_numpy(),
                     api_start_ns=a["api_start_ns"].to_numpy())
    return sel[hit]


def pageable_async_copies(report: NsysFrames) -> pd.DataFrame:
    """The copies nsys's cuda_memcpy_async flags: cudaMemcpy*Async from or to pageable memory."""
    return _copies_flagged(report, "cudaMemcpy%Async%", lambda m: (tx.eq(m["src_kind"], "pageable"))
                           | (tx.eq(m["dst_kind"], "pageable")))


def serialized_copies(report: NsysFrames) -> pd.DataFrame:
    """Host<->device copies on a stream that also runs kernels, with a kernel of it before and one after."""
    m, k = report.memcpy, report.kernels
    if m.empty or k.empty:
        return m.iloc[0:0]
    hd = m[tx.isin(m["kind"], ["HtoD", "DtoH"])]
    rows = []
    # the kernels' columns as arrays: a stream's kernels are picked by a mask, not by copying the frame's rows
    none = np.iinfo(np.int64).min  # no id: equal to no copy's (their groups leave missing ids out)
    k_dev, k_stream = (k[c].to_numpy(np.int64, na_value=none) for c in ("device_id", "stream_id"))
    k_start, k_end = k["start_ns"].to_numpy(np.int64), pd.to_numeric(k["end_ns"]).to_numpy(np.int64)
    for (dev, stream), c in hd.groupby(["device_id", "stream_id"], sort=False):
        on = (k_dev == dev) & (k_stream == stream)
        if not on.any():
            continue
        cs = c["start_ns"].to_numpy(np.int64)
        ce = pd.to_numeric(c["end_ns"]).to_numpy(np.int64)
        before = cs >= k_end[on].min()   # a kernel of the stream ended before it (the first to end did)
        after = ce <= k_start[on].max()  # and one starts after it (the last to start does)
        rows.append(c[before & after])
    return pd.concat(rows) if rows else hd.iloc[0:0]


def _serialized(ctx: Context) -> pd.DataFrame:
    """serialized_copies, found once for the two rules that ask (held by this run of the rules)."""
    if "serialized_copies" not in ctx.memo:
        ctx.memo["serialized_copies"] = serialized_copies(ctx.report)
    found: pd.DataFrame = ctx.memo["serialized_copies"]
    return found


def _copy_evidence(report: NsysFrames, m: pd.DataFrame) -> pd.DataFrame:
    return evidence(m.assign(tid=m["api_tid"]), tx.prefixed("memcpy ", m["kind"]),
                    with_operator(report, {
                        "bytes": m["bytes"], "src_kind": tx.as_text(m["src_kind"]),
                        "dst_kind": tx.as_text(m["dst_kind"]), "api_name": m["api_name"],
                        "nvtx_range": Enclosing.of(report)(m["pid"], m["api_tid"], m["api_start_ns"].fillna(0))},
                        m["pid"], m["api_tid"], m["api_start_ns"].fillna(0)))


def _exposed(ctx: Context, ev: pd.DataFrame) -> int:
    return ctx.diag.exposed(ev["start_ns"], ev["end_ns"], ev["pid"].astype("Int64").fillna(-1),
                            ev["device_id"].astype("Int64").fillna(-1))


REPEATED_MIN_BYTES = 1 << 20   # a copy of at least this many bytes that every step repeats
REPEATED_STEP_SHARE = 0.9      # ... in this share of the steady steps, the same number of times each


def repeated_uploads(ctx: Context, m: pd.DataFrame) -> tuple[int, int] | None:
    """(copies a step, bytes a step) of the host-to-device copies that every steady step repeats with the same
    sizes (same count of each size in REPEATED_STEP_SHARE of the steps), or None.  A constant uploaded again each
    step looks so; batches from a loader do too, so the advice names both."""
    h = m[np.asarray(tx.eq(m["kind"], "HtoD"), bool) & (m["bytes"].to_numpy() >= REPEATED_MIN_BYTES)]
    if h.empty:
        return None
    for pid, st in ctx.diag.steps.items():
        if st.steady_count < 3:
            continue
        starts, ends = st.bounds()
        first = st.count - st.steady_count  # the warm-up step, as the steady window leaves it out
        starts, ends = starts[first:], ends[first:]
        mine = h[h["pid"].to_numpy() == pid]
        t = mine["api_start_ns"].to_numpy(float)
        step = np.searchsorted(starts, t, side="right") - 1
        inside = (step >= 0) & (t < ends[np.clip(step, 0, None)])
        if not inside.any():
            continue
        per = pd.crosstab(step[inside], mine["bytes"].to_numpy()[inside])
        per = per.reindex(range(len(starts)), fill_value=0)
        # a size that every step copies the same number of times
        mode = per.mode().iloc[0]
        same = (per == mode).mean()
        kept = mode[(same >= REPEATED_STEP_SHARE) & (mode > 0)]
        if len(kept):
            return int(kept.sum()), int((kept * kept.index.to_numpy()).sum())
    return None


def rule_cuda_memcpy_async(ctx: Context) -> list[Finding]:
    """nsys cuda_memcpy_async: copies from or to pageable memory issued with cudaMemcpy*Async."""
    report = ctx.report
    m = pageable_async_copies(report)
    if m.empty:
        return []
    ev = _copy_evidence(report, m)
    at_stake = ctx.left("copy", _exposed(ctx, ev))  # a round trip's or an extra copy's copies are theirs
    ser = _serialized(ctx)
    inline = m.index.isin(ser.index)
    also = ""
    if inline.any():
        also = (f" {int(inline.sum())} of them also run on the stream of the kernels, between them "
                "(serialized_copy): pinned memory alone lets them run at full speed, a side stream lets them "
                "overlap.")
    repeated = repeated_uploads(ctx, m)
    if repeated:
        n, b = repeated
        also += (f" Every step copies the same {size_words(b)} to the GPU ({n} copies a step, of the same sizes "
                 "each step): a tensor that holds the same data every step (a constant, a table, a mask, weights "
                 "made on the host) needs one copy before the loop, not one a step.")
    back = np.asarray(tx.eq(m["kind"], "DtoH"), bool)
    if back.any():
        also += (f" {int(back.sum())} of them copy from the GPU ({size_words(int(m.loc[back, 'bytes'].sum()))} in all): "
                 "each waits for the work queued before it, and the host then works on what it read (implicit_sync).")
    return [Finding(
        "cuda_memcpy_async", ctx.severity(at_stake),
        f"{len(ev)} asynchronous copies use pageable host memory"
        + (f": the same {size_words(repeated[1])} every step" if repeated else ""),
        "cudaMemcpyAsync from or to pageable (not pinned) host memory is staged through a driver buffer and blocks "
        "the calling thread: the copy cannot overlap with computation, and the CPU stops queueing work while it runs."
        + where_words(ev) + also,
        ("If the data is the same every step, copy it to the GPU once before the loop (`t = t.to('cuda')` "
         "outside it): that saves all of this time; pinning saves part of it. Batches that change: " if repeated
         else "")
        + "Pin the host memory and copy asynchronously. PyTorch: `DataLoader(..., pin_memory=True)` or "
        "`batch = batch.pin_memory()`, then `batch.to('cuda', non_blocking=True)`; CUDA: allocate with "
        "cudaMallocHost / cudaHostAlloc or register with cudaHostRegister."
        + (" Then prefetch on a side stream: `with torch.cuda.stream(s): nxt = batch.to('cuda', non_blocking=True)` "
           "and `torch.cuda.current_stream().wait_stream(s)`." if inline.any() else "")
        + (" Data copied from the GPU for the host to compute on (metrics, a loss or weights in numpy) and sent back "
           "need no copy at all: compute it with torch on the GPU." if back.any() else ""),
        at_stake, estimate_words(ctx, "the flagged copies' time not hidden behind kernels (pinned, they overlap)"),
        ev, ranges_of(ev), related=("serialized_copy",) if inline.any() else ())]


def rule_cuda_memcpy_sync(ctx: Context) -> list[Finding]:
    """nsys cuda_memcpy_sync: synchronous cudaMemcpy* (not within one device, not small host-to-device)."""
    report, th = ctx.report, ctx.th
    small = th["cuda_memcpy_sync.min_htod_bytes"]

    def keep(m: pd.DataFrame) -> np.ndarray:
        htod_small = (m["bytes"] <= small) & (tx.eq(m["kind"], "HtoD"))
        same_dev = m["src_device_id"].notna() & (m["src_device_id"] == m["dst_device_id"])
        return np.asarray(~(htod_small | same_dev.fillna(False)).to_numpy(bool))

    m = _copies_flagged(report, "cudaMemcpy%", keep)
    if len(m):
        m = m[~like(m["api_name"], "%Async%")]
    if m.empty:
        return []
    ev = _copy_evidence(report, m)
    idle = ctx.diag.gaps("sync")
    idle = idle[idle["in_window"] & idle["sync_name"].astype(str).str.match(r"cu(?:da)?Memcpy(?!.*Async)")]
    after = int(pair_sums(idle["sync"] * idle["scale"], idle["pid"], idle["device_id"]).max()) if len(idle) else 0
    at_stake = _exposed(ctx, ev) + after
    return [Finding(
        "cuda_memcpy_sync", ctx.severity(at_stake),
        f"{len(ev)} synchronous copies block the host",
        "cudaMemcpy (without Async) returns only when the copy is done: the CPU waits and queues no new work. In "
        "PyTorch `tensor.cpu()`, `.numpy()`, `.item()` and `.tolist()` on a GPU tensor do this." + where_words(ev),
        "Copy asynchronously into pinned memory and synchronise only where the value is needed: "
        "`t.to('cpu', non_blocking=True)` + an event, or keep values on the GPU and read them once per N steps.",
        at_stake, estimate_words(ctx, "the copies' time not hidden behind kernels, plus the GPU's idle time after "
                                      "they returned, up to the time the host waited in them"),
        ev, ranges_of(ev))]


def rule_cuda_memset_sync(ctx: Context) -> list[Finding]:
    """nsys cuda_memset_sync: cudaMemset* (not async) on pinned or managed memory."""
    report = ctx.report
    s = report.memset
    if s.empty:
        return []
    sel = s[tx.isin(s["mem_kind"], ["pinned", "managed"])]
    a = api_of(sel, report.cuda_api)
    named = a["api_name"].notna().to_numpy()
    hit = np.zeros(len(sel), bool)
    names = pd.Series(a["api_name"].to_numpy()[named], dtype=object)
    hit[named] = like(names, "cudaMemset%") & ~like(names, "%async%")
    sel = sel.assign(api_name=a["api_name"].to_numpy(), api_tid=a["api_tid"].to_numpy(),
                     api_start_ns=a["api_start_ns"].to_numpy())[hit]
    if sel.empty:
        return []
    ev = evidence(sel.assign(tid=sel["api_tid"]), "memset", {
        "bytes": sel["bytes"], "mem_kind": sel["mem_kind"].astype(str), "api_name": sel["api_name"],
        "nvtx_range": Enclosing.of(report)(sel["pid"], sel["api_tid"], sel["api_start_ns"].fillna(0))})
    at_stake = _exposed(ctx, ev)
    return [Finding(
        "cuda_memset_sync", ctx.severity(at_stake), f"{len(ev)} synchronous memsets on host-visible memory",
        "cudaMemset on pinned or managed memory synchronises with the host.",
        "Use cudaMemsetAsync on a stream (PyTorch: `torch.zeros(..., device='cuda')` or `t.zero_()` on a GPU "
        "tensor), or clear device memory instead of host-visible memory.",
        at_stake, estimate_words(ctx, "the memsets' time not hidden behind kernels"), ev, ranges_of(ev))]


def rule_serialized_copy(ctx: Context) -> list[Finding]:
    """Host<->device copies on a stream that also runs the kernels, between two of its kernels: no overlap.
    Copies that are also pageable belong to cuda_memcpy_async (one cause, counted there)."""
    report, th = ctx.report, ctx.th
    t = _serialized(ctx)
    if t.empty or t["duration_ns"].sum() < th["serialized_copy.min_copy_ms"] * 1e6:
        return []
    pageable = (tx.eq(t["src_kind"], "pageable")) | (tx.eq(t["dst_kind"], "pageable"))
    ev = evidence(t, tx.prefixed("memcpy ", t["kind"]), {"bytes": t["bytes"], "pageable": np.asarray(pageable)})
    own = ev[~ev["pageable"].astype(bool)]
    at_stake = _exposed(ctx, own) if len(own) else 0
    if not len(own):  # every one of them is pageable: cuda_memcpy_async is the cause, this is how to finish it
        return []
    streams = ", ".join(str(s) for s in sorted(set(ev["stream_id"].dropna().astype(int)))[:5])
    return [Finding(
        "serialized_copy", ctx.severity(at_stake),
        f"{len(ev)} copies wait in line with the kernels of stream {streams}",
        "These host<->device copies ran on the same stream as the computation, between its kernels: a stream "
        "runs one thing after another, so the copy engine and the SMs took turns instead of working at once."
        + (f" {int(pageable.sum())} of them are pageable too (cuda_memcpy_async counts their time)."
           if pageable.any() else ""),
        "Copy on a side stream and wait with an event: `s = torch.cuda.Stream()`; `with torch.cuda.stream(s): "
        "nxt = batch.to('cuda', non_blocking=True)`; `torch.cuda.current_stream().wait_stream(s)` (pinned memory "
        "needed), i.e. prefetch the next batch while this one computes.",
        at_stake, estimate_words(ctx, "the pinned copies' time not hidden behind kernels (on a side stream they "
                                      "overlap)"), ev, ranges_of(ev),
        related=("cuda_memcpy_async",) if pageable.any() else ())]


def rule_small_copies(ctx: Context) -> list[Finding] | Found:
    """The GPU paced by host-to-device copies made one small tensor at a time: many idle gaps a step that end with a
    small copy (smaller than a batch), the host issuing the next copy (and, without non_blocking, a sync) while the
    GPU waits.  Pinned or pageable alike: the number of copies is the cause."""
    report, th = ctx.report, ctx.th
    m = report.memcpy
    if m.empty or not ctx.diag.pairs:
        return []
    small = m[np.asarray(tx.eq(m["kind"], "HtoD"), bool) & (m["bytes"].fillna(0).to_numpy() < INPUT_MIN_BYTES)]
    if small.empty:
        return []
    ops = ctx.diag.ops
    picked, copies = [], []
    for p in ctx.diag.pairs:
        g = p.gaps
        if not len(g) or p.steps is None:
            continue
        g = g[g["in_window"].to_numpy(bool) & (g["next_kind"] == "copy").to_numpy()]
        o = ops[((ops["pid"] == p.pid) & (ops["device_id"] == p.device)).to_numpy()]
        # the operation that ended each gap (it starts where the gap ends), and whether it is a small H2D copy
        if o.empty or g.empty:
            continue
        at = np.minimum(np.searchsorted(o["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)), len(o) - 1)
        corr = pd.array(o["correlation_id"], dtype="Int64").to_numpy(dtype=np.int64, na_value=-1)[at]
        mine = small[(small["pid"] == p.pid).to_numpy()]
        ids = pd.array(mine["correlation_id"], dtype="Int64").to_numpy(dtype=np.int64, na_value=-2)
        hit = np.isin(corr, ids)
        if hit.sum() < th["small_copies.min_per_step"] * p.steps.steady_count:
            continue
        picked.append(g[hit].assign(pid=p.pid, device_id=p.device, scale=p.scale))
        copies.append(mine[np.isin(ids, corr[hit])])
    if not picked:
        return []
    g = pd.concat(picked, ignore_index=True)
    # launch and sync time together, less what tracing added to the calls made meanwhile (once, not per category)
    both = ctx.host_stake("paced", g.assign(paced=g["launch"].to_numpy(np.int64) + g["sync"].to_numpy(np.int64)))
    share = {c: float(g[c].sum()) for c in ("launch", "sync")}
    total = max(sum(share.values()), 1.0)
    idle = {c: ctx.left(c, int(both * v / total)) for c, v in share.items()}
    at_stake = sum(idle.values())
    if at_stake <= 0 or ctx.window_share(at_stake) * 100 < th["small_copies.min_share_pct"]:
        return []
    claims = Claims()
    for c, ns in idle.items():
        claims.take(c, ns)
    claims.small_copy_gaps = {k: gg["start_ns"].to_numpy(np.int64) for k, gg in g.groupby(["pid", "device_id"])}
    c = pd.concat(copies)
    a = api_of(c, report.cuda_api)
    c = c.assign(tid=pd.array(a["api_tid"].to_numpy(), dtype="Int64"))  # the thread that made the copy
    ev = evidence(c, c["kind"].astype(str).radd("copy "), with_operator(report, {
        "bytes": c["bytes"].to_numpy(), "src_kind": c["src_kind"].astype(str).to_numpy() if "src_kind" in c else "",
        "api_name": a["api_name"].astype(str).to_numpy()}, c["pid"], a["api_tid"],
        pd.to_numeric(a["api_start_ns"]).fillna(0)))
    steps = max((p.steps.steady_count for p in ctx.diag.pairs if p.steps is not None), default=1)
    pageable = int((ev["src_kind"] == "pageable").sum())
    synced = idle["sync"] > 0
    return Found([Finding(
        "small_copies", ctx.severity(at_stake),
        f"The GPU waited for {len(g) / steps:,.0f} small host-to-device copies a step, made one at a time",
        f"{len(g):,} times in the steady state the GPU sat idle until the next small copy to it arrived (median "
        f"{size_words(int(ev['bytes'].median()))}): the host moved data one small tensor at a time, and the GPU "
        "ran each step's work in between. Every copy costs a CUDA call"
        + (" and, without `non_blocking=True`, a synchronisation that empties the GPU's queue" if synced else "")
        + (f"; {pageable:,} of them from pageable memory" if pageable else "") + "."
        + (where_words(ev) if "op" in ev else ""),  # with --ops: the operators that made them
        "Collate on the CPU and copy once: `torch.stack(tensors)` (or one preallocated buffer), `.pin_memory()`, then "
        "`.cuda(non_blocking=True)`; or let a DataLoader's collate_fn and `pin_memory=True` do it; or keep tensors "
        "that do not change on the GPU across steps.",
        at_stake, estimate_words(ctx, "the GPU's idle time before these copies (launch overhead and syncs), less "
                                      "what tracing added to the calls made meanwhile"), ev, ranges_of(ev))], claims)
