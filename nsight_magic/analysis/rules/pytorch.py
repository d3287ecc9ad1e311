"""PyTorch's own anti-patterns, where the profile shows them (the list of torch.profiler's pattern matcher and of
DLProf's expert system): an optimizer run tensor by tensor, gradients zeroed instead of dropped, a tensor made on
the CPU then copied to the GPU, a Python loop over a tensor's elements, a convolution's bias added just before a
BatchNorm removes it.

What shows them: the optimizer's step and zero_grad ranges every profiled PyTorch cell gets
(inside/training_ranges.py), the operator ranges of --ops, and the kernels' names and order (kernel_classes).
Host-side causes take their time at stake from the GPU's idle time inside their stretch, less what tracing added
(Context.host_stake), and claim it from launch_bound; GPU-side ones from kernels.gpu_side_saving.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...inside.training_ranges import TRAINING_DOMAIN
from .. import intervals as I
from ..kernel_classes import with_classes
from .common import Claims, Context, Finding, Found, api_of, estimate_words, evidence, ranges_of, where_words
from .kernels import gpu_side_saving
from .. import text as tx
from ...readers.contract import NsysFrames
from ...readers.nsys_frames import gkey

SMALL_CLASSES = ("elementwise", "indexing", "layout", "reduction")
LOOP_MAX_PERIOD = 8       # a Python loop body launching up to this many kernels per iteration
FACTORY_OPS = re.compile(r"^aten::(?:full|ones|zeros|empty|rand|randn|randint|arange|linspace|tensor|"
                         r"scalar_tensor|eye|normal|uniform_|fill_|zero_)")
COPY_OPS = re.compile(r"^aten::(?:to|_to_copy|copy_|cuda)$")


def _training_ranges(report: NsysFrames, pattern: str) -> pd.DataFrame:
    nv = report.nvtx
    if nv.empty or "domain" not in nv:
        return nv.iloc[0:0]
    r = nv[(tx.eq(nv["domain"], TRAINING_DOMAIN)) & nv["end_ns"].notna().to_numpy()]
    return r[tx.contains(r["name"], pattern, regex=True)]


def _gaps_in(ctx: Context, ranges: pd.DataFrame) -> pd.DataFrame:
    """The diagnosis's idle gaps (steady windows) that lie inside the given ranges of their process."""
    g = ctx.diag.gaps()
    if g.empty or ranges.empty:
        return g.iloc[0:0]
    keep = np.zeros(len(g), bool)
    for pid, r in ranges.groupby("pid"):
        iv = I.union(r["start_ns"].to_numpy(np.int64), pd.to_numeric(r["end_ns"]).to_numpy(np.int64))
        m = (g["pid"] == pid).to_numpy()
        inside = I.overlap(iv, g["start_ns"].to_numpy(np.int64)[m], g["end_ns"].to_numpy(np.int64)[m])
        keep[np.flatnonzero(m)] = inside > 0.5 * (g["end_ns"] - g["start_ns"]).to_numpy()[m]
    return g[keep]


def _launched_in(k: pd.DataFrame, api: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """The GPU operations `k` (kernels, copies) whose launch call (in `api`) was made inside the ranges, on the
    range's thread."""
    if k.empty or ranges.empty:
        return k.iloc[0:0]
    a = api_of(k, api, ("api_tid", "api_start_ns"))
    t = pd.to_numeric(a["api_start_ns"]).to_numpy()
    tid = pd.to_numeric(a["api_tid"]).to_numpy()
    keep = np.zeros(len(k), bool)
    for (pid, th), r in ranges.groupby(["pid", "tid"]):
        s = np.sort(r["start_ns"].to_numpy(np.int64))
        e = pd.to_numeric(r["end_ns"]).to_numpy(np.int64)[np.argsort(r["start_ns"].to_numpy(np.int64))]
        m = (k["pid"].to_numpy() == pid) & (tid == th) & ~np.isnan(t)
        j = np.searchsorted(s, t[m], "right") - 1
        ok = (j >= 0) & (t[m] < e[np.maximum(j, 0)])
        keep[np.flatnonzero(m)[ok]] = True
    return k[keep]


def rule_optimizer_single_tensor(ctx: Context) -> list[Finding] | Found:
    """An optimizer whose step updates each parameter with kernels of its own (foreach=False, or a PyTorch that
    could not group them), in a loop the host sets the pace of."""
    steps = _training_ranges(ctx.report, r"\.step \[single-tensor\]$")
    if steps.empty:
        return []
    gaps = _gaps_in(ctx, steps)
    at_stake = ctx.host_stake("launch", gaps) if len(gaps) else 0
    if at_stake <= 0 or ctx.window_share(at_stake) * 100 < ctx.th["optimizer_single_tensor.min_share_pct"]:
        return []
    claims = Claims()
    claims.take("launch", at_stake)
    k = _launched_in(ctx.report.kernels, ctx.report.cuda_api, steps)
    name = str(steps["name"].iloc[0]).split(" [")[0]
    ev = evidence(steps, steps["name"], {"kernels": np.bincount(
        np.searchsorted(np.sort(steps["start_ns"].to_numpy(np.int64)), k["start_ns"].to_numpy(np.int64), "right")
        - 1, minlength=len(steps))[:len(steps)] if len(k) else 0})
    per_step = len(k) / max(len(steps), 1)
    return Found([Finding(
        "optimizer_single_tensor", ctx.severity(at_stake),
        f"{name} updates its parameters one tensor at a time: {per_step:.0f} kernels per step",
        f"{name} ran its single-tensor implementation ({len(steps)} steps, about {per_step:.0f} kernels each): every "
        "parameter gets its own handful of small kernels, each launched from Python, and the GPU waits for those "
        "launches. The foreach implementation does the same arithmetic on all parameters with a few multi-tensor "
        "kernels; the fused one (Adam, AdamW, SGD) with one.",
        f"Create the optimizer with `foreach=True` (PyTorch's default when every parameter is on the GPU and "
        f"`foreach` is not set to False) or `fused=True`: `torch.optim.{name.split('.')[0]}(params, ..., fused=True)`.",
        at_stake, estimate_words(ctx, "the GPU's idle time while the host ran the optimizer's steps, less what "
                                      "tracing added to their CUDA calls"), ev, ranges_of(ev))], claims)


def rule_zero_grad_not_none(ctx: Context) -> list[Finding] | Found:
    """zero_grad(set_to_none=False): kernels writing zeros into every gradient, then the backward adding into them
    instead of writing them."""
    zeros = _training_ranges(ctx.report, r"zero_grad \[set_to_none=False\]$")
    if zeros.empty:
        return []
    k = _launched_in(ctx.report.kernels, ctx.report.cuda_api, zeros)
    host = ctx.host_stake("launch", _gaps_in(ctx, zeros)) if len(zeros) else 0
    # memory traffic, in units of the zeroing kernels' (they write each gradient once): the backward then adds into
    # the gradients (reads them, reads the new ones, writes) where it would have kept the new ones as they are
    gpu = gpu_side_saving(ctx, pd.concat([k] * 4)) if len(k) else 0
    at_stake = host + gpu
    if at_stake <= 0 or ctx.window_share(at_stake) * 100 < ctx.th["zero_grad_not_none.min_share_pct"]:
        return []
    claims = Claims()
    claims.take("launch", host)
    ev = evidence(zeros, zeros["name"])
    return Found([Finding(
        "zero_grad_not_none", ctx.severity(at_stake),
        f"zero_grad(set_to_none=False): {len(k)} kernels write zeros into the gradients ({len(zeros)} times)",
        "The gradients are set to zero before each backward instead of being dropped: kernels write zeros into "
        f"every gradient ({k['duration_ns'].sum() / 1e6:,.1f} ms of GPU time), and the backward then reads those "
        "zeros to add the new gradients to them instead of just writing them.",
        "Call `optimizer.zero_grad(set_to_none=True)` (PyTorch's default since 2.0; also `model.zero_grad()`), "
        "unless the code relies on gradients being zero tensors.",
        at_stake, estimate_words(ctx, "the zeroing kernels' GPU time four times (they write the gradients once; "
                                      "the backward's adding reads them, reads the new ones and writes) beyond the time the host paced the GPU, plus the GPU's idle time while "
                                      "the host zeroed"), ev, ranges_of(ev))], claims)


def rule_extra_copy(ctx: Context) -> list[Finding] | Found:
    """With --ops: a tensor made on the CPU (aten::full, zeros, randn, ...) and copied to the GPU right after."""
    from ..ops import op_ranges

    report = ctx.report
    ops = op_ranges(report)
    if ops.empty:
        return []
    # the operators as a dispatch mode sees them (emit_nvtx: aten::full, not the aten::fill_ inside it)
    ops = ops[ops["visible"].to_numpy(bool)].sort_values(["pid", "tid", "start_ns"], kind="stable")
    name = ops["op"].astype(str)
    nxt = name.shift(-1)
    same = (ops["tid"].shift(-1) == ops["tid"]).to_numpy() & (ops["pid"].shift(-1) == ops["pid"]).to_numpy()
    is_factory = name.str.match(FACTORY_OPS).to_numpy() & same & nxt.fillna("").str.match(COPY_OPS).to_numpy()
    if not is_factory.any():
        return []
    factory = ops[is_factory]
    copy = ops.iloc[np.flatnonzero(is_factory) + 1]
    # the copies these .to() calls made: host-to-device, their API call inside the copy operator's range
    m = report.memcpy
    hd = m[(tx.eq(m["kind"], "HtoD"))] if len(m) else m
    moved = _launched_in(hd, report.cuda_api, copy.assign(end_ns=pd.to_numeric(copy["end_ns"]))) if len(hd) else hd
    if moved.empty:
        return []
    host = ctx.host_stake("launch", _gaps_in(ctx, factory)) + ctx.host_stake("input", _gaps_in(ctx, factory))
    exposed = ctx.diag.exposed(moved["start_ns"], moved["end_ns"], moved["pid"], moved["device_id"])
    waited = ctx.host_stake("launch", _gaps_in(ctx, copy)) + ctx.host_stake("input", _gaps_in(ctx, copy))
    at_stake = host + exposed + waited
    if at_stake <= 0:
        return []
    claims = Claims()
    claims.take("copy", exposed)
    claims.take("launch", host + waited)
    kinds = ", ".join(sorted(set(name[is_factory])))
    ev = evidence(factory, name[is_factory].to_numpy(), {"bytes": None})
    ev["bytes"] = moved["bytes"].to_numpy()[:len(ev)] if len(moved) >= len(ev) else np.nan
    return Found([Finding(
        "extra_copy", ctx.severity(at_stake),
        f"{len(factory)} tensors made on the CPU ({kinds}) and copied to the GPU right after",
        f"These tensors are filled on the CPU and then copied to the GPU ({moved['bytes'].sum() / 2**20:,.0f} MiB in "
        f"{len(moved)} host-to-device copies): the CPU fills memory the GPU would fill far faster, and the copy from "
        "pageable memory blocks the host." + where_words(ev),
        "Create them on the GPU: `torch.full(shape, v, device='cuda')` (likewise zeros, ones, randn, arange), or "
        "build constant tensors once, outside the loop.",
        at_stake, estimate_words(ctx, "the GPU's idle time while the host made these tensors and copied them, plus "
                                      "the copies' time the kernels did not hide"), ev, ranges_of(ev))], claims)


def _loop_runs(names: np.ndarray, min_len: int) -> list[tuple[int, int]]:
    """Index ranges [a, b) of kernels (in launch order; `names`: a code per distinct name) whose names repeat with
    a period of at most LOOP_MAX_PERIOD for at least min_len kernels: a Python loop launching the same few small
    kernels per iteration."""
    n = len(names)
    periodic = np.zeros(n, bool)
    for p in range(1, LOOP_MAX_PERIOD + 1):
        if n > p:
            periodic[p:] |= names[p:] == names[:-p]
    edges = np.flatnonzero(np.diff(np.r_[0, periodic.astype(np.int8), 0]))
    a, b = edges[::2], edges[1::2]
    long = b - a >= min_len
    return list(zip(np.maximum(a[long] - LOOP_MAX_PERIOD, 0).tolist(), b[long].tolist()))


def rule_python_loop(ctx: Context) -> list[Finding] | Found:
    """Long runs of the same few small (elementwise, indexing, copy) kernels repeating, launched one by one: a
    Python loop over a tensor's rows or elements that one vectorised operation would replace."""
    report = ctx.report
    k = report.kernels
    if k.empty:
        return []
    # what the loop search reads: the groups copy no more
    # the launching thread as the reader joined it (the kernels' launch_tid, the thread api_of finds), so that only
    # the launch time is looked up
    own_tid = "launch_tid" in report.kernels
    k = with_classes(k)[["pid", "correlation_id", "start_ns", "end_ns", "device_id", "name", "cls"] +
                        (["launch_tid"] if own_tid else [])]
    opt = _training_ranges(report, r"\.step \[")
    if len(opt):
        k = k[~k.index.isin(_launched_in(report.kernels, report.cuda_api, opt).index)]
    a = api_of(k, report.cuda_api, ("api_start_ns",) if own_tid else ("api_tid", "api_start_ns"))
    launcher = k["launch_tid"] if own_tid else a["api_tid"]
    t = pd.to_numeric(a["api_start_ns"]).fillna(k["start_ns"]).to_numpy(np.int64)
    known = launcher.notna().to_numpy()  # kernels without a launching thread are in no loop
    tid, pids = launcher.to_numpy(np.int64, na_value=0), k["pid"].to_numpy(np.int64)
    del a, launcher
    # by launching thread (a few), each in launch order: one sort, then slices.  The thread as one key where its
    # (pid, tid) fit one integer in their order (Linux's ids are under 2**22): two sort keys and one gather, not three
    thread = gkey(pids, tid) if len(tid) and 0 <= tid.min() and tid.max() < 1 << 24 and pids.min() >= 0 \
        and pids.max() < 1 << 38 else None
    order = np.flatnonzero(known)
    if thread is not None:
        every = len(order) == len(t)  # every kernel's launching thread known: no gathers
        th, tt = (thread, t) if every else (thread[order], t[order])
        # one launching thread (the usual loop): a stable sort of its launch times, which timsort does in one pass
        # where they come in order
        order = order[np.argsort(tt, kind="stable") if len(th) and bool((th == th[0]).all()) else
                      np.lexsort((tt, th))]
        del th, tt
    else:
        order = order[np.lexsort((t[order], tid[order], pids[order]))]
    if not len(order):
        return []
    # what the search reads, in launch order: a code per name and whether the kernel is small, not the rows (a
    # gather of every column of 10M kernels took 1.2 s); the rows are taken for the runs found
    names = pd.factorize(k["name"])[0][order]  # a categorical column: its codes, no text work
    small = np.asarray(k["cls"].isin(SMALL_CLASSES).to_numpy(), bool)[order]
    if thread is not None:
        cuts = np.flatnonzero(np.r_[True, np.diff(thread[order]) != 0, True])
    else:
        cuts = np.flatnonzero(np.r_[True, (np.diff(pids[order]) != 0) | (np.diff(tid[order]) != 0), True])
    del thread
    spans, runs = [], []
    for lo, hi in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        pid, tid_ = int(pids[order[lo]]), int(tid[order[lo]])
        for a_, b_ in _loop_runs(names[lo:hi], ctx.th["python_loop.min_kernels"]):
            if small[lo + a_:lo + b_].mean() >= 0.9:
                rows = order[lo + a_:lo + b_]
                run = k.iloc[rows].assign(t=t[rows], tid=tid[rows])
                runs.append(run)
                spans.append((pid, tid_, int(run["t"].min()), int(run["end_ns"].max()), b_ - a_,
                              run["name"].astype(str).value_counts().index[:3].tolist()))
    if not spans:
        return []
    ranges = pd.DataFrame([{"pid": p, "tid": t, "start_ns": s, "end_ns": e} for p, t, s, e, _, _ in spans])
    host = ctx.host_stake("launch", _gaps_in(ctx, ranges))
    loop_k = pd.concat(runs)
    # the loop's host time goes too: the GPU's saving may exceed the host's slack by that much
    gpu = gpu_side_saving(ctx, loop_k, _launch_floor_saved(loop_k, np.repeat(np.arange(len(runs)),
                                                                             [len(r) for r in runs])), host)
    at_stake = host + gpu
    if at_stake <= 0 or ctx.window_share(at_stake) * 100 < ctx.th["python_loop.min_share_pct"]:
        return []
    claims = Claims()
    claims.take("launch", host)
    ev = evidence(ranges, "loop of small kernels", {"kernels": [n for *_, n, _ in spans]})
    longest = max(spans, key=lambda s: s[4])
    return Found([Finding(
        "python_loop", ctx.severity(at_stake),
        f"{len(spans)} runs of the same few small kernels launched one by one (up to {longest[4]} in a row)",
        "The same few elementwise, indexing or copy kernels repeat back to back, each launched separately: a "
        "Python loop over a tensor's rows or elements (`for i in range(n): out[i] = f(x[i])`) or over a list of "
        "tensors (the parameters: an EMA of the weights, a weight decay or clipping by hand). Each iteration "
        "costs the launches of its kernels on the host while the GPU finishes each one at once. The loop's "
        f"kernels: {'; '.join(n[:60] for n in longest[5])}.",
        "Vectorise the loop: one operation on the whole tensor (`out = f(x)`, broadcasting, `torch.where`, "
        "`index_select`/`gather`, `torch.stack` of the inputs once); over a list of tensors, the multi-tensor ops "
        "(`torch._foreach_lerp_(ema, params, 1 - decay)`, `_foreach_mul_`, `_foreach_add_`), a few kernels for the "
        "whole list; where it cannot be vectorised, "
        "`torch.compile` the loop or capture it in a CUDA graph.",
        at_stake, estimate_words(ctx, "the GPU's idle time during these runs, less what tracing added to their "
                                      "launches, plus the GPU time each kernel of the loop pays per launch (its "
                                      "shortest run in the loop) but once, beyond the time the host paced the "
                                      "GPU"), ev, ranges_of(ev))], claims)


def _launch_floor_saved(k: pd.DataFrame, run: np.ndarray) -> np.ndarray:
    """Per kernel of the loops, the share of its GPU time that one vectorised (or foreach) kernel per name would
    not pay: each launch's fixed cost, the shortest kernel of that name in its run, once instead of per
    iteration (the bytes stay)."""
    d = (k["end_ns"] - k["start_ns"]).to_numpy(float)
    key = pd.Series(pd.factorize(k["name"])[0] + run * (1 << 20))
    floor = pd.Series(d).groupby(key.to_numpy()).transform("min").to_numpy()
    first = ~key.duplicated().to_numpy()  # one kernel a name keeps its cost
    return np.where(first, 0.0, np.minimum(floor / np.maximum(d, 1.0), 1.0))


_CONV_FWD = re.compile(r"(?i)fprop|implicit_convolve|conv2d_fwd|convolution_fwd")
_NORM_FWD = re.compile(r"(?i)bn_fw|batchnorm_fw|batch_norm_(?:collect|transform)|norm_fw")
_CONV_BWD = re.compile(r"(?i)wgrad|dgrad")
_SETUP = re.compile(r"(?i)init_device_workspace|splitKreduce")


def rule_conv_bias_bn(ctx: Context) -> list[Finding]:
    """A convolution with a bias followed by BatchNorm: on each stream, a conv forward kernel, an elementwise kernel
    (the bias) and the BatchNorm forward kernel; in the backward the reduction after the weight gradient (the
    bias's gradient).  BatchNorm subtracts the mean, so the bias changes nothing but costs both."""
    k = ctx.report.kernels
    if k.empty or not _gpu_side(ctx):
        return []
    # what each name is, asked once per distinct name (a million kernels of a few hundred names), whole names
    name = k["name"]
    setup = tx.per_value(name, lambda n: bool(_SETUP.search(n)))
    k = with_classes(k).assign(
        _conv=tx.per_value(name, lambda n: bool(_CONV_FWD.search(n))) & ~setup,
        _norm=tx.per_value(name, lambda n: bool(_NORM_FWD.search(n))),
        _wgrad=tx.per_value(name, lambda n: bool(_CONV_BWD.search(n)) and "wgrad" in n.lower()),
        _skip=tx.per_value(name, lambda n: bool(_CONV_BWD.search(n))) | setup).sort_values("start_ns", kind="stable")
    bias: list[int] = []
    grads: list[int] = []
    for _, s in k.groupby(["pid", "device_id", "stream_id"]):
        norm, skip = s["_norm"].to_numpy(bool), s["_skip"].to_numpy(bool)
        cls = s["cls"].to_numpy()
        dur = s["duration_ns"].to_numpy()
        idx = s.index.to_numpy()
        n = len(s)
        convs = 0
        for i in np.flatnonzero(s["_conv"].to_numpy(bool)):
            j, adds = i + 1, []
            while j < n and j <= i + 4 and not norm[j]:
                if cls[j] == "elementwise" and dur[j] > 0.05 * dur[i]:
                    adds.append(idx[j])
                j += 1
            if j < n and norm[j] and len(adds) == 1:
                bias += adds
                convs += 1
        if not convs:
            continue
        # the bias's gradient: a reduction right after a convolution's weight gradient
        for i in np.flatnonzero(s["_wgrad"].to_numpy(bool)):
            j = i + 1
            while j < n and skip[j]:
                j += 1
            if j < n and cls[j] == "reduction" and len(grads) < len(bias):
                grads.append(idx[j])
    if not bias:
        return []
    sel = k.loc[bias + grads].drop(columns=["_conv", "_norm", "_wgrad", "_skip"])
    at_stake = gpu_side_saving(ctx, sel)
    if at_stake <= 0 or ctx.window_share(at_stake) * 100 < ctx.th["conv_bias_bn.min_share_pct"]:
        return []
    ev = evidence(sel, sel["name"], {"role": ["bias add"] * len(bias) + ["bias gradient"] * len(grads)})
    return [Finding(
        "conv_bias_bn", ctx.severity(at_stake),
        f"{len(bias)} convolutions add a bias that the BatchNorm after them removes",
        f"Each of these convolutions is followed by a kernel adding its bias and then by BatchNorm, which subtracts "
        f"the mean per channel and so removes any bias; the backward computes the bias's gradient too "
        f"({len(bias)} bias additions, {len(grads)} bias gradients, {sel['duration_ns'].sum() / 1e6:,.1f} ms of GPU "
        "time).",
        "Create these convolutions with `bias=False` (`nn.Conv2d(..., bias=False)` before `nn.BatchNorm2d`); "
        "BatchNorm's own shift (beta) takes the bias's role.",
        at_stake, estimate_words(ctx, "the bias kernels' GPU time beyond the time the host paced the GPU"), ev,
        ranges_of(ev))]


def _gpu_side(ctx: Context) -> bool:
    from ..bottleneck import bottleneck

    return bottleneck(ctx.report).kind == "gpu"
