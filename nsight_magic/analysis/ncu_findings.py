"""Findings of an Nsight Compute report: its guided-analysis rules, ranked by the time their fix can save.

ncu estimates, per kernel and rule, how much faster the kernel could run ("estimated speedup", % of its duration).
A finding is one rule over all the kernels it fired on: time at stake = sum of duration x speedup; evidence = those
kernels with their NVTX range (module), speedup and ncu's own message.
"""
from __future__ import annotations

import pandas as pd

from .findings import Finding, sort_findings
from ..readers.contract import NcuFrames


def _severity(share: float) -> str:
    return "high" if share >= 0.2 else "medium" if share >= 0.05 else "low"


def ncu_findings(report: NcuFrames) -> list[Finding]:
    rules, k = report.rules, report.kernels
    if rules.empty or k.empty:
        return []
    r = rules[rules["type"].astype(str).str.upper().isin(["OPT", "WRN", "WARNING"])]
    r = r[pd.to_numeric(r["speedup_pct"], errors="coerce").fillna(0) > 0]
    if r.empty:
        return []
    cols = ["id", "name", "nvtx", "duration_ns"]
    r = r.merge(k[[c for c in cols if c in k]], left_on="kernel_id", right_on="id", how="left")
    dur = pd.to_numeric(r["duration_ns"], errors="coerce").fillna(0).to_numpy(float)
    r["saving_ns"] = dur * pd.to_numeric(r["speedup_pct"]).to_numpy(float) / 100.0
    total = float(pd.to_numeric(k["duration_ns"], errors="coerce").fillna(0).sum()) or 1.0
    out = []
    for rule, g in r.groupby("rule", sort=False):
        g = g.sort_values("saving_ns", ascending=False, kind="stable")
        top = g.iloc[0]
        ev = pd.DataFrame({
            "kernel_id": g["kernel_id"].to_numpy(), "name": g["name"].astype(str).to_numpy(),
            "nvtx_range": g["nvtx"].to_numpy() if "nvtx" in g else None,
            "duration_ns": g["duration_ns"].to_numpy(), "speedup_pct": g["speedup_pct"].to_numpy(),
            "speedup_type": g["speedup_type"].to_numpy() if "speedup_type" in g else None,
            "section": g["section"].to_numpy(), "message": g["message"].astype(str).to_numpy(),
            # ncu measures kernels one by one, without a timeline: no timestamps to point at
            "start_ns": pd.array([pd.NA] * len(g), dtype="Int64"), "end_ns": pd.array([pd.NA] * len(g), dtype="Int64"),
        })
        saving = float(g["saving_ns"].sum())
        where = ", ".join(dict.fromkeys(str(x) for x in g["nvtx"].dropna() if str(x)))[:120] if "nvtx" in g else ""
        out.append(Finding(
            f"ncu:{rule}", _severity(saving / total),
            f"{rule} ({top['section']}): up to {float(top['speedup_pct']):.0f}% faster on {len(g)} kernel(s)",
            f"Nsight Compute's rule {rule} fired on {len(g)} kernel(s)"
            + (f" in {where}" if where else "") + f"; on {str(top['name'])[:80]} it says: {top['message']}",
            "Follow ncu's message above for the kernel with the most at stake; the evidence lists every kernel, "
            "its estimated speedup and message.",
            int(round(saving)), "sum over the kernels of duration x ncu's estimated speedup (an upper bound: "
            "rules overlap)", ev, ()))
    return sort_findings(out)
