"""Several processes in one report (torchrun ranks): NCCL collectives, a per-rank table and the straggler.

NCCL shows up as kernels (`ncclDevKernel_AllReduce_Sum_f32_RING_LL`, `ncclKernel_SendRecv_...`): the collective
is in the name.  A collective kernel runs until every rank has joined, so for the k-th collective of each rank the
rank with the shortest kernel came last: the others waited (their duration minus the shortest) for it.  That is
the straggler; per step (the k-th instance of the step's NVTX range on each rank) the straggler is the rank whose
collectives the others waited on longest.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

_NCCL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+?)(?:_|\(|$)")
COLLECTIVES = {"AllReduce": "all-reduce", "AllGather": "all-gather", "ReduceScatter": "reduce-scatter",
               "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": "send/recv", "Send": "send/recv",
               "Recv": "send/recv", "AllToAll": "all-to-all", "Generic": "nccl (generic)"}
_STEP = re.compile(r"step|iter", re.IGNORECASE)


def nccl_collective(names) -> np.ndarray:
    """The collective of each kernel name ('all-reduce', 'send/recv', ...), None for kernels that are not NCCL's.
    Newer NCCL names every collective kernel ncclDevKernel_Generic: 'nccl (generic)'."""
    codes, uniq = pd.factorize(pd.Series(np.asarray(names, dtype=object)).astype(str))
    kinds = np.empty(len(uniq), dtype=object)
    for i, n in enumerate(uniq):  # once per distinct name
        m = _NCCL.match(n)
        kinds[i] = (COLLECTIVES.get(m.group(1), m.group(1).lower()) if m else
                    "nccl (other)" if n.startswith("nccl") else None)
    return kinds[codes] if len(codes) else np.empty(0, dtype=object)


def _owners(report) -> pd.DataFrame:
    """pid -> rank (or NA) and a label, for processes with GPU work or NVTX ranges (the ones a table lists)."""
    pr = report.processes
    ranks = pr["rank"]
    active = pr[ranks.notna() | pr["devices"].map(len).gt(0)].copy()
    active["label"] = [f"rank {int(r)}" if pd.notna(r) else f"pid {p}" for p, r in zip(active["pid"], active["rank"])]
    return active.sort_values(["rank", "pid"], na_position="last").reset_index(drop=True)


def nccl_kernels(report) -> pd.DataFrame:
    """NCCL kernels: pid, rank, device_id, start_ns, end_ns, duration_ns, collective, name, and `seq` (the
    kernel's number among its process's NCCL kernels: the k-th collective of each rank is the same one)."""
    k = report.kernels
    cols = ["pid", "rank", "device_id", "start_ns", "end_ns", "duration_ns", "collective", "name", "seq"]
    if k.empty:
        return pd.DataFrame({c: [] for c in cols})
    coll = nccl_collective(k["name"])
    sel = pd.notna(coll)
    out = k.loc[sel, ["pid", "device_id", "start_ns", "end_ns", "duration_ns", "name"]].copy()
    out["collective"] = coll[sel]
    ranks = report.ranks_by_pid
    out["rank"] = pd.array([ranks.get(int(p), (None, None))[0] for p in out["pid"]], dtype="Int64")
    out = out.sort_values(["pid", "start_ns"], kind="stable")
    out["seq"] = out.groupby("pid").cumcount()
    return out[cols].reset_index(drop=True)


def collective_waits(report, nccl: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per NCCL kernel: wait_ns = its duration minus the shortest of the same collective (same seq) on the other
    processes; straggler = the pid that came last (shortest kernel).  Only collectives every process ran."""
    n = nccl_kernels(report) if nccl is None else nccl
    if n.empty or n["pid"].nunique() < 2:
        return n.assign(wait_ns=pd.Series([], dtype="int64"), straggler=pd.Series([], dtype="int64")).iloc[:0]
    procs = n["pid"].nunique()
    full = n.groupby("seq")["pid"].transform("nunique") == procs
    n = n[full].copy()
    shortest = n.groupby("seq")["duration_ns"].transform("min")
    n["wait_ns"] = (n["duration_ns"] - shortest).astype(np.int64)
    last = n.loc[n.groupby("seq")["duration_ns"].idxmin(), ["seq", "pid"]].set_index("seq")["pid"]
    n["straggler"] = n["seq"].map(last).astype(np.int64)
    return n.reset_index(drop=True)


def step_name(report) -> str | None:
    """The NVTX range that marks steps, as a name pattern (digits as '#': 'step 0', 'step 1' are one step): a user
    range named like 'step'/'iter' seen at least twice on each process, else the most repeated outermost user range
    whose instances cover at least a third of the capture (so that repeated small ranges, such as PyTorch's
    per-operator ones, are not taken for steps); None without such a range."""
    nv = report.nvtx
    if nv.empty:
        return None
    ours = nv["domain"].astype("string").fillna("").eq("nsight-magic")
    rng = nv[(nv["kind"] != "mark") & ~ours & nv["end_ns"].notna()]
    if rng.empty:
        return None
    stem = rng["label"].astype(str).str.replace(r"\d+", "#", regex=True)
    per_pid = stem.groupby([stem, rng["pid"]]).size().groupby(level=0).min()
    stems = per_pid[per_pid >= 2]
    named = [s for s in stems.index if _STEP.search(s)]
    if named:
        return max(named, key=lambda s: stems[s])
    span = max(report.time_span.duration_ns, 1)
    dur = (rng["end_ns"].astype(np.int64) - rng["start_ns"]).groupby([stem, rng["pid"]]).sum().groupby(level=0).min()
    depth = rng.groupby(stem)["depth"].min()
    cand = [s for s in stems.index if depth[s] == depth.min() and dur[s] >= span / 3]
    return max(cand, key=lambda s: stems[s]) if cand else None


def _steps(report, name: str | None) -> pd.DataFrame:
    """The step ranges: pid, step (k-th on its process), start_ns, end_ns."""
    if name is None:
        return pd.DataFrame({"pid": [], "step": [], "start_ns": [], "end_ns": []})
    nv = report.nvtx
    stem = nv["label"].astype(str).str.replace(r"\d+", "#", regex=True)
    s = nv[(stem == name) & (nv["kind"] != "mark") & nv["end_ns"].notna()]
    s = s.sort_values(["pid", "start_ns"], kind="stable")[["pid", "start_ns", "end_ns"]].copy()
    s["end_ns"] = s["end_ns"].astype(np.int64)
    s["step"] = s.groupby("pid").cumcount()
    return s.reset_index(drop=True)


def ranks_table(report) -> pd.DataFrame:
    """One row per rank (or per process with GPU work when ranks are unknown): devices, gpu_busy_pct (of the
    capture), compute_ns (non-NCCL kernels), nccl_ns, wait_ns (time its collectives waited for a later rank),
    others_wait_ns (time the other ranks' collectives waited for this one), straggler_steps (steps where the others
    waited for it most), steps and step_med_ns (the step range's median).  GPU columns are NA for a process
    without kernels."""
    from ..readers.nsys_summary import busy_fraction

    owners = _owners(report)
    cols = ["rank", "pid", "label", "devices", "gpu_busy_pct", "compute_ns", "nccl_ns", "wait_ns",
            "others_wait_ns", "straggler_steps", "steps", "step_med_ns", "step_name"]
    if owners.empty:
        return pd.DataFrame({c: [] for c in cols})
    k = report.kernels
    nccl = nccl_kernels(report)
    waits = collective_waits(report, nccl)
    name = step_name(report)
    steps = _steps(report, name)
    strag = stragglers_by_step(report, waits, steps)
    span = report.time_span
    gpu_parts = [f[["pid", "start_ns", "end_ns"]] for f in (k, report.memcpy, report.memset) if not f.empty]
    gpu = pd.concat(gpu_parts) if gpu_parts else pd.DataFrame({"pid": [], "start_ns": [], "end_ns": []})
    rows = []
    for o in owners.itertuples():
        mine = gpu[gpu["pid"] == o.pid]
        busy = np.nan
        if len(mine) and span.duration_ns > 0:
            busy = 100.0 * busy_fraction(mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64),
                                         np.array([span.start_ns, span.end_ns], np.int64))[0]
        kmine = k[k["pid"] == o.pid] if not k.empty else k
        kn = kmine["duration_ns"].sum() if len(kmine) else np.nan
        nn = nccl[nccl["pid"] == o.pid]["duration_ns"].sum() if len(kmine) and not nccl.empty else (
            0 if len(kmine) else np.nan)
        wt = waits[waits["pid"] == o.pid]["wait_ns"].sum() if not waits.empty else np.nan
        others = waits[(waits["straggler"] == o.pid) & (waits["pid"] != o.pid)]["wait_ns"].sum() \
            if not waits.empty else np.nan
        st = steps[steps["pid"] == o.pid]
        rows.append({
            "rank": o.rank, "pid": o.pid, "label": o.label, "devices": o.devices, "gpu_busy_pct": busy,
            "compute_ns": kn - nn, "nccl_ns": nn, "wait_ns": wt, "others_wait_ns": others,
            "straggler_steps": int((strag["straggler"] == o.pid).sum()) if not strag.empty else 0,
            "steps": len(st), "step_med_ns": float(np.median(st["end_ns"] - st["start_ns"])) if len(st) else np.nan,
            "step_name": name})
    out = pd.DataFrame(rows, columns=cols)
    out["rank"] = out["rank"].astype("Int64")
    return out


def stragglers_by_step(report, waits: pd.DataFrame | None = None, steps: pd.DataFrame | None = None
                       ) -> pd.DataFrame:
    """Per step: the pid (and rank) the others waited for most, and how long they waited in total (wait_ns).
    A collective belongs to the last step range of its process that started before the kernel (GPU work runs
    after its launch, so the CPU may already be in the next step: an approximation)."""
    waits = collective_waits(report) if waits is None else waits
    steps = _steps(report, step_name(report)) if steps is None else steps
    cols = ["step", "straggler", "rank", "wait_ns"]
    if waits.empty or steps.empty:
        return pd.DataFrame({c: [] for c in cols})
    w = waits.copy()
    w["step"] = -1
    for pid, st in steps.groupby("pid"):
        m = (w["pid"] == pid).to_numpy()
        starts = st["start_ns"].to_numpy(np.int64)
        idx = np.searchsorted(starts, w.loc[m, "start_ns"].to_numpy(np.int64), "right") - 1
        w.loc[m, "step"] = np.where(idx >= 0, st["step"].to_numpy()[np.maximum(idx, 0)], -1)
    w = w[w["step"] >= 0]
    if w.empty:
        return pd.DataFrame({c: [] for c in cols})
    # per step, the time the others waited on each straggler's late arrivals
    by = w.groupby(["step", "straggler"])["wait_ns"].sum().reset_index()
    best = by.loc[by.groupby("step")["wait_ns"].idxmax()].rename(columns={})
    ranks = report.ranks_by_pid
    best["rank"] = pd.array([ranks.get(int(p), (None, None))[0] for p in best["straggler"]], dtype="Int64")
    return best[cols].reset_index(drop=True)


def nccl_summary(report, by: str = "rank") -> pd.DataFrame:
    """Time per collective per rank (by='rank', or 'process'/'device'): count, total_ns, wait_ns."""
    n = collective_waits(report)
    if n.empty:
        n = nccl_kernels(report).assign(wait_ns=np.nan)
    key = {"rank": "rank", "process": "pid", "device": "device_id"}[by]
    if n.empty:
        return pd.DataFrame({key: [], "collective": [], "count": [], "total_ns": [], "wait_ns": []})
    g = n.groupby([key, "collective"], dropna=False).agg(count=("duration_ns", "size"),
                                                         total_ns=("duration_ns", "sum"),
                                                         wait_ns=("wait_ns", "sum"))
    return g.reset_index().sort_values([key, "total_ns"], ascending=[True, False]).reset_index(drop=True)
