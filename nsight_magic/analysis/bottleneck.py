"""What bounds a cell: the verdict, and where each nanosecond of the steady-state step went.

For every process and GPU it used, over the steady state (analysis.steps: the steps after the first; without steps,
from the GPU's first to its last operation), the GPU's time is split with interval unions into

    compute          non-NCCL kernels running (busy once however many run at once)
    communication    NCCL kernels not overlapped by compute
    copy             copies and memsets not overlapped by kernels
    input            idle before a batch's host-to-device copy: the host was preparing data (not when it read back
                     at least as much just before: a round trip through the host's own code)
    sync             idle after a host synchronisation returned: the CPU had waited instead of queueing work (a
                     sync call, a synchronous copy, or a copy into pageable memory, which returns when it is done)
    allocator        idle while the launching thread was in the CUDA allocator (cudaMalloc, cudaFree, ...)
    module load      idle while it loaded GPU code (cuLibraryLoadData, cuModuleLoad*: lazy loading)
    host wait        idle while the launching thread was blocked in the OS (sleep, lock, I/O, a queue)
    launch           idle while the launching thread ran Python and launch calls (or no launching thread is known)

Each idle stretch belongs to the thread that launched the operation ending it, and is split between the
categories in that order: input first (gap beyond the typical launch gap), then sync (at most the time the
host was blocked in the sync, which is what it could have spent queueing work), then the time the thread spent in
the allocator and in module loading (CUDA calls of those classes overlapping the gap), then OS-blocked time outside
them, the rest launch.  The categories add up to the window.  The verdict's kind is "gpu" when compute fills >= 80%
of the window (or nothing else reaches 10%), else the largest other category: input, copy, sync, communication,
or "cpu" for the host's own time (allocator, module load, host wait, launch).

Everything is scaled from the steady window to the whole loop by steps / steady steps; findings (analysis.findings)
take their time at stake from these figures, so that they count each nanosecond once.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import pandas as pd

from . import intervals as I
from .steps import Steps, cell_threads, find_steps
from . import text as tx
from . import top
from ..readers.constant_columns import compacted, constant
from .frame_memo import per_frame, report_memo
from ..readers.contract import NsysFrames
from ..readers.nsys_frames import FirstMatch

Lookup: TypeAlias = Callable[[npt.ArrayLike], np.ndarray]  # ids (correlation ids) -> a column's values, -1: unknown

CATEGORIES = ("compute", "communication", "copy", "input", "sync", "allocator", "module load", "host wait", "launch")
IDLE = CATEGORIES[3:]       # the idle gaps' causes
HOST = ("allocator", "module load", "host wait", "launch")   # the host's own time: a CPU-bound verdict
KIND_OF = {"compute": "gpu", "communication": "communication", "copy": "copy", "input": "input", "sync": "sync",
           **{c: "cpu" for c in HOST}}
GPU_BOUND_PCT = 80.0        # compute share at which the GPU is the bottleneck
MINOR_PCT = 10.0            # ... or when nothing else reaches this share
INPUT_MIN_BYTES = 64_000    # a batch: host-to-device copies smaller than this are parameters, not input
INPUT_MIN_GAP_NS = 1_000_000
SYNC_TOLERANCE_NS = 50_000  # a sync call "ended the gap" when it returned this close to the GPU going idle
BLOCKED_CALL_FACTOR = 10    # another CUDA call this many times its name's median (and BLOCKED_CALL_NS longer) waited
BLOCKED_CALL_NS = 100_000   #   for the GPU: a launch on a full queue, a cudaFree or copy waiting for the kernels
HOST_BLOCKED_SHARE = 0.5    # a gap is host wait when the launching thread was blocked for this share of it

_API_SYNC = re.compile(r"^cu(?:da)?(?:Device|Stream|Event|Ctx)Synchronize")
_MEMCPY_SYNC = re.compile(r"^cu(?:da)?Memcpy(?!.*Async)")
# freeing device or pinned memory waits for the whole GPU first (cudaFree synchronises the device): what the GPU then
# idles until the host queues work again is the allocator's, as a sync's is the sync's
_FREE_SYNC = re.compile(r"^cu(?:da)?(?:Free(?:Host)?|MemFree(?:Host)?)(?!.*Async)")
# CUDA calls by what they do for the host, when the GPU waits while the launching thread is in them
HOST_CALLS = {
    "allocator": re.compile(r"^cu(?:da)?(?:Malloc|Free|HostAlloc|MallocHost|FreeHost|HostRegister|HostUnregister|"
                            r"MemAlloc|MemFree|MemCreate|MemRelease|MemMap|MemUnmap|MemSetAccess|MemAddressReserve|"
                            r"MemAddressFree|MemHostAlloc|MemHostRegister|MemPool)(?!.*Async)"),
    "module load": re.compile(r"^cu(?:Library|Module)(?:Load|Get|Unload)|^cudaGetFuncBySymbol|"
                              r"^cu(?:da)?FuncGetAttribute|^cuKernelGetFunction"),
}
_NCCL = re.compile(r"(?i)^(?:void )?nccl")


@dataclass
class Pair:
    """One process on one GPU: its window, the category totals in it, and its idle gaps with their causes."""

    pid: int
    device: int
    window: tuple[int, int]
    steps: Steps | None
    scale: float                  # whole loop / steady window (steps / steady steps)
    totals: dict[str, int]        # category -> ns inside the window
    gaps: pd.DataFrame            # every idle gap between the first and last operation: start_ns, end_ns, tid,
    #                               next_kind, sync_name, sync_ns, and each idle category's share (ns); in_window
    busy: dict[str, I.Intervals] = field(default_factory=dict)  # "compute" / "communication" / "copy" -> disjoint
    #                                                              interval sets
    slack: int | None = None      # ns the launching threads waited for the GPU in the window (None: no CUDA calls)

    @property
    def window_ns(self) -> int:
        return self.window[1] - self.window[0]


@dataclass(frozen=True)
class Bottleneck:
    """report.bottleneck(): what bounds the cell, and where the steady-state time went."""

    kind: str                     # gpu | cpu | input | copy | sync | communication | (no GPU work:) cpu | (the
    #                               cell ran out of GPU memory:) memory
    summary: str                  # one line for people
    breakdown: pd.DataFrame       # category, time_ns, pct (of the window; the rows add up to it)
    window: tuple[int, int]       # (start_ns, end_ns) analysed, on the report's clock (the first process's)
    window_source: str            # how the window was chosen
    steps: int                    # steps found (0: none), on the first process with steps
    startup_ns: int               # from the capture start to the first step (or the first GPU operation)
    per_rank: pd.DataFrame | None = None  # several processes: pid, rank, kind, summary, then each category's pct

    def __str__(self) -> str:
        return self.summary


# ---- inputs ----------------------------------------------------------------------------------------------------

OP_CATS = ["compute", "communication", "copy"]
NEXT_KINDS = np.array([*OP_CATS, "htod batch", ""], dtype=object)  # what ends a gap: an op's cat, a batch's copy, none


def _op_columns(report: NsysFrames, frame: str, cols: list[str]) -> pd.DataFrame:
    """A few columns of an operations frame: read from the summaries' columns (report.columns) rather than the
    whole frame, which the diagnosis reads in a thread meanwhile (prefetch; columns() takes the frame's own once it
    is read)."""
    return report.columns(frame, cols)


def _gpu_ops(report: NsysFrames) -> pd.DataFrame:
    """Kernels, copies and memsets with what the breakdown needs: cat (compute/communication/copy), htod_batch;
    sorted by start, the empty ones left out.  Each column is gathered into its place once, from the frames' own
    columns: a concatenated frame and its sorted copy held 1.7 GB at once at 13M operations."""
    parts: list[tuple[pd.DataFrame, Any, Any, Any]] = []  # (frame, cat code per row, htod_batch, bytes)
    k = _op_columns(report, "kernels", ["start_ns", "end_ns", "pid", "device_id", "correlation_id", "name"])
    if len(k):
        parts.append((k, np.asarray(tx.contains(k["name"], _NCCL), np.int8), False, 0))  # 1: communication
    g = report.graphs
    if len(g):  # a CUDA graph's launch: its kernels, as one interval
        parts.append((g, 0, False, 0))
    for f in (_op_columns(report, "memcpy", ["start_ns", "end_ns", "pid", "device_id", "correlation_id", "kind",
                                             "bytes"]),
              _op_columns(report, "memset", ["start_ns", "end_ns", "pid", "device_id", "correlation_id", "bytes"])):
        if len(f):
            batch = ((tx.eq(f["kind"], "HtoD")) & (f["bytes"] >= INPUT_MIN_BYTES)).to_numpy() if "kind" in f else False
            parts.append((f, 2, batch, f["bytes"].fillna(0).to_numpy(np.int64) if "bytes" in f else 0))
    if not parts:
        return pd.DataFrame(columns=["start_ns", "end_ns", "pid", "device_id", "correlation_id", "cat",
                                     "htod_batch", "bytes"])

    def joined(each: Any, dtype: Any) -> np.ndarray:
        """each(frame, code, batch, bytes) of every part, as one array in the frames' order."""
        return np.concatenate([np.broadcast_to(np.asarray(each(*part), dtype), (len(part[0]),)) for part in parts])

    start = joined(lambda f, *_: f["start_ns"].to_numpy(np.int64), np.int64)
    end = joined(lambda f, *_: f["end_ns"].to_numpy(np.int64), np.int64)
    keep = np.flatnonzero(end > start)
    # timsort: the frames' runs in order are merged; every operation kept (none empty): no copy of the starts
    sort = np.argsort(start, kind="stable") if len(keep) == len(start) else \
        keep[np.argsort(start[keep], kind="stable")]
    # nothing empty, already sorted: no gather
    order: np.ndarray | slice = slice(None) if len(sort) == len(start) and (sort[1:] > sort[:-1]).all() else sort
    del keep, sort
    out: dict[str, Any] = {"start_ns": start[order]}
    del start
    out["end_ns"] = end[order]
    del end
    for c in ("pid", "device_id"):  # one process, one GPU: the value, not a gather of 13M rows
        col = joined(lambda f, *_, c=c: f[c].to_numpy(np.int64), np.int64)
        out[c] = constant(col[0], len(out["start_ns"])) if len(col) and (col == col[0]).all() else col[order]
        del col
    corr = [pd.array(f["correlation_id"], dtype="Int64") for f, *_ in parts]
    out["correlation_id"] = pd.arrays.IntegerArray(
        np.concatenate([c.to_numpy(np.int64, na_value=0) for c in corr])[order],
        np.concatenate([np.asarray(c.isna(), bool) for c in corr])[order])
    del corr
    out["cat"] = pd.Categorical.from_codes(joined(lambda f, c, *_: c, np.int8)[order], categories=OP_CATS)
    out["htod_batch"] = compacted(joined(lambda f, c, batch, _: batch, bool)[order])
    out["bytes"] = compacted(joined(lambda f, c, b, nbytes: nbytes, np.int64)[order])
    return pd.DataFrame(out, copy=False)


def blocking_readbacks(memcpy: pd.DataFrame) -> np.ndarray:
    """The copies the host waited for although no call says sync: device to pageable host memory (`.cpu()`,
    `.numpy()`, `.tolist()` of a GPU tensor).  CUDA returns from such a cudaMemcpyAsync only once the copy is done,
    after the work queued before it.  A boolean per row."""
    if memcpy.empty or "dst_kind" not in memcpy or "kind" not in memcpy:
        return np.zeros(len(memcpy), bool)
    return np.asarray(tx.eq(memcpy["kind"], "DtoH") & tx.eq(memcpy["dst_kind"], "pageable"), bool)


API_COLUMNS = ["start_ns", "end_ns", "pid", "tid", "correlation_id", "name"]  # what the diagnosis reads of the calls


def _host_calls(report: NsysFrames, pid: int, api: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The process's CUDA API calls (for the launching thread of an op, and its sync calls) and its OS calls.  The
    calls get `waits`: the host waited for the GPU in them (syncs, synchronous copies, blocking read-backs).
    api: the report's calls (API_COLUMNS at least)."""
    if len(api) and not (mine := (api["pid"] == pid).to_numpy()).all():  # one process: no copy
        api = api[mine]
    if len(api):
        m = report.memcpy
        back = m[blocking_readbacks(m) & (m["pid"] == pid).to_numpy()] if len(m) else m
        back = back[back["correlation_id"].notna().to_numpy()] if len(back) else back
        waits, got = _is_sync(api["name"]) | tx.contains(api["name"], _FREE_SYNC), np.zeros(len(api), np.int64)
        if len(back):
            size = pd.Series(back["bytes"].fillna(0).to_numpy(np.int64),
                             index=back["correlation_id"].to_numpy(np.int64))
            size = size[~size.index.duplicated()]
            got = size.reindex(api["correlation_id"].to_numpy(np.int64, na_value=-1)).fillna(0).to_numpy(np.int64)
            waits = waits | (got > 0)
        api = api.assign(waits=waits, readback_bytes=got)
    osrt = report.osrt
    if len(osrt):
        osrt = osrt[osrt["pid"] == pid]
        if "nesting_level" in osrt:
            osrt = osrt[pd.to_numeric(osrt["nesting_level"], errors="coerce").fillna(0).to_numpy() == 0]
    return api, osrt


# ---- per process and GPU ---------------------------------------------------------------------------------------

def _window(report: NsysFrames, pid: int, ops: pd.DataFrame, steps: Steps | None,
            launched: Lookup) -> tuple[tuple[int, int], float, str]:
    """The steady-state window of a process: steps after the first (stretched to the GPU work they launched), or
    the GPU's first to last operation.  `launched`: correlation ids -> launch time (the CUDA call's start)."""
    first, last = int(ops["start_ns"].min()), int(ops["end_ns"].max())
    steady = steps.steady() if steps is not None else None
    if steps is not None and steady is not None:
        a, b = steady
        # GPU work runs after its launch: a GPU-bound loop's (or a rank waiting in its collectives) last steps end
        # on the GPU long after the CPU's ranges
        at = launched(ops["correlation_id"].to_numpy(np.int64, na_value=-1))
        at = np.where(at >= 0, at, ops["start_ns"].to_numpy(np.int64))
        mine = at <= b
        if mine.any():
            b = max(b, int(ops["end_ns"].to_numpy(np.int64)[mine].max()))
        scale = steps.count / max(steps.steady_count, 1)
        source = (f"steps {steps.count - steps.steady_count + 1}-{steps.count} of '{steps.name}' "
                  f"(the first, warm-up, step left out)" if steps.steady_count < steps.count else
                  f"{steps.count} steps of '{steps.name}'")
        return (a, max(b, a + 1)), scale, source
    return (first, max(last, first + 1)), 1.0, "the GPU's first to last operation (no repeated NVTX range marks steps)"


def _pair(report: NsysFrames, pid: int, dev: int, ops: pd.DataFrame, window: tuple[int, int], scale: float,
          steps: Steps | None, api: pd.DataFrame, osrt: pd.DataFrame, launch_tid: Lookup) -> Pair:
    a, b = window
    os_, oe = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    code = np.asarray(ops["cat"].cat.codes)  # OP_CATS's

    def of(cat: str) -> I.Intervals:
        m = code == OP_CATS.index(cat)
        return I.union(os_[m], oe[m])

    comp = of("compute")
    comm = I.subtract(of("communication"), comp)
    kern = I.union(np.r_[comp[0], comm[0]], np.r_[comp[1], comm[1]]) if len(comm[0]) else comp
    copy = I.subtract(of("copy"), kern)
    # every operation is of one of the three: their union is that of the kernels' and the copies', disjoint sets
    # made already (merged, not a pass over every operation again)
    busy = I.union(np.r_[kern[0], copy[0]], np.r_[kern[1], copy[1]]) if len(copy[0]) else kern
    lo, hi = int(os_.min()), int(oe.max())
    gs, ge = I.gaps(busy, min(lo, a), max(hi, b))
    del kern, busy  # not needed again: let _classify have their memory (two op-long arrays each at 13M ops)
    gaps = _classify(gs, ge, ops, api, osrt, launch_tid)
    in_w = (gaps["start_ns"] >= a) & (gaps["end_ns"] <= b)
    # a gap cut by the window's edge counts with the part inside
    cut = (gaps["end_ns"] > a) & (gaps["start_ns"] < b) & ~in_w
    gaps["in_window"] = pd.Series(compacted((in_w | cut).to_numpy(bool)), index=gaps.index, copy=False)
    inside = np.minimum(gaps["end_ns"], b) - np.maximum(gaps["start_ns"], a)
    frac = np.where(gaps["in_window"], inside / np.maximum(gaps["end_ns"] - gaps["start_ns"], 1), 0.0)
    totals = {"compute": I.total(I.clip(comp, a, b)), "communication": I.total(I.clip(comm, a, b)),
              "copy": I.total(I.clip(copy, a, b))}
    for c in IDLE:
        totals[c] = int(round(float((gaps[c].to_numpy(float) * frac).sum())))
    # rounding: the categories add up to the window exactly
    totals["launch"] += (b - a) - sum(totals.values())
    totals["launch"] = max(totals["launch"], 0)
    slack = _host_slack(api, (a, b))
    _refill(gaps, frac, totals, api, (a, b))
    return Pair(pid, dev, (a, b), steps, scale, totals, gaps,
                {"compute": comp, "communication": comm, "copy": copy}, slack)


def _is_sync(names: pd.Series) -> np.ndarray:
    """The calls that wait for the GPU: syncs and synchronous copies."""
    return np.asarray(tx.contains(names, _API_SYNC) | tx.contains(names, _MEMCPY_SYNC))


def _host_slack(api: pd.DataFrame, window: tuple[int, int]) -> int | None:
    """How long the launching threads waited for the GPU inside the window: in sync calls, and in other CUDA calls
    far beyond their usual time (a launch on a full queue, cudaFree waiting for the kernels).  The GPU's work can
    shrink by this much before the host sets the pace: what GPU-side fixes save at most."""
    if not len(api):
        return None
    a, b = window
    tid = api["tid"].to_numpy(np.int64)
    launchers = pd.unique(tid[tx.contains(api["name"], "Launch", regex=False)])  # a hash, not a sort of 10M
    mine: Any = np.isin(tid, launchers) if len(launchers) else slice(None)
    if not isinstance(mine, slice) and mine.all():  # every call is a launching thread's: the columns, no copies
        mine = slice(None)
    start, end = api["start_ns"].to_numpy(np.int64)[mine], api["end_ns"].to_numpy(np.int64)[mine]
    dur = end - start
    sync = api["waits"].to_numpy(bool)[mine]
    names = api["name"]
    code = (np.asarray(names.cat.codes) if isinstance(names.dtype, pd.CategoricalDtype)
            else pd.factorize(names, use_na_sentinel=False)[0])
    typical = _median_by(dur, code[mine])
    blocked = ~sync & (dur > BLOCKED_CALL_FACTOR * typical) & (dur > typical + BLOCKED_CALL_NS)
    w = sync | blocked
    if not w.any():
        return 0
    iv = I.union(start[w], end[w])
    return I.total(I.clip(iv, a, b))


def _median_by(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Each row's group median of `values` (as pandas' groupby median: the mean of the middle two), by sorting the
    group codes once (a few call names: their codes sort by radix) rather than a groupby's per-group work."""
    if not len(values):
        return np.zeros(0)
    order = np.argsort(group, kind="stable")
    g = group[order]
    cuts = np.flatnonzero(np.r_[True, g[1:] != g[:-1], True])
    med = np.array([np.median(values[order[a:b]]) for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist())])
    out = np.empty(len(values))
    out[order] = np.repeat(med, np.diff(cuts))
    return out


def _refill(gaps: pd.DataFrame, frac: np.ndarray, totals: dict[str, int], api: pd.DataFrame,
            window: tuple[int, int]) -> None:
    """When the host could have kept ahead of the GPU but for its syncs, the launch gaps after them are the syncs'.

    A sync empties the GPU's queue; the GPU then runs at the host's pace until the host is ahead again.  _classify
    charges a sync at most the time the host waited in it (the lead it gave up).  But when the host's own work in
    the window (the window less its time in sync calls) is less than the GPU's, the loop without the syncs would
    have been GPU-bound: what they cost is the window less the larger of the two (and less the idle time other
    causes explain), and that much of the launch time after syncs moves to sync."""
    a, b = window
    if not len(api) or not gaps["after_sync"].any():
        return
    s = api[api["waits"].to_numpy(bool)]
    if s.empty:
        return
    waited = I.total(I.clip(I.union(s["start_ns"], s["end_ns"]), a, b))
    gpu = totals["compute"] + totals["communication"] + totals["copy"]
    host = (b - a) - waited
    others = sum(totals[c] for c in IDLE if c not in ("sync", "launch"))
    cost = (b - a) - max(host, gpu) - others
    extra = cost - totals["sync"]
    after = gaps["after_sync"].to_numpy() & (frac > 0)
    movable = gaps["launch"].to_numpy(float) * frac * after
    if extra <= 0 or movable.sum() <= 0:
        return
    share = min(1.0, extra / movable.sum())
    moved = np.round(gaps["launch"].to_numpy(float) * after * share).astype(np.int64)
    gaps["sync"] = gaps["sync"].to_numpy(np.int64) + moved
    gaps["launch"] = gaps["launch"].to_numpy(np.int64) - moved
    shift = min(int(round(movable.sum() * share)), totals["launch"])
    totals["sync"] += shift
    totals["launch"] -= shift


def _classify(gs: np.ndarray, ge: np.ndarray, ops: pd.DataFrame, api: pd.DataFrame, osrt: pd.DataFrame,
              launch_tid: Lookup) -> pd.DataFrame:
    """Each idle gap's causes (ns per category), vectorised: see the module docstring.  Also per gap: the launching
    thread (tid), what ended it (next_kind), the sync whose wait it is charged to (sync_name, sync_start_ns, sync_ns)
    and how many CUDA calls that thread made during it (calls: each was slowed down by tracing); round_trip: the
    gap ends with a copy back of data the host read from the GPU as it began (_round_trip)."""
    n = len(gs)
    out: dict[str, Any] = {"start_ns": gs, "end_ns": ge}  # columns, framed once at the end (a million gaps)
    # the columns each gap has in its order; those the steps below set are made there, not filled twice
    for c in IDLE:  # a category no gap has stays one value (held once: constant_columns)
        out[c] = constant(0, n, np.int64)
    out["tid"] = None
    out["next_kind"] = ""
    out["sync_name"] = None
    out["sync_start_ns"] = None
    out["sync_ns"] = None
    out["calls"] = np.zeros(n, np.int64)
    out["after_sync"] = out["round_trip"] = None
    if not n:
        out.update(tid=pd.array([], dtype="Int64"), sync_start_ns=np.zeros(0, np.int64), sync_ns=np.zeros(0, np.int64),
                   after_sync=np.zeros(0, bool), round_trip=np.zeros(0, bool))
        return pd.DataFrame(out)
    dur = ge - gs
    starts = ops["start_ns"].to_numpy(np.int64)
    nxt = np.searchsorted(starts, ge, "left")  # the operation that ends the gap starts at its end
    has_next = nxt < len(starts)
    nxt_c = np.minimum(nxt, len(starts) - 1)
    code = np.asarray(ops["cat"].cat.codes)[nxt_c]  # OP_CATS's (_gpu_ops)
    code = np.where(has_next, np.where(ops["htod_batch"].to_numpy()[nxt_c], len(OP_CATS), code), len(OP_CATS) + 1)
    out["next_kind"] = pd.Categorical.from_codes(code, categories=NEXT_KINDS)  # codes, not a string per gap
    tid = launch_tid(ops["correlation_id"].to_numpy(np.int64, na_value=-1)[nxt_c])
    tid = np.where(has_next, tid, -1)  # framed at the end (in place: 13M gaps)
    typical = int(np.median(dur)) if n else 0
    left = dur.astype(np.int64).copy()
    # a round trip: the host computed on data it read back from the GPU and sends the result back (not input)
    rt = np.zeros(n, bool)
    batch = code == len(OP_CATS)
    del code
    if batch.any() and len(api) and "readback_bytes" in api:
        rt = batch & _round_trip(gs, ge, ops["bytes"].to_numpy(np.int64)[nxt_c], api)
    out["round_trip"] = rt
    # input: the gap before a batch's copy, beyond a typical launch gap
    inp = batch & ~rt & (dur - typical >= INPUT_MIN_GAP_NS)
    take = np.where(inp, np.maximum(dur - typical, 0), 0)
    out["input"] = take
    left -= take
    del dur, nxt, nxt_c, has_next, take  # gap-long arrays not needed again (13M gaps: 100 MB each)
    rows_of: dict[int, Any] = {}  # per launching thread, its gaps: every gap (a slice, no copies) in a one-thread loop

    def gaps_of(th: int) -> Any:
        if th not in rows_of:
            mine = tid == th
            rows_of[th] = slice(None) if mine.all() else np.flatnonzero(mine)
        return rows_of[th]

    by_thread = {}  # the calls of each thread that launched a gap's next op (a copy of what is needed, no more)
    if len(api):
        api_tid, calls_of = api["tid"].to_numpy(np.int64), api[["start_ns", "end_ns", "name", "waits"]]
        calls = np.zeros(n, np.int64)  # the CUDA calls the launching thread made in each gap
        for th in np.unique(tid[tid >= 0]).tolist():
            mine = api_tid == th
            g = by_thread[th] = calls_of if mine.all() else calls_of[mine]
            m = gaps_of(th)
            cs = g["start_ns"].to_numpy(np.int64)
            if len(cs) > 1 and not (cs[1:] >= cs[:-1]).all():  # the frames come sorted by start
                cs = np.sort(cs)
            calls[m] = np.searchsorted(cs, ge[m]) - np.searchsorted(cs, gs[m])
        out["calls"] = calls
    # the launching thread in the allocator or loading modules: CUDA calls of those classes overlapping the gap
    # tid -> the union of the named calls' intervals (OS waits inside them are theirs)
    named: dict[int, I.Intervals] = {}
    for cat, rx in HOST_CALLS.items():
        got = None
        for th, g in by_thread.items():
            g = g[tx.contains(g["name"], rx)]
            if g.empty:  # (every thread in by_thread launched some gap's op)
                continue
            m = gaps_of(int(th))
            iv = I.union(g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64))
            at, part = I.meeting(iv, gs[m], ge[m])  # a few calls against a million gaps: those they meet
            got = np.zeros(n, np.int64) if got is None else got
            got[I.within(m, at)] = part
            prev = named.get(int(th))
            named[int(th)] = iv if prev is None else I.union(np.r_[prev[0], iv[0]], np.r_[prev[1], iv[1]])
        if got is None:  # no such call: none of the gap-long arrays
            continue
        take = np.minimum(left, got)
        out[cat] = compacted(take)
        left -= take
        del got, take
    # host wait: the launching thread blocked in the OS (outside those calls) during the rest of the gap
    if len(osrt):
        blocked = np.zeros(n, np.int64)
        for th, g in osrt.groupby("tid"):
            m = gaps_of(int(th))
            if not isinstance(m, slice) and not len(m):
                continue
            iv = I.union(g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64))
            if int(th) in named:
                iv = I.subtract(iv, named[int(th)])
            at, part = I.meeting(iv, gs[m], ge[m])
            blocked[I.within(m, at)] = part
        hw = blocked >= HOST_BLOCKED_SHARE * np.maximum(left, 1)
        take = np.where(hw, np.minimum(left, blocked), 0)
        out["host wait"] = take
        left -= take
    # sync: the idle time after a synchronising call returned, until that thread's next one, up to the time the
    # host waited in it: the lead over the GPU it gave up (the GPU drains its queue meanwhile, then idles while the
    # host queues work again).  Charged from what would otherwise be launch overhead.
    # gap-long arrays written only where a sync takes time: made (and touched) only then
    sync_take = np.zeros(n, np.int64)
    sync_code: np.ndarray | None = None  # into sync_names: a few call names for up to millions of gaps
    sync_names: dict[str, int] = {}
    sync_start: np.ndarray | None = None
    sync_wait = np.zeros(n, np.int64)
    after_sync = np.zeros(n, bool)
    for th, g in by_thread.items():
        g = g[g["waits"].to_numpy(bool)]
        if g.empty:
            continue
        m = gaps_of(int(th))
        g = g.sort_values("start_ns", kind="stable")  # one thread's calls: one after the other
        se, ss = g["end_ns"].to_numpy(np.int64), g["start_ns"].to_numpy(np.int64)
        # the thread's last sync begun by the gap's start: returned by then, or during the gap (a read-back into
        # pageable memory returns after the GPU's copy, once the driver copied its staging buffer)
        k = np.searchsorted(ss, gs[m] + SYNC_TOLERANCE_NS, "right") - 1
        nxt_start = np.r_[ss[1:], np.iinfo(np.int64).max]
        kk = np.maximum(k, 0)
        ok = (k >= 0) & (gs[m] < nxt_start[kk]) & (se[kk] <= ge[m])
        # syncs closer together than the tolerance (a check after every backward node): when the sync it found
        # returned only after the gap, the gap follows the one before
        back = ~ok & (k >= 1) & (gs[m] < ss[kk]) & (se[np.maximum(k - 1, 0)] <= ge[m])
        k = np.where(back, k - 1, k)
        kk = np.maximum(k, 0)
        ok |= back
        if not ok.any():
            continue
        mm, kk = (np.flatnonzero(ok) if isinstance(m, slice) else m[ok]), kk[ok]
        after_sync[mm] = True
        budget = (se - ss)[kk]
        avail = left[mm]
        if len(kk) > 1 and not (kk[1:] >= kk[:-1]).all():  # by sync, then in time (the gaps come in time)
            order = np.lexsort((gs[mm], kk))
            mm, kk, budget, avail = mm[order], kk[order], budget[order], avail[order]
        cum = np.cumsum(avail)
        first = np.r_[True, kk[1:] != kk[:-1]]
        base = np.maximum.accumulate(np.where(first, cum - avail, 0))  # what the group's earlier gaps held
        before = cum - avail - base
        take = np.clip(np.minimum(before + avail, budget) - np.minimum(before, budget), 0, None)
        hit = take > 0
        if not hit.any():
            continue
        sync_take[mm[hit]] = take[hit]
        if sync_code is None or sync_start is None:
            sync_code, sync_start = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        names, inv = np.unique(g["name"].astype(str).to_numpy(object)[kk[hit]], return_inverse=True)
        sync_code[mm[hit]] = np.array([sync_names.setdefault(x, len(sync_names)) for x in names], np.int64)[inv]
        sync_start[mm[hit]] = ss[kk[hit]]
        sync_wait[mm[hit]] = budget[hit]
    if sync_code is None or sync_start is None:
        sync_code, sync_start = constant(-1, n, np.int64), constant(-1, n, np.int64)
    freed = np.zeros(n, bool)  # the wait after a cudaFree: the allocator's
    for name, known in sync_names.items():
        if _FREE_SYNC.search(name):
            freed |= sync_code == known
    if freed.any():
        out["allocator"] = out["allocator"] + np.where(freed, sync_take, 0)
        sync_take = np.where(freed, 0, sync_take)
    out["sync"] = sync_take
    out["sync_name"] = pd.Categorical.from_codes(sync_code, categories=list(sync_names))
    out["sync_start_ns"] = sync_start
    out["sync_ns"] = sync_wait
    out["after_sync"] = after_sync
    left -= sync_take
    np.maximum(left, 0, out=left)
    out["launch"] = left
    unknown = tid < 0
    np.putmask(tid, unknown, 0)
    out["tid"] = pd.arrays.IntegerArray(tid, unknown)
    # its own arrays, not copied into blocks (a million gaps); a column of one value (a category no gap has, no
    # sync in the loop) held as that value
    return pd.DataFrame({c: compacted(v) for c, v in out.items()}, copy=False)


def _round_trip(gs: np.ndarray, ge: np.ndarray, copy_bytes: np.ndarray, api: pd.DataFrame) -> np.ndarray:
    """Gaps that end with a host-to-device copy no larger than what the process read back from the GPU
    (blocking_readbacks) as the gap began: the host computed on the GPU's data and sent it back (a weight, a loss
    done in numpy, a layer left on the CPU), not a new batch.  An input loop reads back values or outputs, smaller
    than its batches.  Any thread's read-back counts: autograd's device thread reads the gradients back that the
    main thread's CPU work then uses."""
    rb = api[api["readback_bytes"].to_numpy() > 0]
    if rb.empty:
        return np.zeros(len(gs), bool)
    rb = rb.sort_values("start_ns", kind="stable")
    rs, re = rb["start_ns"].to_numpy(np.int64), rb["end_ns"].to_numpy(np.int64)
    size = rb["readback_bytes"].to_numpy(np.int64)
    # the read-back under way as the GPU went idle (its call returns after the copy: the driver's staging)
    j = np.searchsorted(rs, gs, "right") - 1
    jj = np.maximum(j, 0)
    ok = (j >= 0) & (re[jj] >= gs - SYNC_TOLERANCE_NS) & (re[jj] <= ge)
    return np.asarray(ok & (size[jj] >= copy_bytes))


@per_frame
def _correlation_keys(api: pd.DataFrame) -> tuple[FirstMatch, Any]:
    """The join on the correlation ids of the calls that have one (readers.nsys_frames.FirstMatch: a binary search,
    since a process's ids grow with its calls), and those calls' rows in the frame: a slice where every call has
    one (CUDA's runtime calls do), so that their columns are taken without copies (13M calls at 10M kernels)."""
    have = api["correlation_id"].notna().to_numpy()
    rows: Any = slice(None) if have.all() else np.flatnonzero(have)
    return FirstMatch(api["correlation_id"].to_numpy(np.int64, na_value=-1)[rows]), rows


def by_correlation(api: pd.DataFrame, column: str, keys: tuple[FirstMatch, Any] | None = None) -> Lookup:
    """correlation ids -> a column of the CUDA call that launched them (the thread, the launch time; the first
    call with the id); -1 when unknown.  keys: _correlation_keys(api), where several columns are looked up (made
    once: a copy and a scan of 13M ids at 10M kernels)."""
    if api.empty:
        return lambda corr: np.full(len(np.asarray(corr)), -1, np.int64)
    match, rows = keys or _correlation_keys(api)
    values = api[column].to_numpy(np.int64)[rows]

    def lookup(corr: npt.ArrayLike) -> np.ndarray:
        c = corr if isinstance(corr, np.ndarray) and corr.dtype == np.int64 else \
            pd.array(corr, dtype="Int64").to_numpy(dtype=np.int64, na_value=-1)
        i = match(c)
        return np.where((i >= 0) & (c >= 0), values[np.maximum(i, 0)], -1)

    return lookup


# ---- the report ------------------------------------------------------------------------------------------------

@dataclass
class Diagnosis:
    """Per (process, GPU) breakdowns of a report, shared by bottleneck() and the findings' time at stake."""

    pairs: list[Pair]
    steps: dict[int, Steps]       # pid -> Steps
    sources: dict[int, str]       # pid -> how its window was chosen
    startup: dict[int, int]       # pid -> ns from the capture start to its first step / first GPU operation
    capture: tuple[int, int]
    ops: pd.DataFrame             # the GPU operations by start: start_ns, end_ns, pid, device_id, correlation_id
    _all_gaps: pd.DataFrame | None = field(default=None, repr=False, compare=False)  # gaps(), built once
    # gaps(category): the rows of each, found once (positions, not frames: "launch" holds nearly every gap, and a
    # kept copy of 13M gaps was 1.7 GB at 10M kernels); None: every gap
    _gaps_of: dict[str, npt.NDArray[np.intp] | None] = field(default_factory=dict, repr=False, compare=False)

    def scaled(self, category: str, pid: int | None = None) -> int:
        """A category's time in the steady window scaled to the whole loop; the largest over processes and GPUs
        (they run at the same time: a fix saves wall time once)."""
        vals = [p.totals[category] * p.scale for p in self.pairs if pid is None or p.pid == pid]
        return int(max(vals, default=0))

    def by_pair(self, category: str) -> dict[tuple[int, int], int]:
        return {(p.pid, p.device): int(p.totals[category] * p.scale) for p in self.pairs}

    def gaps(self, category: str | None = None, largest: int | None = None) -> pd.DataFrame:
        """Idle gaps of every pair (with pid, device_id), or those with time of one category.  `largest`: where
        there are more, only that many with the most time of it, most first (ties in order, as
        DataFrame.nlargest(keep="first")), taken without copying the others (13M launch gaps are 1.7 GB)."""
        if self._all_gaps is None:  # the rules ask for it ten times: a million gaps are framed once
            parts = [p.gaps.assign(**{k: pd.Series(constant(v, len(p.gaps)), index=p.gaps.index, copy=False)
                                      for k, v in (("pid", p.pid), ("device_id", p.device), ("scale", p.scale))})
                     for p in self.pairs if len(p.gaps)]
            # one pair (one process on one GPU): its own columns, and its process, GPU and scale held once each
            self._all_gaps = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True) if parts else \
                pd.DataFrame(columns=["start_ns", "end_ns", *CATEGORIES[3:], "tid", "next_kind", "sync_name",
                                      "sync_ns", "in_window", "pid", "device_id", "scale"])
        g = self._all_gaps
        rows = self._rows_of(category) if category else None
        if rows is None:  # every gap: the frame itself (a caller's new columns stay its own)
            if not category or largest is None or len(g) <= largest:
                return g.copy(deep=False)
            rows = top.largest(g[category].to_numpy(), largest)
        elif largest is not None and len(rows) > largest:
            rows = rows[top.largest(g[category].to_numpy()[rows], largest)]
        return g.take(rows)

    def gap_count(self, category: str) -> int:
        """How many gaps hold time of `category` (gaps(category) with no `largest`)."""
        rows = self._rows_of(category)
        return len(self.gaps()) if rows is None else len(rows)

    def _rows_of(self, category: str) -> npt.NDArray[np.intp] | None:
        if category not in self._gaps_of:  # the rules ask for the same categories again
            g = self.gaps()
            has = (g[category] > 0).to_numpy(dtype=bool, na_value=False)
            rows = np.flatnonzero(has)
            # 4 bytes a position where they fit (launch: 13M gaps but a few)
            self._gaps_of[category] = None if len(rows) == len(g) else \
                rows.astype(np.int32) if len(g) < 2**31 else rows
        return self._gaps_of[category]

    def exposed(self, starts: npt.ArrayLike, ends: npt.ArrayLike, pids: npt.ArrayLike, devices: npt.ArrayLike) -> int:
        """How much of the given GPU operations' time lies in the copy category of the steady windows (copies not
        hidden behind kernels), scaled to the loop; the largest over pairs."""
        best = 0
        s, e = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
        for p in self.pairs:
            m = (np.asarray(pids) == p.pid) & (np.asarray(devices) == p.device)
            if not m.any():
                continue
            iv = I.intersect(I.clip(p.busy["copy"], *p.window), I.union(s[m], e[m]))
            best = max(best, int(I.total(iv) * p.scale))
        return best

    @property
    def window_total(self) -> int:
        """The largest window scaled to its whole loop: what the findings' time at stake adds up to at most."""
        return int(max((p.window_ns * p.scale for p in self.pairs), default=0))


def diagnose(report: NsysFrames) -> Diagnosis:
    """The per-(process, GPU) breakdowns of a report (computed once per report: frame_memo.report_memo)."""
    memo = report_memo(report)
    if "diagnosis" in memo:
        known: Diagnosis = memo["diagnosis"]
        return known
    # read in threads while the steps are found (the kernels' frame is the largest)
    report.prefetch("kernels", "memcpy", "memset", "graphs", "cuda_api", "osrt")
    steps = find_steps(report)
    ops = _gpu_ops(report)
    calls = _op_columns(report, "cuda_api", API_COLUMNS)
    span = report.time_span
    pairs, sources, startup = [], {}, {}
    for pid, pops in _groups(ops, "pid"):
        st = steps.get(pid)
        api, osrt = _host_calls(report, pid, calls)
        keys = _correlation_keys(api) if len(api) else None
        tids = by_correlation(api, "tid", keys)
        window, scale, source = _window(report, pid, pops, st, by_correlation(api, "start_ns", keys))
        del keys
        first = int(st.starts[0]) if st is not None else int(pops["start_ns"].min())
        startup[pid] = max(0, first - span.start_ns)
        sources[pid] = source
        for dev, d in _groups(pops, "device_id"):
            pairs.append(_pair(report, pid, dev, d, window, scale, st, api, osrt, tids))
    # the rules look up operations by time and correlation id: the categories and bytes go (117 MB at 10M kernels)
    ops = ops[["start_ns", "end_ns", "pid", "device_id", "correlation_id"]]
    diag = Diagnosis(pairs, steps, sources, startup, (span.start_ns, span.end_ns), ops)
    try:
        memo["diagnosis"] = diag
    except AttributeError:
        pass
    return diag


def _groups(ops: pd.DataFrame, column: str) -> Iterator[tuple[int, pd.DataFrame]]:
    """(value, rows) per value of an integer column, in order, each with a fresh index; the frame itself where it
    holds one value (one process, one GPU: the usual case, where a groupby and its copy cost 0.1 s at 1M
    operations and 0.7 GB at 13M)."""
    col = ops[column].to_numpy(np.int64)
    if len(col) and (col == col[0]).all():
        yield int(col[0]), ops if isinstance(ops.index, pd.RangeIndex) and ops.index.start == 0 and \
            ops.index.step == 1 else ops.reset_index(drop=True)
        return
    for value, rows in ops.groupby(column, sort=True):
        yield int(value), rows.reset_index(drop=True)


def _shares(totals: dict[str, int], window_ns: int) -> dict[str, float]:
    return {c: 100.0 * totals.get(c, 0) / max(window_ns, 1) for c in CATEGORIES}


def verdict_kind(pct: dict[str, float]) -> str:
    if pct["compute"] >= GPU_BOUND_PCT:
        return "gpu"
    by_kind: dict[str, float] = {}
    for c in CATEGORIES[1:]:
        by_kind[KIND_OF[c]] = by_kind.get(KIND_OF[c], 0.0) + pct[c]
    kind, share = max(by_kind.items(), key=lambda kv: kv[1])
    return "gpu" if share < MINOR_PCT else kind


_WHAT = {
    "gpu": "GPU-bound: kernels keep the GPU busy {compute:.0f}% of the steady state{matrix}; look at the kernels "
           "(%%ncu) rather than the host",
    "cpu": "CPU-bound: the GPU waits for the host {cpu:.0f}% of the steady state ({host_parts})",
    "input": "input-bound: the GPU waits for the next batch {input:.0f}% of the steady state",
    "copy": "copy-bound: copies the kernels do not hide take {copy:.0f}% of the steady state",
    "sync": "sync-bound: after host synchronisations the GPU idles {sync:.0f}% of the steady state",
    "communication": "communication-bound: collectives not hidden by compute take {communication:.0f}% of the "
                     "steady state",
}


QUIET_SHOWN_PCT = 5  # the verdict names host code that launches nothing from this share of the window on
HOST_WORDS = {"launch": "launch overhead and Python", "allocator": "the CUDA allocator",
              "module load": "loading GPU code", "host wait": "the host blocked in the OS"}


def quiet_gaps(gaps: pd.DataFrame, min_ns: float | None = None, max_calls: float | None = None) -> np.ndarray:
    """Which launch gaps are host code that launches nothing: at least `min_ns` of launch time in which the
    launching thread made at most `max_calls` CUDA calls per `min_ns` (defaults: thresholds host_code.*).  A rate,
    not a count: torch.save's 12 ms per tensor between its copies makes 3 calls, a launch-bound loop one every few
    microseconds."""
    from ..thresholds import DEFAULTS

    min_ns = DEFAULTS["host_code.min_gap_ms"] * 1e6 if min_ns is None else min_ns
    max_calls = DEFAULTS["host_code.max_calls"] if max_calls is None else max_calls
    if gaps.empty or "calls" not in gaps:
        return np.zeros(len(gaps), bool)
    launch = gaps["launch"].to_numpy(float)
    return np.asarray((launch >= min_ns)
                      & (gaps["calls"].to_numpy(float) <= max_calls * np.maximum(launch / max(min_ns, 1), 1)))


def _quiet_pct(pairs: list[Pair]) -> float:
    """The share of the steady windows in launch gaps of code that launches nothing (quiet_gaps)."""
    quiet = sum(float(p.gaps["launch"].to_numpy(float)[quiet_gaps(p.gaps) & p.gaps["in_window"].to_numpy(bool)].sum())
                for p in pairs if len(p.gaps))
    return 100.0 * quiet / max(sum(p.window_ns for p in pairs), 1)


# without the OS runtime traced, a wait in the OS looks like any other time the launching thread did not launch
UNTRACED_LAUNCH = "launch overhead, Python and waits in the OS (not told apart: the OS runtime was not traced)"


def osrt_traced(report: NsysFrames) -> bool:
    """Whether the report holds OS runtime calls (nsys -t ...,osrt): without them no time is known to be spent
    blocked in the OS, and nothing may be said of it."""
    return "OSRT_API" in report.meta.tables or len(report.osrt) > 0


def verdict_summary(kind: str, pct: dict[str, float], matrix: str = "", quiet_pct: float = 0.0,
                    osrt: bool = True) -> str:
    parts = sorted(HOST, key=lambda c: -pct[c])
    shown = [c for c in parts if pct[c] >= 0.5] or ["launch"]
    if "launch" not in shown:
        shown.append("launch")
    if "host wait" not in shown and osrt:
        shown.append("host wait")
    words = dict(HOST_WORDS, launch=UNTRACED_LAUNCH) if not osrt else HOST_WORDS
    said = [(words[c], pct[c]) for c in shown if osrt or c != "host wait"]
    if quiet_pct >= QUIET_SHOWN_PCT:  # launch gaps are launch overhead or code that launches nothing (host_code)
        quiet = min(quiet_pct, pct["launch"])
        at = shown.index("launch")
        from ..thresholds import DEFAULTS

        said[at:at + 1] = [(f"host code launching nothing for {DEFAULTS['host_code.min_gap_ms']:g} ms or more", quiet),
                           (words["launch"], pct["launch"] - quiet)]
    host_parts = ", ".join(f"{w} {v:.0f}%" for w, v in said)
    return _WHAT[kind].format(**pct, cpu=sum(pct[c] for c in HOST), host_parts=host_parts, matrix=matrix)


def _matrix_words(report: NsysFrames, window: tuple[int, int]) -> str:
    """A GPU-bound verdict's first question: do the matrix kernels hold the time, and on the tensor cores?"""
    from .kernel_classes import MATRIX, kernel_classes

    kc = kernel_classes(report, window)
    m = kc[kc["cls"].isin(MATRIX)]
    if m.empty or kc["time_ns"].sum() <= 0:
        return _metrics_words(report, window)
    share = 100.0 * m["time_ns"].sum() / kc["time_ns"].sum()
    tc = 100.0 * m["tc_ns"].sum() / max(m["time_ns"].sum(), 1)
    metrics = _metrics_words(report, window)
    # fp64 runs on H100's tensor cores too, at a fraction of the TF32/bf16 rate: say so beside the share
    fp64 = 100.0 * m.loc[m["precision"] == "fp64", "time_ns"].sum() / max(m["time_ns"].sum(), 1)
    return (f"; matrix kernels (GEMM, convolution, attention) take {share:.0f}% of kernel time, {tc:.0f}% of that "
            f"on tensor cores" + (f", {fp64:.0f}% in fp64" if fp64 >= 1 else "") + metrics)


def _metrics_words(report: NsysFrames, window: tuple[int, int]) -> str:
    """'; GPU metrics: SMs active 97%, ... : memory-bound kernels' where nsys sampled the GPU's counters."""
    from .gpu_metrics import read_metrics

    got = read_metrics(report, window)
    return "".join(f"; GPU {m.device_id} metrics: {m.words}" for m in got[:2])


def bottleneck(report: NsysFrames) -> Bottleneck:
    """report.bottleneck(): see the module docstring (computed once per report: rules ask whether it is GPU-bound,
    the view and the job ask for the verdict)."""
    memo = report_memo(report)
    if "bottleneck" not in memo:
        memo["bottleneck"] = _bottleneck(report)
    got: Bottleneck = memo["bottleneck"]
    return got


def _bottleneck(report: NsysFrames) -> Bottleneck:
    d = diagnose(report)
    if not d.pairs:
        return _cpu_only(report)
    totals = {c: sum(p.totals[c] for p in d.pairs) for c in CATEGORIES}
    window_sum = sum(p.window_ns for p in d.pairs)
    pct = _shares(totals, window_sum)
    kind = verdict_kind(pct)
    ranks = report.ranks_by_pid
    osrt = osrt_traced(report)
    per = None
    pids = sorted({p.pid for p in d.pairs})
    if len(pids) > 1:
        rows = []
        for pid in pids:
            mine = [p for p in d.pairs if p.pid == pid]
            t = {c: sum(p.totals[c] for p in mine) for c in CATEGORIES}
            pp = _shares(t, sum(p.window_ns for p in mine))
            k = verdict_kind(pp)
            rows.append({"pid": pid, "rank": ranks.get(pid, (None, None))[0], "kind": k,
                         "summary": verdict_summary(k, pp, quiet_pct=_quiet_pct(mine), osrt=osrt),
                         **{f"{c.replace(' ', '_')}_pct": round(pp[c], 1) for c in CATEGORIES}})
        per = pd.DataFrame(rows)
        per["rank"] = per["rank"].astype("Int64")
        # ranks wait for each other: exposed collectives on any rank make it the job's bottleneck
        if kind != "communication" and per["communication_pct"].max() >= 2 * MINOR_PCT:
            kind = "communication"
    first = d.pairs[0]
    main_pid = next((pid for pid in pids if pid in d.steps), pids[0])
    st = d.steps.get(main_pid)
    breakdown = pd.DataFrame({"category": list(CATEGORIES), "time_ns": [int(totals[c]) for c in CATEGORIES],
                              "pct": [round(pct[c], 1) for c in CATEGORIES]})
    window = next((p.window for p in d.pairs if p.pid == main_pid), first.window)
    summary = verdict_summary(kind, pct, _matrix_words(report, window) if kind == "gpu" else "", _quiet_pct(d.pairs),
                              osrt)
    where = d.sources[main_pid]
    startup = d.startup.get(main_pid, 0)
    tail = f" (window: {where}"
    if startup >= 0.05 * max(d.capture[1] - d.capture[0], 1):
        tail += f"; {startup / 1e9:,.2f} s of start-up before it"
    summary += tail + ")"
    if len(pids) > 1:
        summary += f"; {len(pids)} processes"
    failed = _out_of_memory(report)
    if failed:  # a cell that failed is not bounded by anything: what it ran until then says what it would have been
        kind, summary = "memory", f"{failed}; until then {summary}"
    return Bottleneck(kind, summary, breakdown, window, where, st.count if st is not None else 0, startup, per)


def _out_of_memory(report: NsysFrames) -> str:
    """'out of memory: the cell failed ...' where the memory record holds a failed allocation, else ''."""
    from ..errors import ReportError
    from .gpu_memory import memory_summary

    try:
        d = memory_summary(report).devices
    except ReportError:  # a damaged snapshot: the GPU memory tab says why
        return ""
    d = d[np.isfinite(d["oom_ns"].astype(float))] if len(d) else d
    if d.empty:
        return ""
    r = d.iloc[0]
    subject = report.subject
    return (f"out of memory: {subject} failed on GPU {int(r['device_id'])} asking for {r['oom_asked'] / 2**20:,.0f} "
            f"MiB with {r['oom_free'] / 2**20:,.0f} MiB free")


def _cpu_only(report: NsysFrames) -> Bottleneck:
    """No GPU work was recorded: the main thread's time split into running and blocked in the OS."""
    subject = report.subject
    span = report.time_span
    a, b = span.start_ns, span.end_ns
    threads = cell_threads(report)
    blocked = 0
    osrt = report.osrt
    if len(osrt) and threads:
        pid, tid = next(iter(threads.items()))
        o = osrt[(osrt["pid"] == pid) & (osrt["tid"] == tid)]
        if "nesting_level" in o:
            o = o[pd.to_numeric(o["nesting_level"], errors="coerce").fillna(0).to_numpy() == 0]
        blocked = I.total(I.clip(I.union(o["start_ns"], o["end_ns"]), a, b))
    w = max(b - a, 1)
    if osrt_traced(report):
        breakdown = pd.DataFrame({"category": ["host running", "host blocked"], "time_ns": [w - blocked, blocked],
                                  "pct": [round(100.0 * (w - blocked) / w, 1), round(100.0 * blocked / w, 1)]})
        summary = (f"no GPU work was recorded: {subject} ran on the CPU (its thread blocked in the OS "
                   f"{100.0 * blocked / w:.0f}% of the capture)")
    else:  # how long it was blocked is not known: say only what was recorded
        breakdown = pd.DataFrame({"category": ["host"], "time_ns": [w], "pct": [100.0]})
        summary = (f"no GPU work was recorded: {subject} ran on the CPU (the OS runtime was not traced, so how long "
                   "its thread was blocked in the OS is not known: -t ...,osrt records it)")
    steps = find_steps(report)
    st = next(iter(steps.values()), None)
    return Bottleneck("cpu", summary, breakdown, (a, b), "the capture (no GPU work)",
                      st.count if st is not None else 0, 0, None)


