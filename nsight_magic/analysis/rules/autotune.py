"""An autotuner running inside the measured steps: cuDNN's `benchmark = True` with shapes that change (every new
shape tries every algorithm again), Triton / torch.compile autotuning, GEMM heuristics tried at run time.

What it leaves in a report, per steady step: many variants of the same matrix-kernel family (the same name but for
its tile and configuration: `sm90_xmma_wgrad_..._tilesize64x64x32` and `..._tilesize128x64x32`), and the launching
thread synchronising between them (each trial is timed).  A loop with fixed shapes autotunes in its first step only,
which the steady state leaves out.  The time at stake is the GPU's idle time, on the critical path, from the start
of each autotuning step to its last synchronisation between trials (the tuner builds its plans on the host before
the first trial): what the steps would not wait for if each shape were tuned once, outside the loop.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..kernel_classes import classify
from ..text import contains
from .common import Claims, Context, Finding, Found, estimate_words, evidence, ranges_of

MIN_SYNCS = 8        # synchronisations a step, at least
MIN_VARIANTS = 3     # variants of one matrix-kernel family in a step, at least
MIN_STEP_SHARE = 0.5  # of the steady steps that autotune
CATEGORIES = ("launch", "sync", "module load", "allocator")
_SYNC = r"Synchronize"
# a kernel's family: its name without template arguments, tile sizes, stage counts and digits
_TILE = re.compile(r"(tilesize|_tile|_stage|_warpgroup|_execute|_cga|_kernel_trns|_splitk|_sliced|x\d)\w*$", re.I)


def family_of(name: str) -> str:
    base = name.split("<", 1)[0].split("(", 1)[0].replace("void ", "").strip()
    return re.sub(r"\d+", "#", _TILE.sub("", base))


def _variants(a: np.ndarray, b: np.ndarray, wanted: np.ndarray, k_start: np.ndarray, k_name: np.ndarray,
              fam_codes: np.ndarray, n_names: int) -> tuple[np.ndarray, np.ndarray]:
    """Per step [a, b) (contiguous, sorted): the most variants of one family among its distinct matrix kernels, and
    how many distinct ones it ran; counted in arrays for the `wanted` steps only (a million steps: no loop)."""
    variants = np.zeros(len(a), np.int64)
    distinct = np.zeros(len(a), np.int64)
    if not len(a) or not len(k_start):
        return variants, distinct
    j = np.searchsorted(a, k_start, side="right") - 1  # the step each kernel starts in
    jc = np.clip(j, 0, None)
    ok = (j >= 0) & (k_start < b[jc]) & wanted[jc]
    pairs = np.unique(jc[ok].astype(np.int64) * n_names + k_name[ok])  # distinct (step, name)
    step, name = pairs // n_names, pairs % n_names
    distinct += np.bincount(step, minlength=len(a))
    n_fam = int(fam_codes.max()) + 1
    trio, count = np.unique(step * n_fam + fam_codes[name], return_counts=True)  # (step, family) -> names
    np.maximum.at(variants, trio // n_fam, count)
    return variants, distinct


def rule_autotune(ctx: Context) -> list[Finding] | Found:
    report = ctx.report
    steps = ctx.diag.steps  # pid -> Steps, found once by the diagnosis
    if not steps:
        return []
    k = report.kernels
    api = report.cuda_api
    if k.empty or api.empty:
        return []
    # per distinct name (a million kernels, a few hundred names): is it a matrix kernel, and its family
    codes, uniq = pd.factorize(pd.Series(k["name"].to_numpy(object)).fillna(""), sort=False)
    u = [str(v) for v in np.asarray(uniq, dtype=object)]
    is_matrix = classify(u).set_index("name")["family"].reindex(u).to_numpy(object) == "matrix"
    matrix = is_matrix[codes]
    if not matrix.any():
        return []
    fam_codes, _ = pd.factorize(np.array([family_of(v) if m else "" for v, m in zip(u, is_matrix)], object))
    order = np.argsort(k["start_ns"].to_numpy(np.int64)[matrix], kind="stable")
    mk_start = k["start_ns"].to_numpy(np.int64)[matrix][order]
    mk_name = codes[matrix][order]
    syncs = api[contains(api["name"], _SYNC)]
    windows, rows = [], []
    for pid, st in steps.items():
        a, b = st.bounds()
        if st.count >= 3:  # the steady steps: the first one tunes whatever the loop
            a, b = a[1:], b[1:]
        s = syncs[syncs["pid"] == pid].sort_values("start_ns", kind="stable")  # backward tunes on autograd's thread
        s_start = s["start_ns"].to_numpy(np.int64)
        s_end = s["end_ns"].to_numpy(np.int64)
        n_sync = np.diff(np.searchsorted(s_start, np.stack([a, b])), axis=0)[0]
        variants, distinct = _variants(a, b, n_sync >= MIN_SYNCS, mk_start, mk_name, fam_codes, len(u))
        hit = np.flatnonzero((n_sync >= MIN_SYNCS) & (variants >= MIN_VARIANTS))
        last_sync = s_end[np.searchsorted(s_start, b[hit]) - 1]  # the plans are built before the first trial
        windows += [(int(lo), int(e)) for lo, e in zip(a[hit], last_sync)]
        rows += [(pid, st.tid, int(a[i]), int(b[i]), int(n_sync[i]), int(variants[i]), int(distinct[i])) for i in hit]
        tuned = len(hit)
        if len(a) == 0 or tuned < MIN_STEP_SHARE * len(a):
            windows = [w for w, r in zip(windows, rows) if r[0] != pid]
            rows = [r for r in rows if r[0] != pid]
    if not windows:
        return []
    g = ctx.diag.gaps()
    if g.empty:
        return []
    w = np.array(windows, np.int64)
    w = w[np.argsort(w[:, 0])]
    gs, ge = g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)
    j = np.searchsorted(w[:, 0], gs, side="right") - 1
    inside = (j >= 0) & (gs < w[np.clip(j, 0, None), 1]) & (ge > w[np.clip(j, 0, None), 0])
    picked = g[inside]
    claims = Claims()
    for key, gg in picked.groupby(["pid", "device_id"]):  # the symptoms' rules leave these gaps to this one
        claims.autotune_gaps[key] = gg["start_ns"].to_numpy(np.int64)
    at_stake = 0
    for c in CATEGORIES:
        got = ctx.left(c, ctx.host_stake(c, picked))
        claims.take(c, got)
        at_stake += got
    if at_stake <= 0 or ctx.window_share(at_stake) * 100 < ctx.th["autotune.min_share_pct"]:
        return Found([], claims)
    df = pd.DataFrame(rows, columns=["pid", "tid", "start_ns", "end_ns", "syncs", "variants", "kernels"])
    ev = evidence(df, pd.Series(["autotuning step"] * len(df)), {"syncs": df["syncs"], "variants": df["variants"],
                                                                 "matrix_kernels": df["kernels"]})
    per_sync = int(df["syncs"].median())
    most = int(df["variants"].median())
    return Found([Finding(
        "autotune", ctx.severity(at_stake),
        f"An autotuner runs inside the loop: {len(df)} steady steps each try up to {most} variants of a matrix "
        f"kernel, with {per_sync} synchronisations a step between the trials",
        "Each of these steps runs several versions of the same convolution or GEMM kernel and waits for each "
        "(synchronisations between them): an autotuner timing its candidates. It runs again whenever it meets a "
        "shape it has not tuned: cuDNN with torch.backends.cudnn.benchmark = True and inputs whose size changes "
        "from step to step (multi-scale images, variable sequence lengths, a last partial batch), or Triton / "
        "torch.compile autotuning a new shape. The GPU waits while the host tries and times.",
        "Keep shapes fixed (pad or bucket the inputs to a few sizes, drop_last=True) and tune each one once before "
        "the loop; with shapes that keep changing, set torch.backends.cudnn.benchmark = False (cuDNN's heuristics "
        "pick an algorithm without trials); for torch.compile, mark dynamic dimensions "
        "(torch._dynamo.mark_dynamic) or use mode='default' rather than 'max-autotune'.",
        at_stake, estimate_words(ctx, "the GPU's idle time on the critical path from each autotuning step's start "
                                      "to its last synchronisation between trials"), ev, ranges_of(ev))], claims)
