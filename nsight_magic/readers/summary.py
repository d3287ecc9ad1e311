"""The few numbers that describe a profile in a listing (summary.json): capture, kernels, top kernel and range."""
from __future__ import annotations

from pathlib import Path

from ..store import write_summary_file


def profile_summary(report) -> dict:
    """The few numbers that describe a profile in a listing: capture duration, kernels, top kernel and range."""
    out: dict = {"tool": report.tool}
    if report.tool == "nsys":
        out["capture_ns"] = int(report.meta.duration_ns)
        ks = report.kernel_summary()
        out["kernels"] = int(ks["count"].sum()) if len(ks) else 0
        if len(ks):
            out["top_kernel"], out["top_kernel_pct"] = str(ks["name"].iloc[0]), round(float(ks["pct"].iloc[0]), 1)
        nv = report.nvtx_summary()  # the user's ranges (our cell range is not among them)
        if len(nv):
            total = nv["total_ns"].sum()
            out["top_range"] = str(nv["name"].iloc[0])
            out["top_range_pct"] = round(float(nv["total_ns"].iloc[0] * 100.0 / total), 1) if total else 0.0
        return out
    k = report.kernels
    out["kernels"] = int(len(k))
    if len(k) and k["duration_ns"].notna().any():
        by = k.groupby("name", sort=False)["duration_ns"].sum().sort_values(ascending=False)
        out["capture_ns"] = int(by.sum())  # for ncu: the profiled kernels' own time
        out["top_kernel"], out["top_kernel_pct"] = str(by.index[0]), round(float(by.iloc[0] * 100.0 / by.sum()), 1)
    return out


def write_summary(folder: Path, report) -> dict:
    """summary.json in a profile folder (store.SUMMARY_KEYS); returns what was written."""
    return write_summary_file(folder, profile_summary(report))
