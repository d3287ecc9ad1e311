"""Timeline preparation: the reader's DataFrames -> rows, coded events, and glyphs for a time window.

Pure functions, no Bokeh.  `prepare_timeline(report)` builds one sorted event table (integer codes for
names, categories, details and colours; strings live once in lists) and the rows as a tree like Nsight Systems':
process -> thread -> NVTX levels / CUDA API / OS runtime ..., GPU (its utilization strip) -> context -> streams.
`fold_layout(rows, folded)` places the rows that stay visible when groups are folded.
`view_glyphs(data, t0, t1, ...)` picks what to draw for a window under a glyph budget: rows with few events in the
window get their exact events, busy rows get per-bin busy fractions (numpy, prefix sums).

Colours: NVTX ranges in the colour the code gave them (the NVTX colour attribute), else a stable colour per name;
kernels a stable colour per name (a hash into a palette), so repeats are easy to spot; copies by direction and
pageable vs pinned; everything else by category.  nsight-magic's own cell range is not a row: it frames the
timeline (x = 0 at its start).
"""
from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import pandas as pd

from ..analysis import text as tx
from ..analysis.frame_memo import made_for, note_made, report_memo
from ..inside.marks import CAPTURE_DOMAIN
from ..errors import ReportError
from ..readers.capture_span import OWN_SOURCES
from ..readers.contract import Meta, NsysFrames

Part: TypeAlias = "dict[str, np.ndarray]"  # one source's events as columns (_part)

# Thread sub-rows, in display order after the NVTX levels (0..255 are NVTX depths).
_THREAD_SOURCES = {"cuda_api": (256, "CUDA API"), "osrt": (257, "OS runtime"),
                   "cublas": (258, "cuBLAS"), "cudnn": (259, "cuDNN"), "python": (260, "Python")}
_READER_SOURCES = ("cuda_api", "osrt", "cublas", "cudnn")  # frames of the report; "python" is the samples' runs

# Fixed colours for the categories we know; anything new gets a palette colour in order of appearance.
_COLORS = {
    "kernel": "#4c78a8", "memset": "#b279a2", "CUDA API": "#72b7b2", "NVTX": "#54a24b",
    "OS runtime": "#bab0ac", "cuBLAS": "#eeca3b", "cuDNN": "#ff9da6", "GPU utilization": "#2f4b7c",
    "Python": "#3776ab",
    "memcpy HtoD pageable": "#e45756", "memcpy HtoD pinned": "#f58518",
    "memcpy DtoH pageable": "#9d755d", "memcpy DtoH pinned": "#a0cbe8", "memcpy DtoD": "#79706e",
}
_EXTRA_COLORS = ["#17becf", "#bcbd22", "#8c564b", "#e377c2", "#7f7f7f", "#1f77b4", "#d62728", "#9467bd"]

KERNEL_CAT = "kernel"
UTIL_CAT = "GPU utilization"
# stable per-name colours (Category20 without its greys); a name's colour is crc32(name) modulo its length
NAME_PALETTE = ["#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896", "#9467bd",
                "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#bcbd22", "#dbdb8d", "#17becf", "#9edae5"]


def name_color(name: str) -> int:
    """Index into NAME_PALETTE: the same name gets the same colour in every profile."""
    return zlib.crc32(str(name).encode("utf-8", "replace")) % len(NAME_PALETTE)


@dataclass
class TimelineData:
    """Everything the timeline needs, with strings stored once.

    events: start_ns/end_ns relative to the origin (int64), row, cat, name, detail, color (codes), bytes
    (copies), link (dense code of (pid, correlation id) for kernels and CUDA API calls, -1 otherwise); sorted by
    (row, start_ns).
    rows (display order): row, key, level (0 process / GPU, 1 thread / context, 2 leaf), ancestors (keys of the
    groups above, '|'-joined), label (short), path (full), group (the level-0 label), kind ('process', 'thread',
    'nvtx', 'cuda_api', ..., 'util' (a GPU: its utilization strip), 'context', 'gpu' (a stream)), pid, tid,
    device_id.  palette: the colours the `color` codes index.
    """

    events: pd.DataFrame
    rows: pd.DataFrame
    names: list[str]
    details: list[str]
    categories: list[str]
    colors: list[str]
    span_ns: int
    api_row_of_row: np.ndarray  # for an NVTX row: the CUDA API row of the same thread, else -1
    origin_ns: int = 0  # absolute time of x = 0: our cell range's start, else the capture start
    first_ns: int = 0   # earliest event relative to origin (<= 0 when something starts before the capture)
    palette: list[str] = field(default_factory=list)  # event colour codes index this
    frame_ns: tuple[int, int] | None = None  # our cell range (start, end) relative to the origin, where there is one
    last_ns: int = 0    # latest event end relative to origin: the first view spans first_ns..last_ns
    memory: pd.DataFrame | None = None  # the memory track: t_ms, gb, series (memory_series)
    gpu_metrics: pd.DataFrame | None = None  # the GPU metrics track: t_ms, pct, series (metrics_series)
    _index: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def total_events(self) -> int:
        return len(self.events)


def _frame(report: NsysFrames, attr: str) -> pd.DataFrame:
    df = getattr(report, attr)  # one of the contract's frames (readers.contract.FRAME_COLUMNS)
    if not isinstance(df, pd.DataFrame):
        raise ReportError(f"report.{attr} is a {type(df).__name__}, expected a pandas DataFrame")
    return df


def _need(df: pd.DataFrame, attr: str, cols: Iterable[str]) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ReportError(f"report.{attr} lacks column(s) {', '.join(missing)}; cannot draw the timeline")


def _int(s: pd.Series) -> np.ndarray:
    return np.asarray(pd.to_numeric(s, errors="coerce").fillna(-1).to_numpy(dtype=np.int64))


def _str(s: pd.Series) -> pd.Series:
    return s.astype("string").fillna("")


def _codes(values: pd.Series, table: dict[str, int]) -> np.ndarray:
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


def _detail_codes(df: pd.DataFrame, cols: list[str], fmt: Callable[..., str], table: dict[str, int]) -> np.ndarray:
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
    return np.asarray(mapping[grp])


def _group_ids(codes_2d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense ids for identical rows of small non-negative int codes, and the first position of each."""
    key = np.zeros(len(codes_2d), dtype=np.int64)
    for j in range(codes_2d.shape[1]):
        key = key * (int(codes_2d[:, j].max()) + 1) + codes_2d[:, j]
    _, first_pos, inv = np.unique(key, return_index=True, return_inverse=True)
    return inv.ravel(), first_pos


Codes: TypeAlias = "int | np.ndarray"  # one value for every event of a source, or one per event


def _part(df: pd.DataFrame, sub_or_stream: Codes, cat_codes: Codes, name_codes: Codes, detail_codes: Codes,
          key_a: Codes, key_b: Codes, nbytes: pd.Series | None = None, link: np.ndarray | None = None,
          color: Codes | None = None) -> Part:
    """One source's events as numpy arrays (concatenated later without pandas overhead)."""
    n = len(df)

    def bcast(v: Codes, dt: type[np.generic]) -> np.ndarray:
        return np.broadcast_to(np.asarray(v, dtype=dt), (n,))
    return {
        "start_ns": _int(df["start_ns"]),
        "end_ns": _int(df["end_ns"]),
        "key_a": bcast(key_a, np.int64), "key_b": bcast(key_b, np.int64), "sub": bcast(sub_or_stream, np.int64),
        "cat": bcast(cat_codes, np.int32), "name": bcast(name_codes, np.int32), "detail": bcast(detail_codes, np.int32),
        "color": bcast(-1 if color is None else color, np.int32),  # -1: the category's colour (set in _assemble)
        # none: one value for every event (a view, joined later), not an array a source long
        # float32, as the plots take it: 4 bytes an event, not 8 (3.15M NVTX ranges: 12.6 MB of the load's peak)
        "bytes": bcast(0, np.float32) if nbytes is None else
        pd.to_numeric(nbytes, errors="coerce").fillna(0).to_numpy(np.float32),
        "link_key": bcast(-1, np.int64) if link is None else np.asarray(link, np.int64),
        "pid": _int(df["pid"]) if "pid" in df else bcast(-1, np.int64),  # GPU work: the launching process
    }


def _host_side(kind: pd.Series, src: pd.Series, dst: pd.Series) -> pd.Series:
    """HtoD -> the source memory kind, DtoH -> the destination's: that is where pageable vs pinned matters."""
    host = pd.Series("", index=kind.index, dtype="string")
    k = _str(kind)
    host = host.mask(k.str.startswith("Hto"), _str(src)).mask(k.str.endswith("toH"), _str(dst))
    return host


class _Strings:
    """The string tables shared by all sources: each distinct name, detail, category and colour once."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.details: dict[str, int] = {}
        self.cats: dict[str, int] = {}
        # NAME_PALETTE first: name_color() indexes it
        self.colors: dict[str, int] = {c: i for i, c in enumerate(NAME_PALETTE)}

    def cat(self, label: str) -> int:
        return self.cats.setdefault(label, len(self.cats))

    def name(self, label: str) -> int:
        return self.names.setdefault(label, len(self.names))

    def detail(self, label: str) -> int:
        return self.details.setdefault(label, len(self.details))

    def color(self, hex_color: str) -> int:
        return self.colors.setdefault(hex_color.lower(), len(self.colors))

    def name_colors(self, name_codes: np.ndarray) -> np.ndarray:
        """Per-name palette colour of coded names (each distinct name hashed once)."""
        if not len(name_codes):
            return np.empty(0, np.int32)
        table = list(self.names)
        uniq, inv = np.unique(name_codes, return_inverse=True)
        return np.array([name_color(table[u]) for u in uniq.tolist()], np.int32)[inv.ravel()]


_KERNEL_CFG = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers_per_thread",
               "static_smem_bytes", "dynamic_smem_bytes")


def _launch_link(df: pd.DataFrame) -> np.ndarray:
    """(pid, correlation id) as one int64: correlation ids repeat across processes."""
    return (_int(df["pid"]) << 32) | (_int(df["correlation_id"]) & 0xFFFFFFFF)


def _kernels_part(k: pd.DataFrame, st: _Strings) -> Part:
    _need(k, "kernels", ["start_ns", "end_ns", "name", "device_id", "stream_id", "correlation_id", "pid"])
    name_col = k["short_name"] if "short_name" in k and k["short_name"].notna().all() else k["name"]
    cfg = [c for c in _KERNEL_CFG if c in k.columns]

    def fmt(*v: object) -> str:
        d = dict(zip(cfg, v))

        def dims(p: str) -> str:
            return f"({d.get(p + '_x', '?')},{d.get(p + '_y', '?')},{d.get(p + '_z', '?')})"
        return (f"grid {dims('grid')} block {dims('block')} regs {d.get('registers_per_thread', '?')} "
                f"smem {d.get('static_smem_bytes', '?')}+{d.get('dynamic_smem_bytes', '?')} B")

    detail = _detail_codes(k, cfg, fmt, st.details) if cfg else st.detail("")
    names = _codes(name_col, st.names)
    ctx = _int(k["context_id"]) if "context_id" in k else 0
    return _part(k, _int(k["stream_id"]), st.cat(KERNEL_CAT), names, detail, ctx, _int(k["device_id"]),
                 link=_launch_link(k), color=st.name_colors(names))


def _memcpy_part(m: pd.DataFrame, st: _Strings) -> Part:
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
    ctx = _int(m["context_id"]) if "context_id" in m else 0
    return _part(m, _int(m["stream_id"]), cat, name, detail, ctx, _int(m["device_id"]), nbytes=m["bytes"])


def _memset_part(s: pd.DataFrame, st: _Strings) -> Part:
    _need(s, "memset", ["start_ns", "end_ns", "device_id", "stream_id"])
    mk = s["mem_kind"] if "mem_kind" in s else pd.Series("", index=s.index)
    val = s["value"] if "value" in s else pd.Series("", index=s.index)
    detail = _detail_codes(pd.DataFrame({"k": mk, "v": val}), ["k", "v"],
                           lambda a, b: f"memset {a} value {b}", st.details)
    ctx = _int(s["context_id"]) if "context_id" in s else 0
    return _part(s, _int(s["stream_id"]), st.cat("memset"), st.name("memset"), detail, ctx, _int(s["device_id"]),
                 nbytes=s["bytes"] if "bytes" in s else None)


def _is_ours(nv: pd.DataFrame) -> np.ndarray:
    """Rows of nsight-magic's own cell range (domain nsight-magic): they frame the timeline, they are no row."""
    if "domain" not in nv:
        return np.zeros(len(nv), bool)
    return tx.eq(nv["domain"], CAPTURE_DOMAIN)  # per distinct domain, not per row


def _nvtx_part(nv: pd.DataFrame, st: _Strings) -> Part:
    _need(nv, "nvtx", ["start_ns", "end_ns", "name", "pid", "tid"])
    ours = _is_ours(nv)
    frames = nv[ours]
    # the columns drawn, then the rows: not every column of millions of ranges copied
    nv = nv[[c for c in ("start_ns", "end_ns", "name", "pid", "tid", "depth", "domain", "color") if c in nv]][~ours]
    # marks have no end: draw them at their start (one pixel wide)
    nv = nv.assign(end_ns=pd.to_numeric(nv["end_ns"], errors="coerce").fillna(pd.to_numeric(nv["start_ns"])))
    depth = np.clip(_int(nv["depth"]) if "depth" in nv else np.zeros(len(nv), np.int64), 0, 255)
    for f in frames.itertuples():  # the user's ranges inside our cell range: their level counts from 0
        end = pd.to_numeric(pd.Series([f.end_ns]), errors="coerce").fillna(np.iinfo(np.int64).max).iloc[0]
        inside = ((_int(nv["pid"]) == f.pid) & (_int(nv["tid"]) == f.tid) & (_int(nv["start_ns"]) >= f.start_ns)
                  & (_int(nv["start_ns"]) <= end))
        depth = np.where(inside & (depth > 0), depth - 1, depth)
    dom = nv["domain"] if "domain" in nv else pd.Series("", index=nv.index)
    detail = _detail_codes(pd.DataFrame({"d": dom}), ["d"],
                           lambda d: f"domain {d}" if d not in ("", "?", "<NA>") else "default domain", st.details)
    names = _codes(nv["name"], st.names)
    color = st.name_colors(names)
    if "color" in nv and len(nv):  # the colour the code chose (ARGB), where it chose one
        argb = pd.to_numeric(nv["color"], errors="coerce").to_numpy(float)
        has = ~np.isnan(argb)
        if has.any():
            rgb = argb[has].astype(np.int64) & 0xFFFFFF
            uniq, inv = np.unique(rgb, return_inverse=True)
            codes = np.array([st.color(f"#{int(c):06x}") for c in uniq.tolist()], np.int32)
            color[has] = codes[inv.ravel()]
    return _part(nv, depth, st.cat("NVTX"), names, detail, _int(nv["pid"]), _int(nv["tid"]), color=color)


def _thread_part(df: pd.DataFrame, attr: str, st: _Strings) -> Part:
    sub, label = _THREAD_SOURCES[attr]
    _need(df, attr, ["start_ns", "end_ns", "name", "pid", "tid"])
    df = df[_int(df["tid"]) != 0]  # tid 0 is no thread (nsys writes it for a call it could not attribute)
    link = _launch_link(df) if attr == "cuda_api" and "correlation_id" in df else None
    return _part(df, sub, st.cat(label), _codes(df["name"], st.names), st.detail(label),
                 _int(df["pid"]), _int(df["tid"]), link=link)


def _cell_range(report: NsysFrames) -> tuple[int, int] | None:
    """(start, end) of what the user profiled, when the report is ours: the reader's capture span decided by
    nsight-magic's cell range(s) or process marks (readers.capture_span)."""
    meta = report.meta
    return (int(meta.start_ns), int(meta.end_ns)) if meta.span_source in OWN_SOURCES else None


def prepare_timeline(report: NsysFrames) -> TimelineData:
    """Collect every drawable event of a report into one coded, sorted table plus the row layout.  A timeline
    prepared before and kept (saved_analysis.py puts it in the report's memo) is taken once instead."""
    memo = report_memo(report)
    kept = memo.pop(KEPT_TIMELINE, None)
    if isinstance(kept, TimelineData):
        return kept
    data = _prepare(report)
    note_made(report, MADE_TIMELINE, data)
    return data


KEPT_TIMELINE, MADE_TIMELINE = "timeline", "timeline_made"  # report_memo's keys


def made_timeline(report: NsysFrames) -> TimelineData | None:
    """The timeline prepare_timeline made for this report, while something (a view) still holds it."""
    return made_for(report, MADE_TIMELINE, TimelineData)


def keep_timeline(report: NsysFrames, data: TimelineData) -> None:
    """Let the report's next prepare_timeline take `data` (prepared before, for this report) instead."""
    build_index(data)
    report_memo(report)[KEPT_TIMELINE] = data


def _prepare(report: NsysFrames) -> TimelineData:
    st = _Strings()
    parts = []
    for attr, make in (("kernels", _kernels_part), ("memcpy", _memcpy_part), ("memset", _memset_part),
                       ("nvtx", _nvtx_part)):
        df = _frame(report, attr)
        if len(df):
            parts.append(make(df, st))
    for attr in _READER_SOURCES:
        df = _frame(report, attr)
        if len(df):
            parts.append(_thread_part(df, attr, st))
    runs = _python_runs(report)
    if len(runs):
        parts.append(_python_part(runs, st))
    return _assemble(report, parts, st)


def _python_runs(report: NsysFrames) -> pd.DataFrame:
    """The sampled Python code as runs of one summary per thread (analysis/python_code.py), when the profile has
    samples placed on its clock."""
    ps = report.python_samples
    if ps is None or ps.empty:
        return pd.DataFrame()
    from ..analysis.python_code import segments

    return segments(ps)


def _python_part(runs: pd.DataFrame, st: _Strings) -> Part:
    """A Python row per sampled thread: each run named by its summary (cell line › function), its detail the
    innermost frames; one colour per summary."""
    names = _codes(runs["name"], st.names)
    return _part(runs, _THREAD_SOURCES["python"][0], st.cat("Python"), names, _codes(runs["detail"], st.details),
                 _int(runs["pid"]), _int(runs["tid"]), color=st.name_colors(names))


def _assemble(report: NsysFrames, parts: list[Part], st: _Strings) -> TimelineData:
    """Concatenate the sources, choose the time origin, lay out rows, sort by (row, start), index."""
    names, details, cats, cat_code = st.names, st.details, st.cats, st.cat
    meta = report.meta
    empty = _part(pd.DataFrame({"start_ns": [], "end_ns": []}), 0, 0, 0, 0, 0, 0)
    # millions of events: each column is joined, then its sources' copies go (the parts are ours), and later each
    # is sorted as it is taken out, so that at most one extra copy of a column lives at a time
    ev = {}
    for c in empty:
        ev[c] = np.concatenate([p[c] for p in parts] or [empty[c]])
        for p in parts:
            del p[c]
    parts.clear()
    gpu_cats = [v for c, v in cats.items() if c in (KERNEL_CAT, "memset") or c.startswith("memcpy")]
    ev["gpu"] = np.isin(ev["cat"], gpu_cats)
    frame = _cell_range(report)
    origin, span, first = _time_origin(meta, ev["start_ns"], ev["end_ns"], frame)
    ev["start_ns"] -= origin
    ev["end_ns"] -= origin
    rows, row = _layout_rows(ev, report, cat_code)
    # category colours for events without one of their own; the category list keeps the legend's order
    cat_list = list(cats)
    cat_colors, extra = [], iter(_EXTRA_COLORS * 8)
    for c in cat_list:
        cat_colors.append(_COLORS.get(c) or next(extra))
    cat_color_code = np.array([st.color(c) for c in cat_colors] or [0], np.int32)
    color = np.where(ev["color"] >= 0, ev["color"], cat_color_code[np.clip(ev["cat"], 0, len(cat_color_code) - 1)])
    order = np.lexsort((ev["start_ns"], row))
    link_key = ev.pop("link_key")[order]
    codes, _ = pd.factorize(link_key)
    link = np.where(link_key >= 0, codes, -1).astype(np.int32)
    del link_key, codes
    start_ns = ev.pop("start_ns")[order]
    end_ns = ev.pop("end_ns")[order]
    np.maximum(end_ns, start_ns, out=end_ns)
    cols = {"start_ns": start_ns, "end_ns": end_ns, "row": row[order]}
    del row
    for c in ("cat", "name", "detail"):
        cols[c] = ev.pop(c)[order]
    cols["color"] = color[order].astype(np.int32)
    del color
    cols["bytes"] = ev.pop("bytes")[order]
    cols["link"] = link
    del order
    ev = pd.DataFrame(cols, copy=False)  # no block consolidation: millions of rows
    api_row = np.full(len(rows), -1, np.int64)
    thr = rows[rows["kind"].isin(["nvtx", "cuda_api"])]
    api = thr[thr["kind"] == "cuda_api"].set_index(["pid", "tid"])["row"]
    for r in thr[thr["kind"] == "nvtx"].itertuples():  # one per NVTX row, not per event
        api_row[r.row] = api.get((r.pid, r.tid), -1)
    st.color(_COLORS[UTIL_CAT])
    frame_rel = None
    if frame is not None:
        frame_rel = (frame[0] - origin, (frame[1] if frame[1] is not None else origin + span) - origin)
    last = int(ev["end_ns"].max()) if len(ev) else max(span, 1)
    if frame_rel is not None:
        last = max(last, frame_rel[1])
    # a name or detail is drawn and shown on hover up to NAME_CHARS: 3,000 template names of 60 kB each would make a
    # 600 MB page
    shown_names = [n if len(n) <= NAME_CHARS else n[:NAME_CHARS] + "…" for n in map(str, names)]
    shown_details = [d if len(d) <= NAME_CHARS else d[:NAME_CHARS] + "…" for d in map(str, details)]
    data = TimelineData(events=ev, rows=rows, names=shown_names, details=shown_details, categories=cat_list,
                        colors=cat_colors, span_ns=max(span, 1), api_row_of_row=api_row,
                        origin_ns=origin, first_ns=first, palette=list(st.colors), frame_ns=frame_rel,
                        last_ns=max(min(last, max(span, 1)), first + 1), memory=memory_series(report, origin),
                        gpu_metrics=metrics_series(report, origin))
    build_index(data)
    return data


NAME_CHARS = 1000     # of an event's name or detail kept for the page
MEMORY_POINTS = 2000   # per series on the memory track: the most in use within each of these bins


def memory_series(report: NsysFrames, origin_ns: int, points: int = MEMORY_POINTS) -> pd.DataFrame:
    """The memory track's lines: t_ms (from the origin), gb, series ('device 0 reserved', 'device 0 allocated',
    'device 0 (nsys)'), each at most `points` steps (a million allocations draw as the peaks of 2,000 bins:
    bounded output)."""
    cols = {"t_ms": pd.Series([], dtype=float), "gb": pd.Series([], dtype=float), "series": pd.Series([], dtype=object)}
    try:
        mem = report.gpu_memory
        tl = mem.timeline if mem is not None else None
    except Exception:  # noqa: BLE001 - an odd memory record: the timeline without its track
        tl = None
    if tl is None or tl.empty:
        return pd.DataFrame(cols)
    parts = []
    for (src, dev), g in tl.dropna(subset=["start_ns"]).groupby(["source", "device_id"], sort=True):
        t = (g["start_ns"].to_numpy(float) - origin_ns) / 1e6
        what = [("bytes", f"device {dev} (nsys)")] if src == "nsys" else \
            [("reserved", f"device {dev} reserved"), ("allocated", f"device {dev} allocated")]
        for col, name in what:
            tt, yy = _peaks(t, g[col].to_numpy(float) / 1e9, points)
            parts.append(pd.DataFrame({"t_ms": tt, "gb": yy, "series": name}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(cols)


# the GPU metrics track's lines (readers/gpu_metrics.KEYS), in this order
METRIC_LINES = (("sm_active", "SMs active"), ("sm_issue", "SM issue"), ("tensor_active", "tensor cores"),
                ("dram_read", "DRAM read"), ("dram_write", "DRAM write"))


def metrics_series(report: NsysFrames, origin_ns: int, points: int = MEMORY_POINTS) -> pd.DataFrame:
    """The GPU metrics track's lines: t_ms, pct (of the metric's peak), series ('GPU 0 SM issue'), each the mean
    of at most `points` bins (nsys samples every 0.1 ms: a minute is 600,000 samples per metric)."""
    cols = {"t_ms": pd.Series([], dtype=float), "pct": pd.Series([], dtype=float),
            "series": pd.Series([], dtype=object)}
    try:
        gm = report.gpu_metrics
    except Exception:  # noqa: BLE001 - an odd metrics table: the timeline without its track
        gm = None
    if gm is None or gm.empty:
        return pd.DataFrame(cols)
    parts = []
    for dev in sorted(set(gm.names["device_id"].astype(int))):
        for key, label in METRIC_LINES:
            s = gm.series(dev, key)
            if s.empty:
                continue
            t = (s["start_ns"].to_numpy(float) - origin_ns) / 1e6
            tt, yy = _means(t, s["value"].to_numpy(float), points)
            parts.append(pd.DataFrame({"t_ms": tt, "pct": yy, "series": f"GPU {dev} {label}"}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(cols)


def _bin_starts(t: np.ndarray, points: int) -> np.ndarray:
    """The first sample of each of `points` equal bins of time (empty bins dropped); t sorted."""
    edges = np.linspace(t[0], t[-1], points + 1)
    starts = np.unique(np.searchsorted(t, edges[:-1], side="left"))
    return starts[starts < len(t)]


def _means(t: np.ndarray, y: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    if len(t) <= points:
        return t, y
    starts = _bin_starts(t, points)
    return t[starts], np.add.reduceat(y, starts) / np.diff(np.append(starts, len(t)))


def _peaks(t: np.ndarray, y: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    if len(t) <= points:
        return t, y
    starts = _bin_starts(t, points)
    return t[starts], np.maximum.reduceat(y, starts)


def _time_origin(meta: Meta, starts: np.ndarray, ends: np.ndarray,
                 frame: tuple[int, int] | None = None) -> tuple[int, int, int]:
    """x = 0 and the axis end from the reader's capture span (readers.capture_span: the one definition) and the
    events drawn: x = 0 is the capture start, the axis covers every event.  Returns (origin, span, first) in ns,
    first = where the view opens relative to the origin (our own reports open on the cell, not on an OS call that
    began long before it)."""
    events = (int(starts.min()), int(ends.max())) if len(starts) else None
    if meta.span_source == "none":
        origin, end = events if events else (0, 1)
    else:
        origin, end = int(meta.start_ns), max(int(meta.end_ns), events[1] if events else int(meta.end_ns))
    first = events[0] - origin if events else 0
    if frame is not None:
        first = max(first, 0)
    return origin, max(end - origin, 1), first


def thread_names(report: NsysFrames) -> dict[tuple[int, int], str]:
    """(pid, tid) -> the thread's name: nsys's, else the Python name the samples recorded ("IOPub")."""
    ps = report.python_samples
    out = dict(ps.thread_names) if ps is not None else {}
    th = _frame(report, "threads")
    if th.empty or not {"pid", "tid", "name"} <= set(th.columns):
        return out
    th = th.dropna(subset=["name"]).drop_duplicates(["pid", "tid"])
    processes = _process_names(report) if out else {}
    for k, v in zip(zip(_int(th["pid"]), _int(th["tid"])), th["name"].astype(str)):
        # nsys names a thread after its process until the thread names itself: the Python name says more
        if not (k in out and v == (processes.get(k[0]) or "")[:15]):
            out[k] = v
    return out


def _kernel_threads(report: NsysFrames) -> set[tuple[int, int]]:
    """The threads of the machinery that runs the cell (analysis/python_code.thread_roles): one folded group."""
    ps = report.python_samples
    if ps is None or ps.empty:
        return set()
    from ..analysis.python_code import KERNEL, thread_roles

    return {k for k, r in thread_roles(ps).items() if r == KERNEL}


def _process_names(report: NsysFrames) -> dict[int, str]:
    pr = _frame(report, "processes")
    if pr.empty or not {"pid", "name"} <= set(pr.columns):
        return {}
    pr = pr.dropna(subset=["name"]).drop_duplicates("pid")
    return dict(zip(_int(pr["pid"]), pr["name"].astype(str).map(lambda n: n.rsplit("/", 1)[-1])))


def _gpu_names(report: NsysFrames) -> dict[int, str]:
    g = _frame(report, "gpus")
    if g.empty or not {"id", "name"} <= set(g.columns):
        return {}
    g = g.dropna(subset=["name"])
    return dict(zip(_int(g["id"]), g["name"].astype(str)))


_GPU_BIT = 1 << 62


def _layout_rows(ev: Part, report: NsysFrames, cat_code: Callable[[str], int]) -> tuple[pd.DataFrame, np.ndarray]:
    """The rows as a tree: one leaf per (pid, tid, NVTX level or source) and per (GPU, context, stream), under
    headers for each process (and each thread when the process has several), each GPU (its utilization strip)
    and each context (when a GPU has several).  Returns the rows table (display order) and each event's row."""
    gpu = ev["gpu"]
    m24 = 0xFFFFFF
    # each event's row key, made in place and for the GPU's events apart (3M NVTX ranges: one array, not eight)
    on_gpu = np.flatnonzero(gpu)
    key = ev["key_a"] & m24
    key <<= 33
    part = ev["key_b"] & m24
    part <<= 9
    key |= part
    np.bitwise_and(ev["sub"], 0x1FF, out=part)
    key |= part
    del part
    # ranks (%%nsys --nproc), or several processes with GPU work: each one's GPU rows go under its process (in
    # rank order, else pid order), so GPU keys carry the owner too
    ranks = dict(report.ranks_by_pid or {})
    order_of = {p: r for p, (r, _) in ranks.items()}
    if not ranks:
        gpu_pids = np.unique(ev["pid"][gpu & (ev["pid"] >= 0)])
        if len(gpu_pids) > 1:
            order_of = {int(p): int(p) for p in gpu_pids}
    rank_pids = sorted(order_of, key=lambda p: (order_of[p], p))[:127]
    slot = np.zeros(len(on_gpu), np.int64)
    if rank_pids:
        slot = pd.Index(rank_pids).get_indexer(ev["pid"][on_gpu]).astype(np.int64) + 1  # 0: no rank
    # GPU events: key_b device, key_a context, sub stream (shifted so that a missing stream -1 stays apart)
    key[on_gpu] = (_GPU_BIT | (slot << 55) | ((ev["key_b"][on_gpu] & 0xFF) << 47)
                   | ((ev["key_a"][on_gpu] & 0x1FFF) << 34) | ((ev["sub"][on_gpu] + 2) & 0x3FFFFFFFF))
    del slot
    codes, uniq = pd.factorize(key, sort=False)
    first = np.full(len(uniq), -1, np.int64)
    first[codes[::-1]] = np.arange(len(key))[::-1]
    tnames, gnames, pnames = thread_names(report), _gpu_names(report), _process_names(report)
    kernel_threads = _kernel_threads(report)
    by_sub = {v[0]: k for k, v in _THREAD_SOURCES.items()}
    # (sort key, fields) per distinct key: loops over rows (hundreds), never events
    leaves: list[tuple[tuple[int, ...], dict[str, Any], int]] = []
    for code, k in enumerate(uniq.tolist()):
        i = first[code]
        if k & _GPU_BIT:
            dev, ctx, stream = int(ev["key_b"][i]), int(ev["key_a"][i]), int(ev["sub"][i])
            slot_k = (k >> 55) & 0x7F
            owner = rank_pids[slot_k - 1] if slot_k else -1  # the rank's process, if any
            # a rank's GPUs right after its threads; GPUs of no rank after every process
            order = (0, order_of[owner], owner, 1, dev, ctx, stream) if owner >= 0 else (2, dev, ctx, stream, 0, 0, 0)
            leaves.append((order, dict(kind="gpu", pid=owner, tid=-1, device_id=dev, ctx=ctx, stream=stream), code))
        else:
            pid, tid, sub = int(ev["key_a"][i]), int(ev["key_b"][i]), int(ev["sub"][i])
            # ranks first, in rank order; the process's main thread first, then by thread id; within a thread
            # NVTX levels, then sources
            # the kernel's own threads after the program's (folded together: KERNEL_GROUP)
            main = 0 if tid == pid else (2 if (pid, tid) in kernel_threads else 1)
            order = (0, order_of[pid], pid, 0, main, tid, sub) if pid in order_of else (1, pid, main, tid, sub, 0, 0)
            leaves.append((order, dict(kind="nvtx" if sub < 256 else by_sub[sub], pid=pid, tid=tid, device_id=-1,
                                       sub=sub), code))
    leaves.sort(key=lambda x: x[0])
    threads_of: dict[int, set[int]] = {}
    contexts_of: dict[tuple[int, int], set[int]] = {}
    for _, f, _ in leaves:
        if f["kind"] == "gpu":
            contexts_of.setdefault((f["pid"], f["device_id"]), set()).add(f["ctx"])
        else:
            threads_of.setdefault(f["pid"], set()).add(f["tid"])
    recs, leaf_row = [], np.empty(len(uniq), np.int32)
    seen = set()

    def add(key: str, level: int, ancestors: list[str], label: str, path: str, group: str, kind: str, pid: int = -1,
            tid: int = -1, dev: int = -1) -> int:
        recs.append((key, level, "|".join(ancestors), label, path, group, kind, pid, tid, dev))
        return len(recs) - 1

    def process_group(pid: int) -> tuple[str, str]:
        pname = pnames.get(pid) or tnames.get((pid, pid))
        group = f"Process {pid}" + (f" {pname}" if pname else "")
        if pid in ranks:
            group = f"Rank {ranks[pid][0]} · {group}"
        pkey = f"p{pid}"
        if pkey not in seen:
            seen.add(pkey)
            add(pkey, 0, [], group, group, group, "process", pid=pid)
        return pkey, group

    for _, f, code in leaves:
        if f["kind"] == "gpu" and f["pid"] >= 0:  # a rank's GPU: rank -> GPU (utilization) -> streams
            dev, ctx = f["device_id"], f["ctx"]
            pkey, group = process_group(f["pid"])
            gname = gnames.get(dev)
            glabel = f"GPU {dev}" + (f" {gname}" if gname else "")
            gkey = f"{pkey}/g{dev}"
            if gkey not in seen:
                seen.add(gkey)
                add(gkey, 1, [pkey], glabel, f"{group} / {glabel}", group, "util", pid=f["pid"], dev=dev)
            label = f"stream {f['stream']}" if f["stream"] >= 0 else "stream ?"
            if len(contexts_of[(f["pid"], dev)]) > 1:
                label = f"context {ctx} · {label}"
            leaf_row[code] = add(f"{gkey}/c{ctx}/s{f['stream']}", 2, [pkey, gkey], label,
                                 f"{group} / {glabel} / {label}", group, "gpu", pid=f["pid"], dev=dev)
        elif f["kind"] == "gpu":
            dev, ctx = f["device_id"], f["ctx"]
            gname = gnames.get(dev)
            gkey, group = f"g{dev}", f"GPU {dev}" + (f" {gname}" if gname else "")
            if gkey not in seen:
                seen.add(gkey)
                add(gkey, 0, [], group, group, group, "util", dev=dev)
            anc, path = [gkey], group
            if len(contexts_of[(-1, dev)]) > 1:
                ckey = f"{gkey}/c{ctx}"
                if ckey not in seen:
                    seen.add(ckey)
                    add(ckey, 1, [gkey], f"context {ctx}", f"{group} / context {ctx}", group, "context", dev=dev)
                anc, path = [gkey, ckey], f"{group} / context {ctx}"
            label = f"stream {f['stream']}" if f["stream"] >= 0 else "stream ?"
            leaf_row[code] = add(f"{anc[-1]}/s{f['stream']}", 2, anc, label, f"{path} / {label}", group, "gpu",
                                 dev=dev)
        else:
            pid, tid, sub = f["pid"], f["tid"], f["sub"]
            pkey, group = process_group(pid)
            tname = tnames.get((pid, tid))
            who = (tname or "thread") + f" [{tid}]"
            what = (("NVTX" if sub == 0 else f"NVTX ·{sub}") if sub < 256 else _THREAD_SOURCES[f["kind"]][1])
            anc = [pkey]
            if (pid, tid) in kernel_threads:  # one group for all of them, its rows named by thread
                gkey = f"{pkey}/{KERNEL_GROUP}"
                if gkey not in seen:
                    seen.add(gkey)
                    n = sum(1 for p, _ in kernel_threads if p == pid)
                    add(gkey, 1, [pkey], f"kernel threads ({n})", f"{group} / kernel threads", group, "thread",
                        pid=pid)
                leaf_row[code] = add(f"{gkey}/t{tid}/{sub}", 2, [pkey, gkey], f"{who} · {what}",
                                     f"{group} / kernel threads / {who} / {what}", group, f["kind"], pid=pid, tid=tid)
                continue
            if len(threads_of[pid]) > 1 or pid in order_of:  # a rank's threads stay apart from its GPU rows
                tkey = f"{pkey}/t{tid}"
                if tkey not in seen:
                    seen.add(tkey)
                    add(tkey, 1, [pkey], who, f"{group} / {who}", group, "thread", pid=pid, tid=tid)
                anc, label = [pkey, tkey], what
            else:
                label = f"{who} · {what}"
            leaf_row[code] = add(f"{anc[-1]}/{sub}" if len(anc) > 1 else f"{pkey}/t{tid}/{sub}", 2, anc, label,
                                 f"{group} / {who} / {what if sub >= 256 else f'NVTX level {sub}'}", group,
                                 f["kind"], pid=pid, tid=tid)
    rows = pd.DataFrame(recs, columns=["key", "level", "ancestors", "label", "path", "group", "kind", "pid", "tid",
                                       "device_id"])
    rows.insert(0, "row", np.arange(len(rows), dtype=np.int32))
    if (rows["kind"] == "util").any():
        cat_code(UTIL_CAT)
    return rows, leaf_row[codes] if len(key) else np.empty(0, np.int32)


ROW_BUDGET = 48  # rows a static page shows unfolded; above it the thread/context groups start folded
KERNEL_GROUP = "kernel"  # the key's last part of a process's group of the kernel's own threads


def default_folds(rows: pd.DataFrame, budget: int = ROW_BUDGET) -> set[str]:
    """Groups folded when the page first shows: the kernel's own threads always, others only when the rows exceed
    `budget` (then threads and contexts fold, then every process and GPU but the first of each)."""
    kernel = set(rows.loc[rows["key"].astype(str).str.endswith(f"/{KERNEL_GROUP}"), "key"])
    if len(rows) <= budget:
        return kernel
    folded = set(rows.loc[rows["level"] == 1, "key"]) | kernel
    if (~np.isnan(fold_layout(rows, folded))).sum() <= budget:
        return folded
    top = rows[rows["level"] == 0]
    keep = {top.loc[top["kind"] == k, "key"].iloc[0] for k in ("process", "util") if (top["kind"] == k).any()}
    return folded | (set(top["key"]) - keep)


def fold_layout(rows: pd.DataFrame, folded: Iterable[str] = (), strip: bool = False) -> np.ndarray:
    """The y of each row with the groups in `folded` closed: consecutive integers from 0 for the rows still shown
    (a folded group keeps its own header), NaN for the hidden ones.  strip=True: a hidden row takes the y of its
    outermost folded ancestor instead, so a folded group draws its children's activity as one strip on its header
    (as Nsight Systems does); row labels use the layout without it."""
    closed = set(folded)
    anc = [a.split("|") if a else [] for a in rows["ancestors"]]
    hidden = np.array([bool(closed.intersection(a)) for a in anc], bool)
    y = np.full(len(rows), np.nan)
    y[~hidden] = np.arange(int((~hidden).sum()), dtype=float)
    if strip and hidden.any():
        y_of = dict(zip(rows["key"], y))
        for i in np.flatnonzero(hidden):  # rows (a few hundred at most), not events
            outer = next((a for a in anc[i] if a in closed), None)
            y[i] = y_of.get(outer, np.nan)
    return y


def build_index(data: TimelineData) -> None:
    """Per-row offsets plus start/end prefix sums, so a window costs O(rows * log n + drawn events)."""
    ev = data.events
    rows = ev["row"].to_numpy()
    nrows = len(data.rows)
    ptr = np.searchsorted(rows, np.arange(nrows + 1), side="left")
    starts = ev["start_ns"].to_numpy(np.int64)
    ends = ev["end_ns"].to_numpy(np.int64)
    ends_sorted = _ends_by_row(ends, rows, ptr)
    # Prefix sums per row (restarted at each row by subtracting the row's base later).
    cs = np.concatenate([[0], np.cumsum(starts, dtype=np.int64)])
    ce = np.concatenate([[0], np.cumsum(ends_sorted, dtype=np.int64)])
    data._index = {"ptr": ptr, "starts": starts, "ends": ends, "ends_sorted": ends_sorted, "cs": cs, "ce": ce,
                   "util": _util_intervals(data, ptr)}


def _ends_by_row(ends: np.ndarray, rows: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """The events' ends sorted within each row (the events come by row, then start).  Most rows' ends already are
    (a stream's kernels, a thread's calls, one after the other): only the rows whose ends go back (nested ranges,
    overlapping copies) are sorted, not millions of events (a reopen builds this index)."""
    back = np.flatnonzero((ends[1:] < ends[:-1]) & (rows[1:] == rows[:-1]))  # an end before the one before it
    if not len(back):
        return ends
    out = ends.copy()
    for r in np.unique(rows[back]).tolist():
        lo, hi = int(ptr[r]), int(ptr[r + 1])
        if hi - lo > 1:
            out[lo:hi] = np.sort(ends[lo:hi], kind="stable")
    return out


def _merge_intervals(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals, vectorised: a new block starts where a start passes every earlier end."""
    if len(s) == 0:
        return s, e
    if len(s) > 1 and not (s[1:] >= s[:-1]).all():
        o = np.argsort(s, kind="stable")
        s, e = s[o], e[o]
    run_end = np.maximum.accumulate(e)
    new = np.concatenate([[True], s[1:] > run_end[:-1]])
    idx = np.flatnonzero(new)
    block_end = np.maximum.reduceat(e, idx)
    return s[idx], block_end


def _util_intervals(data: TimelineData,
                    ptr: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Per GPU utilisation row: the union of its streams' events, with prefix sums (a stream row's events are
    ptr's slice of the events)."""
    ev, rows = data.events, data.rows
    starts, ends = ev["start_ns"].to_numpy(np.int64), ev["end_ns"].to_numpy(np.int64)
    out = {}
    for dev_row in rows[rows["kind"] == "util"].itertuples():
        stream_rows = rows[(rows["kind"] == "gpu") & (rows["device_id"] == dev_row.device_id)]["row"].to_numpy()
        cuts = [(int(ptr[r]), int(ptr[r + 1])) for r in np.sort(stream_rows).tolist()]
        s = np.concatenate([starts[a:b] for a, b in cuts]) if cuts else starts[:0]
        e = np.concatenate([ends[a:b] for a, b in cuts]) if cuts else ends[:0]
        s, e = _merge_intervals(s, e)
        out[int(dev_row.row)] = (s, e, np.concatenate([[0], np.cumsum(s)]), np.concatenate([[0], np.cumsum(e)]))
    return out


def _busy(t: np.ndarray, s: np.ndarray, e_sorted: np.ndarray, cs: np.ndarray, ce: np.ndarray) -> np.ndarray:
    """F(t) = total busy time before t = sum(min(t, e) - s for s < t); prefix sums make it vectorised."""
    ns = np.searchsorted(s, t, side="left")
    ne = np.searchsorted(e_sorted, t, side="left")
    return np.asarray((ns * t - cs[ns]) - (ne * t - ce[ne]))


AGG_COLUMNS = ["left", "right", "row", "cat", "name", "color", "count", "busy"]


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
            return "showing the one event" if self.total == 1 else f"showing all {self.total:,} events"
        return f"{self.shown:,} of {self.total:,} events exact, the rest as busy bins; zoom in for exact events"


def view_glyphs(data: TimelineData, t0_ns: int | None = None, t1_ns: int | None = None,
                width_px: int = 1200, budget: int = 20000) -> Glyphs:
    """Choose glyphs for [t0_ns, t1_ns) (relative to capture start) under `budget` glyphs.

    Rows are served quietest first: a row whose events all fit in the remaining exact budget is drawn
    exactly, the others become per-bin busy fractions (<= width_px bins per row).  GPU utilization rows
    are always binned.
    """
    t0 = data.first_ns if t0_ns is None else int(t0_ns)
    t1 = (data.last_ns or data.span_ns) if t1_ns is None else int(t1_ns)
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
    ucolor = data.palette.index(_COLORS[UTIL_CAT]) if _COLORS[UTIL_CAT] in data.palette else 0
    for r, (s, e, ucs, uce) in ix["util"].items():
        f = _busy(uedges, s, e, ucs, uce)
        busy = np.diff(f) / np.diff(uedges).clip(min=1)
        keep = busy > 0
        agg_parts.append(pd.DataFrame({"left": uedges[:-1][keep], "right": uedges[1:][keep], "row": r, "cat": ucat,
                                       "name": -1, "color": ucolor, "count": -1, "busy": busy[keep]}))
    idx = np.concatenate(exact_parts) if exact_parts else np.empty(0, np.int64)
    exact = exact_frame(data, idx, min_w)
    agg = pd.concat(agg_parts, ignore_index=True) if agg_parts else pd.DataFrame(columns=AGG_COLUMNS)
    return Glyphs(exact=exact, agg=agg[AGG_COLUMNS], shown=shown, total=total, t0_ns=t0, t1_ns=t1)


def exact_frame(data: TimelineData, idx: np.ndarray, min_w: int = 0) -> pd.DataFrame:
    """The glyph columns (left, right, row, cat, name, detail, color, dur_us, bytes, link) of the events at positions idx; bars at least min_w ns wide."""
    sel = data.events.iloc[idx]
    st = sel["start_ns"].to_numpy()
    en = sel["end_ns"].to_numpy()
    return pd.DataFrame({
        "left": st, "right": np.maximum(en, st + min_w), "row": sel["row"].to_numpy(),
        "cat": sel["cat"].to_numpy(), "name": sel["name"].to_numpy(), "detail": sel["detail"].to_numpy(),
        "color": sel["color"].to_numpy(), "dur_us": (en - st) / 1e3, "bytes": sel["bytes"].to_numpy(),
        "link": sel["link"].to_numpy(),
    })


def embeddable_rows(data: TimelineData, limit: int) -> list[int]:
    """The event rows whose events, all of them, fit `limit` events together: the quietest rows first (as
    view_glyphs serves them), so the rows drawn exactly at the first view are among them."""
    ptr, util = data._index["ptr"], set(data._index["util"])
    counts = sorted((int(ptr[r + 1] - ptr[r]), int(r)) for r in data.rows["row"].tolist() if r not in util)
    chosen, total = [], 0
    for c, r in counts:
        if c == 0:
            continue
        if total + c > limit:
            break
        chosen.append(r)
        total += c
    return chosen


def _bin_row(data: TimelineData, r: int, s: np.ndarray, e_sorted: np.ndarray, cs: np.ndarray, ce: np.ndarray,
             lo: int, edges: np.ndarray) -> pd.DataFrame:
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
                         "name": names[keep],
                         "color": data.events["color"].to_numpy()[lo + rep][keep] if len(s) else 0,
                         "count": count[keep], "busy": busy[keep]})
