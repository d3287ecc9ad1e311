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

from . import text as tx
from .steps import find_steps
from ..readers.contract import NsysFrames

_NCCL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+?)(?:_|\(|$)")
COLLECTIVES = {"AllReduce": "all-reduce", "AllGather": "all-gather", "ReduceScatter": "reduce-scatter",
               "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": "send/recv", "Send": "send/recv",
               "Recv": "send/recv", "AllToAll": "all-to-all", "Generic": "nccl (generic)"}


def nccl_collective(names: tx.Column) -> np.ndarray:
    """The collective of each kernel name ('all-reduce', 'send/recv', ...), None for kernels that are not NCCL's.
    Newer NCCL names every collective kernel ncclDevKernel_Generic: 'nccl (generic)'."""
    codes, uniq = pd.factorize(pd.Series(names))  # a categorical's codes: no text per row
    kinds = np.full(len(uniq) + 1, None, dtype=object)  # the last for missing names (code -1)
    for i, n in enumerate(map(str, uniq)):  # once per distinct name
        m = _NCCL.match(n)
        kinds[i] = (COLLECTIVES.get(m.group(1), m.group(1).lower()) if m else
                    "nccl (other)" if n.startswith("nccl") else None)
    return kinds[codes] if len(codes) else np.empty(0, dtype=object)


def rank_owners(report: NsysFrames) -> pd.DataFrame:
    """pid -> rank (or NA) and a label, for processes with GPU work or NVTX ranges (the ones a table lists)."""
    pr = report.processes
    ranks = pr["rank"]
    active = pr[ranks.notna() | pr["devices"].map(len).gt(0)].copy()
    active["label"] = [f"rank {int(r)}" if pd.notna(r) else f"pid {p}" for p, r in zip(active["pid"], active["rank"])]
    return active.sort_values(["rank", "pid"], na_position="last").reset_index(drop=True)


def nccl_kernels(report: NsysFrames) -> pd.DataFrame:
    """NCCL kernels: pid, rank, device_id, start_ns, end_ns, duration_ns, collective, name, `seq` (the kernel's
    number among its process's NCCL kernels: the k-th collective of each rank is the same one), correlation_id."""
    cols = ["pid", "rank", "device_id", "start_ns", "end_ns", "duration_ns", "collective", "name", "seq",
            "correlation_id"]
    # the columns that find them, not the whole frame
    k = report.columns("kernels", ["pid", "device_id", "start_ns", "end_ns", "duration_ns", "name",
                                   "correlation_id"])
    if k.empty:
        return pd.DataFrame({c: [] for c in cols})
    coll = nccl_collective(k["name"])
    sel = np.asarray(pd.notna(coll))
    out = k[sel].copy()
    out["collective"] = coll[sel]
    ranks = report.ranks_by_pid
    out["rank"] = pd.array([ranks.get(int(p), (None, None))[0] for p in out["pid"]], dtype="Int64")
    out = out.sort_values(["pid", "start_ns"], kind="stable")
    out["seq"] = out.groupby("pid").cumcount()
    return out[cols].reset_index(drop=True)


def collective_waits(report: NsysFrames, nccl: pd.DataFrame | None = None) -> pd.DataFrame:
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


def arrivals(report: NsysFrames, nccl: pd.DataFrame) -> pd.DataFrame:
    """What each process's GPU did before joining each collective (rows of nccl_kernels or collective_waits):
    the stretch from its previous collective's end to this one's start (window_ns: collectives end together, so
    a later arrival is a longer stretch), the time its other kernels kept the GPU busy in it (busy_ns) and how many
    of them started in it (kernels); and how many other kernels the process ran in all (rank_kernels).  A straggler
    with the same kernels but more busy time has a slower GPU; more kernels is more work; more idle time is its
    host."""
    k = report.columns("kernels", ["pid", "start_ns", "end_ns", "name"])
    out = nccl.assign(window_ns=np.zeros(len(nccl), np.int64), busy_ns=np.zeros(len(nccl)),
                      kernels=np.zeros(len(nccl), np.int64), rank_kernels=np.zeros(len(nccl), np.int64))
    if k.empty or nccl.empty:
        return out
    from ..readers.nsys_summary import busy_fraction

    k = k[pd.isna(nccl_collective(k["name"]))]
    by_pid = dict(tuple(k.groupby("pid", sort=False)))
    for pid, idx in out.groupby("pid", sort=False).groups.items():
        g = out.loc[idx].sort_values("seq")
        st = g["start_ns"].to_numpy(np.int64)
        prev = np.r_[st[0], g["end_ns"].to_numpy(np.int64)[:-1]]
        a = np.minimum(prev, st)  # collectives on several streams may overlap: an empty stretch
        mine = by_pid.get(pid)
        if mine is None or st.size == 0:
            continue
        s, e = mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64)
        busy = busy_fraction(s, e, np.ravel(np.column_stack([a, st])))[0::2] * (st - a)
        ss = np.sort(s)
        out.loc[g.index, "window_ns"] = st - a
        out.loc[g.index, "busy_ns"] = busy
        out.loc[g.index, "kernels"] = np.searchsorted(ss, st) - np.searchsorted(ss, a)
        out.loc[g.index, "rank_kernels"] = len(ss)
    return out


def slower_gpu_pct(arr: pd.DataFrame, straggler: int, by: str = "pid") -> float | None:
    """How much slower (%) the straggler's GPU ran the same work before the collectives it came last to, when that
    is why it came late: last to most collectives, the same kernels as the ranks that waited (in all, 1% apart at
    most: a rank that waits runs some of the next ones during its collective, outside the stretches), its GPU busy
    longer for at least half of its lateness.  None when it ran more kernels or its GPU idled instead.  `arr`:
    arrivals() rows with `by` (pid, or rank in a job), seq, straggler, window_ns, busy_ns and rank_kernels."""
    mine = arr[arr[by] == straggler].set_index("seq")
    last = mine.index[mine["straggler"] == straggler]
    # a slower GPU comes last every time: a rank late to a few collectives was held up by something else
    if len(last) < 0.5 * arr["seq"].nunique():
        return None
    rest = arr[(arr[by] != straggler) & arr["seq"].isin(last)]
    if rest.empty:
        return None
    me = mine.loc[rest["seq"]]
    late = float((me["window_ns"].to_numpy() - rest["window_ns"].to_numpy()).sum())
    extra = float((me["busy_ns"].to_numpy() - rest["busy_ns"].to_numpy()).sum())
    mine_n, theirs_n = me["rank_kernels"].to_numpy(float), rest["rank_kernels"].to_numpy(float)
    if np.any(np.abs(mine_n - theirs_n) > 0.01 * np.maximum(theirs_n, 1)) or late <= 0 or extra < 0.5 * late:
        return None
    return 100.0 * extra / max(float(rest["busy_ns"].sum()), 1.0)


def step_name(report: NsysFrames) -> str | None:
    """The name pattern of the step ranges (digits as '#'; analysis.steps: the repeated outermost user range on the
    cell's thread, whatever its name), on the first process that has steps; None without such a range."""
    found = find_steps(report)
    return next(iter(found.values())).name if found else None


def steps_of(report: NsysFrames, name: str | None = None) -> pd.DataFrame:
    """The steps of every process (analysis.steps): pid, step (k-th on its process), start_ns, end_ns (the next
    step's start; the last step's range end)."""
    rows = []
    for pid, st in find_steps(report).items():
        a, b = st.bounds()
        rows.append(pd.DataFrame({"pid": pid, "step": np.arange(st.count), "start_ns": a, "end_ns": b}))
    if not rows:
        return pd.DataFrame({"pid": [], "step": [], "start_ns": [], "end_ns": []})
    return pd.concat(rows, ignore_index=True)


def ranks_table(report: NsysFrames) -> pd.DataFrame:
    """One row per rank (or per process with GPU work when ranks are unknown): devices, gpu_busy_pct (of the
    capture), compute_ns (non-NCCL kernels), nccl_ns, wait_ns (time its collectives waited for a later rank),
    others_wait_ns (time the other ranks' collectives waited for this one), straggler_steps (steps where the others
    waited for it most), steps and step_med_ns (the step range's median).  GPU columns are NA for a process
    without kernels."""
    from ..readers.nsys_summary import busy_fraction

    owners = rank_owners(report)
    cols = ["rank", "pid", "label", "devices", "gpu_busy_pct", "compute_ns", "nccl_ns", "wait_ns",
            "others_wait_ns", "straggler_steps", "steps", "step_med_ns", "step_name"]
    if owners.empty:
        return pd.DataFrame({c: [] for c in cols})
    k = report.kernels
    nccl = nccl_kernels(report)
    waits = collective_waits(report, nccl)
    found = find_steps(report)
    name = next(iter(found.values())).name if found else None
    steps = steps_of(report)
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


def stragglers_by_step(report: NsysFrames, waits: pd.DataFrame | None = None, steps: pd.DataFrame | None = None
                       ) -> pd.DataFrame:
    """Per step: the pid (and rank) the others waited for most in that step, and how long they waited for it
    (wait_ns).  A collective belongs to the step in which it was launched (its CUDA call, found by correlation id),
    not to the one in which it ran: a rank slow on the GPU runs its collectives while its CPU is steps ahead.  The
    k-th collective is the same one on every rank, so it is counted in the step of the rank that launched it
    last (where the others' waiting began)."""
    waits = collective_waits(report) if waits is None else waits
    steps = steps_of(report) if steps is None else steps
    cols = ["step", "straggler", "rank", "wait_ns"]
    if waits.empty or steps.empty:
        return pd.DataFrame({c: [] for c in cols})
    w = waits.copy()
    w["launch_ns"] = launch_times(report, w)
    w["step"] = -1
    for pid, st in steps.groupby("pid"):
        m = (w["pid"] == pid).to_numpy()
        starts = st["start_ns"].to_numpy(np.int64)
        idx = np.searchsorted(starts, w.loc[m, "launch_ns"].to_numpy(np.int64), "right") - 1
        w.loc[m, "step"] = np.where(idx >= 0, st["step"].to_numpy()[np.maximum(idx, 0)], -1)
    # one step per collective: that of its launch on the straggler (the rank whose arrival ended the waiting)
    own = w[w["pid"] == w["straggler"]].set_index("seq")["step"]
    w["step"] = w["seq"].map(own).fillna(w["step"]).astype(np.int64)
    w = w[(w["step"] >= 0) & (w["pid"] != w["straggler"])]
    if w.empty:
        return pd.DataFrame({c: [] for c in cols})
    by = w.groupby(["step", "straggler"])["wait_ns"].sum().reset_index()
    best = by.loc[by.groupby("step")["wait_ns"].idxmax()]
    ranks = report.ranks_by_pid
    best["rank"] = pd.array([ranks.get(int(p), (None, None))[0] for p in best["straggler"]], dtype="Int64")
    return best[cols].reset_index(drop=True)


def launch_times(report: NsysFrames, kernels: pd.DataFrame) -> np.ndarray:
    """When each kernel (of nccl_kernels: pid, correlation_id) was launched: its CUDA API call's start (the first
    call with its process and correlation id); the kernel's own start where the call is unknown."""
    from ..readers.nsys_frames import ckey, first_match

    out: np.ndarray = kernels["start_ns"].to_numpy(np.int64).copy()
    api = report.columns("cuda_api", ["pid", "correlation_id", "start_ns"])
    if api.empty or kernels.empty:
        return out
    have = api["correlation_id"].notna().to_numpy()
    i = first_match(ckey(api["pid"].to_numpy(np.int64)[have], api["correlation_id"][have]),
                    ckey(kernels["pid"].to_numpy(np.int64), kernels["correlation_id"]))
    ok = i >= 0
    out[ok] = api["start_ns"].to_numpy(np.int64)[have][i[ok]]
    return out


def nccl_summary(report: NsysFrames, by: str = "rank") -> pd.DataFrame:
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
