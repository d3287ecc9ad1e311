"""What the host was doing while the GPU waited, named by its CUDA calls: the allocator, lazy module loading, and
implicit synchronisations (a device-to-host copy the host waits for: `.item()`, `nonzero`, boolean masks, or
`.cpu()` / `.numpy()` into pageable memory).

Their time at stake comes from the breakdown (analysis.bottleneck): the GPU's idle time while the launching thread
was in the allocator (`allocator`) or loading modules (`module load`), and the idle time charged to the read-backs
and the syncs that follow them (`sync`, which cuda_api_sync then does not count again), plus, for boolean masks and
nonzero, the GPU time of the data-dependent kernels (select, sort, indexing) beyond what the host paced.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..bottleneck import HOST_CALLS, blocking_readbacks
from ..frame_memo import report_memo
from ..steps import cell_threads
from .common import (Claims, Context, Enclosing, Finding, Found, api_of, estimate_words, evidence, ranges_of,
                     where_words, with_operator)
from .kernels import gpu_side_saving
from ..kernel_classes import with_classes
from ...readers.nsys_frames import ckey
from .. import text as tx
from ...readers.contract import NsysFrames

TINY_COPY_BYTES = 1024       # a device-to-host copy this small is a value the host wants to look at
IMPLICIT_WINDOW_NS = 2_000_000  # ... when the thread synchronises within this long after it
SYNC_RX = re.compile(r"^cu(?:da)?(?:Device|Stream|Event|Ctx)Synchronize")
DATA_DEPENDENT_RX = r"(?i)DeviceSelect|DeviceCompact|nonzero|indexing_backward|masked_(?:select|scatter)|RadixSort"


def _calls_in_window(ctx: Context, rx: re.Pattern[str]) -> pd.DataFrame:
    """The CUDA calls matching `rx` made inside the steady windows (by the processes analysed)."""
    api = ctx.report.cuda_api
    if api.empty:
        return api
    a = api[tx.contains(api["name"], rx)]
    keep = np.zeros(len(a), bool)
    for p in ctx.diag.pairs:
        keep |= ((a["pid"] == p.pid) & (a["start_ns"] >= p.window[0]) & (a["start_ns"] < p.window[1])).to_numpy()
    return a[keep]


def _steps_words(ctx: Context, n: int) -> str:
    counts = [s.count for s in ctx.diag.steps.values()]
    if not counts:
        return f"{n}"
    steady = max(s.steady_count for s in ctx.diag.steps.values())
    return f"{n} ({n / max(steady, 1):.0f} per step)"


def rule_allocator_churn(ctx: Context) -> list[Finding]:
    """The GPU idle while the launching thread was in cudaMalloc / cudaFree (or their host and driver forms)."""
    at_stake = ctx.left("allocator", ctx.stake("allocator"))  # steps that grow claim their growing allocations
    if at_stake <= 0 or ctx.window_share(at_stake) * 100 < ctx.th["allocator_churn.min_share_pct"]:
        return []
    calls = _calls_in_window(ctx, HOST_CALLS["allocator"])
    if calls.empty:
        return []
    report = ctx.report
    ev = evidence(calls, calls["name"], {
        "nvtx_range": Enclosing.of(report)(calls["pid"], calls["tid"], calls["start_ns"])})
    by = ev.groupby("name")["duration_ns"].agg(["size", "sum"]).sort_values("sum", ascending=False)
    names = ", ".join(f"{n} x {int(r['size'])} ({r['sum'] / 1e6:,.1f} ms)" for n, r in by.head(4).iterrows())
    frees = int(by.loc[[n for n in by.index if "Free" in n], "size"].sum()) if len(by) else 0
    said = None
    if frees:  # who empties the cache: the code the host ran in the cudaFree calls (empty_cache's line)
        from ..python_code import code_words

        said = code_words(report, ev[tx.contains(ev["name"], "Free", regex=False)])
    return [Finding(
        "allocator_churn", ctx.severity(at_stake),
        f"The GPU waited {at_stake / 1e6:,.1f} ms while the host was in the CUDA allocator "
        f"({_steps_words(ctx, len(ev))} calls)",
        "PyTorch's caching allocator keeps freed GPU memory for the next tensors, so a training loop should call "
        f"cudaMalloc and cudaFree in its first steps only. This one called them in its steady state: {names}. "
        "cudaFree waits for every kernel queued on the GPU before it returns, and the host then allocates again "
        "while the GPU has nothing to do. The usual causes: `torch.cuda.empty_cache()` (or gc.collect() with it) "
        "in the loop, a per-process memory fraction that forces the cache to release, fragmentation (changing "
        "shapes), or pinned host buffers allocated every step (cudaHostAlloc)."
        + (f" {frees} cudaFree calls in the steady state: the cache is being emptied." if frees else "")
        + (f" In the cudaFree calls the host was in {said.code}." if said and said.code else ""),
        "Remove `torch.cuda.empty_cache()` from the loop (call it once after training, if at all); let the cache "
        "keep its memory; against fragmentation set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`; allocate "
        "buffers once outside the loop (in-place ops, `out=`), and pin host buffers once.",
        at_stake, estimate_words(ctx, "the GPU's idle time while the launching thread was in allocator calls"), ev,
        ranges_of(ev), code=said.code if said else "")]


def rule_module_loading(ctx: Context) -> list[Finding]:
    """The GPU idle while the launching thread loaded GPU code (lazy module loading) in the steady state."""
    at_stake = ctx.stake("module load")
    if at_stake <= 0 or ctx.window_share(at_stake) * 100 < ctx.th["module_loading.min_share_pct"]:
        return []
    calls = _calls_in_window(ctx, HOST_CALLS["module load"])
    if calls.empty:
        return []
    ev = evidence(calls, calls["name"], {
        "nvtx_range": Enclosing.of(ctx.report)(calls["pid"], calls["tid"], calls["start_ns"])})
    return [Finding(
        "module_loading", ctx.severity(at_stake),
        f"The GPU waited {at_stake / 1e6:,.1f} ms while the host loaded GPU code ({len(ev)} loads in the loop)",
        "CUDA loads a kernel's module the first time the kernel is used (lazy loading): cuLibraryLoadData and "
        "cuModuleLoad calls block the launching thread for milliseconds each. Here they happen after the warm-up "
        "step, so new kernels keep appearing: new shapes, dtypes or code paths in later steps (a last partial "
        "batch, evaluation every N steps, a schedule switching precision)." + where_words(ev),
        "Warm up every code path once before the steady state (in %%nsight_setup, or the first steps), keep shapes "
        "and dtypes fixed (drop_last=True, padding to fixed sizes), or load all modules at start with "
        "`CUDA_MODULE_LOADING=EAGER` (slower start, no stalls later).",
        at_stake, estimate_words(ctx, "the GPU's idle time while the launching thread was loading modules"), ev,
        ranges_of(ev))]


def implicit_syncs(report: NsysFrames) -> pd.DataFrame:
    """The host reading data off the GPU and waiting for it: sync calls that follow a tiny device-to-host copy on
    the same thread within IMPLICIT_WINDOW_NS (`.item()`, `if tensor:`, `print(tensor)`, the size of `nonzero`
    and boolean-mask results), and the copy calls into pageable memory, which wait themselves (`.cpu()`,
    `.numpy()`, `.tolist()`: bottleneck.blocking_readbacks).  Columns of cuda_api plus copy_bytes and
    copy_start_ns."""
    cache = report_memo(report).setdefault("implicit_syncs", {})
    if "v" in cache:
        return cache["v"]
    api, m = report.cuda_api, report.memcpy
    empty = api.iloc[0:0].assign(copy_bytes=pd.Series(dtype="int64"), copy_start_ns=pd.Series(dtype="int64"))
    out = empty
    parts = []
    readback = blocking_readbacks(m) if len(m) else np.zeros(0, bool)
    if len(api) and len(m):
        back = m[readback]
        if len(back):  # the copy's own call: joined on (process, correlation id)
            size = pd.Series(back["bytes"].fillna(0).to_numpy(np.int64),
                             index=ckey(back["pid"], back["correlation_id"]))
            size = size[~size.index.duplicated()]
            key = ckey(api["pid"], api["correlation_id"])
            calls = api[np.isin(key, size.index.to_numpy()) & (key >= 0)]
            parts.append(calls.assign(copy_bytes=size.reindex(ckey(calls["pid"], calls["correlation_id"])).to_numpy(),
                                      copy_start_ns=calls["start_ns"].to_numpy(np.int64)))
    if len(api) and len(m) and "kind" in m:
        # a sync after a read-back (a tiny copy: a value; or one into pageable memory, which waited already)
        reads = m[((tx.eq(m["kind"], "DtoH")) & (m["bytes"] <= TINY_COPY_BYTES)).to_numpy() | readback]
        if len(reads):
            a = api_of(reads, api)
            copies = pd.DataFrame({"pid": reads["pid"].to_numpy(), "tid": a["api_tid"].to_numpy(),
                                   "t": pd.to_numeric(a["api_start_ns"]).to_numpy(),
                                   "te": pd.to_numeric(a["api_end_ns"]).to_numpy(), "bytes": reads["bytes"].to_numpy()})
            copies = copies.dropna(subset=["tid", "t", "te"])
            syncs = api[tx.contains(api["name"], SYNC_RX)]
            for (pid, tid), s in syncs.groupby(["pid", "tid"]):  # threads: a few
                c = copies[(copies["pid"] == pid) & (copies["tid"] == tid)].sort_values("t")
                if c.empty:
                    continue
                ct, ce = c["t"].to_numpy(np.int64), c["te"].to_numpy(np.int64)
                st = s["start_ns"].to_numpy(np.int64)
                j = np.searchsorted(ct, st, "right") - 1  # the last read-back before each sync
                # within the window after its call returned (a read-back into pageable memory waits in its call)
                ok = (j >= 0) & (st - ce[np.maximum(j, 0)] <= IMPLICIT_WINDOW_NS)
                if ok.any():
                    parts.append(s[ok].assign(copy_bytes=c["bytes"].to_numpy()[j[ok]].astype(np.int64),
                                              copy_start_ns=ct[j[ok]]))
    if parts:
        out = pd.concat(parts).sort_values("start_ns", kind="stable")
    cache["v"] = out
    return out


_BACKWARD_CHECKS = (" Most of them read one byte on a thread other than the cell's (autograd's backward thread): a "
                    "check after each backward operation, as `torch.autograd.set_detect_anomaly(True)` makes (it "
                    "tests every gradient for NaN), or a backward hook calling `.item()`.")


def _readback_copies(report: NsysFrames, syncs: pd.DataFrame) -> pd.DataFrame:
    """The device-to-host copies of these read-backs (their call starts where a read-back's copy call did), with
    the call's end as call_end_ns."""
    m = report.memcpy
    reads = m[np.asarray(tx.eq(m["kind"], "DtoH"), bool)] if len(m) else m
    if reads.empty:
        return reads.assign(call_end_ns=pd.Series(dtype="int64"))
    a = api_of(reads, report.cuda_api)
    call_start = a["api_start_ns"].to_numpy(np.int64, na_value=-1)
    mine = np.isin(call_start, syncs["copy_start_ns"].to_numpy(np.int64)) & (call_start >= 0)
    return reads[mine].assign(call_end_ns=a["api_end_ns"].to_numpy(np.int64, na_value=-1)[mine])


def _flag_kernels(ctx: Context, copies: pd.DataFrame) -> pd.Index:
    """The kernels that computed the one-byte flags the host read back (a check: `if torch.isnan(x).any():`,
    anomaly detection's test of every gradient): on the copy's stream, the reduction just before it and the
    elementwise test before that.  Without the check they do not run (a value the loop needs, a loss, is never
    one byte).  copies: the read-backs' copies (_readback_copies).  Their labels in the kernels frame."""
    copies = copies[copies["bytes"].to_numpy() <= 1]
    k = ctx.report.kernels
    if copies.empty or k.empty:
        return pd.Index([])
    k = with_classes(k)[["start_ns", "device_id", "stream_id", "cls"]]
    got = []
    for (dev, stream), c in copies.groupby(["device_id", "stream_id"]):  # streams: a few
        on = k[((k["device_id"] == dev) & (k["stream_id"] == stream)).to_numpy()]
        if on.empty:
            continue
        j = np.searchsorted(on["start_ns"].to_numpy(np.int64), c["start_ns"].to_numpy(np.int64)) - 1
        cls = on["cls"].astype(str).to_numpy()
        red = j[(j >= 0) & (cls[np.maximum(j, 0)] == "reduction")]
        test = red - 1
        test = test[(test >= 0) & (cls[np.maximum(test, 0)] == "elementwise")]
        got.append(on.index[np.unique(np.r_[red, test])])
    return got[0].append(got[1:]).unique() if got else pd.Index([])


def _queued_readback_gaps(ctx: Context, copies: pd.DataFrame) -> pd.DataFrame:
    """The launch gaps (steady windows) that end with a read-back's own copy whose call had returned before the
    gap began: the GPU idled with the copy queued (a switch from the kernels to the copy engine, a few
    microseconds), a cost of the read-back rather than of the host's launches.  A round trip's gaps stay its own.
    copies: the read-backs' copies (_readback_copies)."""
    g = ctx.diag.gaps()  # chosen on its columns, then the few taken (not a copy of a million launch gaps)
    if g.empty or copies.empty:
        return g.iloc[0:0]
    starts, ends = copies["start_ns"].to_numpy(np.int64), copies["call_end_ns"].to_numpy(np.int64)
    o = np.argsort(starts, kind="stable")
    starts, ends = starts[o], ends[o]
    ge, gs = g["end_ns"].to_numpy(np.int64), g["start_ns"].to_numpy(np.int64)
    if len(ge) > 1 and bool((ge[1:] > ge[:-1]).all()):
        # one pair's gaps, in order: each copy start finds the gap it ends (a few thousand searches, not one per
        # gap of millions); of copies that start together, the first, as a search from the gap finds it
        first = np.r_[True, starts[1:] != starts[:-1]]
        us, ue = starts[first], ends[first]
        at = np.searchsorted(ge, us)
        ok = at < len(ge)
        at, us, ue = at[ok], us[ok], ue[ok]
        ok = ge[at] == us
        rows = at[ok][ue[ok] <= gs[at[ok]]]
    else:
        j = np.minimum(np.searchsorted(starts, ge), len(starts) - 1)  # the copy that starts as the gap ends
        rows = np.flatnonzero((starts[j] == ge) & (ends[j] <= gs))
    hit = g["in_window"].to_numpy(bool)[rows] & (g["launch"].iloc[rows] > 0).to_numpy(dtype=bool, na_value=False)
    if "round_trip" in g:
        hit &= ~g["round_trip"].to_numpy(bool)[rows]
    return g.iloc[rows[hit]]


def _reads_of(syncs: pd.DataFrame) -> pd.DataFrame:
    """One row per read-back (a copy call and its sync are one)."""
    return syncs.drop_duplicates(["pid", "tid", "copy_start_ns"])


def _in_backward(report: NsysFrames, reads: pd.DataFrame) -> bool:
    """Most read-backs are of one byte (a flag) and made by threads other than the cells' own."""
    if reads.empty:
        return False
    main = cell_threads(report)
    other = np.array([main.get(int(p)) != int(t) for p, t in zip(reads["pid"], reads["tid"])])
    flag = reads["copy_bytes"].to_numpy(np.int64) <= 1
    return bool((other & flag).mean() > 0.5)


def rule_implicit_sync(ctx: Context) -> list[Finding] | Found:
    """Synchronisations that read a value off the GPU (see implicit_syncs): the idle time charged to them and the
    GPU's idle time before their copies once queued; for data-dependent shapes (nonzero, boolean masks) the GPU time
    of their select/sort/index kernels, for one-byte flags that of the kernels computing them."""
    report = ctx.report
    syncs = implicit_syncs(report)
    if syncs.empty:
        return []
    g = ctx.diag.gaps("sync")
    g = g[g["in_window"] & g["sync_start_ns"].isin(set(syncs["start_ns"].to_numpy(np.int64)))]
    idle = ctx.host_stake("sync", g) if len(g) else 0  # less what tracing added to the re-queueing calls
    idle = ctx.left("sync", idle)  # a round trip's read-backs are host_round_trip's
    claims = Claims()
    claims.take("sync", idle)
    copies = _readback_copies(report, syncs)
    queued = _queued_readback_gaps(ctx, copies)
    before_copy = ctx.host_stake("launch", queued) if len(queued) else 0
    if before_copy:
        claims.take("launch", before_copy)  # not launch_bound's: the copy was queued, the host had done its part
        claims.readback_gaps = {k: q["start_ns"].to_numpy(np.int64)
                                for k, q in queued.groupby(["pid", "device_id"])}
    idle += before_copy
    k = report.kernels
    dd = k[tx.contains(k["name"], DATA_DEPENDENT_RX, regex=True)] if len(k) else k
    flags = _flag_kernels(ctx, copies)  # a check's own kernels: they go with the check
    gpu_k = k.loc[dd.index.union(flags)] if len(flags) else dd
    gpu = gpu_side_saving(ctx, gpu_k) if len(gpu_k) else 0
    at_stake = idle + gpu
    if at_stake <= 0:
        return Found([], claims)
    ev = evidence(syncs, syncs["name"], with_operator(report, {
        "copy_bytes": syncs["copy_bytes"], "nvtx_range": Enclosing.of(report)(syncs["pid"], syncs["tid"],
                                                                              syncs["start_ns"])},
        syncs["pid"], syncs["tid"], syncs["copy_start_ns"]))
    masks = len(dd) > 0
    reads = _reads_of(syncs)  # a read-back's copy call and its sync: once
    backward = _in_backward(report, reads)
    values = bool((syncs["copy_bytes"] <= TINY_COPY_BYTES).all())
    what = ("boolean masks or nonzero (their result's size is read back before the indexing kernels can be "
            "launched)" if masks else "`.item()`, `.tolist()`, `float(t)`, `if t:` or `print(t)` on a GPU tensor"
            if values else "`.cpu()`, `.numpy()` or `.tolist()` of a GPU tensor (metrics, logging, a loss or a "
            "weight computed on the host)")
    copied = (f"a copy of at most {TINY_COPY_BYTES} bytes from the GPU to the host" if values else
              "a copy from the GPU to the host")
    median = f"median {int(reads['copy_bytes'].median()):,} bytes" + ("" if values else
                                                                      "; into pageable memory the copy call waits")
    costs = f"the GPU idled {idle / 1e6:,.1f} ms after them while the host queued work again"
    if before_copy:
        costs += (f" (of which {before_copy / 1e6:,.1f} ms before the read-back copies, which were queued already: "
                  "the GPU's switch from the kernels to each copy)")
    if gpu:
        which = [w for w, n in (("select, sort, indexing", len(dd)), ("the tests and reductions that computed each "
                                                                     "flag read back", len(flags))) if n]
        costs += (f", and the {'data-dependent ' if len(dd) else ''}kernels ({'; '.join(which)}: {len(gpu_k)}) took "
                  f"{gpu / 1e6:,.1f} ms of GPU time on the critical path")
    from ..python_code import sync_words

    sites = sync_words(report.python_samples)  # the operations' own lines (torch's sync-debug mode during the cell)
    find = ("Those lines first. " if sites.code else
            "Find the lines with `torch.cuda.set_sync_debug_mode('warn')` (a warning at every synchronising call). ")
    return Found([Finding(
        "implicit_sync", ctx.severity(at_stake),
        f"{_steps_words(ctx, len(reads))} implicit synchronisations read values back from the GPU",
        f"Each of these synchronisations waits for {copied} ({median}): "
        f"the host waits for every queued kernel to read {'one value' if values else 'the data'}, typically {what}. "
        f"Meanwhile it queues nothing, so {costs}." + where_words(ev) + sites.words
        + (_BACKWARD_CHECKS if backward else ""),
        ("Outside debugging, turn anomaly detection off (`torch.autograd.set_detect_anomaly(False)`, no "
         "`detect_anomaly()` around the loop). " if backward else "")
        + find + "Keep values on the GPU: accumulate losses and metrics as tensors and read them every N steps; "
        "compute metrics "
        "and weights with torch on the GPU rather than in numpy; replace boolean masks and `nonzero` with "
        "`torch.where(mask, x, 0)`, masked reductions (`(x * mask).sum() / mask.sum()`) or fixed-size ops; compare "
        "on the GPU instead of `if loss.item() > ...`.",
        at_stake, estimate_words(ctx, "the GPU's idle time after these syncs returned (up to the time the host "
                                      "waited in them) and before their copies once queued, plus the GPU time of "
                                      "the data-dependent kernels and of the kernels computing one-byte flags read "
                                      "back, beyond the time the host paced the GPU"), ev, ranges_of(ev),
        code=sites.code)], claims)
