"""A profile as a Chrome / Perfetto trace (the Trace Event JSON format, issue 66): for people who have neither
Nsight nor nsight-magic (ui.perfetto.dev, chrome://tracing where it is still shipped, Chrome DevTools' Performance
panel).

    processes   one per profiled process (its name and pid), one per GPU ("GPU 0 NVIDIA H100 ...")
    threads     per CPU thread: its CUDA API and OS runtime calls (which nest); its NVTX ranges on a track of their
                own beside it ("MainThread · NVTX": ranges need not nest with the calls); per GPU, one track per
                stream with its kernels, copies and memsets
    flows       from each CUDA launch to the GPU work it queued (same correlation id): a flow start at the call's
                start, its end at the work's start, both in the category "cuda" of the events they bind to (Chrome
                DevTools binds a flow to the event with its timestamp, thread and category; Perfetto to the slice
                that encloses it)
    Python      the sampled Python code, per thread, on a track of its own ("MainThread · Python")

Times are microseconds from the capture's start with nanosecond decimals.  Every name is JSON-encoded once (a
category's names: kernels repeat a million times over a few hundred names) and rows are written in chunks, never
held as a list of dicts.  `.gz` compresses.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..readers.contract import NsysFrames

GPU_PID_BASE = 1 << 28       # GPUs as processes of their own, after any real pid
PSEUDO_TID_BASE = 1 << 27    # tracks that are not OS threads (NVTX, Python, GPU streams)
CHUNK = 200_000

Label = Callable[[int, int], str]  # (pid, key) -> a track's name


class _Writer:
    def __init__(self, f: IO[str], origin_ns: int) -> None:
        self.f, self.origin, self.first = f, origin_ns, True

    def raw(self, text: str) -> None:
        if not text:
            return
        self.f.write(text if self.first else "," + text)
        self.first = False

    def meta(self, kind: str, pid: int, tid: int, name: str, sort: int | None = None) -> None:
        self.raw(json.dumps({"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": name}}))
        if sort is not None:
            key = "process_sort_index" if kind == "process_name" else "thread_sort_index"
            self.raw(json.dumps({"ph": "M", "name": key, "pid": pid, "tid": tid, "args": {"sort_index": sort}}))

    def slices(self, names: npt.ArrayLike, cat: str, pid: npt.ArrayLike, tid: npt.ArrayLike, start_ns: npt.ArrayLike,
               end_ns: npt.ArrayLike, extra: list[str] | None = None) -> int:
        """Complete events ("X"), one per row: names a Series (categorical or text), the rest arrays."""
        starts = np.asarray(start_ns, np.int64)
        n = len(starts)
        if not n:
            return 0
        enc = _encoded(names)
        ts = _us(starts - self.origin)
        dur = _us(np.maximum(np.asarray(end_ns, np.int64) - starts, 0))
        pids, tids = _ints(pid, n), _ints(tid, n)
        category = json.dumps(cat)
        for a in range(0, n, CHUNK):
            b = min(n, a + CHUNK)
            tail = extra[a:b] if extra is not None else [""] * (b - a)
            self.raw(",".join(
                f'{{"ph":"X","cat":{category},"name":{nm},"pid":{p},"tid":{t},"ts":{s},"dur":{d}{x}}}'
                for nm, p, t, s, d, x in zip(enc[a:b], pids[a:b], tids[a:b], ts[a:b], dur[a:b], tail)))
        return n

    def flows(self, ids: np.ndarray, api_pid: npt.ArrayLike, api_tid: npt.ArrayLike, api_ns: npt.ArrayLike,
              op_pid: npt.ArrayLike, op_tid: npt.ArrayLike, op_ns: npt.ArrayLike) -> int:
        n = len(ids)
        if not n:
            return 0
        a_ts, o_ts = _us(np.asarray(api_ns, np.int64) - self.origin), _us(np.asarray(op_ns, np.int64) - self.origin)
        ap, at, op, ot = _ints(api_pid, n), _ints(api_tid, n), _ints(op_pid, n), _ints(op_tid, n)
        flow_ids = _ints(ids, n)
        for a in range(0, n, CHUNK):
            b = min(n, a + CHUNK)
            self.raw(",".join(
                f'{{"ph":"s","cat":"cuda","name":"launch","id":{i},"pid":{p1},"tid":{t1},"ts":{s1}}},'
                f'{{"ph":"f","bp":"e","cat":"cuda","name":"launch","id":{i},"pid":{p2},"tid":{t2},"ts":{s2}}}'
                for i, p1, t1, s1, p2, t2, s2 in zip(flow_ids[a:b], ap[a:b], at[a:b], a_ts[a:b], op[a:b], ot[a:b],
                                                     o_ts[a:b])))
        return n


def _us(ns: np.ndarray) -> list[str]:
    """Nanoseconds as microsecond strings with three decimals (exact: no float rounding of large times)."""
    ns = np.asarray(ns, np.int64)
    sign = np.where(ns < 0, "-", "")
    a = np.abs(ns)
    return [f"{s}{q}.{r:03d}" for s, q, r in zip(sign, (a // 1000).tolist(), (a % 1000).tolist())]


def _ints(v: npt.ArrayLike, n: int) -> list[int]:
    a = np.asarray(v)
    ints: list[int] = (a.astype(np.int64) if a.size else np.zeros(n, np.int64)).tolist()
    return ints


def _encoded(names: npt.ArrayLike) -> list[str]:
    s = names if isinstance(names, pd.Series) else pd.Series(names)
    if isinstance(s.dtype, pd.CategoricalDtype):
        cats = [json.dumps(str(c), ensure_ascii=False) for c in s.cat.categories]
        codes = s.cat.codes.to_numpy()
        return [cats[c] if c >= 0 else '""' for c in codes]
    codes, uniq = pd.factorize(s.astype(str), sort=False)
    enc = [json.dumps(u, ensure_ascii=False) for u in uniq]
    return [enc[c] if c >= 0 else '""' for c in codes]


def _end(df: pd.DataFrame) -> np.ndarray:
    return np.asarray(pd.to_numeric(df["end_ns"], errors="coerce").fillna(df["start_ns"]).to_numpy(np.int64))


def write_chrome_trace(report: NsysFrames, path: str | Path) -> dict[str, int]:
    """Write `report` (an NsysReport) as a Trace Event JSON file (gzip when `path` ends in .gz); returns counts of
    what was written."""
    from ..store import writing

    span = report.time_span
    origin = int(span.origin_ns)
    counts: dict[str, int] = {}
    with writing(path, compress=Path(path).suffix == ".gz") as f:
        f.write('{"displayTimeUnit":"ns","otherData":{"source":"nsight-magic"},"traceEvents":[')
        w = _Writer(f, origin)
        counts.update(_write(report, w))
        f.write("]}")
    return counts


def _write(report: NsysFrames, w: _Writer) -> dict[str, int]:
    from .timeline_prepare import thread_names

    counts: dict[str, int] = {}
    names = thread_names(report)
    pr = report.processes
    process_names = dict(zip(pr["pid"].astype(np.int64).tolist(), pr["name"].astype(object).tolist()))
    named_processes: set[int] = set()
    named_gpus: set[int] = set()
    pseudo: dict[tuple[int, tuple[str, int]], int] = {}

    def name_process(pids: npt.ArrayLike) -> None:
        # only the processes that have events (a report may list every process of the machine)
        for p in set(_ints(pids, 0)) - named_processes:
            named_processes.add(p)
            name = process_names.get(p)
            w.meta("process_name", p, 0, f"{str(name).rsplit('/', 1)[-1] if isinstance(name, str) else 'process'} "
                                         f"(pid {p})", sort=p)

    def track(pid: int, key: tuple[str, int], label: str) -> int:
        if (pid, key) not in pseudo:
            pseudo[(pid, key)] = PSEUDO_TID_BASE + len(pseudo)
            w.meta("thread_name", pid, pseudo[(pid, key)], label)
        return pseudo[(pid, key)]

    def tracks(pids: npt.ArrayLike, keys: npt.ArrayLike, kind: str, label: Label) -> np.ndarray:
        """The track of each row: one per distinct (pid, key), named label(pid, key) (rows: a million kernels;
        their tracks: a few streams)."""
        pairs = pd.MultiIndex.from_arrays([np.asarray(pids, np.int64), np.asarray(keys, np.int64)])
        codes, uniq = pd.factorize(pairs)
        ids = np.array([track(int(p), (kind, int(k)), label(int(p), int(k))) for p, k in uniq], np.int64)
        return ids[codes] if len(codes) else np.empty(0, np.int64)

    seen_threads: set[tuple[int, int]] = set()

    def name_threads(pids: npt.ArrayLike, tids: npt.ArrayLike) -> None:
        name_process(pids)
        for p, t in set(zip(_ints(pids, 0), _ints(tids, 0))):
            if (p, t) not in seen_threads:
                seen_threads.add((p, t))
                w.meta("thread_name", p, t, f"{names.get((p, t)) or 'thread'} [{t}]")

    # the CPU side: CUDA API and OS runtime calls on their threads
    api = report.cuda_api
    for frame, cat in ((api, "cuda"), (report.osrt, "osrt")):
        if len(frame):
            name_threads(frame["pid"], frame["tid"])
            counts[cat] = w.slices(frame["name"], cat, frame["pid"], frame["tid"], frame["start_ns"], _end(frame))
    # NVTX: push/pop ranges on a track beside their thread; start/end ranges and marks there too
    nv = report.nvtx
    if len(nv):
        nv = nv[~nv["kind"].astype(str).eq("mark") & nv["end_ns"].notna()]
        if "ours" in nv:
            nv = nv[~nv["ours"].astype(bool)]
        name_process(nv["pid"])
        tids = tracks(nv["pid"], nv["tid"], "nvtx", lambda p, t: f"{names.get((p, t)) or 'thread'} [{t}] · NVTX")
        counts["nvtx"] = w.slices(nv["label"], "nvtx", nv["pid"], tids, nv["start_ns"], _end(nv))
    # the GPU side: a process per device, a track per stream
    gpus = _gpu_names(report)
    ops = []
    for frame, cat in (("kernels", "cuda"), ("memcpy", "cuda"), ("memset", "cuda")):
        df = getattr(report, frame)
        if not len(df):
            continue
        dev = df["device_id"].astype(np.int64).to_numpy()
        stream = pd.to_numeric(df["stream_id"], errors="coerce").fillna(-1).astype(np.int64).to_numpy()
        gpid = GPU_PID_BASE + dev
        for d in np.unique(dev).tolist():
            if d not in named_gpus:
                named_gpus.add(d)
                w.meta("process_name", GPU_PID_BASE + d, 0, f"GPU {d} {gpus.get(d, '')}".strip(),
                       sort=GPU_PID_BASE + d)
        tids = tracks(gpid, stream, "stream", lambda p, s: f"stream {s}")
        label = df["name"] if frame == "kernels" else _copy_names(df, frame)
        counts[frame] = w.slices(label, cat, gpid, tids, df["start_ns"], _end(df))
        if "correlation_id" in df:
            ops.append(pd.DataFrame({"pid": df["pid"].astype(np.int64).to_numpy(),
                                     "corr": pd.to_numeric(df["correlation_id"], errors="coerce").to_numpy(),
                                     "op_pid": gpid, "op_tid": tids, "op_ns": df["start_ns"].to_numpy(np.int64)}))
    counts["flows"] = _flows(w, api, ops)
    counts["python"] = _python(report, w, tracks, names, name_process)
    return counts


def _copy_names(df: pd.DataFrame, frame: str) -> pd.Series:
    if frame == "memcpy" and "kind" in df:
        return ("memcpy " + df["kind"].astype(str)).astype("category")
    return pd.Series(["memset"] * len(df), dtype="category")


def _gpu_names(report: NsysFrames) -> dict[int, str]:
    try:
        g = report.gpus
        return {int(d): str(n) for d, n in zip(g["id"], g["name"]) if isinstance(n, str)}
    except Exception:  # noqa: BLE001 - a report without GPU names: "GPU 0"
        return {}


def _flows(w: _Writer, api: pd.DataFrame, ops: list[pd.DataFrame]) -> int:
    """From each launching call to the first GPU operation it queued (a graph launch: to its first kernel)."""
    if api.empty or not ops:
        return 0
    o = pd.concat(ops, ignore_index=True).dropna(subset=["corr"])
    o = o.sort_values("op_ns", kind="stable").drop_duplicates(["pid", "corr"])
    a = pd.DataFrame({"pid": api["pid"].astype(np.int64).to_numpy(), "tid": api["tid"].astype(np.int64).to_numpy(),
                      "corr": pd.to_numeric(api["correlation_id"], errors="coerce").to_numpy(),
                      "api_ns": api["start_ns"].to_numpy(np.int64)}).dropna(subset=["corr"])
    a = a.drop_duplicates(["pid", "corr"])
    m = o.merge(a, on=["pid", "corr"], how="inner")
    return w.flows(np.arange(1, len(m) + 1), m["pid"], m["tid"], m["api_ns"], m["op_pid"], m["op_tid"], m["op_ns"])


def _python(report: NsysFrames, w: _Writer, tracks: Callable[[npt.ArrayLike, npt.ArrayLike, str, Label], np.ndarray],
            names: dict[tuple[int, int], str], name_process: Callable[[npt.ArrayLike], None]) -> int:
    ps = report.python_samples
    if ps is None or ps.empty or not ps.placed:
        return 0
    from ..analysis.python_code import segments

    seg = segments(ps)
    if seg.empty:
        return 0
    name_process(seg["pid"])
    tids = tracks(seg["pid"], seg["tid"], "python", lambda p, t: f"{names.get((p, t)) or 'thread'} [{t}] · Python")
    return w.slices(seg["name"], "python", seg["pid"], tids, seg["start_ns"], seg["end_ns"])
