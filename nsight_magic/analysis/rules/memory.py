"""GPU memory (issue 48): a cell that ran out, memory that grows every step, a peak close to the device's size,
and a caching allocator that holds far more than the program uses (fragmentation).

These findings save no time: their time at stake is 0 and their severity says how soon the memory runs out
(memory_growth: the steps left at this pace), except out_of_memory, which comes first (a failed cell).  Read from
analysis/gpu_memory.py's summary of torch's allocator history and nsys's device-memory record.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...errors import ReportError
from ..gpu_memory import MemorySummary, empty_summary, memory_summary
from .common import Context, Finding

MIN_GROWTH_BYTES = 256 << 20      # over the loop: less is noise (a cache warming up)
# steps left until the device is full at this pace: a training run takes thousands of steps, so a device that
# fills within a thousand fails the run (high: it leads the findings, analysis.findings.sort_findings)
HIGH_STEPS, MEDIUM_STEPS = 1000, 2000
NEAR_CAPACITY = 0.9               # a peak at this share of the device
FRAGMENTED_SHARE = 0.15           # reserved but not allocated, of reserved, at the peak
MIN_FRAGMENTED_BYTES = 256 << 20
# no time at stake: an alarm (medium) only where the waste is large or memory is tight, else low (the caching
# allocator's own rounding and pools leave a few hundred MB reserved on any small training loop)
ALARM_FRAGMENTED_BYTES = 1 << 30
TIGHT_SHARE = 0.5                 # peak reserved at this share of the device
GB = 1e9


def _summary(ctx: Context) -> MemorySummary:
    got = ctx.memo.get("memory")
    if got is None:
        try:
            got = memory_summary(ctx.report)
        except ReportError:  # a damaged snapshot: the GPU memory tab says why, the other findings stand
            got = empty_summary()
        ctx.memo["memory"] = got
    return got


def _gb(b: float) -> str:
    return f"{b / GB:,.2f} GB" if b >= 0.1 * GB else f"{b / (1 << 20):,.0f} MiB"


def _where(s: MemorySummary, device: int) -> tuple[str, str]:
    """(the site holding most at the peak, in words; the code column)."""
    rows = s.live[s.live["device_id"] == device]
    if rows.empty:
        return "", ""
    r = rows.iloc[0]
    return (f"; most of it ({_gb(r['bytes'])} in {int(r['blocks']):,} blocks) allocated at {r['site']}"
            + (f" inside NVTX range '{r['nvtx']}'" if r["nvtx"] else ""), str(r["site"]))


def _evidence(s: MemorySummary, device: int, t_ns: float) -> pd.DataFrame:
    t = int(t_ns) if np.isfinite(t_ns) else 0
    rows = s.live[s.live["device_id"] == device]
    return pd.DataFrame({"start_ns": t, "end_ns": t, "duration_ns": 0, "device_id": device,
                         "name": rows["site"].to_numpy(object) if len(rows) else ["(memory)"],
                         "bytes": rows["bytes"].to_numpy(np.int64) if len(rows) else [0]})


def rule_out_of_memory(ctx: Context) -> list[Finding]:
    s = _summary(ctx)
    out = []
    for _, d in s.devices.iterrows():
        if not np.isfinite(d["oom_ns"]):
            continue
        dev = int(d["device_id"])
        where, code = _where(s, dev)
        cap = d["capacity"]
        out.append(Finding(
            "out_of_memory", "high",
            f"The cell ran out of GPU memory on device {dev}: it asked for {_gb(d['oom_asked'])} with "
            f"{_gb(d['oom_free'])} free",
            f"torch's allocator held {_gb(d['peak_allocated'])} in live tensors"
            + (f" of the device's {_gb(cap)}" if np.isfinite(cap) else "") + where + "."
            + _growth_words(d),
            "Free what the loop keeps (a list or cache of tensors: keep .item() or .cpu() copies, or trim it), run "
            "evaluation under torch.no_grad(), or make the batch smaller; the Memory tab shows what was live.",
            0, "a failed cell: no time estimate", _evidence(s, dev, d["oom_ns"]),
            ((int(d["oom_ns"]), int(d["oom_ns"]) + 1),), code=code))
    return out


def _growth_words(d: pd.Series) -> str:
    if not np.isfinite(d["growth_per_step"]) or d["growth_per_step"] <= 0:
        return ""
    return f" It grew {_gb(d['growth_per_step'])} a step over {int(d['steps'])} steps."


def rule_memory_growth(ctx: Context) -> list[Finding]:
    s = _summary(ctx)
    out = []
    for _, d in s.devices.iterrows():
        per = d["growth_per_step"]
        if not np.isfinite(per) or per <= 0 or per * (d["steps"] - 1) < MIN_GROWTH_BYTES:
            continue
        g = s.growth[s.growth["device_id"] == d["device_id"]]["allocated"].to_numpy(float)
        if len(g) < 3 or np.mean(np.diff(g) > 0) < 0.7:  # most steps, not one jump
            continue
        dev = int(d["device_id"])
        left = d["steps_to_full"]
        sev = "high" if np.isfinite(left) and left <= HIGH_STEPS else \
            "medium" if np.isfinite(left) and left <= MEDIUM_STEPS else "low"
        if np.isfinite(d["oom_ns"]):
            sev = "medium"  # out_of_memory says it first
        cause, fix = _growth_cause(s, d)
        where, code = _where(s, dev)
        out.append(Finding(
            "memory_growth", sev,
            f"GPU memory grows every step: +{_gb(per)} a step over {int(d['steps'])} steps"
            + (f", full in about {int(left):,} more steps at this pace" if np.isfinite(left) else ""),
            f"torch's allocated memory on device {dev} rose from {_gb(g[0])} after the first step to {_gb(g[-1])} "
            f"after the last{where}. {cause}",
            fix, 0, "memory: no time estimate (the steps left until the device is full set the severity)",
            _evidence(s, dev, d["peak_allocated_ns"]), tuple(), code=code))
    return out


def _growth_cause(s: MemorySummary, d: pd.Series) -> tuple[str, str]:
    """What the steps keep (`d`: the device's row of s.devices): many blocks a step from inside a model's forward
    (activations: outputs kept with their autograd graph), or about one a step (a list or cache that keeps a
    tensor)."""
    rows = s.live[s.live["device_id"] == d["device_id"]]
    steps = max(int(d["steps"]), 1)
    blocks = int(rows["blocks"].sum()) if len(rows) else 0
    in_forward = bool(len(rows)) and rows["site"].str.contains(r"torch/nn/modules/|forward", regex=True).any()
    if in_forward and blocks >= 2 * steps:
        return (f"Each step keeps about {blocks // steps} blocks made inside the model's forward: the activations "
                "of outputs (or losses) kept with their autograd graph.",
                "Keep what the loop needs without its graph: run evaluation under torch.no_grad() (or "
                "torch.inference_mode()), keep loss.item() or out.detach() instead of the tensor.")
    return ("Each step keeps about one more tensor: a list or cache that is never trimmed.",
            "Keep only what is needed (the last N, or .item() / .cpu() copies), or clear the list each step.")


def rule_near_capacity(ctx: Context) -> list[Finding]:
    s = _summary(ctx)
    out = []
    for _, d in s.devices.iterrows():
        cap, peak = d["capacity"], d["peak_bytes"]
        if np.isfinite(d["oom_ns"]) or not np.isfinite(cap) or cap <= 0 or peak < NEAR_CAPACITY * cap:
            continue
        dev = int(d["device_id"])
        where, code = _where(s, dev)
        out.append(Finding(
            "memory_near_capacity", "medium",
            f"GPU memory peaked at {peak / cap:.0%} of device {dev} ({_gb(peak)} of {_gb(cap)})",
            f"A larger batch or input, or another process on the GPU, makes this cell fail{where}.",
            "Leave room: a smaller batch, activation checkpointing, or mixed precision; the Memory tab shows what "
            "was live at the peak.", 0, "memory: no time estimate", _evidence(s, dev, d["peak_ns"]),
            ((int(d["peak_ns"]), int(d["peak_ns"]) + 1),), code=code))
    return out


def rule_memory_fragmentation(ctx: Context) -> list[Finding]:
    s = _summary(ctx)
    if s.settings.get("expandable_segments"):
        return []
    out = []
    for _, d in s.devices.iterrows():
        res, alloc, free_grown = d["peak_reserved"], d["peak_allocated"], d["free_when_grown"]
        if not (np.isfinite(res) and np.isfinite(alloc) and np.isfinite(free_grown)):
            continue
        gap = res - alloc
        if gap < MIN_FRAGMENTED_BYTES or gap < FRAGMENTED_SHARE * res or free_grown < MIN_FRAGMENTED_BYTES:
            continue
        dev = int(d["device_id"])
        cap = d["capacity"]
        tight = np.isfinite(cap) and res >= TIGHT_SHARE * cap
        out.append(Finding(
            "memory_fragmentation", "medium" if gap >= ALARM_FRAGMENTED_BYTES or tight else "low",
            f"The caching allocator reserved {_gb(gap)} more than the cell ever used ({_gb(res)} reserved, "
            f"{_gb(alloc)} allocated at most) on device {dev}",
            f"It asked the driver for new memory while up to {_gb(free_grown)} sat free in its own segments, in "
            "pieces too small for the request: tensors of changing sizes freed and made again fragment its "
            "segments.  That memory is lost to the rest of the program and to other processes.",
            "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (before torch starts CUDA), or allocate "
            "tensors of the same sizes each step (pad or bucket the shapes).", 0, "memory: no time estimate",
            _evidence(s, dev, d["peak_ns"]), ((int(d["peak_ns"]), int(d["peak_ns"]) + 1),)))
    return out
