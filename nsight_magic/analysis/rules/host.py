"""The host: synchronisations (twin of `nsys analyze`'s cuda_api_sync), the GPU waiting for input, and the
launching thread blocked in the OS.

Their time at stake is the GPU's idle time they cause in the steady state (analysis.bottleneck's `sync`, `input`
and `host wait` categories): a synchronisation that waits for useful GPU work (the GPU stays busy) or the main
thread waiting for autograd's engine thread (which launches the kernels meanwhile) costs nothing.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...inside.marks import CAPTURE_DOMAIN
from .. import intervals as I
from .. import text as tx
from .common import (Context, Enclosing, Finding, estimate_words, evidence, like, pair_sums, ranges_of,
                     where_words, with_operator)
from ...readers.contract import NsysFrames
from ..python_code import GilHolder


def rule_cuda_api_sync(ctx: Context) -> list[Finding]:
    """nsys cuda_api_sync: cudaDeviceSynchronize / cudaStreamSynchronize calls (the same events); the time at stake
    is the GPU's idle time after they returned, at most the time the host waited in them."""
    report = ctx.report
    a = report.cuda_api
    if a.empty:
        return []
    sel = a[like(a["name"], "cudaDeviceSynchronize%") | like(a["name"], "cudaStreamSynchronize%")]
    if sel.empty:
        return []
    ev = evidence(sel, sel["name"], with_operator(
        report, {"nvtx_range": Enclosing.of(report)(sel["pid"], sel["tid"], sel["start_ns"])},
        sel["pid"], sel["tid"], sel["start_ns"]))
    # what implicit_sync charged to the syncs that read a value back is its own
    at_stake = ctx.left("sync", _sync_idle(ctx, r"^cu(?:da)?(?:Device|Stream|Event|Ctx)Synchronize"))
    names = ", ".join(sorted(set(ev["name"].str.replace(r"_v\d+$", "", regex=True))))
    waited = int(ev["duration_ns"].sum())
    costs = (f" They held the host {waited / 1e6:,.1f} ms; the GPU then idled {at_stake / 1e6:,.1f} ms before "
             f"new work reached it." if at_stake else
             f" They held the host {waited / 1e6:,.1f} ms while the GPU did useful work, and the GPU did not idle "
             f"after them: they cost nothing here.")
    return [Finding(
        "cuda_api_sync", ctx.severity(at_stake), f"{len(ev)} host synchronisations ({names})",
        "These calls block the CPU until the GPU has finished the queued work, so the CPU cannot queue the next "
        "kernels while the GPU runs. In PyTorch, `.item()`, `.cpu()`, `print(tensor)`, `torch.cuda.synchronize()` "
        "and data-dependent shapes (`nonzero`, boolean masks) synchronise." + where_words(ev) + costs,
        "Remove synchronisations from the loop: accumulate metrics on the GPU and read them every N steps, use "
        "`non_blocking=True` copies, and `torch.cuda.set_sync_debug_mode('warn')` to find hidden ones.",
        at_stake, estimate_words(ctx, "the GPU's idle time after the syncs returned, up to the time the host waited "
                                      "in them (what it could have spent queueing work)"), ev, ranges_of(ev))]


def _sync_idle(ctx: Context, pattern: str) -> int:
    g = ctx.diag.gaps("sync")
    g = g[g["in_window"] & tx.contains(g["sync_name"], pattern, regex=True)]
    return ctx.host_stake("sync", g) if len(g) else 0  # less what tracing added to the re-queueing calls


def rule_input_wait(ctx: Context) -> list[Finding]:
    """The GPU idle before a batch's host-to-device copy, beyond the loop's usual launch gap: the host was still
    preparing the data (loading, decoding, augmenting, collating) when the GPU had finished the previous step."""
    th = ctx.th
    gaps = ctx.diag.gaps("input")
    if len(gaps) < th["input_wait.min_steps"]:
        return []
    spawn_ns, spawned = ctx.process_start_stake("input")  # processes started to make the data (as host_wait)
    at_stake = max(0, ctx.stake("input") - spawn_ns)
    if at_stake < th["input_wait.min_gap_ms"] * 1e6 * th["input_wait.min_steps"]:
        return []
    med = (gaps["input"]).median()
    ev = evidence(gaps.assign(tid=gaps["tid"]), "GPU waits for input", {"wait_ns": gaps["input"]})
    return [Finding(
        "input_wait", ctx.severity(at_stake),
        f"The GPU waited {med / 1e6:.1f} ms (median) for the next batch, {len(ev)} times",
        "Before each batch's copy to the GPU the GPU had nothing to do: the next batch was still being prepared on "
        "the CPU (reading, decoding, augmenting, collating) when the previous step had already finished.",
        "Prepare batches ahead: `DataLoader(..., num_workers=N, pin_memory=True, prefetch_factor=2, "
        "persistent_workers=True)` with N around the CPU cores per GPU, and copy with `non_blocking=True`; move "
        "heavy augmentation to the GPU.",
        at_stake, estimate_words(ctx, "the GPU's idle time before each batch's copy, beyond the loop's usual gap "
                                      "between two launches" + _spawn_words(spawned)), ev, ranges_of(ev))]


def rule_host_wait(ctx: Context) -> list[Finding]:
    """The GPU idle while the thread that launches its work was blocked in the OS (sleep, a lock, I/O, a queue).
    Without GPU work: blocking OS calls filling a repeated NVTX range (that thread is then the critical path)."""
    if not ctx.diag.pairs:
        return _host_wait_cpu_only(ctx)
    th = ctx.th
    gaps = ctx.diag.gaps("host wait")
    # a process the thread started and waited for (a tool run with subprocess) is slower under nsys, which sets
    # itself up in it: that part of the wait is the profiler's (analysis/overhead.py)
    spawn_ns, spawned = ctx.process_start_stake("host wait")
    # ... also where nsys did not list the child (it lists only those that made a traced call): the thread waited
    # for a child process (waitpid, or Python samples in subprocess)
    child_ns, child_gaps = child_waits(ctx, gaps)
    # host_code's stretches count their own OS calls
    at_stake = ctx.left("host wait", max(0, ctx.stake("host wait") - max(spawn_ns, child_ns)))
    if gaps.empty or ctx.window_share(at_stake) * 100 < th["host_wait.min_share_pct"] / 4:
        return []
    report = ctx.report
    osrt = report.osrt
    if "nesting_level" in osrt:
        osrt = osrt[pd.to_numeric(osrt["nesting_level"], errors="coerce").fillna(0).to_numpy() == 0]
    calls = []
    for (pid, tid), g in gaps.dropna(subset=["tid"]).groupby(["pid", "tid"]):  # launching threads: a few
        o = osrt[(osrt["pid"] == pid) & (osrt["tid"] == tid)]
        if len(o):
            idle = I.union(g["start_ns"], g["end_ns"])
            calls.append(o[I.overlap(idle, o["start_ns"], o["end_ns"]) > 0])
    c = pd.concat(calls) if calls else osrt.iloc[0:0]
    ev = evidence(c, c["name"]) if len(c) else evidence(gaps, "GPU idle, host blocked")
    top = ev.groupby("name")["duration_ns"].sum().sort_values(ascending=False).head(3)
    holder = _gil_holder(report, ev)
    gil = holder is not None or _gil_share(ev) >= GIL_MIN_SHARE
    imports = _imports(report, ev)
    if imports:
        return [_import_finding(ctx, imports, at_stake, "the GPU's idle time while the launching thread was "
                                "blocked", ev)]
    return [Finding(
        "host_wait", ctx.severity(at_stake),
        f"The GPU idled {at_stake / 1e6:,.1f} ms while the launching thread was blocked in the OS"
        + (f", waiting for the GIL held by thread '{holder.thread}'" if holder else ""),
        "While the GPU had nothing to do, the thread that launches its work was blocked in operating-system calls, "
        "mostly " + ", ".join(f"{nm} ({v / 1e6:,.1f} ms)" for nm, v in top.items())
        + ": sleeping, waiting for I/O, a lock, or another process or thread." + _spawned_words(report, spawned)
        + _child_words(child_gaps, child_ns, spawned)
        + (_holder_words(holder) if holder else
           " Its timed waits of about 5 ms are CPython's GIL changing hands (sys.getswitchinterval()): another "
           "Python thread of the process held the interpreter, and this one asked for it back every 5 ms."
           if gil else ""),
        (GIL_ADVICE if gil else "")
        + "Find what it waits for: a sleep or poll in the loop, a lock shared with another thread, logging or "
        "checkpoint I/O on the critical path, or data loading (more DataLoader workers, prefetching)."
        + (" A tool run as a process every step (nvidia-smi, a shell command) costs its start each time: call it "
           "every N steps, in a thread of its own, or use its library in the process (torch.cuda.memory_allocated(), "
           "NVML through pynvml)." if spawned else ""),
        at_stake, estimate_words(ctx, "the GPU's idle time while the launching thread was blocked"
                                 + _spawn_words(spawned or ([0] * child_gaps if child_ns > spawn_ns else []))),
        ev, ranges_of(ev))]


_CHILD_WAIT = r"^(waitpid|wait4|waitid|wait)$"


def child_waits(ctx: Context, gaps: pd.DataFrame) -> tuple[int, int]:
    """(ns, gaps): of the host-wait gaps, those in which the launching thread waited for a child process (a
    waitpid-like call, or Python samples in subprocess / os.system), and the profiler's part of them: the
    PROCESS_START_MS nsys adds to each process it follows (at most the gap's wait), scaled to the loop, the
    largest over pairs."""
    from ..overhead import PROCESS_START_MS

    g = gaps[gaps["in_window"].to_numpy(bool)].dropna(subset=["tid"]) if len(gaps) else gaps
    if g.empty:
        return 0, 0
    report = ctx.report
    hit = np.zeros(len(g), bool)
    o = report.osrt
    if len(o):
        o = o[tx.contains(o["name"], _CHILD_WAIT)]
    ps = report.python_samples
    sp = None
    if ps is not None and not ps.empty and ps.placed:
        fr = ps.frames
        child = (fr["file"].astype(str).str.endswith("subprocess.py")
                 | (fr["file"].astype(str).str.endswith("os.py") & fr["function"].isin(["system", "popen"])))
        ids = set(np.flatnonzero(child.to_numpy(bool)).tolist())
        if ids:
            in_child = np.array([bool(ids.intersection(st.tolist())) for st in ps.stacks], bool)
            s = ps.samples
            sp = s[in_child[s["stack"].to_numpy(np.int64)]]
    gs, ge = g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)
    gp, gt = g["pid"].to_numpy(np.int64), g["tid"].to_numpy(np.int64)
    for (pid, tid) in set(zip(gp.tolist(), gt.tolist())):  # launching threads: a few
        m = (gp == pid) & (gt == tid)
        marks = []
        if len(o):
            w = o[(o["pid"] == pid) & (o["tid"] == tid)]
            marks.append(w["end_ns"].to_numpy(np.int64))
        if sp is not None:
            w = sp[(sp["pid"] == pid) & (sp["tid"] == tid)]
            marks.append((w["time_ns"] - w["weight_ns"] / 2).to_numpy(float).astype(np.int64))
        t = np.sort(np.concatenate(marks)) if marks else np.empty(0, np.int64)
        if len(t):
            lo, hi = np.searchsorted(t, gs[m], side="left"), np.searchsorted(t, ge[m], side="right")
            hit[np.flatnonzero(m)[hi > lo]] = True
    if not hit.any():
        return 0, 0
    h = g[hit]
    spent = np.minimum(h["host wait"].to_numpy(float), PROCESS_START_MS * 1e6) * h["scale"].to_numpy(float)
    by = pair_sums(spent, h["pid"].to_numpy(), h["device_id"].to_numpy())
    return int(by.max()), int(hit.sum())


def _child_words(n_gaps: int, ns: int, spawned: list[int]) -> str:
    if not n_gaps or spawned:
        return ""
    from ..overhead import PROCESS_START_MS

    return (f" In {n_gaps:,} of these waits it waited for a process it started (subprocess): under nsys every new "
            f"process is set up for tracing first (about {PROCESS_START_MS:g} ms more to start), so that part "
            f"({ns / 1e6:,.1f} ms) is the profiler's and is left out; a plain run whose GPU queue is full hides "
            "more of it. Time a step with and without the call (%timeit) to see what it costs without the "
            "profiler.")


GIL_ADVICE = ("Python code in another thread of the process (a metrics, logging or prefetching thread in pure "
              "Python) takes the GIL from the loop's thread: run it in a process (multiprocessing, DataLoader "
              "workers), run it less often or between steps, or do its work in numpy/torch, which release the GIL. "
              "sys.setswitchinterval() below its 5 ms lets the waiting thread take the GIL back sooner, at the cost "
              "of more hand-offs for both. ")


def _gil_holder(report: NsysFrames, ev: pd.DataFrame) -> GilHolder | None:
    """The Python thread that held the GIL while the evidence's thread waited in GIL calls (Python samples)."""
    from ...readers.instrument_waits import GIL_CALLS
    from ..python_code import gil_holder

    if ev.empty or "tid" not in ev:
        return None
    w = ev[tx.contains(ev["name"], GIL_CALLS, regex=True)].dropna(subset=["pid", "tid"])
    if w.empty:
        return None
    holder = gil_holder(report, w.astype({"pid": np.int64, "tid": np.int64}))
    # named only when that thread ran through a good part of the waits (else the waits were something else's)
    return holder if holder is not None and holder.ns >= 0.3 * float(w["duration_ns"].sum()) else None


IMPORT_MIN_SHARE = 0.5  # of the sampled time inside the waits: Python importing modules


def _imports(report: NsysFrames, ev: pd.DataFrame) -> tuple[float, str] | None:
    """(share, module) when Python samples show the waiting thread importing modules for most of the waits."""
    from ..python_code import importing

    if ev.empty or "tid" not in ev:
        return None
    share, module = importing(report.python_samples, ev)
    return (share, module) if share >= IMPORT_MIN_SHARE else None


def _import_finding(ctx: Context, imports: tuple[float, str], at_stake: int, estimate: str,
                    ev: pd.DataFrame) -> Finding:
    """Blocked in the OS because Python was importing (reading and opening module files): start-up."""
    share, module = imports
    calls = ev.groupby("name")["duration_ns"].sum().sort_values(ascending=False).head(3)
    return Finding(
        "host_wait", "low",
        f"Importing modules blocked the host {at_stake / 1e6:,.1f} ms" + (f" ({module})" if module else ""),
        "The thread was blocked in operating-system calls ("
        + ", ".join(f"{nm} {v / 1e6:,.1f} ms" for nm, v in calls.items())
        + f"), and the Python samples show it importing modules for {100 * share:.0f}% of that time"
        + (f", mostly {module}" if module else "") + ": the start-up of a first call (a library that imports "
        "more of itself when first used), paid once, not data loading.",
        "Import it before the loop (in a %%nsight_setup cell, or with one warm-up step outside the measured "
        "part), so the steps show what they cost from then on.",
        at_stake, estimate, ev, ranges_of(ev))


def _holder_words(holder: GilHolder) -> str:
    return (f": waiting for CPython's GIL, which thread '{holder.thread}' of the process held: the Python samples "
            f"saw it run {holder.ns / 1e6:,.1f} ms inside these waits"
            + (f", in {holder.code}" if holder.code else "") + ".")


# CPython's GIL: a thread that wants it waits on a condition variable for the switch interval (5 ms unless
# sys.setswitchinterval changed it), then asks the holder to drop it, and waits again: timed waits of about 5 ms
GIL_SWITCH_NS = 5_000_000
GIL_MIN_SHARE = 0.25  # of the blocked time in such waits: the GIL, not a lock or queue of the program's


def _gil_share(ev: pd.DataFrame) -> float:
    """The share of the blocked time spent in pthread_cond_timedwait calls lasting about the GIL's switch
    interval."""
    if ev.empty:
        return 0.0
    d = ev["duration_ns"].to_numpy(float)
    timed = tx.contains(ev["name"], "pthread_cond_timedwait", regex=False)
    near = timed & (d >= 0.9 * GIL_SWITCH_NS) & (d <= 1.2 * GIL_SWITCH_NS)
    return float(d[near].sum() / max(d.sum(), 1.0))


def _spawn_words(spawned: list[int]) -> str:
    from ..overhead import PROCESS_START_MS

    return (f", less the {PROCESS_START_MS:g} ms nsys adds to the start of each process it follows "
            f"({len(spawned):,} started meanwhile; benchmarks/call_overhead.py --kinds spawn)" if spawned else "")


def _spawned_words(report: NsysFrames, spawned: list[int]) -> str:
    """' In these waits it started 19 processes (nvidia-smi) and waited for them.'"""
    if not spawned:
        return ""
    pr = report.processes
    names = pr[pr["pid"].isin(spawned)]["name"].dropna().astype(str).map(lambda n: n.rsplit("/", 1)[-1])
    top = ", ".join(f"{n} x{c}" if c > 1 else n for n, c in names.value_counts().head(3).items())
    return (f" In these waits it started {len(spawned):,} process{'es' if len(spawned) > 1 else ''}"
            + (f" ({top})" if top else "") + " and waited for them.")


def _host_wait_cpu_only(ctx: Context) -> list[Finding]:
    """A report without GPU work: blocking OS calls covering a large share of a repeated NVTX range, on the
    range's own thread (then that thread is the critical path)."""
    report, th = ctx.report, ctx.th
    nv, os_ = report.nvtx, report.osrt
    if nv.empty or os_.empty:
        return []
    nv = nv[(~tx.eq(nv["kind"], "mark")) & nv["end_ns"].notna()]
    nv = nv[~tx.eq(nv["domain"], CAPTURE_DOMAIN)]
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
        r = nv[tx.eq(nv["label"], label)]
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
        ev = evidence(calls, calls["name"], {"nvtx_range": label})
        top = sorted(by_call.items(), key=lambda kv: -kv[1])[:3]
        total = int(waited[hit].sum())
        holder = _gil_holder(report, ev)
        imports = _imports(report, ev)
        if imports:
            findings.append(_import_finding(ctx, imports, total, "the blocked time inside the flagged instances of "
                                            f"'{label}'", ev))
            continue
        findings.append(Finding(
            "host_wait", ctx.severity(total),
            f"'{label}' waits "
            + (f"for the GIL held by thread '{holder.thread}'" if holder else "in OS calls")
            + f" for {share[hit].mean():.0f}% of its time ({int(hit.sum())} of {len(r)})",
            f"In {int(hit.sum())} of the {len(r)} instances of the NVTX range '{label}' its thread spent at least "
            f"{th['host_wait.min_share_pct']:g}% of the range blocked in operating-system calls, mostly "
            + ", ".join(f"{nm} ({c / 1e6:,.1f} ms)" for nm, c in top)
            + (_holder_words(holder) if holder else
               ": sleeping, waiting for I/O, a lock, or another process or thread (DataLoader workers)."),
            GIL_ADVICE if holder else
            "Find what it waits for: data loading (more DataLoader workers, prefetching, faster storage), a lock "
            "shared with another thread, or an explicit sleep or poll in the loop.",
            total, "the blocked time inside the flagged instances", ev, ranges_of(ev)))
    return findings


