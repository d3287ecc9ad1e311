"""Idle GPUs: the twins of `nsys analyze`'s gpu_gaps and gpu_time_util, and start-up.

gpu_gaps and gpu_time_util flag the same stretches as nsys, but they are symptoms: their time at stake is only
the idle time in them that no cause found by another rule (input, sync, host wait, launch) explains, so the same
time is never counted twice.  Idle time before the first step belongs to `startup`, an "info" finding: building
the model, initialising NCCL or first-call compilation inside the cell is measured, not slowness of the loop.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ...readers.constant_columns import held_value
from .. import intervals as I
from ..bottleneck import quiet_gaps
from .common import Context, Finding, api_of, cpu_context, evidence, ranges_of
from .gpu_ops import GpuOps

# idle categories of analysis.bottleneck and the rules that explain them (launch: host_code, then launch_bound;
# host wait: host_code's inside its stretches when it counted them, else host_wait's)
EXPLAINED_BY = {"input": "input_wait", "sync": "cuda_api_sync", "allocator": "allocator_churn",
                "module load": "module_loading", "host wait": "host_wait", "launch": "launch_bound"}


def unexplained_idle(ctx: Context, ev: pd.DataFrame) -> tuple[int, str]:
    """The idle time inside the evidence's stretches (steady windows only) that the rules in ctx.fired do not
    explain, scaled to the loop; and a sentence naming the rules that do."""
    gaps = ctx.diag.gaps()
    if gaps.empty or ev.empty:
        return 0, ""
    fired = ctx.fired
    by_pair: dict[tuple[int, int], pd.DataFrame] = {}
    named: dict[str, int] = {}
    strag = ctx.straggler["pid"] if ctx.straggler else None
    # host_code counts the OS calls inside its stretches when its code held most of them (it claimed them)
    os_in_quiet = "host_code" if ctx.claimed.get("host wait", 0) > 0 else "host_wait"
    # the gaps are framed per pair only where they meet the evidence's stretches (the others weigh nothing): a
    # million launch gaps are not copied for a few thousand long ones
    in_w = gaps["in_window"].to_numpy(bool)
    gpid, gdev = gaps["pid"].to_numpy(np.int64), gaps["device_id"].to_numpy(np.int64)
    gs, ge = gaps["start_ns"].to_numpy(np.int64), gaps["end_ns"].to_numpy(np.int64)
    for pid, dev in sorted({(p.pid, p.device) for p in ctx.diag.pairs}):  # where the gaps come from
        mine = in_w & (gpid == pid) & (gdev == dev)
        every = bool(mine.all())  # one process on one GPU, the steady window all of it: no copy of the columns
        if not every and not mine.any():
            continue
        if pid == strag:  # the straggler's idle time is its straggling: collective_wait counts it
            g = gaps if every else gaps[mine]
            named["collective_wait"] = named.get("collective_wait", 0) + int((g[list(EXPLAINED_BY)].sum(axis=1)
                                                                              * g["scale"]).sum())
            continue
        e = ev[(ev["pid"] == pid) & (ev["device_id"] == dev)]
        if e.empty:
            continue
        span = I.union(e["start_ns"], e["end_ns"])
        # the gaps the stretches meet (one pair's gaps come in order, disjoint: intervals.gaps of its busy time), as
        # positions, and the few columns needed, never a copy of the frame (at 10M kernels the stretches of
        # gpu_time_util meet 13M gaps: their frame taken whole was 2 GB at the analysis's peak); where they meet
        # every gap of the report (gpu_time_util's stretches can span the whole capture): the columns themselves
        pos: Any = slice(None) if every else np.flatnonzero(mine)
        del mine
        at, met = I.meeting(span, gs[pos], ge[pos])
        rows: Any = I.within(pos, at)
        del pos, at

        def col(c: str, dtype: type = np.int64) -> np.ndarray:
            return np.asarray(gaps[c].to_numpy(dtype)[rows])

        starts = gs[rows]
        weight = met.astype(float) / np.maximum(ge[rows] - starts, 1) * col("scale", float)
        del met
        left = 0.0
        # launch gaps of code that launches nothing are host_code's (with the OS calls in them), the others launch
        # overhead (launch_bound's)
        launch_ns = col("launch", float)
        quiet = quiet_gaps(pd.DataFrame({"launch": launch_ns, "calls": col("calls")}, copy=False),
                           ctx.th["host_code.min_gap_ms"] * 1e6, ctx.th["host_code.max_calls"]) \
            if "calls" in gaps else np.zeros(len(starts), bool)
        # a round trip's gaps are host_round_trip's, whatever their categories (when that rule ran and found them)
        trip = col("round_trip", bool) if "round_trip" in gaps and "host_round_trip" in fired \
            else np.zeros(len(starts), bool)
        # so are the gaps before small copies made one at a time (their launch and sync time), when that rule fired
        few = np.isin(starts, ctx.small_copy_gaps.get((pid, dev), ())) \
            if "small_copies" in fired else np.zeros(len(starts), bool)
        few &= ~trip
        # an autotuner's steps are its own, whatever their categories (when autotune fired)
        tuned = np.isin(starts, ctx.autotune_gaps.get((pid, dev), ())) \
            if "autotune" in fired else np.zeros(len(starts), bool)
        tuned &= ~trip
        few &= ~tuned
        # and the gaps before read-back copies queued already (their launch time: implicit_sync's)
        back = np.isin(starts, ctx.readback_gaps.get((pid, dev), ())) \
            if "implicit_sync" in fired else np.zeros(len(starts), bool)
        back &= ~trip & ~few & ~tuned
        rest = ~trip & ~few & ~tuned
        parts = [(cat, "host_round_trip", trip) for cat in EXPLAINED_BY]
        parts += [(cat, "autotune", tuned) for cat in EXPLAINED_BY]
        parts += [(cat, "small_copies", few) for cat in ("launch", "sync")]
        parts += [("launch", "implicit_sync", back)]
        parts += [(cat, rule, few) for cat, rule in EXPLAINED_BY.items() if cat not in ("launch", "sync")]
        parts += [(cat, rule, rest) for cat, rule in EXPLAINED_BY.items() if cat not in ("launch", "host wait")]
        parts += [("launch", "host_code", quiet & rest & ~back), ("launch", "launch_bound", ~quiet & rest & ~back),
                  ("host wait", os_in_quiet, quiet & rest), ("host wait", "host_wait", ~quiet & rest)]
        # steps that grow claimed the idle time of their growth (growing_steps), whatever its category
        grown = dict(ctx.growth_idle.get((pid, dev), {})) if "growing_steps" in fired else {}
        for cat in EXPLAINED_BY:  # one category's weighted time at a time
            # a category no gap has is held as one 0 (constant_columns): its parts are 0, not a sum over every gap
            one = None if cat == "launch" else held_value(gaps[cat])
            none = one is not None and one is not pd.NA and one == 0
            weighted = None if none else (launch_ns if cat == "launch" else col(cat, float)) * weight
            for c, rule, m in parts:
                if c != cat:
                    continue
                part = 0.0 if weighted is None else float(np.sum(weighted, where=m))
                if rule in fired:
                    named[rule] = named.get(rule, 0) + int(part)
                    continue
                take = min(part, grown.get(cat, 0.0))
                if take > 0:
                    grown[cat] -= take
                    named["growing_steps"] = named.get("growing_steps", 0) + int(take)
                left += part - take
        by_pair[(pid, dev)] = int(left)
    words = ""
    if named:
        words = " Most of this idle time has its cause in " + ", ".join(
            f"{r} ({v / 1e6:,.1f} ms)" for r, v in sorted(named.items(), key=lambda kv: -kv[1])) + " (above)."
    return int(max(by_pair.values(), default=0)), words


def rule_startup(ctx: Context) -> list[Finding]:
    """The time before the loop's first step (or the GPU's first operation), and a warm-up step much longer than
    the others: measured in the cell, but not the loop's speed."""
    th, d = ctx.th, ctx.diag
    if not d.startup:
        return []
    pid = next((p for p in sorted(d.startup) if p in d.steps), sorted(d.startup)[0])
    start = d.startup[pid]
    st = d.steps.get(pid)
    warm = 0
    if st is not None and st.count >= 3:
        b0, b1 = st.bounds()
        lengths = b1 - b0
        warm = max(0, int(lengths[0] - np.median(lengths[1:])))
    total = start + warm
    cap = max(ctx.span, 1)
    if total < th["startup.min_ms"] * 1e6 or total * 100.0 / cap < th["startup.min_share_pct"]:
        return []
    t0 = d.capture[0]
    first = t0 + start
    ev = evidence(pd.DataFrame({"start_ns": [t0], "end_ns": [first], "pid": [pid]}), "start-up")
    if warm and st is not None:
        ev = pd.concat([ev, evidence(pd.DataFrame({"start_ns": [int(st.starts[0])], "end_ns": [int(st.starts[1])],
                                                   "pid": [pid]}), "warm-up step")], ignore_index=True)
    what = "the first step" if st is not None else "the GPU's first operation"
    return [Finding(
        "startup", "info",
        f"{start / 1e9:,.2f} s before {what}" + (f", and a warm-up step {warm / 1e6:,.0f} ms longer than the others"
                                                 if warm else ""),
        f"The cell spent {100.0 * start / cap:.0f}% of the capture before {what}: building the model, moving it "
        "to the GPU, initialising NCCL (init_process_group), starting DataLoader workers, or compiling "
        "(torch.compile, cuDNN autotuning). That is measured here but is not the speed of the loop; the other "
        "findings judge the steady state after it.",
        "Move one-off set-up into `%%nsight_setup` (it runs outside the capture, once per warm session), or "
        "profile a cell that only runs the loop; with torch.compile, warm up before profiling.",
        total, "the time before the first step, plus the first step's excess over the median step", ev,
        ranges_of(ev))]


def _gpu_ops(ctx: Context, last: bool = False) -> GpuOps:
    """The operations nsys analyze's GPU rules look at (rules.gpu_ops), made once for both rules and held by this
    run of the rules only (not kept for the report's life); `last`: the last rule to read them takes them out, so
    that they go as soon as it lets them go."""
    ops: GpuOps | None = ctx.memo.pop("gpu_ops", None) if last else ctx.memo.get("gpu_ops")
    if ops is None:
        ops = GpuOps(ctx.report)
        if not last:
            ctx.memo["gpu_ops"] = ops
    return ops


def _in_order(values: np.ndarray, rows: np.ndarray | slice) -> tuple[np.ndarray, np.ndarray | slice]:
    """values[rows] in increasing order (ties as they come), and where each came from in `values`: `rows` itself
    where they are in order already (a slice: no copy)."""
    v = values[rows]
    if len(v) < 2 or bool((v[1:] >= v[:-1]).all()):
        return v, rows
    o = np.argsort(v, kind="stable")
    return v[o], I.within(rows, o)


def _long_gaps(ops: GpuOps, thr: float) -> pd.DataFrame | None:
    """The stretches longer than thr ns in which a (process, GPU) of `ops` ran nothing, by start (None: none),
    with the context of the operation before and the correlation id of the one after.  Its sorted copies of the
    operations' columns go when it returns, before the rule weighs the gaps (13M operations at 10M kernels)."""
    parts = []
    starts, ends = ops.start, ops.end
    for (pid, dev), rows in ops.pairs:
        s, order_s = _in_order(starts, rows)
        e, order_e = _in_order(ends, rows)
        # a gap longer than thr that is one (the ends before it all passed): integer ns, so one comparison with
        # floor(thr) (13M operations: one temporary, not four); a threshold of inf or NaN finds none, as before
        hit = np.flatnonzero(np.subtract(s[1:], e[:-1]) > (max(math.floor(thr), 0) if math.isfinite(thr) else thr))
        del s, e
        if not len(hit):
            continue
        before, after = I.within(order_e, hit), I.within(order_s, hit + 1)  # the operations around each gap
        parts.append(pd.DataFrame({
            "start_ns": ends[before], "end_ns": starts[after], "pid": int(pid), "device_id": int(dev),
            "context_id": ops.context_ids(before), "next_corr": ops.correlation_ids(after)}))
    if not parts:
        return None
    return pd.concat(parts, ignore_index=True).sort_values(["start_ns"], kind="stable").reset_index(drop=True)


def rule_gpu_gaps(ctx: Context) -> list[Finding]:
    """nsys gpu_gaps: a GPU idle for at least gap_ms between its first and last operation (per process)."""
    report, th = ctx.report, ctx.th
    gaps = _long_gaps(_gpu_ops(ctx), th["gpu_gaps.gap_ms"] * 1e6)
    if gaps is None:
        return []
    # the thread that launched the work after each gap: it was the one not feeding the GPU
    api = report.cuda_api
    launch = np.full(len(gaps), None, dtype=object)
    if len(api):
        probe = gaps.assign(correlation_id=pd.array(gaps["next_corr"], dtype="Int64"))
        launch = api_of(probe, api)["api_tid"].to_numpy(dtype=object)
    cpu = cpu_context(report, gaps, launch)
    ev = evidence(gaps.assign(tid=pd.array(launch, dtype="Int64")), "GPU idle",
                  {"context_id": gaps["context_id"], **{c: cpu[c] for c in cpu}})
    at_stake, explained = unexplained_idle(ctx, ev)
    worst = ev.loc[ev["duration_ns"].idxmax()]
    doing = "; ".join(f"{w}: {worst[k]}" for k, w in (("cpu_nvtx", "NVTX range"), ("cpu_cuda_api", "CUDA API"),
                                                       ("cpu_osrt", "OS call")) if pd.notna(worst[k]) and worst[k])
    return [Finding(
        "gpu_gaps", ctx.severity(at_stake),
        f"GPU idle {len(ev)} time(s) for {th['gpu_gaps.gap_ms']:g} ms or more",
        "Between its first and last operation the GPU ran nothing for these stretches: the work that feeds it "
        "(data loading, Python, host synchronisation) was on the critical path"
        + (f". During the longest gap the launching thread was in {doing}." if doing else ".") + explained,
        "Find what the CPU does during the gaps (the cpu_* columns of the evidence): overlap data loading with "
        "compute (DataLoader num_workers, prefetch), remove host synchronisations, or queue work ahead "
        "(CUDA graphs, larger batches).",
        at_stake, "the idle time in the gaps that no other finding explains (start-up and warm-up belong to the "
                  "startup finding)", ev, ranges_of(ev))]


def _low_use(ops: GpuOps, n_chunks: int, thr: float) -> list[dict[str, Any]]:
    """Per (process, GPU) of `ops`: the runs of its `n_chunks` equal chunks busy less than thr % of the time."""
    rows = []
    op_s, op_e = ops.start, ops.end
    for (pid, dev), of_pair in ops.pairs:
        s, order = _in_order(op_s, of_pair)
        e = op_e[order]
        lo, hi = int(s[0]), int(e.max())
        longest = int((e - s).max())
        size = float(np.ceil((hi - lo) / n_chunks))
        cid = ops.context_at(0 if isinstance(of_pair, slice) else int(of_pair[0]))
        chunk_ids, starts, ends, pcts = [], [], [], []
        for k in range(n_chunks):
            cs, ce = k * size + lo, min(k * size + lo + size, hi)
            if not cs < ce:
                continue
            # the operations that overlap the chunk start after cs - longest and before ce (a slice, by start)
            a, b = np.searchsorted(s, int(cs) - longest, "right"), np.searchsorted(s, int(np.ceil(ce)), "left")
            si, ei = s[a:b], e[a:b]
            m = ei > cs  # overlaps summed, as nsys does (concurrent work can exceed 100%)
            used = float(np.sum(np.minimum(ei[m], ce) - np.maximum(si[m], cs)))
            pct = used / (ce - cs) * 100
            if pct < thr:
                chunk_ids.append(k)
                starts.append(cs)
                ends.append(ce)
                pcts.append(pct)
        if not chunk_ids:
            continue
        ids = np.array(chunk_ids)
        group = ids - np.arange(len(ids))  # consecutive chunks share a group
        for gid in np.unique(group):
            m = group == gid
            st, en, pc = np.array(starts)[m], np.array(ends)[m], np.array(pcts)[m]
            sz = en - st
            rows.append({"start_ns": int(st.min()), "end_ns": int(en.max()), "pid": int(pid), "device_id": int(dev),
                         "context_id": cid, "in_use_pct": round(float(np.sum(sz * pc) / np.sum(sz)), 1)})
    return rows


def rule_gpu_time_util(ctx: Context) -> list[Finding]:
    """nsys gpu_time_util: stretches of `chunks` equal chunks per (process, GPU) with average use < threshold."""
    th = ctx.th
    n_chunks = int(th["gpu_time_util.chunks"])
    thr = th["gpu_time_util.threshold_pct"]
    # the last rule to read the operations (gpu_gaps ran before): they go once the stretches are found
    rows = _low_use(_gpu_ops(ctx, last=True), n_chunks, thr)
    if not rows:
        return []
    low = pd.DataFrame(rows).sort_values("start_ns").reset_index(drop=True)
    ev = evidence(low, "low GPU utilization", {"context_id": low["context_id"], "in_use_pct": low["in_use_pct"]})
    at_stake, explained = unexplained_idle(ctx, ev)
    return [Finding(
        "gpu_time_util", ctx.severity(at_stake),
        f"GPU used less than {thr:g}% of the time in {len(ev)} stretch(es)",
        f"The GPU's active span (first to last operation) was cut into {n_chunks} equal chunks; in these "
        f"stretches the GPU was busy less than {thr:g}% of the time." + explained,
        "Look at the CPU threads during these stretches: start-up, data loading, evaluation or logging often run "
        "there. Overlap them with GPU work, or leave them out of the measurement.",
        at_stake, "the idle time in the stretches that no other finding explains (start-up and warm-up belong to "
                  "the startup finding)", ev, ranges_of(ev))]


