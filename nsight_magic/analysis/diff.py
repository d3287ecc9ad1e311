"""Two profiles compared: what got faster, what got slower, and which findings came or went.

`diff(before, after)` takes profile folders, report files or opened reports (Nsight Systems or Nsight Compute) and
returns a ProfileDiff.  Every table has the columns name, count_before, count_after, total_before_ns,
total_after_ns, delta_ns, ratio (after / before), status (new | gone | changed | same), biggest change first.

Matching: kernels on their demangled name without the parameter list (template arguments kept, so
`gemm<128, 64>(float*, int)` and `gemm<128, 64>(half*, int)` are one kernel, `gemm<64, 64>` another); NVTX ranges on
their name path (`step/forward/attn`, the ranges open around them on their thread; module ranges of --modules
carry the module path already); CUDA API by function; copies by kind.  match="order" numbers kernels that repeat
within a step (`gemm #0`, `gemm #1`, ...) so the n-th GEMM of a step is compared with the n-th.
A row is `same` when its total moved by at most rel_tol of the larger total or abs_tol_ns (run-to-run noise).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
import numpy as np
import pandas as pd

from ..inside.marks import CAPTURE_DOMAIN
from . import text as tx
from .findings import Finding
from ..readers.contract import NsysFrames, Report, is_ncu, is_nsys

DIFF_COLUMNS = ["name", "count_before", "count_after", "total_before_ns", "total_after_ns", "delta_ns", "ratio",
                "status"]
REL_TOL = 0.05
ABS_TOL_NS = 20_000


def kernel_key(name: object) -> str:
    """A kernel's demangled name without its parameter list and a leading `void`: template arguments stay."""
    s = str(name).strip()
    if s.endswith(")"):
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            c = s[i]
            depth += c == ")"
            depth -= c == "("
            if depth == 0:
                s = s[:i].rstrip() if i > 0 else s
                break
    return s[5:] if s.startswith("void ") else s


def _keys(names: pd.Series) -> pd.Series:
    """kernel_key per row, computed once per distinct name."""
    codes, uniq = pd.factorize(names.astype(str))
    return pd.Series(np.array([kernel_key(u) for u in uniq], dtype=object)[codes] if len(codes) else [],
                     index=names.index, dtype=object)


def compare(before: pd.DataFrame | None, after: pd.DataFrame | None, *, rel_tol: float = REL_TOL,
            abs_tol_ns: float = ABS_TOL_NS) -> pd.DataFrame:
    """Two (name, count, total_ns) frames -> the diff table (names may repeat: summed)."""
    def agg(df: pd.DataFrame | None) -> pd.DataFrame:
        if df is None or df.empty:
            return pd.DataFrame({"count": [], "total_ns": []}, index=pd.Index([], name="name"))
        return df.groupby("name", sort=False)[["count", "total_ns"]].sum()

    b, a = agg(before), agg(after)
    m = b.add_suffix("_before").join(a.add_suffix("_after"), how="outer").fillna(0)
    out = pd.DataFrame({
        "name": m.index.astype(str),
        "count_before": m["count_before"].astype(np.int64).to_numpy(),
        "count_after": m["count_after"].astype(np.int64).to_numpy(),
        "total_before_ns": m["total_ns_before"].astype(np.int64).to_numpy(),
        "total_after_ns": m["total_ns_after"].astype(np.int64).to_numpy()})  # noqa: E501
    out["delta_ns"] = out["total_after_ns"] - out["total_before_ns"]
    tb = out["total_before_ns"].astype(np.float64)
    out["ratio"] = np.where(tb > 0, out["total_after_ns"] / tb.where(tb > 0, 1.0), np.nan)
    noise = np.maximum(rel_tol * np.maximum(out["total_before_ns"], out["total_after_ns"]), abs_tol_ns)
    out["status"] = np.select([out["count_before"] == 0, out["count_after"] == 0, out["delta_ns"].abs() > noise],
                              ["new", "gone", "changed"], "same")
    order = np.argsort(-out["delta_ns"].abs().to_numpy(), kind="stable")
    return out.iloc[order].reset_index(drop=True)[DIFF_COLUMNS]


# ---- per report: (name, count, total_ns) ----------------------------------------------------------------------
def _kernels(report: Report, match: str) -> pd.DataFrame:
    k = report.kernels
    if k.empty:
        return pd.DataFrame({"name": [], "count": [], "total_ns": []})
    if "duration_ns" not in k or k["duration_ns"].isna().all():
        return pd.DataFrame({"name": [], "count": [], "total_ns": []})
    names = _keys(k["name"])
    dur = pd.to_numeric(k["duration_ns"], errors="coerce").fillna(0).astype(np.int64)
    if match == "order" and "start_ns" in k and is_nsys(report):
        from .ranks import steps_of

        steps = steps_of(report)
        step = np.zeros(len(k), np.int64)
        if not steps.empty:  # the step whose range (on any process) started last before the kernel
            s = steps.sort_values("start_ns")
            idx = np.searchsorted(s["start_ns"].to_numpy(np.int64), k["start_ns"].to_numpy(np.int64), "right") - 1
            step = np.where(idx >= 0, s["step"].to_numpy()[np.maximum(idx, 0)], -1)
        frame = pd.DataFrame({"name": names.to_numpy(object), "step": step, "start": k["start_ns"].to_numpy()})
        frame = frame.sort_values(["step", "start"], kind="stable")
        nth = frame.groupby(["step", "name"], sort=False).cumcount()
        names = pd.Series((frame["name"] + " #" + nth.astype(str)).to_numpy(object), index=frame.index).sort_index()
    return pd.DataFrame({"name": names.to_numpy(object), "count": 1, "total_ns": dur.to_numpy()})


def _summary_rows(report: NsysFrames, method: str, name_col: str) -> pd.DataFrame:
    s = getattr(report, method)()  # one of the contract's summaries (readers.contract.NsysTables)
    if s.empty:
        return pd.DataFrame({"name": [], "count": [], "total_ns": []})
    return pd.DataFrame({"name": s[name_col].astype(str), "count": s["count"], "total_ns": s["total_ns"]})


def nvtx_paths(nv: pd.DataFrame) -> pd.DataFrame:
    """User NVTX ranges (not marks, not nsight-magic's cell range, closed) with their name path: the labels of the
    ranges open around each one on its thread, outermost first, joined by '/'.  Columns: path, duration_ns."""
    if nv is None or nv.empty:
        return pd.DataFrame({"path": [], "duration_ns": []})
    ours = nv["domain"].astype("string").fillna("").eq(CAPTURE_DOMAIN) if "domain" in nv else False
    r = nv[(~tx.eq(nv["kind"], "mark")) & ~ours & nv["end_ns"].notna()]
    if r.empty:
        return pd.DataFrame({"path": [], "duration_ns": []})
    r = r.sort_values(["pid", "tid", "start_ns"], kind="stable")
    thread = pd.factorize(r["pid"].to_numpy(np.int64) * (1 << 24) + r["tid"].to_numpy(np.int64))[0].astype(np.int64)
    depth = r["depth"].to_numpy(np.int64)
    start = r["start_ns"].to_numpy(np.int64)
    end = r["end_ns"].astype(np.int64).to_numpy()
    label = r["label"].astype(str).to_numpy(object)
    n = len(r)
    pos = np.arange(n, dtype=np.int64)
    parent = np.full(n, -1, np.int64)
    path = label.copy()
    for d in range(1, int(depth.max()) + 1 if n else 1):  # parents one depth at a time, vectorised
        rows = pos[depth == d]
        cand = pos[depth == d - 1]
        if not len(rows) or not len(cand):
            continue
        ck = thread[cand] * (n + 1) + cand
        j = np.searchsorted(ck, thread[rows] * (n + 1) + rows) - 1
        ok = j >= 0
        p = np.where(ok, cand[np.maximum(j, 0)], -1)
        ok &= (p >= 0) & (thread[np.maximum(p, 0)] == thread[rows]) & (end[np.maximum(p, 0)] >= start[rows])
        parent[rows[ok]] = p[ok]
        path[rows[ok]] = path[p[ok]] + "/" + label[rows[ok]]
    return pd.DataFrame({"path": path, "duration_ns": end - start})


def _nvtx(report: NsysFrames) -> pd.DataFrame:
    p = nvtx_paths(report.nvtx)
    if p.empty:
        return pd.DataFrame({"name": [], "count": [], "total_ns": []})
    g = p.groupby("path", sort=False)["duration_ns"].agg(["size", "sum"])
    return pd.DataFrame({"name": g.index.astype(str), "count": g["size"].to_numpy(), "total_ns": g["sum"].to_numpy()})


def _gpu_busy_ns(report: NsysFrames) -> int:
    """Time at least one kernel, copy or memset ran (the union of their intervals)."""
    parts = [f[["start_ns", "end_ns"]] for f in (report.kernels, report.memcpy, report.memset) if not f.empty]
    if not parts:
        return 0
    from ..readers.nsys_summary import busy_fraction

    iv = pd.concat(parts)
    s = iv["start_ns"].to_numpy(np.int64)
    e = np.maximum(pd.to_numeric(iv["end_ns"], errors="coerce").fillna(iv["start_ns"]).to_numpy(np.int64), s)
    lo, hi = int(s.min()), int(e.max())
    return int(round(busy_fraction(s, e, np.array([lo, hi], np.int64))[0] * (hi - lo)))


def _memory_peaks(report: NsysFrames) -> dict[int, float]:
    """Peak GPU memory per device: torch's allocated bytes where its history was recorded, else nsys's count; {}
    without a memory record (or with a damaged one: the rest of the comparison stands)."""
    from .gpu_memory import memory_summary

    try:
        d = memory_summary(report).devices
    except Exception:  # noqa: BLE001
        return {}
    peak = d["peak_allocated"].where(d["peak_allocated"].notna(), d["peak_bytes"])
    return {int(k): float(v) for k, v in zip(d["device_id"], peak) if pd.notna(v)}


def _ncu_metrics(report: Report) -> pd.DataFrame:
    k = report.kernels
    cols = ["sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "achieved_occupancy_pct"]
    if k.empty:
        return pd.DataFrame(columns=["name"] + cols)
    f = k.assign(name=_keys(k["name"]))
    return f.groupby("name", sort=False)[cols].mean().reset_index()


@dataclass
class ProfileDiff:
    """The comparison of two profiles; see the module docstring.  Tables are DataFrames (DIFF_COLUMNS)."""

    before: Report                # the two reports: both nsys's (NsysData) or both ncu's
    after: Report
    before_label: str
    after_label: str
    kernels: pd.DataFrame
    api: pd.DataFrame
    memcpy: pd.DataFrame
    nvtx: pd.DataFrame
    metrics: pd.DataFrame
    findings: pd.DataFrame
    headline: dict[str, Any] = field(default_factory=dict)

    def tables(self) -> dict[str, pd.DataFrame]:
        return {"kernels": self.kernels, "nvtx": self.nvtx, "api": self.api, "memcpy": self.memcpy}

    def top(self, n: int = 15) -> pd.DataFrame:
        """The biggest changes over every table: what (kernel / NVTX / CUDA API / memory), name, delta_ns, ..."""
        what = {"kernels": "kernel", "nvtx": "NVTX", "api": "CUDA API", "memcpy": "memory"}
        parts = [t.assign(what=what[k]) for k, t in self.tables().items() if not t.empty]
        if not parts:
            return pd.DataFrame(columns=["what"] + DIFF_COLUMNS)
        allrows = pd.concat(parts, ignore_index=True)
        allrows = allrows[allrows["delta_ns"] != 0]
        order = np.argsort(-allrows["delta_ns"].abs().to_numpy(), kind="stable")[:n]
        return allrows.iloc[order][["what"] + DIFF_COLUMNS].reset_index(drop=True)

    def is_zero(self) -> bool:
        return all((t["delta_ns"] == 0).all() and (t["status"] == "same").all() for t in self.tables().values())

    def __repr__(self) -> str:
        h = self.headline
        return (f"ProfileDiff({self.before_label!r} -> {self.after_label!r}: capture "
                f"{h.get('capture_before_ns', 0) / 1e6:,.3f} -> {h.get('capture_after_ns', 0) / 1e6:,.3f} ms)")


def _tool(report: Report) -> str:
    return "an Nsight Compute" if is_ncu(report) else "an Nsight Systems"


def _kind_findings(report: Report) -> list[Finding]:
    from .findings import nsys_findings
    from .ncu_findings import ncu_findings

    return ncu_findings(report) if is_ncu(report) else nsys_findings(report)


def _findings_diff(before: Report, after: Report) -> pd.DataFrame:
    def get(r: Report) -> dict[str, tuple[str, int]]:  # rule -> (title of its biggest finding, time at stake)
        try:
            found = _kind_findings(r)
        except Exception:  # noqa: BLE001 - a rule that cannot read one report must not stop the comparison
            return {}
        out: dict[str, tuple[str, int]] = {}
        for f in found:  # sorted by time at stake: the first of a rule is its biggest
            title, ns = out.get(f.rule, (f.title, 0))
            out[f.rule] = (title, ns + f.time_at_stake_ns)
        return out

    fb, fa = get(before), get(after)
    rows = []
    for rule in list(dict.fromkeys([*fb, *fa])):
        b, a = fb.get(rule), fa.get(rule)
        either = a if a is not None else b
        rows.append({"rule": rule, "status": "new" if b is None else "gone" if a is None else "still",
                     "title": either[0] if either is not None else "", "at_stake_before_ns": b[1] if b else 0,
                     "at_stake_after_ns": a[1] if a else 0})
    return pd.DataFrame(rows, columns=["rule", "status", "title", "at_stake_before_ns", "at_stake_after_ns"])


def diff(before: Report, after: Report, *, match: str = "name", rel_tol: float = REL_TOL,
         abs_tol_ns: float = ABS_TOL_NS, labels: tuple[str, str] | None = None) -> ProfileDiff:
    """Compare two opened reports (nsight_magic.diff opens folders and files); see the module docstring.
    `labels`: their names in the comparison (default: their folders' names)."""
    from ..errors import OptionError

    if match not in ("name", "order"):
        raise OptionError(f"match must be 'name' or 'order', not {match!r}")
    if isinstance(before, (str, Path)) or isinstance(after, (str, Path)):
        raise TypeError("analysis.diff compares opened reports; nsight_magic.diff opens folders and report files")
    from ..readers import report_label

    b, a = before, after
    bl, al = labels or (report_label(b), report_label(a))
    if is_ncu(a) != is_ncu(b):
        raise OptionError(f"cannot compare {_tool(b)} report with {_tool(a)} report: both must be Nsight Systems "
                          f"reports, or both Nsight Compute reports")
    tol = dict(rel_tol=rel_tol, abs_tol_ns=abs_tol_ns)
    empty = compare(None, None)
    if is_ncu(b):
        mb, ma = _ncu_metrics(b), _ncu_metrics(a)
        metrics = mb.merge(ma, on="name", how="outer", suffixes=("_before", "_after"))
        kern = compare(_kernels(b, match), _kernels(a, match), **tol)
        metrics = kern.merge(metrics, on="name", how="left")
        d = ProfileDiff(b, a, bl, al, kern, empty, empty, empty, metrics, _findings_diff(b, a))
        d.headline = _headline(d)
        return d
    if not (is_nsys(b) and is_nsys(a)):
        raise OptionError(f"cannot compare reports of {b.tool!r} and {a.tool!r}: neither Nsight Systems nor "
                          f"Nsight Compute")
    d = ProfileDiff(b, a, bl, al,
                    kernels=compare(_kernels(b, match), _kernels(a, match), **tol),
                    api=compare(_summary_rows(b, "cuda_api_summary", "name"),
                                _summary_rows(a, "cuda_api_summary", "name"), **tol),
                    memcpy=compare(_summary_rows(b, "memcpy_summary", "kind"),
                                   _summary_rows(a, "memcpy_summary", "kind"), **tol),
                    nvtx=compare(_nvtx(b), _nvtx(a), **tol),
                    metrics=pd.DataFrame(), findings=_findings_diff(b, a))
    d.headline = _headline(d)
    return d


def _headline(d: ProfileDiff) -> dict[str, Any]:
    h: dict[str, Any] = {}
    b, a = d.before, d.after
    if is_nsys(b) and is_nsys(a):
        h["capture_before_ns"] = int(getattr(b.meta, "duration_ns", 0) or 0)
        h["capture_after_ns"] = int(getattr(a.meta, "duration_ns", 0) or 0)
        h["gpu_busy_before_ns"] = _gpu_busy_ns(b)
        h["gpu_busy_after_ns"] = _gpu_busy_ns(a)
        mb, ma = _memory_peaks(b), _memory_peaks(a)
        if mb or ma:  # device -> peak bytes in use (torch's allocated where recorded, else nsys's count)
            h["memory_peak_before"], h["memory_peak_after"] = mb, ma
    else:
        h["kernel_time_before_ns"] = int(d.kernels["total_before_ns"].sum())
        h["kernel_time_after_ns"] = int(d.kernels["total_after_ns"].sum())
    top = d.top(3)
    h["top"] = [(w, n, int(x)) for w, n, x in zip(top["what"], top["name"], top["delta_ns"])]
    f = d.findings
    h["findings_new"] = f[f["status"] == "new"]["rule"].tolist() if not f.empty else []
    h["findings_gone"] = f[f["status"] == "gone"]["rule"].tolist() if not f.empty else []
    return h
