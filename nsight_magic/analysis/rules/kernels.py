"""Kernels: the GPU waiting for launches (CPU-bound), layout transposes, grids smaller than the GPU.

launch_bound's time at stake is the breakdown's `launch` idle time (the GPU waiting while the launching thread
runs Python and launch calls): what CUDA graphs, fusion or bigger batches give back.  The kernel-side rules save
GPU time, which shortens the cell only where the GPU sets the pace: their time at stake is the GPU time saved minus
the time the host paced the GPU anyway (launch and host wait), never below zero.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..bottleneck import HOST
from ..overhead import words as overhead_words
from .common import (MAX_EVIDENCE, Context, Finding, api_of, estimate_words, evidence, evidence_names,
                     evidence_rows, has_operators, launch_call_ns, ranges_of, where_words, with_operator)
from .. import text as tx
from ...readers.contract import NsysFrames


def gpu_side_saving(ctx: Context, kernels: pd.DataFrame, saved_fraction: np.ndarray | float | None = None,
                    freed_ns: int = 0) -> int:
    """What making these kernels (a fraction of each) vanish saves on the critical path: per process and GPU, the
    GPU time saved in the steady window, at most the time the launching thread waited for the GPU there (below
    that the host sets the pace), scaled to the loop; the largest.  freed_ns: host time (whole loop) the same fix
    also removes, which leaves the GPU that much more room to set the pace."""
    best = 0
    frac = np.ones(len(kernels)) if saved_fraction is None else np.asarray(saved_fraction, float)
    for p in ctx.diag.pairs:
        m = ((kernels["pid"] == p.pid) & (kernels["device_id"] == p.device)).to_numpy()
        if not m.any():
            continue
        every = bool(m.all())  # one process on one GPU: its columns, not a copy (millions of kernels)
        k = kernels if every else kernels[m]
        a, b = p.window
        inside = np.minimum(k["end_ns"].to_numpy(np.int64), b) - np.maximum(k["start_ns"].to_numpy(np.int64), a)
        saved = float((np.maximum(inside, 0) * (frac if every else frac[m])).sum())
        if p.slack is not None:
            # the loop gets shorter until the host sets the pace: by the time it waited for the GPU at most
            got = min(saved, float(p.slack) + freed_ns / max(p.scale, 1e-9))
        else:  # no CUDA calls traced: the time the host or another rank paced the GPU does not shrink
            got = saved - sum(p.totals[c] for c in HOST) - p.totals["communication"]
        if ctx.straggler is None or p.pid != ctx.straggler["pid"]:
            best = max(best, int(max(0.0, got) * p.scale))
    return best


def rule_launch_bound(ctx: Context) -> list[Finding]:
    """The GPU waiting for the CPU between launches: kernels shorter than their launch call, Python overhead."""
    report, th = ctx.report, ctx.th
    raw = ctx.stake("launch")
    at_stake = ctx.left("launch", ctx.host_stake("launch"))  # what tracing added and the named causes took aside
    share = ctx.window_share(raw) * 100
    k = report.kernels
    tiny = np.zeros(len(k), bool)
    api_ns = np.zeros(len(k))
    # a kernel a CUDA graph replayed (--cuda-graph-trace=node) has no launch of its own: one cudaGraphLaunch
    # queues the whole graph, so it is never "shorter than its launch"
    own = k["graph_node_id"].isna().to_numpy(bool) if "graph_node_id" in k else np.ones(len(k), bool)
    if len(k):  # each launch's length only: the calls' names and threads are joined for the evidence's rows
        api_ns = launch_call_ns(k, report.cuda_api)
        tiny = (k["duration_ns"].to_numpy(float) < api_ns) & ~np.isnan(api_ns) & own
    n = int(tiny.sum())
    launched = int(own.sum())
    many_tiny = n >= th["launch_bound.min_kernels"] and n * 100.0 / max(launched, 1) >= th["launch_bound.min_share_pct"]
    if share < th["launch_bound.min_idle_pct"] and not (many_tiny and at_stake > 0):
        return []
    named = ctx.claimed.get("launch", 0)
    explained = (f" ({min(100.0, named * 100 / max(raw, 1)):.0f}% of it explained by the findings above)"
                 if named > 0 and raw > 0 else "")
    events = None  # the evidence's rows
    if many_tiny:
        t = k[tiny]
        a = api_of(t, report.cuda_api)
        ev = evidence(t.assign(tid=a["api_tid"].array), t["name"],
                      {"launch_ns": api_ns[tiny].astype(np.int64), "api_name": a["api_name"]})
        top = ev["name"].value_counts()
        top.index = top.index.astype(str)  # ties by name, not by the order the categories were read in
        top = top.sort_index().sort_values(ascending=False, kind="stable").head(3)
        title = (f"{n} of {launched} kernels ({n * 100 / launched:.0f}%) are shorter than their launch: the GPU waits "
                 f"for the CPU {share:.0f}% of the steady state{explained}")
        why = ("Each of these kernels runs for less time than the CPU takes to launch it "
               f"(median kernel {ev['duration_ns'].median() / 1e3:.1f} us, median launch "
               f"{ev['launch_ns'].median() / 1e3:.1f} us): the GPU waits for the CPU. Most frequent: "
               + "; ".join(f"{c} x {nm[:60]}" for nm, c in top.items()) + ".")
    else:
        events = ctx.diag.gap_count("launch")  # a CPU-bound loop's launch gaps can number millions
        gaps = ctx.diag.gaps("launch", largest=MAX_EVIDENCE).sort_values("start_ns")
        ev = evidence(gaps, "GPU waits for a launch", {"wait_ns": gaps["launch"]})
        title = f"The GPU waits for the next launch {share:.0f}% of the steady state{explained}"
        why = ("Between its kernels the GPU had nothing to do while the thread that launches them was running: "
               "Python between the operations, the launch calls themselves, the allocator. The CPU, not the GPU, "
               "sets the pace; faster kernels would change nothing.")
    return [Finding(
        "launch_bound", ctx.severity(at_stake), title, why,
        "Launch fewer, larger kernels: capture the step in a CUDA graph (`torch.cuda.CUDAGraph`, "
        "`torch.compile(mode='reduce-overhead')`), fuse operations (`torch.compile`), use larger batches, and keep "
        "Python work (logging, `.item()`, list building) out of the loop.",
        at_stake, estimate_words(ctx, "the GPU's idle time while the launching thread was running (what a CUDA graph "
                                      f"or fusion gives back), {overhead_words(report)}"), ev, ranges_of(ev),
        events=events)]


TRANSPOSE_RX = r"(?i)(?:nchw_?to_?nhwc|nhwc_?to_?nchw|nchw2nhwc|nhwc2nchw)"
# normalisation kernels with a channels_last twin: PyTorch's batch norm (its NHWC kernels say channels_last) and
# cuDNN's (its kernels name the layout)
NORM_RX = r"(?i)batch_norm|\bbn_(?:fw|bw)"
NHWC_RX = r"(?i)channels_last|nhwc"
# what channels_last saves of the NCHW batch-norm kernels: about half (H100, bf16 autocast, 4 x Conv-BN-ReLU of 128
# channels at 56 x 56: 33.1 ms of NCHW kernels against 12.8 ms of channels_last ones; tests/data/planted
# nchw_autocast)
NCHW_NORM_SAVING = 0.5


def rule_layout_transpose(ctx: Context) -> list[Finding]:
    """NCHW <-> NHWC transposes (cuDNN converting the memory layout around convolutions), and the normalisation
    kernels that run their NCHW versions beside them: channels_last removes the first and speeds up the second."""
    report, th = ctx.report, ctx.th
    k = report.kernels
    if k.empty:
        return []
    hit = tx.contains(k["name"], TRANSPOSE_RX, regex=True)
    total_gpu = k["duration_ns"].sum()
    # positions, not copies of the frame: a long trace has hundreds of thousands of them, and the evidence keeps the
    # longest MAX_EVIDENCE
    own_rows = np.flatnonzero(hit)
    own = int(k["duration_ns"].take(own_rows).sum())
    if not len(own_rows) or own * 100.0 / max(total_gpu, 1) < th["layout_transpose.min_gpu_pct"]:
        return []
    norm_rows = np.flatnonzero(tx.contains(k["name"], NORM_RX, regex=True)
                               & ~tx.contains(k["name"], NHWC_RX, regex=True) & ~hit)
    if "elementwise_fusion" in ctx.fired:  # its chains hold the norms' time: counted there once
        norm_rows = norm_rows[:0]
    rows = np.r_[own_rows, norm_rows]
    both = k[["pid", "device_id", "correlation_id", "start_ns", "end_ns"]].take(rows).reset_index(drop=True)
    span = pd.DataFrame({"start_ns": both["start_ns"].to_numpy(np.int64),
                         "end_ns": pd.to_numeric(both["end_ns"]).to_numpy(np.int64)})
    span["duration_ns"] = span["end_ns"] - span["start_ns"]
    extra: dict[str, Any] = {"role": np.r_[np.full(len(own_rows), "transpose", object),
                                           np.full(len(norm_rows), "NCHW norm", object)]}
    if has_operators(report):  # with --ops, the operator whose call launched each kernel
        a = api_of(both, report.cuda_api)
        extra = with_operator(report, extra, both["pid"], a["api_tid"], pd.to_numeric(a["api_start_ns"]).fillna(0))
        span["op"] = extra["op"]
    keep = evidence_rows(span["duration_ns"].to_numpy())
    t = k.take(rows[keep])
    ev = evidence(t, t["name"], {c: np.asarray(v)[keep] for c, v in extra.items()})
    norm_ns = int(k["duration_ns"].take(norm_rows).sum())
    at_stake = gpu_side_saving(ctx, both, np.r_[np.ones(len(own_rows)), np.full(len(norm_rows), NCHW_NORM_SAVING)])
    norm_words = (f" Beside them {len(norm_rows)} batch-norm kernels ran their NCHW versions "
                  f"({norm_ns * 100 / total_gpu:.1f}% of kernel time): in channels_last PyTorch runs kernels that read "
                  "a pixel's channels contiguously, about twice as fast." if len(norm_rows) else "")
    return [Finding(
        "layout_transpose", ctx.severity(at_stake),
        f"{len(own_rows)} layout transposes take {own * 100 / total_gpu:.1f}% of kernel time",
        "Kernels converting tensors between NCHW and NHWC ran around the convolutions: the model's tensors are in "
        "one layout and the fastest convolution kernels (Tensor Cores) want the other." + norm_words
        + (where_words(span) if "op" in span else "")
        + ("" if at_stake else " The host sets this loop's pace, so removing them would not shorten it yet."),
        "Keep the whole network in channels_last: `model = model.to(memory_format=torch.channels_last)` and "
        "`x = x.to(memory_format=torch.channels_last)` (with AMP for fp16/bf16 Tensor Core kernels).",
        at_stake, estimate_words(ctx, "the transposes' GPU time" + (
            f", plus {NCHW_NORM_SAVING:g} of the NCHW batch-norm kernels' (channels_last ones took about half the "
            "time on an H100)" if len(norm_rows) else "") + ", beyond the time the host paced the GPU"), ev,
        ranges_of(span), events=len(rows))]


def rule_undersized_launch(ctx: Context) -> list[Finding]:
    """Kernels launched with fewer blocks than the GPU has SMs: most SMs idle while they run."""
    report, th = ctx.report, ctx.th
    k = report.kernels
    g = report.gpus
    if k.empty or g.empty or g["sm_count"].isna().all():
        return []
    # NCCL's kernels use a few blocks on purpose (their time is communication: comm.py)
    mine = ~tx.contains(k["name"], r"(?i)^(?:void )?nccl", regex=True)
    if not mine.any():
        return []
    sms = dict(zip(g["id"].to_numpy(), pd.to_numeric(g["sm_count"], errors="coerce").to_numpy()))
    dev_sms = k["device_id"].map(sms).to_numpy(float)
    blocks = (k["grid_x"] * k["grid_y"] * k["grid_z"]).to_numpy(float)
    # a grid that fills most SMs (a library's 112-block tiling on 132 SMs) is one wave's quantisation, which its
    # heuristics weigh against bigger tiles: what a user can change is a grid that leaves most of the GPU empty
    small = mine & ~np.isnan(dev_sms) & (blocks <= dev_sms * th["undersized_launch.max_fill"])
    total_gpu = k["duration_ns"].to_numpy()[mine].sum()
    # positions, not a copy of the frame: a long trace has half a million such kernels, and the evidence keeps the
    # longest MAX_EVIDENCE of them
    rows = np.flatnonzero(small)
    idle_frac = 1 - blocks[rows] / dev_sms[rows]
    idle_ns = k["duration_ns"].take(rows).to_numpy(float) * idle_frac
    # 128 blocks on 132 SMs cost little; 16 blocks cost most of the GPU: judge by the SM time left idle
    if not len(rows) or idle_ns.sum() * 100.0 / max(total_gpu, 1) < th["undersized_launch.min_idle_pct"]:
        return []
    idle = int(idle_ns.sum())
    at_stake = gpu_side_saving(ctx, k[["pid", "device_id", "start_ns", "end_ns"]].take(rows), idle_frac)
    idle_sm = idle_ns.astype(np.int64)
    names = evidence_names(k["name"].take(rows), len(rows))
    worst = pd.DataFrame({"name": names, "idle_sm_ns": idle_sm}).groupby("name")["idle_sm_ns"].sum().sort_values(
        ascending=False)
    first = rows[int(np.flatnonzero(np.asarray(names == worst.index[0]))[0])]
    w = {"sm_count": int(dev_sms[first]), "blocks": int(blocks[first]),
         "threads_per_block": int(k["block_x"].iloc[first] * k["block_y"].iloc[first] * k["block_z"].iloc[first])}
    start = k["start_ns"].take(rows).to_numpy(np.int64)
    span = pd.DataFrame({"start_ns": start, "end_ns": pd.to_numeric(k["end_ns"].take(rows)).to_numpy(np.int64)})
    keep = evidence_rows((span["end_ns"] - span["start_ns"]).to_numpy())
    t = k.take(rows[keep])
    ev = evidence(t, t["name"], {"blocks": blocks[rows[keep]].astype(np.int64),
                                 "threads_per_block": (t["block_x"] * t["block_y"] * t["block_z"]),
                                 "sm_count": dev_sms[rows[keep]].astype(np.int64), "idle_sm_ns": idle_sm[keep]})
    return [Finding(
        "undersized_launch", ctx.severity(at_stake),
        f"{len(rows)} kernels use fewer blocks than the GPU's {int(w['sm_count'])} SMs",
        f"These kernels run with too few thread blocks to fill the GPU, leaving SMs idle for "
        f"{idle * 100 / total_gpu:.0f}% of the kernel time; the worst, {worst.index[0][:80]}, runs "
        f"{int(w['blocks'])} blocks of {int(w['threads_per_block'])} threads on {int(w['sm_count'])} SMs."
        + ("" if at_stake else " The host sets this loop's pace, so fuller kernels would not shorten it yet."),
        "Give the GPU more parallel work: larger batches, fuse small operations, or (own kernels) more blocks "
        "with fewer threads each / a grid-stride loop sized to a multiple of the SM count.",
        at_stake, estimate_words(ctx, "kernel time x the fraction of SMs left without a block, beyond the time the "
                                      "host paced the GPU"), ev, ranges_of(span), events=len(rows))]



