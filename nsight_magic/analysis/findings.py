"""Findings: what a profile says to change, each with its evidence (events with the report's own timestamps).

`nsys_findings(report, thresholds)` runs every rule over an NsysReport's frames and returns `Finding`s sorted by
the time the fix can save.  Pure functions over DataFrames; no views, no IPython.

Rules (thresholds: analysis/thresholds.py):
- twins of `nsys analyze` (same ids, defaults and events as nsys 2022.4 and 2025.3): cuda_memcpy_async,
  cuda_memcpy_sync, cuda_memset_sync, cuda_api_sync, gpu_gaps (with what the CPU did during each gap),
  gpu_time_util;
- ours: launch_bound, layout_transpose, undersized_launch, serialized_copy, input_wait, nccl_share,
  collective_wait (ranks waiting for a straggler), host_wait, nvtx_other_thread (a note where the NVTX GPU
  projection would surprise).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..child import CAPTURE_DOMAIN
from . import thresholds as T


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str                 # high | medium | low | info
    title: str
    explanation: str
    suggestion: str
    time_at_stake_ns: int         # what the fix can save, at most
    estimate: str                 # how time_at_stake_ns was estimated
    evidence: pd.DataFrame = field(repr=False)  # the events concerned: start_ns/end_ns on the report's clock, ...
    ranges: tuple = ()            # ((start_ns, end_ns), ...) on the same clock: where to look on the timeline

    @property
    def count(self) -> int:
        return len(self.evidence)

    def __str__(self):
        return f"[{self.severity}] {self.title} ({self.time_at_stake_ns / 1e6:,.3f} ms at stake)"


SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}
FINDING_COLUMNS = ["rule", "severity", "title", "time_at_stake_ns", "estimate", "count", "first_ns", "last_ns",
                   "explanation", "suggestion"]


def findings_frame(findings: list[Finding]) -> pd.DataFrame:
    """One row per finding (the evidence stays on the Finding objects)."""
    rows = [{"rule": f.rule, "severity": f.severity, "title": f.title, "time_at_stake_ns": f.time_at_stake_ns,
             "estimate": f.estimate, "count": f.count,
             "first_ns": min((a for a, _ in f.ranges), default=pd.NA),
             "last_ns": max((b for _, b in f.ranges), default=pd.NA),
             "explanation": f.explanation, "suggestion": f.suggestion} for f in findings]
    return pd.DataFrame(rows, columns=FINDING_COLUMNS)


# ---- helpers ---------------------------------------------------------------------------------------------------

def _severity(at_stake_ns: float, span_ns: int) -> str:
    share = at_stake_ns / span_ns if span_ns > 0 else 0.0
    return "high" if share >= 0.2 else "medium" if share >= 0.05 else "low"


def _ranges(ev: pd.DataFrame, limit: int = 200) -> tuple:
    """(start, end) of the evidence, merged where they touch, the longest `limit` of them."""
    if ev.empty:
        return ()
    s = ev["start_ns"].to_numpy(np.int64)
    e = pd.to_numeric(ev["end_ns"], errors="coerce").fillna(ev["start_ns"]).to_numpy(np.int64)
    o = np.argsort(s, kind="stable")
    s, e = s[o], np.maximum(e[o], s[o])
    run = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > run[:-1]]
    starts, ends = s[new], np.maximum.reduceat(e, np.flatnonzero(new))
    if len(starts) > limit:
        keep = np.sort(np.argsort(ends - starts, kind="stable")[::-1][:limit])
        starts, ends = starts[keep], ends[keep]
    return tuple(zip(starts.tolist(), ends.tolist()))


def _like(names: pd.Series, pattern: str) -> np.ndarray:
    """SQL LIKE as nsys's rules use it (case-insensitive), on a categorical or text column."""
    rx = "^" + re.escape(pattern).replace("%", ".*").replace("_", ".") + "$"
    if isinstance(names.dtype, pd.CategoricalDtype):
        cats = pd.Series(names.cat.categories.astype(str))
        hit = cats.str.contains(rx, case=False, regex=True).to_numpy()
        codes = names.cat.codes.to_numpy()
        return np.where(codes >= 0, hit[np.maximum(codes, 0)] if len(hit) else False, False)
    return names.astype(str).str.contains(rx, case=False, regex=True).fillna(False).to_numpy()


def _api_of(ops: pd.DataFrame, api: pd.DataFrame) -> pd.DataFrame:
    """For each GPU op: the runtime call with its correlation id in its process (name, tid, start, end);
    NaN/NA where there is none."""
    cols = ["api_name", "api_tid", "api_start_ns", "api_end_ns"]
    if ops.empty or api.empty:
        return pd.DataFrame({c: pd.Series([pd.NA] * len(ops), dtype="object") for c in cols}, index=ops.index)
    a = api.dropna(subset=["correlation_id"]).drop_duplicates(["pid", "correlation_id"])
    key = pd.MultiIndex.from_arrays([a["pid"].to_numpy(), a["correlation_id"].to_numpy(np.int64)])
    okey = pd.MultiIndex.from_arrays([ops["pid"].to_numpy(),
                                      ops["correlation_id"].fillna(-1).to_numpy(np.int64)])
    idx = key.get_indexer(okey)
    ok = idx >= 0
    take = np.maximum(idx, 0)
    out = pd.DataFrame(index=ops.index)
    out["api_name"] = np.where(ok, a["name"].astype(object).to_numpy()[take] if len(a) else None, None)
    out["api_tid"] = pd.array(np.where(ok, a["tid"].to_numpy()[take] if len(a) else 0, 0), dtype="Int64")
    out.loc[~ok, "api_tid"] = pd.NA
    out["api_start_ns"] = pd.array(np.where(ok, a["start_ns"].to_numpy()[take] if len(a) else 0, 0), dtype="Int64")
    out.loc[~ok, "api_start_ns"] = pd.NA
    out["api_end_ns"] = pd.array(np.where(ok, a["end_ns"].to_numpy()[take] if len(a) else 0, 0), dtype="Int64")
    out.loc[~ok, "api_end_ns"] = pd.NA
    return out


def _evidence(df: pd.DataFrame, name, extra: dict | None = None) -> pd.DataFrame:
    """Common evidence columns: start_ns, end_ns, duration_ns, name, pid, tid, device_id, stream_id (+ extra)."""
    n = len(df)
    out = pd.DataFrame({
        "start_ns": df["start_ns"].to_numpy(np.int64),
        "end_ns": pd.to_numeric(df["end_ns"]).to_numpy(np.int64),
    })
    out["duration_ns"] = out["end_ns"] - out["start_ns"]
    if isinstance(name, pd.Series):
        name = name.to_numpy()
    out["name"] = pd.Series(name if isinstance(name, (np.ndarray, list)) else [name] * n, dtype=object).astype(str)
    for c in ("pid", "tid", "device_id", "stream_id"):
        src = df[c] if c in df else None
        out[c] = pd.array(src.to_numpy() if src is not None else [pd.NA] * n, dtype="Int64")
    for k, v in (extra or {}).items():
        out[k] = v.to_numpy() if isinstance(v, pd.Series) else v
    return out.reset_index(drop=True)


def _where(ev: pd.DataFrame, share: float = 0.8) -> str:
    """' 3 of them take 97% of that time, in NVTX ranges step 0, step 2, step 4.': the few events that matter."""
    if ev.empty or ev["duration_ns"].sum() <= 0:
        return ""
    d = ev.sort_values("duration_ns", ascending=False, kind="stable")
    cum = d["duration_ns"].cumsum() / d["duration_ns"].sum()
    top = d.iloc[: int(np.searchsorted(cum.to_numpy(), share) + 1)]
    pct = top["duration_ns"].sum() * 100.0 / d["duration_ns"].sum()
    top = top.sort_values("start_ns", kind="stable")
    ranges = [r for r in dict.fromkeys(top.get("nvtx_range", pd.Series(dtype=object)).dropna())][:6]
    where = f", in NVTX range{'s' if len(ranges) > 1 else ''} {', '.join(map(str, ranges))}" if ranges else ""
    if len(top) == len(d):
        return f" All {len(d)} take their time{where}." if where else ""
    return f" {len(top)} of them take {pct:.0f}% of that time{where}."


class _Enclosing:
    """The innermost user NVTX range (our own cell range excluded) open on a thread at a time, for many events."""

    def __init__(self, report):
        nv = report.nvtx
        nv = nv[(nv["kind"].astype(str) != "mark")] if len(nv) else nv
        if len(nv):
            nv = nv[~nv["domain"].astype(str).eq(CAPTURE_DOMAIN).to_numpy()]
        self.threads = {}
        for (pid, tid), g in nv.groupby(["pid", "tid"], sort=False):
            g = g.sort_values(["start_ns", "duration_ns"], ascending=[True, False], kind="stable")
            s = g["start_ns"].to_numpy(np.int64)
            e = pd.to_numeric(g["end_ns"], errors="coerce").fillna(np.iinfo(np.int64).max).to_numpy(np.int64)
            parent = np.full(len(s), -1, np.int64)
            stack: list[int] = []
            for i in range(len(s)):  # once per NVTX range of the thread
                while stack and e[stack[-1]] <= s[i]:
                    stack.pop()
                parent[i] = stack[-1] if stack else -1
                stack.append(i)
            self.threads[(int(pid), int(tid))] = (s, e, parent, g["label"].astype(str).to_numpy(object))

    def __call__(self, pid, tid, t) -> np.ndarray:
        out = np.full(len(t), None, dtype=object)
        pid = np.asarray(pid, dtype=float)
        tid = np.asarray(pd.array(tid, dtype="Int64").to_numpy(dtype=float, na_value=np.nan))
        t = np.asarray(t, np.int64)
        for (p, th), (s, e, parent, label) in self.threads.items():
            m = np.flatnonzero((pid == p) & (tid == th))
            if not len(m):
                continue
            cand = np.searchsorted(s, t[m], "right") - 1  # the latest range started before the event
            for _ in range(64):  # walk out to the enclosing range while the candidate has ended
                ended = (cand >= 0) & (e[np.maximum(cand, 0)] <= t[m])
                if not ended.any():
                    break
                cand = np.where(ended, parent[np.maximum(cand, 0)], cand)
            ok = cand >= 0
            out[m[ok]] = label[cand[ok]]
        return out


def _span(report) -> int:
    return int(getattr(report.meta, "duration_ns", 0) or 0)


# ---- twins of nsys analyze -------------------------------------------------------------------------------------

def _copies_flagged(report, api_pattern: str, keep) -> pd.DataFrame:
    m = report.memcpy
    if m.empty:
        return m
    sel = m[keep(m)]
    a = _api_of(sel, report.cuda_api)
    named = a["api_name"].notna().to_numpy()
    hit = np.zeros(len(sel), bool)
    hit[named] = _like(pd.Series(a["api_name"].to_numpy()[named], dtype=object), api_pattern)
    sel = sel.assign(api_name=a["api_name"].to_numpy(), api_tid=a["api_tid"].to_numpy(),
                     api_start_ns=a["api_start_ns"].to_numpy())
    return sel[hit]


def rule_cuda_memcpy_async(report, th) -> list[Finding]:
    """nsys cuda_memcpy_async: copies from or to pageable memory issued with cudaMemcpy*Async."""
    m = _copies_flagged(report, "cudaMemcpy%Async%",
                        lambda m: (m["src_kind"].astype(str) == "pageable") | (m["dst_kind"].astype(str) == "pageable"))
    if m.empty:
        return []
    ev = _evidence(m.assign(tid=m["api_tid"]), "memcpy " + m["kind"].astype(str),
                   {"bytes": m["bytes"], "src_kind": m["src_kind"].astype(str), "dst_kind": m["dst_kind"].astype(str),
                    "api_name": m["api_name"],
                    "nvtx_range": _Enclosing(report)(m["pid"], m["api_tid"], m["api_start_ns"].fillna(0))})
    total = int(ev["duration_ns"].sum())
    return [Finding(
        "cuda_memcpy_async", _severity(total, _span(report)),
        f"{len(ev)} asynchronous copies use pageable host memory",
        "cudaMemcpyAsync from or to pageable (not pinned) host memory is staged through a driver buffer and blocks "
        "the calling thread: the copy cannot overlap with computation, and the CPU stops queueing work while it runs."
        + _where(ev),
        "Pin the host memory and copy asynchronously. PyTorch: `DataLoader(..., pin_memory=True)` or "
        "`batch = batch.pin_memory()`, then `batch.to('cuda', non_blocking=True)`; CUDA: allocate with "
        "cudaMallocHost / cudaHostAlloc or register with cudaHostRegister.",
        total, "the flagged copies' own GPU time: pinned, they can overlap with kernels", ev, _ranges(ev))]


def rule_cuda_memcpy_sync(report, th) -> list[Finding]:
    """nsys cuda_memcpy_sync: synchronous cudaMemcpy* (not within one device, not small host-to-device)."""
    small = th["cuda_memcpy_sync.min_htod_bytes"]

    def keep(m):
        htod_small = (m["bytes"] <= small) & (m["kind"].astype(str) == "HtoD")
        same_dev = m["src_device_id"].notna() & (m["src_device_id"] == m["dst_device_id"])
        return ~(htod_small | same_dev.fillna(False)).to_numpy(bool)

    m = _copies_flagged(report, "cudaMemcpy%", keep)
    if len(m):
        m = m[~_like(m["api_name"], "%Async%")]
    if m.empty:
        return []
    ev = _evidence(m.assign(tid=m["api_tid"]), "memcpy " + m["kind"].astype(str),
                   {"bytes": m["bytes"], "src_kind": m["src_kind"].astype(str), "dst_kind": m["dst_kind"].astype(str),
                    "api_name": m["api_name"],
                    "nvtx_range": _Enclosing(report)(m["pid"], m["api_tid"], m["api_start_ns"].fillna(0))})
    total = int(ev["duration_ns"].sum())
    return [Finding(
        "cuda_memcpy_sync", _severity(total, _span(report)),
        f"{len(ev)} synchronous copies block the host",
        "cudaMemcpy (without Async) returns only when the copy is done: the CPU waits and queues no new work. In "
        "PyTorch `tensor.cpu()`, `.numpy()`, `.item()` and `.tolist()` on a GPU tensor do this." + _where(ev),
        "Copy asynchronously into pinned memory and synchronise only where the value is needed: "
        "`t.to('cpu', non_blocking=True)` + an event, or keep values on the GPU and read them once per N steps.",
        total, "the copies' GPU time, during which the host waited", ev, _ranges(ev))]


def rule_cuda_memset_sync(report, th) -> list[Finding]:
    """nsys cuda_memset_sync: cudaMemset* (not async) on pinned or managed memory."""
    s = report.memset
    if s.empty:
        return []
    sel = s[s["mem_kind"].astype(str).isin(["pinned", "managed"]).to_numpy()]
    a = _api_of(sel, report.cuda_api)
    named = a["api_name"].notna().to_numpy()
    hit = np.zeros(len(sel), bool)
    names = pd.Series(a["api_name"].to_numpy()[named], dtype=object)
    hit[named] = _like(names, "cudaMemset%") & ~_like(names, "%async%")
    sel = sel.assign(api_name=a["api_name"].to_numpy(), api_tid=a["api_tid"].to_numpy(),
                     api_start_ns=a["api_start_ns"].to_numpy())[hit]
    if sel.empty:
        return []
    ev = _evidence(sel.assign(tid=sel["api_tid"]), "memset", {
        "bytes": sel["bytes"], "mem_kind": sel["mem_kind"].astype(str), "api_name": sel["api_name"],
        "nvtx_range": _Enclosing(report)(sel["pid"], sel["api_tid"], sel["api_start_ns"].fillna(0))})
    total = int(ev["duration_ns"].sum())
    return [Finding(
        "cuda_memset_sync", _severity(total, _span(report)), f"{len(ev)} synchronous memsets on host-visible memory",
        "cudaMemset on pinned or managed memory synchronises with the host.",
        "Use cudaMemsetAsync on a stream (PyTorch: `torch.zeros(..., device='cuda')` or `t.zero_()` on a GPU "
        "tensor), or clear device memory instead of host-visible memory.",
        total, "the memsets' GPU time", ev, _ranges(ev))]


def rule_cuda_api_sync(report, th) -> list[Finding]:
    """nsys cuda_api_sync: cudaDeviceSynchronize / cudaStreamSynchronize calls."""
    a = report.cuda_api
    if a.empty:
        return []
    sel = a[_like(a["name"], "cudaDeviceSynchronize%") | _like(a["name"], "cudaStreamSynchronize%")]
    if sel.empty:
        return []
    ev = _evidence(sel, sel["name"].astype(str),
                   {"nvtx_range": _Enclosing(report)(sel["pid"], sel["tid"], sel["start_ns"])})
    total = int(ev["duration_ns"].sum())
    names = ", ".join(sorted(set(ev["name"].str.replace(r"_v\d+$", "", regex=True))))
    return [Finding(
        "cuda_api_sync", _severity(total, _span(report)), f"{len(ev)} host synchronisations ({names})",
        "These calls block the CPU until the GPU has finished the queued work, so the CPU cannot queue the next "
        "kernels while the GPU runs. In PyTorch, `.item()`, `.cpu()`, `print(tensor)`, `torch.cuda.synchronize()` "
        "and data-dependent shapes (`nonzero`, boolean masks) synchronise." + _where(ev),
        "Remove synchronisations from the loop: accumulate metrics on the GPU and read them every N steps, use "
        "`non_blocking=True` copies, and `torch.cuda.set_sync_debug_mode('warn')` to find hidden ones.",
        total, "the time the host spent blocked in these calls", ev, _ranges(ev))]


def _gpu_ops_with_overhead(report) -> pd.DataFrame:
    """Kernels, copies and memsets (start > 0) plus nsys's CUDA overhead inside each (process, GPU) range: the
    operations nsys analyze's GPU rules look at."""
    parts = []
    for attr in ("kernels", "memcpy", "memset"):
        f = getattr(report, attr)
        if len(f):
            parts.append(pd.DataFrame({
                "start_ns": f["start_ns"].to_numpy(np.int64), "end_ns": pd.to_numeric(f["end_ns"]).to_numpy(np.int64),
                "pid": f["pid"].to_numpy(np.int64), "device_id": f["device_id"].to_numpy(np.int64),
                "context_id": pd.array(f["context_id"], dtype="Int64"),
                "correlation_id": pd.array(f["correlation_id"], dtype="Int64"),
                "stream_id": pd.array(f["stream_id"], dtype="Int64"), "what": attr}))
    if not parts:
        return pd.DataFrame(columns=["start_ns", "end_ns", "pid", "device_id", "context_id", "correlation_id",
                                     "stream_id", "what"])
    ops = pd.concat(parts, ignore_index=True)
    ops = ops[ops["start_ns"] > 0]
    ov = getattr(report, "overhead", pd.DataFrame())
    if len(ov) and len(ops):
        names = ov["name"].astype(str)
        ov = ov[names.isin(["CUDA profiling data flush overhead", "CUDA profiling stop overhead",
                            "CUDA profiling overhead"]).to_numpy()]
        rng = ops.groupby(["device_id", "pid"]).agg(lo=("start_ns", "min"), hi=("end_ns", "max"),
                                                    ctx=("context_id", "first")).reset_index()
        extra = []
        for r in rng.itertuples():  # one per (GPU, process)
            o = ov[(ov["pid"] == r.pid) & (ov["start_ns"] > r.lo) & (ov["end_ns"] < r.hi)]
            if len(o):
                extra.append(pd.DataFrame({"start_ns": o["start_ns"].to_numpy(np.int64),
                                           "end_ns": o["end_ns"].to_numpy(np.int64), "pid": r.pid,
                                           "device_id": r.device_id, "context_id": r.ctx, "correlation_id": pd.NA,
                                           "stream_id": pd.NA, "what": "overhead"}))
        if extra:
            ops = pd.concat([ops, *extra], ignore_index=True)
    return ops.reset_index(drop=True)


def _cpu_context(report, gaps: pd.DataFrame, launch_tid: np.ndarray) -> pd.DataFrame:
    """What the launching thread did during each gap: the NVTX range, CUDA API call and OS runtime call that cover
    most of it (with the share of the gap they cover)."""
    out = {k: [None] * len(gaps) for k in ("cpu_nvtx", "cpu_cuda_api", "cpu_osrt")}
    shares = {k: [np.nan] * len(gaps) for k in ("cpu_nvtx_pct", "cpu_cuda_api_pct", "cpu_osrt_pct")}
    sources = {"cpu_nvtx": report.nvtx, "cpu_cuda_api": report.cuda_api, "cpu_osrt": report.osrt}
    prepared = {}
    for key, df in sources.items():
        if df is None or df.empty:
            continue
        d = df
        if key == "cpu_nvtx":
            d = d[d["kind"].astype(str) != "mark"]
            d = d[~d["domain"].astype(str).eq(CAPTURE_DOMAIN).to_numpy()]  # our own cell range says nothing
        end = pd.to_numeric(d["end_ns"], errors="coerce").fillna(np.iinfo(np.int64).max).to_numpy(np.int64)
        label = d["label"] if key == "cpu_nvtx" else d["name"]
        prepared[key] = (d["pid"].to_numpy(), d["tid"].to_numpy(), d["start_ns"].to_numpy(np.int64), end,
                         label.astype(object).to_numpy())
    for i, g in enumerate(gaps.itertuples()):  # gaps are few (>= 500 ms each by default)
        tid = launch_tid[i]
        for key, (pid, tids, s, e, label) in prepared.items():
            m = (pid == g.pid) & (s < g.end_ns) & (e > g.start_ns)
            if tid is not None and not pd.isna(tid):
                m &= tids == tid
            if not m.any():
                continue
            cover = np.minimum(e[m], g.end_ns) - np.maximum(s[m], g.start_ns)
            j = int(np.argmax(cover))
            out[key][i] = str(label[m][j])
            shares[key + "_pct"][i] = round(100.0 * cover[j] / max(g.end_ns - g.start_ns, 1), 1)
    return pd.DataFrame({**out, **shares})


def rule_gpu_gaps(report, th) -> list[Finding]:
    """nsys gpu_gaps: a GPU idle for at least gap_ms between its first and last operation (per process)."""
    thr = th["gpu_gaps.gap_ms"] * 1e6
    ops = _gpu_ops_with_overhead(report)
    rows = []
    for (pid, dev), g in ops.groupby(["pid", "device_id"], sort=True):
        s = np.sort(g["start_ns"].to_numpy(np.int64), kind="stable")
        order_e = np.argsort(g["end_ns"].to_numpy(np.int64), kind="stable")
        e = g["end_ns"].to_numpy(np.int64)[order_e]
        gap = s[1:] - e[:-1]
        hit = np.flatnonzero((gap > thr) & (e[:-1] < s[1:]))
        if not len(hit):
            continue
        ctx = g["context_id"].to_numpy()[order_e]
        nxt = g.sort_values("start_ns", kind="stable")
        for i in hit:
            after = nxt.iloc[i + 1]
            rows.append({"start_ns": int(e[i]), "end_ns": int(s[i + 1]), "pid": int(pid), "device_id": int(dev),
                         "context_id": ctx[i], "next_corr": after["correlation_id"]})
    if not rows:
        return []
    gaps = pd.DataFrame(rows).sort_values(["start_ns"]).reset_index(drop=True)
    # the thread that launched the work after each gap: it was the one not feeding the GPU
    api = report.cuda_api
    launch = np.full(len(gaps), None, dtype=object)
    if len(api):
        probe = gaps.assign(correlation_id=pd.array(gaps["next_corr"], dtype="Int64"))
        launch = _api_of(probe, api)["api_tid"].to_numpy(dtype=object)
    ctx = _cpu_context(report, gaps, launch)
    ev = _evidence(gaps.assign(tid=pd.array(launch, dtype="Int64")), "GPU idle",
                   {"context_id": gaps["context_id"], **{c: ctx[c] for c in ctx}})
    total = int(ev["duration_ns"].sum())
    worst = ev.loc[ev["duration_ns"].idxmax()]
    doing = "; ".join(f"{w}: {worst[k]}" for k, w in (("cpu_nvtx", "NVTX range"), ("cpu_cuda_api", "CUDA API"),
                                                       ("cpu_osrt", "OS call")) if worst[k])
    return [Finding(
        "gpu_gaps", _severity(total, _span(report)),
        f"GPU idle {len(ev)} time(s) for {th['gpu_gaps.gap_ms']:g} ms or more",
        "Between its first and last operation the GPU ran nothing for these stretches: the work that feeds it "
        "(data loading, Python, host synchronisation) was on the critical path"
        + (f". During the longest gap the launching thread was in {doing}." if doing else "."),
        "Find what the CPU does during the gaps (the cpu_* columns of the evidence): overlap data loading with "
        "compute (DataLoader num_workers, prefetch), remove host synchronisations, or queue work ahead "
        "(CUDA graphs, larger batches).",
        total, "the idle time itself", ev, _ranges(ev))]


def rule_gpu_time_util(report, th) -> list[Finding]:
    """nsys gpu_time_util: stretches of `chunks` equal chunks per (process, GPU) with average use < threshold."""
    n_chunks = int(th["gpu_time_util.chunks"])
    thr = th["gpu_time_util.threshold_pct"]
    ops = _gpu_ops_with_overhead(report)
    rows = []
    for (pid, dev), g in ops.groupby(["pid", "device_id"], sort=True):
        s, e = g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)
        lo, hi = int(s.min()), int(e.max())
        size = float(np.ceil((hi - lo) / n_chunks))
        ctx = g["context_id"].iloc[0]
        chunk_ids, starts, ends, pcts = [], [], [], []
        for k in range(n_chunks):
            cs, ce = k * size + lo, min(k * size + lo + size, hi)
            if not cs < ce:
                continue
            m = (s < ce) & (e > cs)  # overlaps summed, as nsys does (concurrent work can exceed 100%)
            used = float(np.sum(np.minimum(e[m], ce) - np.maximum(s[m], cs)))
            pct = used / (ce - cs) * 100
            if pct < thr:
                chunk_ids.append(k), starts.append(cs), ends.append(ce), pcts.append(pct)
        if not chunk_ids:
            continue
        ids = np.array(chunk_ids)
        group = ids - np.arange(len(ids))  # consecutive chunks share a group
        for gid in np.unique(group):
            m = group == gid
            st, en, pc = np.array(starts)[m], np.array(ends)[m], np.array(pcts)[m]
            sz = en - st
            rows.append({"start_ns": int(st.min()), "end_ns": int(en.max()), "pid": int(pid), "device_id": int(dev),
                         "context_id": ctx, "in_use_pct": round(float(np.sum(sz * pc) / np.sum(sz)), 1)})
    if not rows:
        return []
    low = pd.DataFrame(rows).sort_values("start_ns").reset_index(drop=True)
    ev = _evidence(low, "low GPU utilization", {"context_id": low["context_id"], "in_use_pct": low["in_use_pct"]})
    idle = int(np.sum(ev["duration_ns"].to_numpy() * (1 - ev["in_use_pct"].to_numpy() / 100)))
    return [Finding(
        "gpu_time_util", _severity(idle, _span(report)),
        f"GPU used less than {thr:g}% of the time in {len(ev)} stretch(es)",
        f"The GPU's active span (first to last operation) was cut into {n_chunks} equal chunks; in these "
        f"stretches the GPU was busy less than {thr:g}% of the time.",
        "Look at the CPU threads during these stretches: start-up, data loading, evaluation or logging often run "
        "there. Overlap them with GPU work, or leave them out of the measurement.",
        idle, "the idle part of the low-utilization stretches", ev, _ranges(ev))]


# ---- ours ------------------------------------------------------------------------------------------------------

def _kernels_with_launch(report) -> pd.DataFrame:
    k = report.kernels
    if k.empty:
        return k
    a = _api_of(k, report.cuda_api)
    return k.assign(api_name=a["api_name"].to_numpy(), api_tid=a["api_tid"].to_numpy(),
                    api_ns=(a["api_end_ns"] - a["api_start_ns"]).to_numpy())


def rule_launch_bound(report, th) -> list[Finding]:
    """Many kernels shorter than the CPU call that launched them: the CPU, not the GPU, sets the pace."""
    k = _kernels_with_launch(report)
    if k.empty:
        return []
    api_ns = pd.to_numeric(pd.Series(k["api_ns"]), errors="coerce").to_numpy(float)
    tiny = (k["duration_ns"].to_numpy(float) < api_ns) & ~np.isnan(api_ns)
    n = int(tiny.sum())
    if n < th["launch_bound.min_kernels"] or n * 100.0 / len(k) < th["launch_bound.min_share_pct"]:
        return []
    t = k[tiny]
    ev = _evidence(t.assign(tid=t["api_tid"]), t["name"].astype(str),
                   {"launch_ns": api_ns[tiny].astype(np.int64), "api_name": t["api_name"]})
    at_stake = int((ev["launch_ns"] - ev["duration_ns"]).clip(lower=0).sum())
    top = ev["name"].value_counts().head(3)
    return [Finding(
        "launch_bound", _severity(at_stake, _span(report)),
        f"{n} of {len(k)} kernels ({n * 100 / len(k):.0f}%) are shorter than their launch",
        "Each of these kernels runs for less time than the CPU takes to launch it "
        f"(median kernel {ev['duration_ns'].median() / 1e3:.1f} us, median launch {ev['launch_ns'].median() / 1e3:.1f} us): "
        "the GPU waits for the CPU. Most frequent: " + "; ".join(f"{c} x {nm[:60]}" for nm, c in top.items()) + ".",
        "Launch fewer, larger kernels: fuse elementwise operations (`torch.compile`), capture the step in a CUDA "
        "graph (`torch.compile(mode='reduce-overhead')` or `torch.cuda.CUDAGraph`), use larger batches, or keep "
        "small scalar work on the CPU.",
        at_stake, "the launch time beyond each kernel's own run time (what a CUDA graph or fusion removes)", ev,
        _ranges(ev))]


TRANSPOSE_RX = r"(?i)(?:nchw_?to_?nhwc|nhwc_?to_?nchw|nchw2nhwc|nhwc2nchw)"


def rule_layout_transpose(report, th) -> list[Finding]:
    """NCHW <-> NHWC transposes (cuDNN converting the memory layout around convolutions)."""
    k = report.kernels
    if k.empty:
        return []
    hit = k["name"].astype(str).str.contains(TRANSPOSE_RX, regex=True).to_numpy()
    total_gpu = k["duration_ns"].sum()
    t = k[hit]
    if t.empty or t["duration_ns"].sum() * 100.0 / max(total_gpu, 1) < th["layout_transpose.min_gpu_pct"]:
        return []
    ev = _evidence(t, t["name"].astype(str))
    total = int(ev["duration_ns"].sum())
    return [Finding(
        "layout_transpose", _severity(total, _span(report)),
        f"{len(ev)} layout transposes take {total * 100 / total_gpu:.1f}% of kernel time",
        "Kernels converting tensors between NCHW and NHWC ran around the convolutions: the model's tensors are in "
        "one layout and the fastest convolution kernels (Tensor Cores) want the other.",
        "Keep the whole network in channels_last: `model = model.to(memory_format=torch.channels_last)` and "
        "`x = x.to(memory_format=torch.channels_last)` (with AMP for fp16/bf16 Tensor Core kernels).",
        total, "the transposes' own GPU time", ev, _ranges(ev))]


def rule_undersized_launch(report, th) -> list[Finding]:
    """Kernels launched with fewer blocks than the GPU has SMs: most SMs idle while they run."""
    k = report.kernels
    g = report.gpus
    if k.empty or g.empty or g["sm_count"].isna().all():
        return []
    sms = dict(zip(g["id"].to_numpy(), pd.to_numeric(g["sm_count"], errors="coerce").to_numpy()))
    dev_sms = k["device_id"].map(sms).to_numpy(float)
    blocks = (k["grid_x"] * k["grid_y"] * k["grid_z"]).to_numpy(float)
    small = ~np.isnan(dev_sms) & (blocks < dev_sms)
    total_gpu = k["duration_ns"].sum()
    t = k[small]
    idle_ns = t["duration_ns"].to_numpy(float) * (1 - blocks[small] / dev_sms[small])
    # 128 blocks on 132 SMs cost little; 16 blocks cost most of the GPU: judge by the SM time left idle
    if t.empty or idle_ns.sum() * 100.0 / max(total_gpu, 1) < th["undersized_launch.min_idle_pct"]:
        return []
    ev = _evidence(t, t["name"].astype(str), {"blocks": blocks[small].astype(np.int64),
                                              "threads_per_block": (t["block_x"] * t["block_y"] * t["block_z"]),
                                              "sm_count": dev_sms[small].astype(np.int64),
                                              "idle_sm_ns": idle_ns.astype(np.int64)})
    idle = int(idle_ns.sum())
    worst = ev.groupby("name")["idle_sm_ns"].sum().sort_values(ascending=False)
    w = ev[ev["name"] == worst.index[0]].iloc[0]
    return [Finding(
        "undersized_launch", _severity(idle, _span(report)),
        f"{len(ev)} kernels use fewer blocks than the GPU's {int(w['sm_count'])} SMs",
        f"These kernels run with too few thread blocks to fill the GPU, leaving SMs idle for "
        f"{idle * 100 / total_gpu:.0f}% of the kernel time; the worst, {worst.index[0][:80]}, runs "
        f"{int(w['blocks'])} blocks of {int(w['threads_per_block'])} threads on {int(w['sm_count'])} SMs.",
        "Give the GPU more parallel work: larger batches, fuse small operations, or (own kernels) more blocks "
        "with fewer threads each / a grid-stride loop sized to a multiple of the SM count.",
        idle, "kernel time x the fraction of SMs left without a block", ev, _ranges(ev))]


def rule_serialized_copy(report, th) -> list[Finding]:
    """Host<->device copies on a stream that also runs the kernels, between two of its kernels: no overlap."""
    m, k = report.memcpy, report.kernels
    if m.empty or k.empty:
        return []
    hd = m[m["kind"].astype(str).isin(["HtoD", "DtoH"]).to_numpy()]
    rows = []
    for (dev, stream), c in hd.groupby(["device_id", "stream_id"], sort=False):
        ks = k[(k["device_id"] == dev) & (k["stream_id"] == stream)]
        if ks.empty:
            continue
        ks_start = np.sort(ks["start_ns"].to_numpy(np.int64))
        ks_end = np.sort(pd.to_numeric(ks["end_ns"]).to_numpy(np.int64))
        cs = c["start_ns"].to_numpy(np.int64)
        ce = pd.to_numeric(c["end_ns"]).to_numpy(np.int64)
        before = np.searchsorted(ks_end, cs, "right") > 0          # a kernel of the stream ended before it
        after = np.searchsorted(ks_start, ce, "left") < len(ks_start)  # and one starts after it
        rows.append(c[before & after])
    t = pd.concat(rows) if rows else hd.iloc[0:0]
    if t.empty or t["duration_ns"].sum() < th["serialized_copy.min_copy_ms"] * 1e6:
        return []
    ev = _evidence(t, "memcpy " + t["kind"].astype(str), {"bytes": t["bytes"]})
    total = int(ev["duration_ns"].sum())
    streams = ", ".join(str(s) for s in sorted(set(ev["stream_id"].dropna().astype(int)))[:5])
    return [Finding(
        "serialized_copy", _severity(total, _span(report)),
        f"{len(ev)} copies wait in line with the kernels of stream {streams}",
        "These host<->device copies ran on the same stream as the computation, between its kernels: a stream "
        "runs one thing after another, so the copy engine and the SMs took turns instead of working at once.",
        "Copy on a side stream and wait with an event: `s = torch.cuda.Stream()`; `with torch.cuda.stream(s): "
        "nxt = batch.to('cuda', non_blocking=True)`; `torch.cuda.current_stream().wait_stream(s)` (pinned memory "
        "needed), i.e. prefetch the next batch while this one computes.",
        total, "the copies' GPU time, which can overlap with kernels", ev, _ranges(ev))]


def rule_input_wait(report, th) -> list[Finding]:
    """The GPU idle right before each step's host-to-device copy: it waits for the next batch (data loading)."""
    ops = _gpu_ops_with_overhead(report)
    m = report.memcpy
    if m.empty or ops.empty:
        return []
    htod = m[m["kind"].astype(str) == "HtoD"]
    rows = []
    for (pid, dev), g in ops[ops["what"] != "overhead"].groupby(["pid", "device_id"]):
        g = g.sort_values("start_ns", kind="stable")
        s = g["start_ns"].to_numpy(np.int64)
        e = np.maximum.accumulate(g["end_ns"].to_numpy(np.int64))
        c = htod[(htod["pid"] == pid) & (htod["device_id"] == dev)]
        if c.empty:
            continue
        i = np.searchsorted(s, c["start_ns"].to_numpy(np.int64), "left")  # ops starting before the copy
        prev_end = np.where(i > 0, e[np.maximum(i - 1, 0)], np.iinfo(np.int64).min)
        gap = c["start_ns"].to_numpy(np.int64) - prev_end
        ok = (i > 0) & (gap > 0)
        rows.append(pd.DataFrame({"start_ns": prev_end[ok], "end_ns": c["start_ns"].to_numpy(np.int64)[ok],
                                  "pid": pid, "device_id": dev, "stream_id": c["stream_id"].to_numpy()[ok],
                                  "copy_bytes": c["bytes"].to_numpy()[ok]}))
    if not rows:
        return []
    gaps = pd.concat(rows, ignore_index=True)
    gaps = gaps[(gaps["end_ns"] - gaps["start_ns"]) >= th["input_wait.min_gap_ms"] * 1e6]
    if len(gaps) < th["input_wait.min_steps"]:
        return []
    mean = (gaps["end_ns"] - gaps["start_ns"]).median()
    ev = _evidence(gaps, "GPU waits for input", {"copy_bytes": gaps["copy_bytes"]})
    total = int(ev["duration_ns"].sum())
    return [Finding(
        "input_wait", _severity(total, _span(report)),
        f"The GPU waited {mean / 1e6:.1f} ms (median) before each of {len(ev)} host-to-device copies",
        "Before each batch arrived the GPU had nothing to do: the next batch was still being prepared on the CPU "
        "(reading, decoding, augmenting, collating) when the previous step had already finished.",
        "Prepare batches ahead: `DataLoader(..., num_workers=N, pin_memory=True, prefetch_factor=2, "
        "persistent_workers=True)` with N around the CPU cores per GPU, and copy with `non_blocking=True`; move "
        "heavy augmentation to the GPU.",
        total, "the GPU's idle time before the copies", ev, _ranges(ev))]


def rule_nccl_share(report, th) -> list[Finding]:
    """NCCL (collective communication) kernels taking a large share of GPU time."""
    k = report.kernels
    if k.empty:
        return []
    hit = k["name"].astype(str).str.contains(r"(?i)^(?:void )?nccl", regex=True).to_numpy()
    total_gpu = k["duration_ns"].sum()
    t = k[hit]
    share = t["duration_ns"].sum() * 100.0 / max(total_gpu, 1)
    if t.empty or share < th["nccl_share.min_gpu_pct"]:
        return []
    ev = _evidence(t, t["name"].astype(str))
    total = int(ev["duration_ns"].sum())
    return [Finding(
        "nccl_share", "info" if share < 30 else _severity(total, _span(report)),
        f"NCCL communication takes {share:.0f}% of kernel time",
        "Collective communication kernels (all-reduce, all-gather, ...) run for this share of the GPUs' kernel "
        "time; time spent in them waiting for the slowest rank shows up here too.",
        "Overlap communication with computation (DDP's gradient bucketing: `bucket_cap_mb`, `no_sync()` for "
        "gradient accumulation), communicate less often, compress gradients, and check for a straggler rank.",
        total, "the NCCL kernels' time, an upper bound (part of it overlaps compute)", ev, _ranges(ev))]


def rule_collective_wait(report, th) -> list[Finding]:
    """Ranks waiting in collectives for a late rank (the straggler): NCCL kernels that ran longer than the same
    collective on the rank that joined last (analysis/ranks.py)."""
    from .ranks import collective_waits

    if not hasattr(report, "ranks_by_pid"):
        return []
    w = collective_waits(report)
    if w.empty:
        return []
    total = int(w["wait_ns"].sum())
    nccl = int(w["duration_ns"].sum())
    if total < th["collective_wait.min_ms"] * 1e6 or total * 100.0 < th["collective_wait.min_share_pct"] * nccl:
        return []
    ranks = report.ranks_by_pid
    who = lambda pid: f"rank {ranks[pid][0]}" if pid in ranks else f"process {pid}"  # noqa: E731
    on = w.groupby("straggler")["wait_ns"].sum().sort_values(ascending=False)
    worst, worst_ns = int(on.index[0]), int(on.iloc[0])
    ev = w[w["wait_ns"] > 0].copy()
    ev["rank"] = ev["rank"].astype("Int64")
    ev["waits_for"] = [who(int(p)) for p in ev["straggler"]]
    ev = ev[["name", "start_ns", "end_ns", "duration_ns", "wait_ns", "pid", "rank", "collective", "waits_for"]]
    return [Finding(
        "collective_wait", _severity(total, _span(report)),
        f"Ranks wait {total / 1e6:,.1f} ms in collectives, {100.0 * worst_ns / max(total, 1):.0f}% of it for "
        f"{who(worst)}",
        f"Of {nccl / 1e6:,.1f} ms in NCCL kernels, {100.0 * total / max(nccl, 1):.0f}% is spent waiting: a collective "
        "kernel runs until the last rank joins, so its time on the other ranks beyond the shortest one is waiting "
        f"for that rank. {who(worst).capitalize()} is the one the others wait for most.",
        f"Look at {who(worst)} before its collectives (the Ranks tab and its rows in the timeline): uneven work "
        "(batch or sequence sizes per rank), slower data loading, extra work on one rank (logging, evaluation, "
        "checkpoints on rank 0), or CPU contention (set OMP_NUM_THREADS, pin ranks to cores).",
        total, "the waiting part of the NCCL kernels (duration minus the same collective's shortest)", ev,
        _ranges(ev))]


def rule_host_wait(report, th) -> list[Finding]:
    """Blocking OS calls covering a large share of a repeated NVTX range, on the range's own thread."""
    nv, os_ = report.nvtx, report.osrt
    if nv.empty or os_.empty:
        return []
    nv = nv[(nv["kind"].astype(str) != "mark") & nv["end_ns"].notna()]
    nv = nv[~nv["domain"].astype(str).eq(CAPTURE_DOMAIN).to_numpy()]
    if "nesting_level" in os_:
        os_ = os_[pd.to_numeric(os_["nesting_level"], errors="coerce").fillna(0).to_numpy() == 0]
    counts = nv["label"].astype(str).value_counts()
    repeated = counts[counts >= th["host_wait.min_ranges"]].index
    findings = []
    o_thread = (os_["pid"].to_numpy(np.int64) << 24) | os_["tid"].to_numpy(np.int64)
    o_start = os_["start_ns"].to_numpy(np.int64)
    o_end = pd.to_numeric(os_["end_ns"]).to_numpy(np.int64)
    o_name = os_["name"].astype(str).to_numpy()
    for label in repeated:
        r = nv[nv["label"].astype(str) == label]
        r_thread = (r["pid"].to_numpy(np.int64) << 24) | r["tid"].to_numpy(np.int64)
        rs, re_ = r["start_ns"].to_numpy(np.int64), pd.to_numeric(r["end_ns"]).to_numpy(np.int64)
        waited = np.zeros(len(r))
        by_call: dict[str, float] = {}
        sel_rows = []
        for i in range(len(r)):  # instances of the repeated ranges (steps): tens to thousands
            m = (o_thread == r_thread[i]) & (o_start < re_[i]) & (o_end > rs[i])
            cover = np.minimum(o_end[m], re_[i]) - np.maximum(o_start[m], rs[i])
            waited[i] = cover.sum()
            for nm, c in zip(o_name[m], cover):
                by_call[nm] = by_call.get(nm, 0) + c
            sel_rows.append(np.flatnonzero(m))
        share = waited / np.maximum(re_ - rs, 1) * 100
        hit = share >= th["host_wait.min_share_pct"]
        if hit.sum() < th["host_wait.min_ranges"]:
            continue
        idx = np.concatenate([sel_rows[i] for i in np.flatnonzero(hit)]) if hit.any() else np.empty(0, int)
        calls = os_.iloc[np.unique(idx)]
        ev = _evidence(calls, calls["name"].astype(str), {"nvtx_range": label})
        top = sorted(by_call.items(), key=lambda kv: -kv[1])[:3]
        total = int(waited[hit].sum())
        findings.append(Finding(
            "host_wait", _severity(total, _span(report)),
            f"'{label}' waits in OS calls for {share[hit].mean():.0f}% of its time ({int(hit.sum())} of {len(r)})",
            f"In {int(hit.sum())} of the {len(r)} instances of the NVTX range '{label}' its thread spent at least "
            f"{th['host_wait.min_share_pct']:g}% of the range blocked in operating-system calls, mostly "
            + ", ".join(f"{nm} ({c / 1e6:,.1f} ms)" for nm, c in top)
            + ": sleeping, waiting for I/O, a lock, or another process or thread (DataLoader workers).",
            "Find what it waits for: data loading (more DataLoader workers, prefetching, faster storage), a lock "
            "shared with another thread, or an explicit sleep or poll in the loop.",
            total, "the blocked time inside the flagged instances", ev, _ranges(ev)))
    return findings


def rule_nvtx_other_thread(report, th) -> list[Finding]:
    """A note, not a problem: NVTX ranges whose GPU work was launched by another thread (autograd's backward runs
    on its own thread), so their GPU projection is near zero although the GPU was busy."""
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
    ev = _evidence(df, df["name"], {"kernels_by_other_threads": df["kernels_by_other_threads"],
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
        0, "a note: nothing to save", ev, _ranges(ev))]


NSYS_RULES = {
    "cuda_memcpy_async": rule_cuda_memcpy_async,
    "cuda_memcpy_sync": rule_cuda_memcpy_sync,
    "cuda_memset_sync": rule_cuda_memset_sync,
    "cuda_api_sync": rule_cuda_api_sync,
    "gpu_gaps": rule_gpu_gaps,
    "gpu_time_util": rule_gpu_time_util,
    "launch_bound": rule_launch_bound,
    "layout_transpose": rule_layout_transpose,
    "undersized_launch": rule_undersized_launch,
    "serialized_copy": rule_serialized_copy,
    "input_wait": rule_input_wait,
    "nccl_share": rule_nccl_share,
    "collective_wait": rule_collective_wait,
    "host_wait": rule_host_wait,
    "nvtx_other_thread": rule_nvtx_other_thread,
}
# nsys analyze's names for its rules: 2023+ / 2022.4
NSYS_ANALYZE_NAMES = {
    "cuda_memcpy_async": "cuda-async-memcpy", "cuda_memcpy_sync": "cuda-sync-memcpy",
    "cuda_memset_sync": "cuda-sync-memset", "cuda_api_sync": "cuda-sync-api", "gpu_gaps": "gpu-starv",
    "gpu_time_util": "gpu-low-util",
}


def sort_findings(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-f.time_at_stake_ns, SEVERITY_ORDER.get(f.severity, 9), f.rule))


def nsys_findings(report, thresholds: dict | None = None, rules=None) -> list[Finding]:
    """Every rule (or those named in `rules`) over an NsysReport, sorted by time at stake."""
    th = T.resolve(thresholds)
    out = []
    for name, fn in NSYS_RULES.items():
        if rules is None or name in rules:
            out += fn(report, th)
    return sort_findings(out)
