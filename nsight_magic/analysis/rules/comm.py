"""Several ranks: waiting in collectives for a straggler, and NCCL's share of the GPU.

collective_wait's time at stake is what the straggler costs the job: the most any rank spent waiting in the
steady state for the others' late arrival (ranks wait at the same time, so the job loses it once), scaled to the
loop.  The straggler's own cause (its GPU busier, its host blocked or slower to launch) is named in it, and the
other rules count the straggler's share of that time only once (Context.straggler).  nccl_share keeps the
communication time that is not waiting.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .common import Context, Finding, estimate_words, evidence, ranges_of
from .. import text as tx
from ...readers.contract import NsysFrames

_CAUSE_WORDS = {
    "compute": "its GPU computes {mine:.0f}% of the steady state against {others:.0f}% on the others: it has more "
               "GPU work per step",
    "host wait": "its GPU waits {mine:.0f}% of the steady state while its launching thread is blocked in the OS "
                 "(sleep, I/O, a lock), against {others:.0f}% on the others",
    "launch": "its GPU waits {mine:.0f}% of the steady state for launches (Python, launch overhead), against "
              "{others:.0f}% on the others",
    "allocator": "its GPU waits {mine:.0f}% of the steady state while its host is in the CUDA allocator, against "
                 "{others:.0f}% on the others",
    "module load": "its GPU waits {mine:.0f}% of the steady state while its host loads GPU code, against "
                   "{others:.0f}% on the others",
    "input": "its GPU waits {mine:.0f}% of the steady state for input, against {others:.0f}% on the others",
    "sync": "its GPU idles {mine:.0f}% of the steady state after host synchronisations, against {others:.0f}% on "
            "the others",
    "copy": "its copies take {mine:.0f}% of the steady state, against {others:.0f}% on the others",
}


def _who(report: NsysFrames, pid: int) -> str:
    ranks = report.ranks_by_pid
    return f"rank {ranks[pid][0]}" if pid in ranks else f"process {pid}"


def steady_waits(ctx: Context) -> pd.DataFrame:
    """The NCCL kernels' waiting (analysis.ranks.collective_waits) inside each process's steady window, with the
    window's scale."""
    from ..ranks import collective_waits

    w = collective_waits(ctx.report)
    if w.empty:
        return w.assign(scale=pd.Series([], dtype=float))
    win = {p.pid: (p.window, p.scale) for p in ctx.diag.pairs}
    keep = np.zeros(len(w), bool)
    scale = np.ones(len(w))
    for pid, ((a, b), sc) in win.items():
        m = (w["pid"] == pid).to_numpy() & (w["start_ns"] >= a).to_numpy() & (w["start_ns"] < b).to_numpy()
        keep |= m
        scale[m] = sc
    return w.assign(scale=scale)[keep]


def straggler_of(ctx: Context) -> dict[str, Any] | None:
    """The rank the others wait for, and what it costs the job (scaled ns): None without such waiting."""
    w = steady_waits(ctx)
    if w.empty:
        return None
    w = w[w["pid"] != w["straggler"]]
    if w.empty or w["wait_ns"].sum() <= 0:
        return None
    per_rank = (w["wait_ns"] * w["scale"]).groupby(w["pid"]).sum()
    on = (w["wait_ns"] * w["scale"]).groupby(w["straggler"]).sum().sort_values(ascending=False)
    return {"pid": int(on.index[0]), "ns": int(per_rank.max()), "share": float(on.iloc[0] / max(on.sum(), 1))}


def slower_gpu(ctx: Context, pid: int) -> float | None:
    """analysis.ranks.slower_gpu_pct over the steady collectives: how much slower the straggler's GPU ran the same
    kernels, when that made it late."""
    from ..ranks import arrivals, slower_gpu_pct

    w = steady_waits(ctx)
    return None if w.empty else slower_gpu_pct(arrivals(ctx.report, w), pid)


def slower_gpu_words(who: str, slow: float, spread_pct: float, sev: str) -> tuple[str, str, str]:
    """collective_wait's severity, cause sentence and advice when the straggler's GPU is `slow`% slower on the same
    kernels: low while within the spread of one model's boards (`spread_pct`)."""
    usual = slow < spread_pct
    cause = (f" {who.capitalize()} ran the same kernels as the others between collectives, {slow:.1f}% slower: its "
             "GPU is slower, not its work" + (f" (GPUs of one model differ by up to about {spread_pct:g}% under power "
                                              "management: the code cannot gain it back)." if usual else "."))
    advice = (f"Check {who}'s GPU while the job runs: its clocks and the reason they are held back "
              "(`nvidia-smi -q -d PERFORMANCE,CLOCK`: power cap, thermal slowdown), its temperature, and other "
              "processes on it (`nvidia-smi`). Nothing in the code runs more on that rank.")
    return ("low" if usual and sev != "info" else sev), cause, advice


def _cause(ctx: Context, pid: int) -> str:
    """What the straggler does differently: the breakdown category where it exceeds the others most."""
    shares: dict[int, dict[str, float]] = {}
    for p in ctx.diag.pairs:
        t = shares.setdefault(p.pid, {})
        for c, v in p.totals.items():
            t[c] = t.get(c, 0.0) + 100.0 * v / max(p.window_ns, 1)
    if pid not in shares or len(shares) < 2:
        return ""
    mine = shares[pid]
    others = {c: float(np.median([s[c] for q, s in shares.items() if q != pid])) for c in mine}
    best = max(_CAUSE_WORDS, key=lambda c: mine.get(c, 0) - others.get(c, 0))
    if mine.get(best, 0) - others.get(best, 0) < 5:
        return ""
    return " On it, " + _CAUSE_WORDS[best].format(mine=mine[best], others=others[best]) + "."


def rule_collective_wait(ctx: Context) -> list[Finding]:
    """Ranks waiting in collectives for a late rank (the straggler): NCCL kernels that ran longer than the same
    collective on the rank that joined last (analysis/ranks.py)."""
    from ..ranks import collective_waits

    report, th = ctx.report, ctx.th
    w = collective_waits(report)
    if w.empty:
        return []
    total = int(w["wait_ns"].sum())
    nccl = int(w["duration_ns"].sum())
    if total < th["collective_wait.min_ms"] * 1e6 or total * 100.0 < th["collective_wait.min_share_pct"] * nccl:
        return []
    s = straggler_of(ctx)
    at_stake = s["ns"] if s else 0
    on = w.groupby("straggler")["wait_ns"].sum().sort_values(ascending=False)
    worst = s["pid"] if s else int(on.index[0])
    worst_ns = int(on.get(worst, 0))
    ev = w[w["wait_ns"] > 0].copy()
    ev["rank"] = ev["rank"].astype("Int64")
    ev["waits_for"] = [_who(report, int(p)) for p in ev["straggler"]]
    ev = ev[["name", "start_ns", "end_ns", "duration_ns", "wait_ns", "pid", "rank", "collective", "waits_for"]]
    who = _who(report, worst)
    slow = slower_gpu(ctx, worst) if s else None
    sev = ctx.severity(at_stake)
    if slow is None:
        cause = _cause(ctx, worst)
        advice = (f"Look at {who} before its collectives (the Ranks tab and its rows in the timeline): uneven work "
                  "(batch or sequence sizes per rank), slower data loading, extra work on one rank (logging, "
                  "evaluation, checkpoints on rank 0), or CPU contention (set OMP_NUM_THREADS, pin ranks to cores).")
    else:
        sev, cause, advice = slower_gpu_words(who, slow, th["collective_wait.gpu_spread_pct"], sev)
    return [Finding(
        "collective_wait", sev,
        f"Ranks wait in collectives for {who}: {at_stake / 1e6:,.1f} ms of the job",
        f"Of {nccl / 1e6:,.1f} ms in NCCL kernels, {100.0 * total / max(nccl, 1):.0f}% is spent waiting "
        f"({100.0 * worst_ns / max(total, 1):.0f}% of it for {who}): a collective kernel runs until the last rank "
        f"joins, so its time on the other ranks beyond the shortest one is waiting for that rank." + cause,
        advice,
        at_stake, estimate_words(ctx, "the waiting part of the NCCL kernels (duration minus the same collective's "
                                      "shortest) on the rank that waits most"), ev, ranges_of(ev))]


def rule_nccl_share(ctx: Context) -> list[Finding]:
    """NCCL (collective communication) kernels taking a large share of GPU time."""
    report, th = ctx.report, ctx.th
    k = report.kernels
    if k.empty:
        return []
    hit = tx.contains(k["name"], r"(?i)^(?:void )?nccl", regex=True)
    total_gpu = k["duration_ns"].sum()
    t = k[hit]
    share = t["duration_ns"].sum() * 100.0 / max(total_gpu, 1)
    if t.empty or share < th["nccl_share.min_gpu_pct"]:
        return []
    ev = evidence(t, t["name"])
    waits = steady_waits(ctx)
    waited = (waits["wait_ns"] * waits["scale"]).groupby(waits["pid"]).sum() if len(waits) else pd.Series(dtype=float)
    at_stake = 0
    for (pid, _), v in ctx.diag.by_pair("communication").items():
        at_stake = max(at_stake, int(max(0.0, v - float(waited.get(pid, 0.0)))))
    return [Finding(
        "nccl_share", ctx.severity(at_stake) if at_stake else "info",
        f"NCCL communication takes {share:.0f}% of kernel time",
        "Collective communication kernels (all-reduce, all-gather, ...) run for this share of the GPUs' kernel "
        "time; the part that waits for a late rank is collective_wait's.",
        "Overlap communication with computation (DDP's gradient bucketing: `bucket_cap_mb`, `no_sync()` for "
        "gradient accumulation), communicate less often, compress gradients, and check for a straggler rank.",
        at_stake, estimate_words(ctx, "the NCCL time not hidden behind compute and not spent waiting for a "
                                      "straggler"), ev, ranges_of(ev), related=("collective_wait",))]
