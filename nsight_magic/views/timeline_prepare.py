"""Timeline preparation: the reader's DataFrames -> rows, coded events, and glyphs for a time window.

Pure functions, no Bokeh.  `prepare_timeline(report)` builds one sorted event table (integer codes for
names, categories and details; strings live once in lists).  `view_glyphs(data, t0, t1, ...)` picks what
to draw for a window under a glyph budget: rows with few events in the window get their exact events,
busy rows get per-bin busy fractions (numpy, prefix sums), and each GPU gets a utilization strip.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import ReportError
from ..readers.capture_span import capture_span

# Thread sub-rows, in display order after the NVTX levels (0..255 are NVTX depths).
_THREAD_SOURCES = {"cuda_api": (256, "CUDA API"), "osrt": (257, "OS runtime"),
                   "cublas": (258, "cuBLAS"), "cudnn": (259, "cuDNN")}
_UTIL_SUB = -1  # the utilization strip sorts first within its GPU

# Fixed colours for the categories we know; anything new gets a palette colour in order of appearance.
_COLORS = {
    "kernel": "#4c78a8", "memset": "#b279a2", "CUDA API": "#72b7b2", "NVTX": "#54a24b",
    "OS runtime": "#bab0ac", "cuBLAS": "#eeca3b", "cuDNN": "#ff9da6", "GPU utilization": "#2f4b7c",
    "memcpy HtoD pageable": "#e45756", "memcpy HtoD pinned": "#f58518",
    "memcpy DtoH pageable": "#9d755d", "memcpy DtoH pinned": "#a0cbe8", "memcpy DtoD": "#79706e",
}
_EXTRA_COLORS = ["#17becf", "#bcbd22", "#8c564b", "#e377c2", "#7f7f7f", "#1f77b4", "#d62728", "#9467bd"]

KERNEL_CAT = "kernel"
UTIL_CAT = "GPU utilization"


@dataclass
class TimelineData:
    """Everything the timeline needs, with strings stored once.

    events: start_ns/end_ns relative to capture start (int64), row, cat, name, detail (codes),
    bytes (copies), link (dense code of (pid, correlation id) for kernels and CUDA API calls, -1 otherwise);
    sorted by (row, start_ns).
    rows: row, group, label, kind ('nvtx', 'cuda_api', ..., 'gpu', 'util'), pid, tid, device_id.
    """

    events: pd.DataFrame
    rows: pd.DataFrame
    names: list
    details: list
    categories: list
    colors: list
    span_ns: int
    api_row_of_row: np.ndarray  # for an NVTX row: the CUDA API row of the same thread, else -1
    origin_ns: int = 0  # absolute time of x = 0 (the capture start when the events lie in the capture)
    first_ns: int = 0   # earliest event relative to origin (<= 0 when something starts before the capture)
    _index: dict = field(default_factory=dict, repr=False)

    @property
    def total_events(self) -> int:
        return len(self.events)


def _frame(report, attr: str) -> pd.DataFrame:
    df = getattr(report, attr, None)
    if df is None:
        return pd.DataFrame()
    if not isinstance(df, pd.DataFrame):
        raise ReportError(f"report.{attr} is a {type(df).__name__}, expected a pandas DataFrame")
    return df


def _need(df: pd.DataFrame, attr: str, cols) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ReportError(f"report.{attr} lacks column(s) {', '.join(missing)}; cannot draw the timeline")


def _int(s) -> np.ndarray:
    return pd.to_numeric(s, errors="coerce").fillna(-1).to_numpy(dtype=np.int64)


def _str(s) -> pd.Series:
    return s.astype("string").fillna("")


def _codes(values: pd.Series, table: dict) -> np.ndarray:
    """Codes into a shared string table (dict str -> code, insertion ordered); strings stay once.

    Categorical columns (the reader's names) are used as they are: no per-event string work."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        codes, uniques = values.cat.codes.to_numpy(), list(values.cat.categories)
    else:
        codes, uniques = pd.factorize(values, sort=False)
        uniques = list(uniques)
    mapping = np.array([table.setdefault("" if pd.isna(u) else str(u), len(table)) for u in uniques]
                       + [table.setdefault("", len(table))], dtype=np.int32)  # code -1 (missing) -> ""
    return mapping[codes] if len(codes) else np.empty(0, dtype=np.int32)


def _detail_codes(df: pd.DataFrame, cols, fmt, table: dict) -> np.ndarray:
    """Group identical detail tuples (integer codes per column), format each distinct tuple once."""
    if df.empty:
        return np.empty(0, dtype=np.int32)
    codes, uniques = [], []
    for c in cols:
        col = df[c]
        if pd.api.types.is_integer_dtype(col.dtype):  # nullable Int64 -> plain int64 first: much faster
            col = col.to_numpy(dtype=np.int64, na_value=-1)
        k, u = pd.factorize(col, sort=False, use_na_sentinel=False)
        codes.append(k)
        uniques.append(list(u))
    grp, first_pos = _group_ids(np.column_stack(codes))
    labels = [fmt(*("?" if pd.isna(uniques[j][codes[j][i]]) else uniques[j][codes[j][i]]
                    for j in range(len(cols)))) for i in first_pos]  # one per distinct tuple
    mapping = np.array([table.setdefault(t, len(table)) for t in labels], dtype=np.int32)
    return mapping[grp]


def _group_ids(codes_2d: np.ndarray):
    """Dense ids for identical rows of small non-negative int codes, and the first position of each."""
    key = np.zeros(len(codes_2d), dtype=np.int64)
    for j in range(codes_2d.shape[1]):
        key = key * (int(codes_2d[:, j].max()) + 1) + codes_2d[:, j]
    _, first_pos, inv = np.unique(key, return_index=True, return_inverse=True)
    return inv.ravel(), first_pos


def _part(df, sub_or_stream, cat_codes, name_codes, detail_codes, key_a, key_b, nbytes=None, link=None):
    """One source's events as numpy arrays (concatenated later without pandas overhead)."""
    n = len(df)
    bcast = lambda v, dt: np.broadcast_to(np.asarray(v, dtype=dt), (n,))  # noqa: E731
    return {
        "start_ns": _int(df["start_ns"]),
        "end_ns": _int(df["end_ns"]),
        "key_a": bcast(key_a, np.int64), "key_b": bcast(key_b, np.int64), "sub": bcast(sub_or_stream, np.int64),
        "cat": bcast(cat_codes, np.int32), "name": bcast(name_codes, np.int32), "detail": bcast(detail_codes, np.int32),
        "bytes": np.zeros(n) if nbytes is None else pd.to_numeric(nbytes, errors="coerce").fillna(0).to_numpy(float),
        "link_key": np.full(n, -1, dtype=np.int64) if link is None else np.asarray(link, np.int64),
    }


def _host_side(kind: pd.Series, src: pd.Series, dst: pd.Series) -> pd.Series:
    """HtoD -> the source memory kind, DtoH -> the destination's: that is where pageable vs pinned matters."""
    host = pd.Series("", index=kind.index, dtype="string")
    k = _str(kind)
    host = host.mask(k.str.startswith("Hto"), _str(src)).mask(k.str.endswith("toH"), _str(dst))
    return host


class _Strings:
    """The string tables shared by all sources: each distinct name, detail and category once."""

    def __init__(self):
        self.names: dict = {}
        self.details: dict = {}
        self.cats: dict = {}

    def cat(self, label: str) -> int:
        return self.cats.setdefault(label, len(self.cats))

    def name(self, label: str) -> int:
        return self.names.setdefault(label, len(self.names))

    def detail(self, label: str) -> int:
        return self.details.setdefault(label, len(self.details))


_KERNEL_CFG = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread",
               "static_smem_bytes", "dynamic_smem_bytes")


def _launch_link(df: pd.DataFrame) -> np.ndarray:
    """(pid, correlation id) as one int64: correlation ids repeat across processes."""
    return (_int(df["pid"]) << 32) | (_int(df["correlation_id"]) & 0xFFFFFFFF)


def _kernels_part(k: pd.DataFrame, st: _Strings) -> dict:
    _need(k, "kernels", ["start_ns", "end_ns", "name", "device_id", "stream_id", "correlation_id", "pid"])
    name_col = k["short_name"] if "short_name" in k and k["short_name"].notna().all() else k["name"]
    cfg = [c for c in _KERNEL_CFG if c in k.columns]

    def fmt(*v):
        d = dict(zip(cfg, v))
        dims = lambda p: f"({d.get(p + '_x', '?')},{d.get(p + '_y', '?')},{d.get(p + '_z', '?')})"  # noqa: E731
        return (f"grid {dims('grid')} block {dims('block')} regs {d.get('registers_per_thread', '?')} "
                f"smem {d.get('static_smem_bytes', '?')}+{d.get('dynamic_smem_bytes', '?')} B")

    detail = _detail_codes(k, cfg, fmt, st.details) if cfg else st.detail("")
    return _part(k, _int(k["stream_id"]), st.cat(KERNEL_CAT), _codes(name_col, st.names), detail,
                 1, _int(k["device_id"]), link=_launch_link(k))


def _memcpy_part(m: pd.DataFrame, st: _Strings) -> dict:
    _need(m, "memcpy", ["start_ns", "end_ns", "bytes", "kind", "device_id", "stream_id"])
    src = m["src_kind"] if "src_kind" in m else pd.Series("", index=m.index)
    dst = m["dst_kind"] if "dst_kind" in m else pd.Series("", index=m.index)
    # Label each distinct (kind, src, dst) once: "memcpy HtoD pageable" (the host side decides the colour).
    trip = pd.DataFrame({"k": m["kind"], "s": src, "d": dst})
    grp, first = _group_ids(np.column_stack([pd.factorize(trip[c], sort=False, use_na_sentinel=False)[0]
                                             for c in "ksd"]))
    firsts = trip.iloc[first]
    host = _host_side(firsts["k"], firsts["s"], firsts["d"])
    labels = ("memcpy " + _str(firsts["k"]) + (" " + host).where(host != "", "")).str.strip().tolist()
    cat = np.array([st.cat(x) for x in labels], np.int32)[grp]
    name = np.array([st.name(x) for x in labels], np.int32)[grp]
    detail = np.array([st.detail(f"{a}: {b} -> {c}")
                       for a, b, c in firsts.astype("string").fillna("?").itertuples(index=False)], np.int32)[grp]
    return _part(m, _int(m["stream_id"]), cat, name, detail, 1, _int(m["device_id"]), nbytes=m["bytes"])


def _memset_part(s: pd.DataFrame, st: _Strings) -> dict:
    _need(s, "memset", ["start_ns", "end_ns", "device_id", "stream_id"])
    mk = s["mem_kind"] if "mem_kind" in s else pd.Series("", index=s.index)
    val = s["value"] if "value" in s else pd.Series("", index=s.index)
    detail = _detail_codes(pd.DataFrame({"k": mk, "v": val}), ["k", "v"],
                           lambda a, b: f"memset {a} value {b}", st.details)
    return _part(s, _int(s["stream_id"]), st.cat("memset"), st.name("memset"), detail, 1, _int(s["device_id"]),
                 nbytes=s["bytes"] if "bytes" in s else None)


def _nvtx_part(nv: pd.DataFrame, st: _Strings) -> dict:
    _need(nv, "nvtx", ["start_ns", "end_ns", "name", "pid", "tid"])
    # marks have no end: draw them at their start (one pixel wide)
    nv = nv.assign(end_ns=pd.to_numeric(nv["end_ns"], errors="coerce").fillna(pd.to_numeric(nv["start_ns"])))
    depth = np.clip(_int(nv["depth"]) if "depth" in nv else np.zeros(len(nv), np.int64), 0, 255)
    dom = nv["domain"] if "domain" in nv else pd.Series("", index=nv.index)
    detail = _detail_codes(pd.DataFrame({"d": dom}), ["d"],
                           lambda d: f"domain {d}" if d not in ("", "?", "<NA>") else "default domain", st.details)
    return _part(nv, depth, st.cat("NVTX"), _codes(nv["name"], st.names), detail, _int(nv["pid"]), _int(nv["tid"]))


def _thread_part(df: pd.DataFrame, attr: str, st: _Strings) -> dict:
    sub, label = _THREAD_SOURCES[attr]
    _need(df, attr, ["start_ns", "end_ns", "name", "pid", "tid"])
    link = _launch_link(df) if attr == "cuda_api" and "correlation_id" in df else None
    return _part(df, sub, st.cat(label), _codes(df["name"], st.names), st.detail(label),
                 _int(df["pid"]), _int(df["tid"]), link=link)


def prepare_timeline(report) -> TimelineData:
    """Collect every drawable event of a report into one coded, sorted table plus the row layout."""
    st = _Strings()
    parts = []
    for attr, make in (("kernels", _kernels_part), ("memcpy", _memcpy_part), ("memset", _memset_part),
                       ("nvtx", _nvtx_part)):
        df = _frame(report, attr)
        if len(df):
            parts.append(make(df, st))
    for attr in _THREAD_SOURCES:
        df = _frame(report, attr)
        if len(df):
            parts.append(_thread_part(df, attr, st))
    return _assemble(report, parts, st)


def _assemble(report, parts: list, st: _Strings) -> TimelineData:
    """Concatenate the sources, choose the time origin, lay out rows, sort by (row, start), index."""
    names, details, cats, cat_code = st.names, st.details, st.cats, st.cat
    meta = getattr(report, "meta", None)
    empty = _part(pd.DataFrame({"start_ns": [], "end_ns": []}), 0, 0, 0, 0, 0, 0)
    ev = {c: np.concatenate([p[c] for p in parts] or [empty[c]]) for c in empty}
    gpu_cats = [v for c, v in cats.items() if c in (KERNEL_CAT, "memset") or c.startswith("memcpy")]
    ev["gpu"] = np.isin(ev["cat"], gpu_cats)
    origin, span, first = _time_origin(meta, ev["start_ns"], ev["end_ns"])
    ev["start_ns"] = ev["start_ns"] - origin
    ev["end_ns"] = ev["end_ns"] - origin
    rows, row = _layout_rows(ev, report, cat_code)
    order = np.lexsort((ev["start_ns"], row))
    link_key = ev["link_key"][order]
    codes, _ = pd.factorize(link_key)
    start_ns = ev["start_ns"][order]
    ev = pd.DataFrame({
        "start_ns": start_ns, "end_ns": np.maximum(ev["end_ns"][order], start_ns), "row": row[order],
        "cat": ev["cat"][order], "name": ev["name"][order], "detail": ev["detail"][order],
        "bytes": ev["bytes"][order], "link": np.where(link_key >= 0, codes, -1).astype(np.int32)},
        copy=False)  # no block consolidation: millions of rows
    api_row = np.full(len(rows), -1, np.int64)
    thr = rows[rows["kind"].isin(["nvtx", "cuda_api"])]
    api = thr[thr["kind"] == "cuda_api"].set_index(["pid", "tid"])["row"]
    for r in thr[thr["kind"] == "nvtx"].itertuples():  # one per NVTX row, not per event
        api_row[r.row] = api.get((r.pid, r.tid), -1)
    cat_list = list(cats)
    colors, extra = [], iter(_EXTRA_COLORS * 8)
    for c in cat_list:
        colors.append(_COLORS.get(c) or next(extra))
    data = TimelineData(events=ev, rows=rows, names=list(names), details=list(details), categories=cat_list,
                        colors=colors, span_ns=max(span, 1), api_row_of_row=api_row,
                        origin_ns=origin, first_ns=first)
    _build_index(data)
    return data


def _time_origin(meta, starts: np.ndarray, ends: np.ndarray):
    """x = 0 and the axis end from the reader's capture span (readers.capture_span: the one definition) and the
    events drawn.  Returns (origin, span, first) in ns, first = the earliest event relative to the origin."""
    ms = getattr(meta, "start_ns", None)
    me = getattr(meta, "end_ns", None)
    if me is None and ms is not None:
        me = ms + int(getattr(meta, "duration_ns", 0) or 0)
    bounds = None
    if ms is not None and me is not None and getattr(meta, "span_source", None) != "none" and me > ms:
        bounds = (int(ms), int(me))
    events = (int(starts.min()), int(ends.max())) if len(starts) else None
    span = capture_span(bounds, events)
    first = events[0] - span.origin_ns if events else 0
    return span.origin_ns, max(span.axis_end_ns - span.origin_ns, 1), first


def _thread_names(report) -> dict:
    th = _frame(report, "threads")
    if th.empty or not {"pid", "tid", "name"} <= set(th.columns):
        return {}
    th = th.dropna(subset=["name"]).drop_duplicates(["pid", "tid"])
    return dict(zip(zip(_int(th["pid"]), _int(th["tid"])), th["name"].astype(str)))


def _gpu_names(report) -> dict:
    g = _frame(report, "gpus")
    if g.empty or not {"id", "name"} <= set(g.columns):
        return {}
    return dict(zip(_int(g["id"]), g["name"].astype(str)))


def _layout_rows(ev: dict, report, cat_code):
    """One row per (pid, tid, NVTX level or source) and per (GPU, stream), plus a utilization row per GPU.

    Rows are found with np.unique over one int64 key per event (threads sort before GPUs; within a GPU the
    utilization strip, then its streams); returns the rows table and each event's row number."""
    gpu = ev["gpu"]
    m24 = 0xFFFFFF
    thread_key = ((ev["key_a"] & m24) << 33) | ((ev["key_b"] & m24) << 9) | (ev["sub"] & 0x1FF)
    # streams shift by 2 so that a missing stream (-1) never shares the utilization strip's key
    gpu_key = (1 << 62) | ((ev["key_b"] & 0xFFFF) << 33) | ((ev["sub"] + 2) & 0xFFFFFFFF)
    key = np.where(gpu, gpu_key, thread_key)
    devices = np.unique(ev["key_b"][gpu])
    util_keys = (1 << 62) | ((devices & 0xFFFF) << 33)
    # hash-factorize (fast), then rank the few distinct keys to get the display order
    codes, uniq = pd.factorize(np.concatenate([key, util_keys]), sort=False)
    order = np.argsort(uniq, kind="stable")
    rank = np.empty(len(uniq), np.int32)
    rank[order] = np.arange(len(uniq), dtype=np.int32)
    uniq = uniq[order]
    row = rank[codes[: len(key)]]
    # decode each distinct key once (the original values, not the masked ones, label the rows)
    first = np.full(len(uniq), -1, np.int64)
    first[row[::-1]] = np.arange(len(key))[::-1]
    tnames, gnames = _thread_names(report), _gpu_names(report)
    by_sub = {v[0]: k for k, v in _THREAD_SOURCES.items()}
    recs = []
    for r, k in enumerate(uniq.tolist()):  # loop over rows (hundreds), never events
        i = first[r]
        if k >> 62:
            dev = int((k >> 33) & 0xFFFF) if i < 0 else int(ev["key_b"][i])
            gname = gnames.get(dev)
            group = f"GPU {dev}" + (f" {gname}" if gname else "")
            if i < 0:
                recs.append((group, f"GPU {dev} · utilization", "util", -1, -1, dev))
            else:
                recs.append((group, f"GPU {dev} · stream {int(ev['sub'][i])}", "gpu", -1, -1, dev))
        else:
            pid, tid, sub = int(ev["key_a"][i]), int(ev["key_b"][i]), int(ev["sub"][i])
            tname = tnames.get((pid, tid))
            who = f"tid {tid}" + (f" {tname}" if tname else "")
            kind = "nvtx" if sub < 256 else by_sub[sub]
            what = f"NVTX L{sub}" if sub < 256 else _THREAD_SOURCES[kind][1]
            recs.append((f"Process {pid}", f"{who} · {what}", kind, pid, tid, -1))
    rows = pd.DataFrame(recs, columns=["group", "label", "kind", "pid", "tid", "device_id"])
    rows.insert(0, "row", np.arange(len(rows), dtype=np.int32))
    if len(devices):
        cat_code(UTIL_CAT)
    return rows, row


def _build_index(data: TimelineData) -> None:
    """Per-row offsets plus start/end prefix sums, so a window costs O(rows * log n + drawn events)."""
    ev = data.events
    rows = ev["row"].to_numpy()
    nrows = len(data.rows)
    ptr = np.searchsorted(rows, np.arange(nrows + 1), side="left")
    starts = ev["start_ns"].to_numpy(np.int64)
    ends = ev["end_ns"].to_numpy(np.int64)
    order = np.lexsort((ends, rows))
    ends_sorted = ends[order]
    # Prefix sums per row (restarted at each row by subtracting the row's base later).
    cs = np.concatenate([[0], np.cumsum(starts, dtype=np.int64)])
    ce = np.concatenate([[0], np.cumsum(ends_sorted, dtype=np.int64)])
    data._index = {"ptr": ptr, "starts": starts, "ends": ends, "ends_sorted": ends_sorted, "cs": cs, "ce": ce,
                   "util": _util_intervals(data)}


def _merge_intervals(s: np.ndarray, e: np.ndarray):
    """Union of intervals, vectorised: a new block starts where a start passes every earlier end."""
    if len(s) == 0:
        return s, e
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    run_end = np.maximum.accumulate(e)
    new = np.concatenate([[True], s[1:] > run_end[:-1]])
    idx = np.flatnonzero(new)
    block_end = np.maximum.reduceat(e, idx)
    return s[idx], block_end


def _util_intervals(data: TimelineData) -> dict:
    ev, rows = data.events, data.rows
    out = {}
    for dev_row in rows[rows["kind"] == "util"].itertuples():
        stream_rows = rows[(rows["kind"] == "gpu") & (rows["device_id"] == dev_row.device_id)]["row"].to_numpy()
        sel = np.isin(ev["row"].to_numpy(), stream_rows)
        s, e = _merge_intervals(ev["start_ns"].to_numpy()[sel], ev["end_ns"].to_numpy()[sel])
        out[int(dev_row.row)] = (s, e, np.concatenate([[0], np.cumsum(s)]), np.concatenate([[0], np.cumsum(e)]))
    return out


def _busy(t: np.ndarray, s: np.ndarray, e_sorted: np.ndarray, cs: np.ndarray, ce: np.ndarray) -> np.ndarray:
    """F(t) = total busy time before t = sum(min(t, e) - s for s < t); prefix sums make it vectorised."""
    ns = np.searchsorted(s, t, side="left")
    ne = np.searchsorted(e_sorted, t, side="left")
    return (ns * t - cs[ns]) - (ne * t - ce[ne])


GLYPH_COLUMNS = ["left", "right", "row", "cat", "name", "detail", "dur_us", "bytes", "link"]
AGG_COLUMNS = ["left", "right", "row", "cat", "name", "count", "busy"]


@dataclass
class Glyphs:
    """What to draw for one window: exact events, per-bin aggregates, and the counts for the caption."""

    exact: pd.DataFrame
    agg: pd.DataFrame
    shown: int
    total: int
    t0_ns: int
    t1_ns: int

    @property
    def caption(self) -> str:
        if self.shown >= self.total:
            return f"showing all {self.total:,} events"
        return (f"showing {self.shown:,} of {self.total:,} events; the rest as busy fraction per pixel bin "
                f"(zoom in for exact events)")


def view_glyphs(data: TimelineData, t0_ns: int | None = None, t1_ns: int | None = None,
                width_px: int = 1200, budget: int = 20000) -> Glyphs:
    """Choose glyphs for [t0_ns, t1_ns) (relative to capture start) under `budget` glyphs.

    Rows are served quietest first: a row whose events all fit in the remaining exact budget is drawn
    exactly, the others become per-bin busy fractions (<= width_px bins per row).  GPU utilization rows
    are always binned.
    """
    t0 = data.first_ns if t0_ns is None else int(t0_ns)
    t1 = data.span_ns if t1_ns is None else int(t1_ns)
    if t1 <= t0:
        raise ReportError(f"empty time window [{t0}, {t1}) ns; the end must be after the start")
    budget = max(int(budget), 100)
    ix = data._index
    ptr, starts, ends = ix["ptr"], ix["starts"], ix["ends"]
    es, cs, ce = ix["ends_sorted"], ix["cs"], ix["ce"]
    rows = data.rows
    util_rows = set(ix["util"])
    event_rows = [r for r in rows["row"].tolist() if r not in util_rows]
    # events overlapping the window, per row: (#start < t1) - (#end <= t0)
    counts = {}
    for r in event_rows:
        lo, hi = ptr[r], ptr[r + 1]
        n_s = np.searchsorted(starts[lo:hi], t1, side="left")
        n_e = np.searchsorted(es[lo:hi], t0, side="right")
        counts[r] = int(n_s - n_e)
    total = sum(counts.values())
    min_w = max((t1 - t0) // max(width_px, 1), 1)  # one pixel, so a 2 us kernel stays visible
    n_util = len(util_rows)
    exact_budget = budget - n_util * min(width_px, 400)
    exact_parts, agg_parts, shown = [], [], 0
    ordered = sorted((c, r) for r, c in counts.items() if c > 0)
    agg_rows = []
    for c, r in ordered:
        if c <= exact_budget - shown:
            lo, hi = ptr[r], ptr[r + 1]
            stop = lo + np.searchsorted(starts[lo:hi], t1, side="left")
            idx = np.arange(lo, stop)
            idx = idx[ends[idx] > t0] if len(idx) else idx
            # zero-length events exactly at t0 (marks) still count as inside
            exact_parts.append(idx)
            shown += len(idx)
        else:
            agg_rows.append(r)
    if agg_rows:
        left_budget = max(budget - shown - n_util * min(width_px, 400), 0)
        bins = int(max(min(width_px, left_budget // max(len(agg_rows), 1)), 1))
        edges = np.linspace(t0, t1, bins + 1).astype(np.int64)
        for r in agg_rows:
            lo, hi = ptr[r], ptr[r + 1]
            agg_parts.append(_bin_row(data, r, starts[lo:hi], es[lo:hi], cs[lo:hi + 1] - cs[lo],
                                      ce[lo:hi + 1] - ce[lo], lo, edges))
    ubins = int(min(width_px, 400))
    uedges = np.linspace(t0, t1, ubins + 1).astype(np.int64)
    ucat = data.categories.index(UTIL_CAT) if UTIL_CAT in data.categories else 0
    for r, (s, e, ucs, uce) in ix["util"].items():
        f = _busy(uedges, s, e, ucs, uce)
        busy = np.diff(f) / np.diff(uedges).clip(min=1)
        keep = busy > 0
        agg_parts.append(pd.DataFrame({"left": uedges[:-1][keep], "right": uedges[1:][keep], "row": r, "cat": ucat,
                                       "name": -1, "count": -1, "busy": busy[keep]}))
    idx = np.concatenate(exact_parts) if exact_parts else np.empty(0, np.int64)
    ev = data.events
    sel = ev.iloc[idx]
    st = sel["start_ns"].to_numpy()
    en = sel["end_ns"].to_numpy()
    exact = pd.DataFrame({
        "left": st, "right": np.maximum(en, st + min_w), "row": sel["row"].to_numpy(),
        "cat": sel["cat"].to_numpy(), "name": sel["name"].to_numpy(), "detail": sel["detail"].to_numpy(),
        "dur_us": (en - st) / 1e3, "bytes": sel["bytes"].to_numpy(), "link": sel["link"].to_numpy(),
    })
    agg = pd.concat(agg_parts, ignore_index=True) if agg_parts else pd.DataFrame(columns=AGG_COLUMNS)
    return Glyphs(exact=exact, agg=agg[AGG_COLUMNS], shown=shown, total=total, t0_ns=t0, t1_ns=t1)


def _bin_row(data, r, s, e_sorted, cs, ce, lo, edges) -> pd.DataFrame:
    f = _busy(edges, s, e_sorted, cs, ce)
    width = np.diff(edges).clip(min=1)
    busy = np.clip(np.diff(f) / width, 0, 1)
    n_started = np.searchsorted(s, edges[1:], side="left")
    n_ended = np.searchsorted(e_sorted, edges[:-1], side="right")
    count = n_started - n_ended
    keep = count > 0
    # A representative name: the last event that starts before the bin's end.
    rep = np.clip(n_started - 1, 0, max(len(s) - 1, 0))
    names = data.events["name"].to_numpy()[lo + rep] if len(s) else np.zeros(len(rep), np.int32)
    return pd.DataFrame({"left": edges[:-1][keep], "right": edges[1:][keep], "row": r,
                         "cat": data.events["cat"].to_numpy()[lo + rep][keep] if len(s) else 0,
                         "name": names[keep], "count": count[keep],
                         "busy": busy[keep]})
