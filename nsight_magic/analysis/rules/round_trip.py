"""Round trips through the host: data read back from the GPU, computed on by the host, and sent back (a layer
left on the CPU, a loss or weights computed in numpy, a step of the model done with a CPU library).

Each round trip is one cause, whatever its parts look like: the read-back waits for the GPU (implicit_sync), the
host computes while the GPU idles (host_code), the copies from and to pageable memory block (cuda_memcpy_async).
Doing the work on the GPU removes all of it, so the time at stake is all of it: the idle time of the gaps that
begin with the read-back and end with the copy back (analysis.bottleneck marks them `round_trip`) and the two
copies' time the kernels did not hide.  The rule claims those, so that the rules of each part keep only the rest.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .. import text as tx
from ..bottleneck import IDLE
from .common import (Claims, Context, Enclosing, Finding, Found, estimate_words, evidence, ranges_of, size_words,
                     where_words)


def _copies_at(m: pd.DataFrame, kind: str, column: str, g: pd.DataFrame, at: str) -> dict[str, np.ndarray]:
    """For each gap, the copy of `kind` of its process and GPU whose `column` (start_ns, end_ns) is the gap's `at`
    (end_ns, start_ns): the copy that ends it or the read-back it began with.  Arrays start_ns, end_ns, bytes (-1
    where there is none), pageable (from or to pageable memory), pid, device_id."""
    c = m[np.asarray(tx.eq(m["kind"], kind), bool)]
    out = {"pid": g["pid"].to_numpy(np.int64), "device_id": g["device_id"].to_numpy(np.int64)}
    if c.empty:
        none = np.full(len(g), -1, np.int64)
        return {**out, "start_ns": none, "end_ns": none, "bytes": none, "pageable": np.zeros(len(g), bool)}
    key = pd.MultiIndex.from_arrays([c["pid"].to_numpy(np.int64), c["device_id"].to_numpy(np.int64),
                                     pd.to_numeric(c[column]).to_numpy(np.int64)])
    first = ~key.duplicated()
    i = key[first].get_indexer(pd.MultiIndex.from_arrays([out["pid"], out["device_id"], g[at].to_numpy(np.int64)]))
    rows = np.flatnonzero(first)[np.maximum(i, 0)]

    def pick(values: pd.Series) -> np.ndarray:
        return np.where(i >= 0, np.asarray(values, np.int64)[rows], -1)

    pageable = np.zeros(len(c), bool)
    for side in ("src_kind", "dst_kind"):
        if side in c:
            pageable |= np.asarray(tx.eq(c[side], "pageable"), bool)
    return {**out, "start_ns": pick(c["start_ns"]), "end_ns": pick(pd.to_numeric(c["end_ns"])),
            "bytes": pick(c["bytes"].fillna(0)), "pageable": (i >= 0) & pageable[rows]}


def _known(values: np.ndarray) -> pd.arrays.IntegerArray:
    """-1 (no such copy) as NA."""
    return pd.arrays.IntegerArray(np.maximum(values, 0), values < 0)


def rule_host_round_trip(ctx: Context) -> list[Finding] | Found:
    """The GPU's data read back, worked on by the host while the GPU waits, and copied back."""
    g = ctx.diag.gaps()
    if g.empty or "round_trip" not in g:
        return []
    g = g[g["round_trip"].to_numpy(bool) & g["in_window"].to_numpy(bool)]
    if g.empty:
        return []
    report = ctx.report
    m = report.memcpy
    back = _copies_at(m, "DtoH", "end_ns", g, "start_ns")
    sent = _copies_at(m, "HtoD", "start_ns", g, "end_ns")
    idle = {c: ctx.host_stake(c, g) for c in IDLE}  # less what tracing added to the calls made meanwhile
    found = {k: np.concatenate([back[k][back["start_ns"] >= 0], sent[k][sent["start_ns"] >= 0]]) for k in back}
    pageable = int(found["pageable"].sum())
    exposed = ctx.diag.exposed(found["start_ns"], found["end_ns"], found["pid"], found["device_id"]) \
        if len(found["start_ns"]) else 0
    at_stake = sum(idle.values()) + exposed
    if at_stake <= 0:
        return []
    claims = Claims()
    for c, v in idle.items():
        claims.take(c, v)
    claims.take("copy", exposed)
    first = np.where(back["start_ns"] >= 0, back["start_ns"], g["start_ns"].to_numpy(np.int64))
    last = np.where(sent["end_ns"] >= 0, sent["end_ns"], g["end_ns"].to_numpy(np.int64))
    waited = g[list(IDLE)].sum(axis=1).to_numpy(np.int64)
    ev = evidence(pd.DataFrame({"start_ns": first, "end_ns": last, "pid": g["pid"].to_numpy(np.int64),
                                "tid": pd.array(g["tid"], dtype="Int64"),
                                "device_id": g["device_id"].to_numpy(np.int64)}),
                  "round trip through the host",
                  {"read_back_bytes": _known(back["bytes"]), "sent_bytes": _known(sent["bytes"]),
                   "gpu_idle_ns": waited,
                   "nvtx_range": Enclosing.of(report)(g["pid"], g["tid"].fillna(-1).to_numpy(np.int64),
                                                      g["start_ns"])})
    n = len(ev)
    host = int(np.median(waited)) if n else 0
    size = float(pd.Series(ev["read_back_bytes"]).dropna().median()) if ev["read_back_bytes"].notna().any() else 0
    return Found([Finding(
        "host_round_trip", ctx.severity(at_stake),
        f"{n:,} round trips through the host: data read back from the GPU, worked on by the host and copied back",
        f"{n:,} times the host read data back from the GPU (median {size_words(size)}), worked on it while the GPU had "
        f"nothing to do (median {host / 1e6:,.1f} ms) and copied the result back: the read-back waits for all the "
        "work queued before it"
        + (f", {pageable:,} of the copies use pageable memory and block the host" if pageable else "")
        + ", and the GPU idles for the whole trip. "
        "A layer left on the CPU, a loss, weights or a metric computed in numpy or Python, or a CPU library in the "
        f"middle of the step make such trips. Of the time at stake, the GPU idled {sum(idle.values()) / 1e6:,.1f} ms "
        f"and the copies the kernels did not hide took {exposed / 1e6:,.1f} ms." + where_words(ev),
        "Do that work on the GPU: move a module left on the CPU with `.to('cuda')` (`[n for n, p in "
        "model.named_parameters() if not p.is_cuda]` lists them), and write numpy or Python arithmetic on tensors "
        "with torch, on the device where they are. If it must run on the host, pin the buffers "
        "(`torch.empty(..., pin_memory=True)`), copy with `non_blocking=True` and overlap the trip with GPU work "
        "of the next step.",
        at_stake, estimate_words(ctx, "the GPU's idle time between each read-back and the copy back, plus the "
                                      "two copies' time not hidden behind kernels"), ev, ranges_of(ev))], claims)
