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
from .common import Context, Enclosing, Finding, estimate_words, evidence, ranges_of, where_words


def _copies_at(m: pd.DataFrame, kind: str, column: str, g: pd.DataFrame, at: str) -> pd.DataFrame:
    """For each gap, the copy of `kind` of its process and GPU whose `column` (start_ns, end_ns) is the gap's `at`
    (end_ns, start_ns): the copy that ends it or the read-back it began with.  Columns start_ns, end_ns, bytes, pid,
    device_id (NA where none)."""
    c = m[np.asarray(tx.eq(m["kind"], kind), bool)]
    keys = pd.DataFrame({"pid": g["pid"].to_numpy(np.int64), "device_id": g["device_id"].to_numpy(np.int64),
                         "t": g[at].to_numpy(np.int64)})
    cand = pd.DataFrame({"pid": c["pid"].to_numpy(np.int64), "device_id": c["device_id"].to_numpy(np.int64),
                         "t": pd.to_numeric(c[column]).to_numpy(np.int64),
                         "start_ns": c["start_ns"].to_numpy(np.int64),
                         "end_ns": pd.to_numeric(c["end_ns"]).to_numpy(np.int64),
                         "bytes": c["bytes"].fillna(0).to_numpy(np.int64)}).drop_duplicates(["pid", "device_id", "t"])
    return keys.merge(cand, on=["pid", "device_id", "t"], how="left")


def _size(n: float) -> str:
    return next(f"{n / d:,.0f} {u}" for d, u in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"), (1, "bytes"))
                if n >= d or d == 1)


def rule_host_round_trip(ctx: Context) -> list[Finding]:
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
    copies = pd.concat([back, sent]).dropna(subset=["start_ns"])
    exposed = ctx.diag.exposed(copies["start_ns"], copies["end_ns"], copies["pid"], copies["device_id"]) \
        if len(copies) else 0
    at_stake = sum(idle.values()) + exposed
    if at_stake <= 0:
        return []
    for c, v in idle.items():
        ctx.claim(c, v)
    ctx.claim("copy", exposed)
    first = back["start_ns"].fillna(pd.Series(g["start_ns"].to_numpy(np.int64))).to_numpy(np.int64)
    last = sent["end_ns"].fillna(pd.Series(g["end_ns"].to_numpy(np.int64))).to_numpy(np.int64)
    waited = g[list(IDLE)].sum(axis=1).to_numpy(np.int64)
    tids = g["tid"].to_numpy(dtype=object)
    ev = evidence(pd.DataFrame({"start_ns": first, "end_ns": last, "pid": g["pid"].to_numpy(np.int64),
                                "tid": pd.array(g["tid"], dtype="Int64"),
                                "device_id": g["device_id"].to_numpy(np.int64)}),
                  "round trip through the host",
                  {"read_back_bytes": back["bytes"].to_numpy(), "sent_bytes": sent["bytes"].to_numpy(),
                   "gpu_idle_ns": waited,
                   "nvtx_range": Enclosing.of(report)(g["pid"], pd.Series(tids).fillna(-1).astype(np.int64),
                                                      g["start_ns"])})
    n = len(ev)
    host = int(np.median(waited)) if n else 0
    size = float(pd.Series(ev["read_back_bytes"]).dropna().median()) if ev["read_back_bytes"].notna().any() else 0
    parts = ", ".join(f"{c} {v / 1e6:,.1f} ms" for c, v in idle.items() if v > 0)
    return [Finding(
        "host_round_trip", ctx.severity(at_stake),
        f"{n:,} round trips through the host: data read back from the GPU, worked on by the host and copied back",
        f"{n:,} times the host read data back from the GPU (median {_size(size)}), worked on it while the GPU had "
        f"nothing to do (median {host / 1e6:,.1f} ms) and copied the result back: the read-back waits for all the "
        "work queued before it, the copies from pageable memory block, and the GPU idles for the whole trip. "
        "A layer left on the CPU, a loss, weights or a metric computed in numpy or Python, or a CPU library in the "
        f"middle of the step make such trips. Of the time at stake, the GPU idled {parts or '0 ms'} and the copies "
        f"the kernels did not hide took {exposed / 1e6:,.1f} ms." + where_words(ev),
        "Do that work on the GPU: move a module left on the CPU with `.to('cuda')` (`[n for n, p in "
        "model.named_parameters() if not p.is_cuda]` lists them), and write numpy or Python arithmetic on tensors "
        "with torch, on the device where they are. If it must run on the host, pin the buffers "
        "(`torch.empty(..., pin_memory=True)`), copy with `non_blocking=True` and overlap the trip with GPU work "
        "of the next step.",
        at_stake, estimate_words(ctx, "the GPU's idle time between each read-back and the copy back, plus the "
                                      "two copies' time not hidden behind kernels"), ev, ranges_of(ev))]
