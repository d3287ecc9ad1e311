"""Steps that get slower along the loop: something the loop keeps grows every step and is processed whole each
time (a tensor grown with torch.cat, a history kept with its autograd graph, a list scanned every step).

A step's time is measured on the GPU, from its first operation's start to the next step's (operations belong to
the step whose host range launched them): the host may run ahead of a GPU-bound loop, the GPU's pace is the loop's.
Growth is a rank correlation between a step's time and its number, and the last quarter of the steady steps slower
than the first quarter by `growing_steps.min_growth_pct`.  The time at stake is every steady step's time beyond the
first quarter's median: what the loop takes if each step costs what the first ones did.  The idle time in that
growth (the allocator finding ever larger blocks, say) is claimed, so that its own rule counts only the rest.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ..bottleneck import IDLE, by_correlation
from ..kernel_classes import classify
from ..bottleneck import Pair
from .common import Claims, Context, Finding, Found, estimate_words, evidence, ranges_of

MIN_STEPS = 8          # steady steps needed to tell growth from noise
MIN_RANK_CORR = 0.7    # Spearman correlation of a step's time with its number: a trend, not one slow step
TOP = 3                # kernels and CUDA calls named as what grew,
MIN_PART = 0.1         # ... when their growth is at least this share of the steps'


WORK = ("Each step runs the same kernels as the first ones, and its matrix kernels take longer: the work grows with "
        "the input (a sequence or prefix processed whole at every step, images of growing size), not with "
        "something the loop keeps.")
WORK_FIX = ("If each step only needs the newest part (the next token's output), process that part alone and keep "
            "what earlier steps computed (a KV cache, outputs of earlier positions); if the inputs grow by design, "
            "this is the work itself: bucket the sizes and compare per element.")
COLLECTION = ("Something the loop keeps grows with every step and is processed whole each time (more kernels, or "
              "longer copies, every step), so the loop's cost grows with the square of its length.")
COLLECTION_FIX = ("Find what the loop appends to and then uses whole: `torch.cat`/`torch.stack` onto a growing tensor "
                  "(append to a list and concatenate once, after the loop), losses or outputs kept with their "
                  "autograd graph (`.detach()` them, or keep `.item()` values), a Python list or dict scanned every "
                  "step, a cache never trimmed.")


def _quarter(n: int) -> int:
    return max(3, n // 4)


def _growth(per_step: np.ndarray) -> float:
    """Time beyond the first quarter's median, summed over the steps."""
    base = float(np.median(per_step[:_quarter(len(per_step))]))
    return float(np.maximum(per_step - base, 0).sum())


def _per_step(step: np.ndarray, keys: np.ndarray | pd.Series, values: np.ndarray, n: int) -> pd.DataFrame:
    """A (step x key) table of summed values, every step a row (zeros where a key had none)."""
    df = pd.DataFrame({"step": step, "key": keys, "v": values})
    return df.pivot_table(index="step", columns="key", values="v", aggfunc="sum", fill_value=0,
                          observed=True).reindex(range(n), fill_value=0)


def _grown(table: pd.DataFrame, total: float) -> list[tuple[str, float]]:
    """(key, growth ns) of the keys whose per-step time grew most, at least MIN_PART of `total`."""
    got = [(str(c), _growth(table[c].to_numpy(float))) for c in table.columns]
    return sorted([g for g in got if g[1] >= MIN_PART * total], key=lambda g: -g[1])[:TOP]


def _one(ctx: Context, p: Pair) -> dict[str, Any] | None:
    """The growth of one (process, GPU) pair's steps, or None."""
    st = p.steps
    if st is None or st.steady_count < MIN_STEPS:
        return None
    report, ops = ctx.report, ctx.diag.ops
    o = ops[((ops["pid"] == p.pid) & (ops["device_id"] == p.device)).to_numpy()]
    api = report.cuda_api
    api = api[(api["pid"] == p.pid).to_numpy()] if len(api) else api
    launched = by_correlation(api, "start_ns")  # correlation ids -> the launch call's start
    at = launched(o["correlation_id"].to_numpy(np.int64, na_value=-1))
    at = np.where(at >= 0, at, o["start_ns"].to_numpy(np.int64))
    starts = np.asarray(st.starts, np.int64)
    step = np.searchsorted(starts, at, side="right") - 1
    mine = (step >= 0) & (at <= int(st.ends[-1]))
    if not mine.any():
        return None
    o, step = o[mine], step[mine]
    s, e = o["start_ns"].to_numpy(np.int64), o["end_ns"].to_numpy(np.int64)
    first = np.full(st.count, np.iinfo(np.int64).max)
    last = np.full(st.count, np.iinfo(np.int64).min)
    np.minimum.at(first, step, s)
    np.maximum.at(last, step, e)
    if (first == np.iinfo(np.int64).max).any():  # a step that launched nothing: no pace to read
        return None
    ends = np.r_[first[1:], last[-1]]
    skip = st.count - st.steady_count  # the warm-up step
    spans = (ends - first)[skip:].astype(float)
    n = len(spans)
    q = _quarter(n)
    base, late = float(np.median(spans[:q])), float(np.median(spans[-q:]))
    # Spearman's: the ranks' correlation (a step's number is its own rank)
    corr = float(np.corrcoef(pd.Series(spans).rank().to_numpy(), np.arange(n, dtype=float))[0, 1]) if n > 1 else 0.0
    grown = late >= base * (1 + ctx.th["growing_steps.min_growth_pct"] / 100)
    if not np.isfinite(corr) or corr < MIN_RANK_CORR or not grown:
        return None
    extra = np.maximum(spans - base, 0)
    k = report.kernels
    kern = k[((k["pid"] == p.pid) & (k["device_id"] == p.device)).to_numpy()] if len(k) else k
    names = pd.Series(kern["short_name"] if "short_name" in kern else kern["name"]).astype(str).to_numpy()
    kat = launched(kern["correlation_id"].to_numpy(np.int64, na_value=-1)) if len(kern) else np.empty(0, np.int64)
    kstep = np.searchsorted(starts, kat, side="right") - 1 - skip
    ok = (kat >= 0) & (kstep >= 0) & (kstep < n)
    table = _per_step(kstep[ok], names[ok], kern["duration_ns"].to_numpy(float)[ok], n) if ok.any() else None
    kernels = _grown(table, extra.sum()) if table is not None else []
    nature = _nature(table, np.bincount(kstep[ok], minlength=n)[:n] if ok.any() else np.zeros(n), q)
    calls = []
    if len(api):
        astep = np.searchsorted(starts, api["start_ns"].to_numpy(np.int64), side="right") - 1 - skip
        ok = (astep >= 0) & (astep < n) & (api["start_ns"].to_numpy(np.int64) <= int(st.ends[-1]))
        if ok.any():
            calls = _grown(_per_step(astep[ok], api["name"].astype(str).to_numpy()[ok],
                                     (api["end_ns"] - api["start_ns"]).to_numpy(float)[ok], n), extra.sum())
    # the idle time of each category in the growth, per step (a gap belongs to the step it starts in)
    g = p.gaps
    idle = {}
    if len(g):
        gs = np.searchsorted(first[skip:], g["start_ns"].to_numpy(np.int64), side="right") - 1
        ok = (gs >= 0) & (gs < n)
        for c in IDLE:
            v = g[c].to_numpy(float)[ok]
            if v.sum() > 0:
                idle[c] = _growth(np.bincount(gs[ok], weights=v, minlength=n)[:n])
    return {"pair": p, "steps": st, "skip": skip, "first": first[skip:], "ends": ends[skip:], "spans": spans,
            "extra": extra, "base": base, "late": late, "corr": float(corr), "q": q, "kernels": kernels,
            "calls": calls, "idle": idle, "ns": float(extra.sum()) * p.scale, "nature": nature}


def _nature(table: pd.DataFrame | None, counts: np.ndarray, q: int) -> str:
    """'work' when the steps run as many kernels as at first and the growth is in matrix kernels (the same GEMMs
    and convolutions on ever larger inputs: a growing sequence, prefix or image); 'collection' when the steps run
    more kernels, or the growth is in copies (torch.cat onto a growing tensor, a list processed whole); '' when
    the kernels do not say."""
    if table is None or table.empty or len(counts) < 2 * q:
        return ""
    more = float(np.median(counts[-q:])) > 1.1 * max(float(np.median(counts[:q])), 1.0)
    growth = pd.Series({str(c): _growth(table[c].to_numpy(float)) for c in table.columns})
    if growth.sum() <= 0:
        return ""
    cls = classify(list(growth.index)).set_index("name")["family"]
    matrix = float(growth[cls.reindex(growth.index).to_numpy(object) == "matrix"].sum()) / float(growth.sum())
    if more or matrix < 0.5:
        return "collection"
    return "work"


def rule_growing_steps(ctx: Context) -> list[Finding] | Found:
    """A loop whose steps take longer and longer: what grew (kernels, CUDA calls) and the time beyond the first
    steps' pace."""
    found = [x for x in (_one(ctx, p) for p in ctx.diag.pairs) if x is not None]
    if not found:
        return []
    x = max(found, key=lambda f: f["ns"])
    p, st = x["pair"], x["steps"]
    at_stake = int(min(x["ns"], p.window_ns * p.scale))
    took = {c: float(min(ns * p.scale, at_stake)) for c, ns in x["idle"].items()}
    claims = Claims()
    for c, ns in took.items():  # the growth's idle time is this finding's, not its category rule's
        claims.take(c, int(ns))
    claims.growth_idle = {(p.pid, p.device): took}  # and not gpu_gaps' or gpu_time_util's (idle.unexplained_idle)
    idx = np.arange(len(x["spans"]))
    ev = evidence(pd.DataFrame({"start_ns": x["first"], "end_ns": x["ends"], "pid": p.pid, "device_id": p.device}),
                  [f"{st.name} {i + x['skip'] + 1}" for i in idx],
                  {"step": idx + x["skip"] + 1, "extra_ns": x["extra"].astype(np.int64)})
    grew = "; ".join(f"{name} +{ns / 1e6:,.1f} ms" for name, ns in x["kernels"])
    calls = "; ".join(f"{name} +{ns / 1e6:,.1f} ms" for name, ns in x["calls"])
    parts = ([f"kernels {grew}"] if grew else []) + ([f"the host's time in CUDA calls {calls}"] if calls else [])
    what = f" What grew, summed over the steps beyond the first ones' pace: {'; '.join(parts)}." if parts else ""
    alloc = any("alloc" in n.lower() for n, _ in x["calls"])
    q = x["q"]
    return Found([Finding(
        "growing_steps", ctx.severity(at_stake),
        f"Steps get slower along the loop: the last {q} of '{st.name}' take {x['late'] / x['base']:.1f}x as long as "
        f"the first {q}",
        f"The {len(x['spans'])} steady steps of '{st.name}' took longer and longer (rank correlation "
        f"{x['corr']:.2f} between a step's time and its number): {x['base'] / 1e6:,.2f} ms each at first, "
        f"{x['late'] / 1e6:,.2f} ms by the end. " + (WORK if x["nature"] == "work" else COLLECTION) + what
        + (" Ever longer allocator calls: each step needs a larger block of GPU memory than the last." if alloc
           else ""),
        (WORK_FIX if x["nature"] == "work" else COLLECTION_FIX) + " The evidence lists each step's time beyond the "
        "first ones'.",
        at_stake, estimate_words(ctx, f"each steady step's time on the GPU beyond the median of the first {q} "
                                      "(what the loop takes if every step costs what the first ones did)"),
        ev, ranges_of(ev[ev["extra_ns"] > 0]))], claims)
