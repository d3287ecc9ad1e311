"""The work on one rank's report, run as Dask tasks where the report lies, in two tiers:

- `summarize_rank(rank, path)`, every rank: what the ranks' table, the straggler and the heat map need, about as
  cheap as reading the report (summaries, steps, the NCCL kernels' timing, utilisation bins);
- `diagnose_rank(rank, path)`, only the ranks the job chooses (jobs.alike: one per group of ranks that spend their
  time alike, and the straggler): the verdict and the findings, a few times the read.

Both are small enough to travel and never raise: a report that is missing, truncated or needs a newer nsys comes
back with an `error` that says so, and the job loads the others.
"""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

UTIL_BINS = 600       # utilisation bins per rank (the heat map's resolution on its own span)
MAX_EVIDENCE = 200    # rows of evidence a rank's finding carries home


@dataclass
class RankResult:
    rank: int
    path: str
    error: str | None = None
    host: str | None = None           # the machine the report was recorded on, where the report says
    worker: str | None = None         # the machine that read it (a Dask worker)
    read_s: float = 0.0
    nsys_version: str | None = None
    clock_offset_ns: int = 0          # add to the report's times to get UTC ns
    span: tuple[int, int] = (0, 0)    # the capture on the report's own clock
    counts: dict = field(default_factory=dict)
    kernel_ns: int = 0
    gpu_busy_ns: int = 0
    nccl_ns: int = 0
    summaries: dict = field(default_factory=dict)   # kernel/memcpy/cuda_api/nvtx -> DataFrame (the reader's)
    steps: tuple | None = None                       # (name, starts, ends) on the report's clock
    nccl: pd.DataFrame | None = None                 # seq, start_ns, end_ns, duration_ns, launch_ns, collective,
    #                                                  window_ns, busy_ns, kernels, rank_kernels (ranks.arrivals)
    util: tuple | None = None                        # (edges_ns, busy fraction, nccl fraction) on its own clock
    verdict: dict = field(default_factory=dict)      # kind, summary, breakdown, window_ns, scale (diagnosed ranks)
    findings: list = field(default_factory=list)     # the rank's own findings, evidence trimmed (diagnosed ranks)
    like: int | None = None                          # the rank whose diagnosis stands for this one (itself if own)


@dataclass
class RankDiagnosis:
    rank: int
    verdict: dict = field(default_factory=dict)
    findings: list = field(default_factory=list)
    error: str | None = None
    read_s: float = 0.0


def summarize_rank(rank: int, path: str) -> RankResult:
    """Open one rank's report (exporting a .nsys-rep with the nsys of the worker when needed) and keep what the
    job needs of every rank."""
    return _on_report(RankResult(rank, str(path), worker=socket.gethostname()), _fill)


def diagnose_rank(rank: int, path: str) -> RankDiagnosis:
    """The verdict and findings of one rank's report (path: the one summarize_rank read)."""
    return _on_report(RankDiagnosis(rank), _diagnose, path)


def _on_report(out, fill, path: str | None = None):
    """fill(out, report) on the report at `path` (out.path by default), any error as out.error; out.read_s set."""
    t0 = time.perf_counter()
    path = path or out.path
    try:
        from ..readers.nsys import open_nsys_report

        p = Path(path)
        if not p.exists():
            out.error = (f"{p.name}: a link to {os.readlink(p)}, which does not exist" if p.is_symlink() else
                         f"{p}: no such file")
            return out
        if p.suffix == ".qdstrm":  # nsys left its raw stream: import it with the worker's nsys
            from ..tools import import_qdstrm

            p = import_qdstrm(p)
            if isinstance(out, RankResult):
                out.path = str(p)  # the diagnosis reads the imported report
        with open_nsys_report(p) as rep:
            fill(out, rep)
    except Exception as e:  # noqa: BLE001 - one bad report must not take the job down
        out.error = f"{Path(path).name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    out.read_s = time.perf_counter() - t0
    return out


def _fill(out: RankResult, rep) -> None:
    from ..readers.nsys_sql import open_ro
    from ..analysis.ranks import launch_times, arrivals, nccl_kernels
    from ..analysis.steps import find_steps
    from ..readers.nsys_merge import clock_offset_ns
    from ..analysis import intervals as I

    # the summaries first: their read gives the meta its events' span (readers.nsys.NsysData.event_span)
    out.summaries = {"kernel": rep.kernel_summary(), "memcpy": rep.memcpy_summary(),
                     "cuda_api": rep.cuda_api_summary(), "nvtx": rep.nvtx_summary()}
    meta = rep.meta
    out.nsys_version = meta.nsys_version
    out.span = (int(meta.start_ns), int(meta.end_ns))
    con = open_ro(rep.sqlite_path)
    try:
        out.clock_offset_ns = clock_offset_ns(con)
        out.host = _host(con)
    finally:
        con.close()
    # the columns these need, not the frames: a rank's task costs about a read of its report
    ops = {f: rep.columns(f, ["start_ns", "end_ns", "duration_ns"]) for f in ("kernels", "memcpy", "memset")}
    k = ops["kernels"]
    out.counts = {**{f: int(len(g)) for f, g in ops.items()},
                  "cuda_api": int(len(rep.columns("cuda_api", ["start_ns"]))), "nvtx": int(len(rep.nvtx))}
    out.kernel_ns = int(k["duration_ns"].sum()) if len(k) else 0
    gpu = [g for g in ops.values() if len(g)]
    busy = I.union(*(np.concatenate([g[c].to_numpy(np.int64) for g in gpu]) for c in ("start_ns", "end_ns"))) \
        if gpu else I.EMPTY
    out.gpu_busy_ns = I.total(busy)
    n = nccl_kernels(rep)
    out.nccl_ns = int(n["duration_ns"].sum()) if len(n) else 0
    if len(n):
        n = arrivals(rep, n.assign(launch_ns=launch_times(rep, n)))
        out.nccl = n[["seq", "start_ns", "end_ns", "duration_ns", "launch_ns", "collective", "window_ns", "busy_ns",
                      "kernels", "rank_kernels"]].reset_index(drop=True)
    steps = find_steps(rep)
    if steps:
        st = steps[min(steps)] if len(steps) == 1 else max(steps.values(), key=lambda s: s.count)
        out.steps = (st.name, st.starts.copy(), st.ends.copy())
    edges = np.linspace(out.span[0], max(out.span[1], out.span[0] + UTIL_BINS), UTIL_BINS + 1).astype(np.int64)
    from ..readers.nsys_summary import busy_fraction

    frac = busy_fraction(busy[0], busy[1], edges) if len(busy[0]) else np.zeros(UTIL_BINS)
    nf = busy_fraction(*I.union(n["start_ns"], n["end_ns"]), edges) if len(n) else np.zeros(UTIL_BINS)
    out.util = (edges, np.asarray(frac, float), np.asarray(nf, float))
    if not rep.cached:  # the first open of this rank's report: the columns read kept beside it (readers/nsys_cache),
        rep.write_cache()  # so its diagnosis, the job opened again, a %nsys_load of the rank read them alone


def _diagnose(out: RankDiagnosis, rep) -> None:
    from ..analysis import bottleneck, nsys_findings
    from ..analysis.bottleneck import diagnose

    b = bottleneck(rep)
    d = diagnose(rep)
    out.verdict = {"kind": b.kind, "summary": b.summary, "breakdown": b.breakdown,
                   "window_ns": sum(p.window_ns for p in d.pairs),
                   "scale": max((p.scale for p in d.pairs), default=1.0), "startup_ns": b.startup_ns}
    out.findings = [_light(f) for f in nsys_findings(rep) if f.rule != "collective_wait"]


def _light(f):
    """A finding with at most MAX_EVIDENCE rows of evidence (the longest): what travels to the notebook."""
    import dataclasses

    ev = f.longest(MAX_EVIDENCE) if len(f.evidence) > MAX_EVIDENCE else f.evidence
    return dataclasses.replace(f, evidence=ev.reset_index(drop=True), ranges=tuple(f.ranges[:MAX_EVIDENCE]),
                               events=f.count)


def _host(con) -> str | None:
    """The recording machine's name, where the export has it (TARGET_INFO_SYSTEM_ENV, newer exports)."""
    try:
        rows = dict(con.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV").fetchall())
    except Exception:  # noqa: BLE001 - older exports: no such table
        return None
    for key in ("Hostname", "HOSTNAME", "hostname", "DEVICE_DISPLAY_NAME"):
        if rows.get(key):
            return str(rows[key])
    return None
