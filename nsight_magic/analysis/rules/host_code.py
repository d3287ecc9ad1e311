"""The GPU idle while the thread that feeds it runs its own code: stretches of a millisecond or more in which it
makes no CUDA call (Python or CPU work: preprocessing, metrics, logging, schedules, building inputs, recompiling).

Launch overhead is the other kind of launch gap: a call every few microseconds, each kernel waiting for the next
launch, which CUDA graphs and fusion remove.  Neither removes code that launches nothing: it has to move out of the
step (or to DataLoader workers, or onto the GPU), so it is a cause of its own, with its own advice.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import intervals as I
from .. import text as tx
from ..bottleneck import HOST_CALLS, osrt_traced, quiet_gaps
from ..python_code import GilHolder, code_words, gil_holder
from .common import (Claims, Context, Finding, Found, cpu_context, estimate_words, evidence, pair_sums,
                     ranges_of, where_words)
from ...readers.contract import NsysFrames

CONTEXT_MIN_PCT = 20  # a range or OS call named for the longest stretch covers at least this share of it
MAX_EVIDENCE = 1_000  # stretches in the evidence (a long CPU-bound trace has tens of thousands)
COMPILED_MIN_SHARE = 0.5  # of the stretches' idle time in stretches that load GPU code: compilation in the loop
HOLDER_MIN_SHARE = 0.3  # of the stretches' time another Python thread was sampled running Python: it may hold the GIL


def _loading_code(report: NsysFrames, ev: pd.DataFrame) -> np.ndarray:
    """Per stretch: its thread loaded GPU code during it (module and library loads: code compiled or used for the
    first time)."""
    api = report.cuda_api
    out = np.zeros(len(ev), bool)
    if api.empty or ev.empty:
        return out
    loads = api[tx.contains(api["name"], HOST_CALLS["module load"])]
    for (pid, tid), g in loads.groupby(["pid", "tid"]):  # the threads that loaded code: a few
        m = ((ev["pid"] == pid) & (ev["tid"] == tid)).fillna(False).to_numpy(bool)  # a stretch of no known thread: NA
        if m.any():
            iv = I.union(g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64))
            out[m] = I.overlap(iv, ev["start_ns"].to_numpy(np.int64)[m], ev["end_ns"].to_numpy(np.int64)[m]) > 0
    return out


def host_stretches(ctx: Context) -> pd.DataFrame:
    """The diagnosis's launch gaps (steady windows) at least host_code.min_gap_ms long in which the launching
    thread made at most host_code.max_calls CUDA calls per host_code.min_gap_ms (bottleneck.quiet_gaps)."""
    g = ctx.diag.gaps()  # chosen on its columns, then taken once (a million launch gaps are not copied twice)
    if g.empty:
        return g
    keep = (g["launch"] > 0).to_numpy(dtype=bool, na_value=False) & g["in_window"].to_numpy(bool)
    keep &= quiet_gaps(g, ctx.th["host_code.min_gap_ms"] * 1e6, ctx.th["host_code.max_calls"])
    return g[keep]


def rule_host_code(ctx: Context) -> list[Finding] | Found:
    """The launching thread running code without CUDA calls while the GPU has nothing to do."""
    th = ctx.th
    st = host_stretches(ctx)
    if st.empty:
        return []
    # what named causes before this one took of the launch time (an extra copy's filling on the CPU) is theirs
    ran = min(ctx.host_stake("launch", st), ctx.left("launch", ctx.host_stake("launch")))
    if ran <= 0 or ctx.window_share(ran) * 100 < th["host_code.min_share_pct"]:
        return []
    # where the thread mostly ran code, the OS calls it blocked in inside these stretches are that code's work
    # (torch.save writing the file it serialised), which the same fix removes: counted here, host_wait keeps the
    # rest.  Stretches mostly blocked in the OS stay host_wait's whole.
    blocked = (st["host wait"].to_numpy(float) * st["scale"].to_numpy(float))
    blocked = int(pair_sums(blocked, st["pid"].to_numpy(), st["device_id"].to_numpy()).max())
    blocked = min(blocked, ctx.left("host wait", ctx.stake("host wait"))) if blocked <= ran else 0
    at_stake = ran + blocked
    claims = Claims()
    claims.take("launch", ran)
    claims.take("host wait", blocked)
    n, med = len(st), float(np.median(st["launch"])) / 1e6
    if n > MAX_EVIDENCE:  # what the thread was doing is looked up per stretch: the longest are the evidence
        st = st.nlargest(MAX_EVIDENCE, "launch", keep="first")
    st = st.sort_values("start_ns", kind="stable").reset_index(drop=True)
    tids = st["tid"].to_numpy(dtype=object)
    cpu = cpu_context(ctx.report, st, tids)
    # the NVTX range and OS call that covered a good part of each stretch (a call that took a sliver of it says
    # nothing; its CUDA calls, at most a few by definition, neither)
    ctx_cols = {}
    for key, col in (("cpu_nvtx", "nvtx_range"), ("cpu_osrt", "os_call")):
        named = cpu[key].to_numpy(object).copy()
        named[~(cpu[f"{key}_pct"].to_numpy(float) >= CONTEXT_MIN_PCT)] = None
        ctx_cols[col] = named
    ev = evidence(st, "host code, no CUDA call", {"idle_ns": st["launch"].to_numpy(np.int64),
                                                   "cuda_calls": st["calls"].to_numpy(np.int64), **ctx_cols})
    compiled = _loading_code(ctx.report, ev)
    ev["loads_code"] = compiled
    code_share = float(ev.loc[compiled, "idle_ns"].sum() / max(ev["idle_ns"].sum(), 1))
    min_ms = th["host_code.min_gap_ms"]
    worst = ev.loc[ev["idle_ns"].idxmax()]
    doing = "; ".join(f"{w} {worst[k]}" for k, w in (("nvtx_range", "in NVTX range"), ("os_call", "in OS call"))
                      if pd.notna(worst[k]) and worst[k])
    said = code_words(ctx.report, ev)
    code, code_said = said.code, said.words
    untraced = not osrt_traced(ctx.report)  # a wait in the OS is not told apart from running code: say what may be
    holder = _busy_thread(ctx.report, ev) if untraced else None
    title_code = f", mostly in {said.top}" if said.top else ""
    if holder is not None:
        title_code += f", while thread '{holder.thread}' ran Python beside it"
        code_said += (f" Another Python thread of the program, '{holder.thread}', ran Python through most of these "
                      f"stretches ({holder.code}): while it holds the GIL, this thread waits for it after every "
                      "operation that let it go, so the GPU may be waiting for that thread rather than this one's "
                      "code.")
    kinds = ("" if code else ": Python or CPU work inside the step (preprocessing or augmentation on the CPU, "
             "metrics and logging, a schedule or bookkeeping computed in Python, inputs built element by element, a "
             "checkpoint serialised, recompilation)")
    return Found([Finding(
        "host_code", ctx.severity(at_stake),
        f"The GPU waits while the host runs code that launches nothing: {n:,} stretch{'es' if n > 1 else ''} of "
        f"{min_ms:g} ms or more (median {med:.1f} ms){title_code}",
        f"In these stretches the thread that launches the GPU's work ran for {min_ms:g} ms or more launching nothing "
        f"(at most {th['host_code.max_calls']:g} CUDA calls per {min_ms:g} ms: copies, syncs), and the GPU had "
        f"nothing queued{kinds}.{code_said} This is not launch overhead: CUDA graphs and fusion would not remove it."
        + (f" For {blocked / 1e6:,.1f} ms of these stretches the thread was blocked in the OS (writing a file, a "
           "sleep, a lock): part of the same work, counted here." if blocked >= 0.05 * at_stake else "")
        + (f" The longest ({worst['idle_ns'] / 1e6:.1f} ms) was {doing}." if doing else "")
        + (f" {int(compiled.sum()):,} of them, {100 * code_share:.0f}% of the idle time, end with new GPU code "
           "being loaded (cuLibraryLoadData, cuModuleLoad...): code compiled inside the loop, as torch.compile "
           "recompiling for a new input shape or a changed guard, Triton autotuning, or a kernel used for the "
           "first time." if code_share >= COMPILED_MIN_SHARE else "")
        + (f" The evidence lists the {len(ev):,} longest." if len(ev) < n else "")
        + where_words(ev.assign(duration_ns=ev["idle_ns"])),
        (f"Move the work of thread '{holder.thread}' to a process (multiprocessing, DataLoader workers), run it "
         "less often, or do it in numpy/torch, which let the GIL go. " if holder is not None else "")
        + ("Recompiles: `TORCH_LOGS=recompiles` says which guard failed; give torch.compile `dynamic=True` or "
         "`torch._dynamo.mark_dynamic(x, dim)` for the dimension that varies, pad inputs to a few fixed shapes, or "
         "warm every shape up before the loop. " if code_share >= COMPILED_MIN_SHARE else "")
        + ("Take that code out of the step: " if code else
           "Find the code: `%%nsys --lines` times each line of the cell (and `--functions mod.fn` the functions it "
           "calls), `--ops` names the PyTorch operators, the Python tab shows what the samples caught. Then take it "
           "out of the step: ")
        + "compute it once before the loop or every N steps (checkpoints too), move input work into DataLoader workers "
        "(`num_workers`), or do it on the GPU with tensor operations; with torch.compile, check for recompiles "
        "(`TORCH_LOGS=recompiles`)."
        + (" If the thread was waiting rather than working (a sleep, a lock, a subprocess, another thread), "
           "`%%nsys -t cuda,nvtx,osrt` records the OS calls it waited in (the OS runtime was not traced)."
           if untraced and not code and holder is None else ""),
        at_stake, estimate_words(ctx, f"the GPU's idle time while the launching thread ran {min_ms:g} ms or more "
                                      "launching nothing"), ev, ranges_of(ev), code=code, events=n)], claims)


def _busy_thread(report: NsysFrames, ev: pd.DataFrame) -> GilHolder | None:
    """Another Python thread of the program that the samples saw running Python (not waiting) through at least
    HOLDER_MIN_SHARE of the stretches: without the OS runtime's GIL calls, the likeliest reason the launching
    thread stalls while it runs."""
    e = ev.dropna(subset=["pid", "tid"])
    if e.empty:
        return None
    e = e.astype({"pid": np.int64, "tid": np.int64})
    holder = gil_holder(report, e, running=True)
    span = float((e["end_ns"] - e["start_ns"]).sum())
    return holder if holder is not None and span and holder.ns >= HOLDER_MIN_SHARE * span else None
