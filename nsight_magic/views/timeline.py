"""Timeline build: TimelineData + Glyphs -> a Bokeh layout (WebGL), and the live window refresh.

Numbers travel as typed arrays: float64 ms for event edges (float32 resolves only ~4 us at 40 s, so a
microsecond event late in a long capture would get width 0), float32 for durations and sizes, small ints.
Names and details travel once, as lists held by the hover formatters, and are looked up by code in the
browser.  Tooltips use `@field` placeholders, which Bokeh escapes, and the custom formatters return plain
strings (escaped by the same template path).  Names drawn on the bars are canvas text (never markup).

Rows are a tree (timeline_prepare): a glyph's `y` is its row's place in the current fold layout (NaN: hidden).
Folding re-lays the rows out: in the browser (TIMELINE_JS, static pages) or from Python (`fold`, live view).
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from bokeh.events import SelectionGeometry
from bokeh.models import (BoxAnnotation, BoxSelectTool, BoxZoomTool, ColumnDataSource, CustomJS, CustomJSHover,
                          CustomJSTransform, FixedTicker, HoverTool, Label, LayoutDOM, LinearColorMapper,
                          NumeralTickFormatter, PanTool, Range1d, ResetTool, Spacer, TapTool, Title, WheelZoomTool)
from bokeh.layouts import column, row
from bokeh.plotting import figure

from .assets import timeline_js
from .timeline_prepare import (KERNEL_CAT, UTIL_CAT, Glyphs, TimelineData, default_folds, embeddable_rows, exact_frame,
                               fold_layout, view_glyphs)

ROW_PX = 22
LABEL_PX = 250  # width of the row names on the left
# the bars' names of the first view are fitted before the page is laid out (no script may have run: a static copy),
# to the plot's width in a notebook on a 1280-px screen beside the row names; it stretches wider or narrower (two
# stacked %nsys_diff timelines), and names fitted to the nominal width ran past their bars there.  Once laid out
# (and at each resize, zoom or pan) labels.js fits them to the real width.
INITIAL_LABEL_PX = 640
MEMORY_PX = 130  # height of the GPU memory track (and of the GPU metrics track) under the timeline
MEMORY_COLORS = ("#d62728", "#ff9896", "#9467bd", "#2ca02c", "#98df8a", "#8c564b")
METRIC_COLORS = ("#1f77b4", "#17becf", "#2ca02c", "#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2")
UTIL_HEIGHT = 0.45  # the GPU utilization strip is thin (a heat strip); events fill 0.8 of a row


def _y(rows_y: np.ndarray, row: np.ndarray) -> np.ndarray:
    return rows_y[row].astype(np.float32) if len(row) else np.empty(0, np.float32)


def _exact_columns(g: Glyphs, rows_y: np.ndarray) -> dict[str, np.ndarray]:
    e = g.exact
    row = e["row"].to_numpy()
    return {
        "left": e["left"].to_numpy(np.float64) / 1e6,
        "right": e["right"].to_numpy(np.float64) / 1e6,
        "row": row.astype(np.int16),
        "y": _y(rows_y, row),
        "cat": e["cat"].to_numpy().astype(np.uint8),
        "name": e["name"].to_numpy().astype(np.int32),
        "detail": e["detail"].to_numpy().astype(np.int32),
        "color": e["color"].to_numpy().astype(np.int16),
        "dur_us": e["dur_us"].to_numpy().astype(np.float32),
        "bytes": e["bytes"].to_numpy().astype(np.float32),
        "link": e["link"].to_numpy().astype(np.int32),
    }


def _agg_columns(g: Glyphs, rows_y: np.ndarray, util_cat: int) -> dict[str, np.ndarray]:
    a = g.agg
    row = a["row"].to_numpy()
    cat = a["cat"].to_numpy()
    return {
        "left": a["left"].to_numpy(np.float64) / 1e6,
        "right": a["right"].to_numpy(np.float64) / 1e6,
        "row": row.astype(np.int16),
        "y": _y(rows_y, row),
        "h": np.where(cat == util_cat, UTIL_HEIGHT, 0.8).astype(np.float32),
        "cat": cat.astype(np.uint8),
        "name": a["name"].to_numpy().astype(np.int32),
        "color": a["color"].to_numpy().astype(np.int16),
        "count": a["count"].to_numpy().astype(np.int32),
        "busy": a["busy"].to_numpy().astype(np.float32),
    }


def text_colors(palette: Iterable[str]) -> list[str]:
    """Black or white text for each palette colour, whichever reads better on it."""
    out = []
    for c in palette:
        r, g, b = (int(c[i:i + 2], 16) for i in (1, 3, 5))
        out.append("#111111" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#ffffff")
    return out


_LOOKUP_JS = timeline_js("lookup")
_DUR_JS = timeline_js("duration")
_BYTES_JS = timeline_js("bytes")
_BUSY_JS = timeline_js("busy")

# Selecting an API call (or kernel) highlights everything sharing its launch link (pid, correlation id);
# selecting an NVTX range highlights the kernels launched by API calls of the same thread inside it.
_SELECT_JS = timeline_js("select")

# Names on the bars wide enough to hold them, re-laid out whenever the range or the data change.
_LABELS_JS = timeline_js("labels")

# A drag with the measuring tool: the span and its duration.
_MEASURE_JS = timeline_js("measure")

# A names (or details) table up to this long goes to the page whole; a longer one (a --pytorch run's NVTX names
# number every operator call: millions) only with the names of the events the page holds, as {code: name},
# replaced with the window's when the live view fetches one
NAMES_INLINE = 20_000


def shown_table(full: Sequence[str], *codes: Any) -> list[str] | dict[str, str]:
    """The names table a page carries for events of these codes: all of `full`, or (beyond NAMES_INLINE) the
    names of the codes alone, keyed by code (the lookup scripts index either alike)."""
    if len(full) <= NAMES_INLINE:
        return list(full) if not isinstance(full, list) else full
    parts = [np.asarray(c, np.int64).ravel() for c in codes if len(c)]
    used = np.unique(np.concatenate(parts)) if parts else np.empty(0, np.int64)
    used = used[(used >= 0) & (used < len(full))]
    return {str(c): str(full[c]) for c in used.tolist()}


class TimelineView:
    """A Bokeh layout for one report; `set_window` refreshes it with exact events (live kernel only), `fold`
    re-lays out the rows with some groups folded."""

    def __init__(self, data: TimelineData, *, width: int = 1100, budget: int = 10000,
                 folded: Iterable[str] | None = None, name: str | None = None, embed: int = 0) -> None:
        self.data = data
        self.width = width
        self.budget = budget
        self.embed = embed  # static pages: events embedded for exact zoom without a kernel (_embed_exact)
        # the live view takes its static twin's name: clicks in the tables and findings find both
        self.plot_name = name or f"nsight-timeline-{uuid.uuid4().hex[:8]}"
        self.folded = set(default_folds(data.rows) if folded is None else folded)
        self.rows_y = fold_layout(data.rows, self.folded)       # labels: hidden rows have none
        self.event_y = fold_layout(data.rows, self.folded, strip=True)  # events: a folded group's on its header
        self.util_cat = data.categories.index(UTIL_CAT) if UTIL_CAT in data.categories else -1
        g = view_glyphs(data, width_px=width, budget=budget)
        self.glyphs = g
        self.exact_src = ColumnDataSource(_exact_columns(g, self.event_y))
        self.agg_src = ColumnDataSource(_agg_columns(g, self.event_y, self.util_cat))
        self.layout = self._build()

    # ---- layout of the rows ---------------------------------------------------------------------------------
    def _n_visible(self) -> int:
        return max(int(np.sum(~np.isnan(self.rows_y))), 1)

    def _height(self) -> int:
        return int(min(max(90 + ROW_PX * self._n_visible(), 200), 1600))

    def _build(self) -> LayoutDOM:
        data = self.data
        nrows = self._n_visible()
        span_ms = data.span_ns / 1e6
        first_ms = data.first_ns / 1e6
        last_ms = (data.last_ns or data.span_ns) / 1e6  # the first view: where the events are (the whole axis pans)
        x_range = Range1d(first_ms, last_ms, bounds=(first_ms - 0.02 * span_ms, 1.02 * span_ms), min_interval=1e-4)
        p = figure(name=self.plot_name, height=self._height(), sizing_mode="stretch_width", min_width=400,
                   output_backend="webgl", x_range=x_range, y_range=Range1d(nrows - 0.5, -0.5), tools=[],
                   x_axis_label="ms from the start of the cell" if data.frame_ns else "ms from capture start",
                   toolbar_location="above")
        wheel = WheelZoomTool(dimensions="width")
        # the measuring tool selects nothing: it reads a span (SelectionGeometry) through a renderer of its own
        probe = p.scatter(x=[], y=[], size=0)
        measure = BoxSelectTool(dimensions="width", renderers=[probe], description="Measure a span (drag)")
        p.add_tools(wheel, PanTool(dimensions="width"), BoxZoomTool(), measure, ResetTool(), TapTool())
        p.toolbar.active_scroll = wheel
        palette = list(data.palette) or ["#4c78a8"]
        mapper = LinearColorMapper(palette=palette, low=-0.5, high=len(palette) - 0.5)
        color = {"field": "color", "transform": mapper}
        if data.frame_ns is not None:  # outside the cell: shaded (what ran before and after it is not the cell)
            a, b = data.frame_ns[0] / 1e6, data.frame_ns[1] / 1e6
            p.add_layout(BoxAnnotation(right=a, fill_color="#888888", fill_alpha=0.12, line_alpha=0, level="underlay"))
            p.add_layout(BoxAnnotation(left=b, fill_color="#888888", fill_alpha=0.12, line_alpha=0, level="underlay"))
        # the evidence of a finding (Advice tab), shaded across every row
        self.band_src = ColumnDataSource({"left": [], "right": []}, name=f"{self.plot_name}-bands")
        self.band_glyph = p.quad(left="left", right="right", bottom=-0.5, top=nrows - 0.5, source=self.band_src,
                                 fill_color="#f4d03f", fill_alpha=0.3, line_alpha=0, level="underlay")
        # a bin with any event shows at least faintly; busier bins are darker (the hover gives the exact %)
        shade = CustomJSTransform(v_func="return xs.map(x => 0.25 + 0.75 * Math.min(Math.max(x, 0), 1));")
        agg_r = p.hbar(y="y", left="left", right="right", height="h", source=self.agg_src, fill_color=color,
                       fill_alpha={"field": "busy", "transform": shade}, line_alpha=0)
        # a white edge: ranges that touch (step 0, step 1, ...) stay apart
        ex_r = p.hbar(y="y", left="left", right="right", height=0.8, source=self.exact_src, fill_color=color,
                      line_color="white", line_alpha=0.9, line_width=1, selection_line_color="black",
                      nonselection_fill_alpha=0.35)
        hl = ColumnDataSource({"left": [], "right": [], "row": [], "y": []})
        self.hl_src = hl
        p.hbar(y="y", left="left", right="right", height=0.95, source=hl, fill_alpha=0, line_color="black",
               line_width=2)
        self.label_src = ColumnDataSource({"x": [], "y": [], "text": [], "tcol": []},
                                          name=f"{self.plot_name}-labels")
        p.text(x="x", y="y", text="text", text_color={"field": "tcol"}, source=self.label_src, text_font_size="8pt",
               text_baseline="middle", text_align="left")
        names_table = self._table(data.names, "name")
        names = self._names_hover = CustomJSHover(args={"table": names_table}, code=_LOOKUP_JS)
        details = self._details_hover = CustomJSHover(args={"table": self._table(data.details, "detail")},
                                                      code=_LOOKUP_JS)
        paths = CustomJSHover(args={"table": data.rows["path"].astype(str).tolist()}, code=_LOOKUP_JS)
        dur = CustomJSHover(code=_DUR_JS)
        nbytes = CustomJSHover(args={"src": self.exact_src}, code=_BYTES_JS)
        busy = CustomJSHover(args={"src": self.agg_src}, code=_BUSY_JS)
        p.add_tools(HoverTool(renderers=[ex_r], tooltips=[
            ("name", "@name{custom}"), ("start", "@left{0,0.000} ms"), ("duration", "@dur_us{custom}"),
            ("details", "@detail{custom}"), ("bytes", "@bytes{custom}"), ("row", "@row{custom}")],
            formatters={"@name": names, "@detail": details, "@dur_us": dur, "@bytes": nbytes, "@row": paths}))
        p.add_tools(HoverTool(renderers=[agg_r], tooltips=[
            ("e.g.", "@name{custom}"), ("from", "@left{0,0.000} ms"), ("to", "@right{0,0.000} ms"),
            ("busy", "@busy{custom}"), ("row", "@row{custom}")],
            formatters={"@name": names, "@busy": busy, "@row": paths}))
        p.yaxis.visible = False  # the rows are named by the label plot on the left (a tree you can fold)
        p.ygrid.ticker = FixedTicker(ticks=list(range(nrows)))
        p.ygrid.grid_line_alpha = 0.3
        p.xaxis.formatter = NumeralTickFormatter(format="0,0.[000]")  # 12,000,000 ms, never 1.2e+7
        # Titles are canvas text (never markup) and live in BokehJS core: no widgets bundle needed.
        p.title.text = self.glyphs.caption
        p.title.text_font_style = "normal"
        note = Title(text="", align="left", text_font_style="italic")
        p.add_layout(note, "below")
        box = BoxAnnotation(fill_color="#2e86c1", fill_alpha=0.12, line_color="#2e86c1", visible=False)
        mlabel = Label(x=0, y=0, y_units="screen", text="", visible=False, text_font_size="9pt",
                       background_fill_color="white", background_fill_alpha=0.85, x_offset=4, y_offset=4)
        p.add_layout(box)
        p.add_layout(mlabel)
        p.js_on_event(SelectionGeometry, CustomJS(args={"box": box, "label": mlabel}, code=_MEASURE_JS))
        cats = data.categories
        self.exact_src.selected.js_on_change("indices", CustomJS(args={
            "src": self.exact_src, "hl": hl, "note": note, "api_row": data.api_row_of_row.astype(np.int32).tolist(),
            "nvtx_cat": cats.index("NVTX") if "NVTX" in cats else -1,
            "kernel_cat": cats.index(KERNEL_CAT) if KERNEL_CAT in cats else -1}, code=_SELECT_JS))
        self.rows_src = self.rows_source()
        relabel = self._relabel = CustomJS(args={"src": self.exact_src, "labels": self.label_src, "plot": p,
                                                 "names": names_table,
                                 "text_color": text_colors(palette), "char_px": 6.2, "max_labels": 600},
                           code=_LABELS_JS)
        for attr in ("start", "end"):
            p.x_range.js_on_change(attr, relabel)
        p.js_on_change("inner_width", relabel)  # laid out (and resized): the names fitted to the real width
        self.exact_src.js_on_change("data", relabel)
        self.figure = p
        self.fit_labels()
        self.label_plot = self._label_plot(p)
        if self.embed:
            self._embed_exact(self.embed)
        tracks = [t for t in (self._memory_track(p), self._metrics_track(p)) if t is not None]
        if not tracks:
            return row(self.label_plot, p, sizing_mode="stretch_width")
        return column(row(self.label_plot, p, sizing_mode="stretch_width"), *tracks, sizing_mode="stretch_width")

    def _metrics_track(self, p: figure) -> LayoutDOM | None:
        """The GPU's counters under the timeline (nsys --gpu-metrics-devices), on its x range: SMs active, SM issue,
        tensor cores, DRAM read and write, each a share of its peak; None without GPU metrics."""
        m = self.data.gpu_metrics
        if m is None or m.empty:
            return None
        mp = figure(name=f"{self.plot_name}-metrics", height=MEMORY_PX, sizing_mode="stretch_width", min_width=400,
                    x_range=p.x_range, y_range=(0, 135), tools=[], toolbar_location=None,
                    min_border_left=p.min_border_left, min_border_right=p.min_border_right)
        mp.yaxis.visible = False
        mp.title.text = "GPU metrics (% of peak; hover for values)"
        mp.title.text_font_size = "9pt"
        for i, (name, g) in enumerate(m.groupby("series", sort=False)):
            src = ColumnDataSource({"x": g["t_ms"].to_numpy(float), "y": g["pct"].to_numpy(float),
                                    "series": [name] * len(g)})
            mp.line("x", "y", source=src, line_width=1.2, legend_label=name,
                    color=METRIC_COLORS[i % len(METRIC_COLORS)])
        # one line of legend above 100%: the lines stay visible under it
        mp.legend.orientation = "horizontal"
        mp.legend.location = "top_left"
        mp.legend.label_text_font_size = "8pt"
        mp.legend.background_fill_alpha = 0.6
        mp.add_tools(HoverTool(tooltips=[("", "@series"), ("%", "@y{0.0}"), ("ms", "@x{0,0.000}")], mode="vline"))
        return row(Spacer(width=LABEL_PX, height=MEMORY_PX), mp, sizing_mode="stretch_width")

    def _memory_track(self, p: figure) -> LayoutDOM | None:
        """GPU memory in use under the timeline, on its x range (zoom and pan move both): torch's reserved and
        allocated bytes, nsys's device-memory count; None when the report has no memory record."""
        m = self.data.memory
        if m is None or m.empty:
            return None
        # no y axis: its labels would shift the plot off the timeline's x positions (the hover and title say GB)
        mp = figure(name=f"{self.plot_name}-memory", height=MEMORY_PX, sizing_mode="stretch_width", min_width=400,
                    x_range=p.x_range, tools=[], toolbar_location=None, min_border_left=p.min_border_left,
                    min_border_right=p.min_border_right)
        mp.yaxis.visible = False
        mp.title.text = f"GPU memory in use (GB; peak {m['gb'].max():,.2f} GB, hover for values)"
        mp.title.text_font_size = "9pt"
        for i, (name, g) in enumerate(m.groupby("series", sort=True)):
            src = ColumnDataSource({"x": g["t_ms"].to_numpy(float), "y": g["gb"].to_numpy(float),
                                    "series": [name] * len(g)})
            mp.step("x", "y", source=src, mode="after", line_width=1.5, legend_label=name,
                    color=MEMORY_COLORS[i % len(MEMORY_COLORS)])
        mp.legend.location = "top_left"
        mp.legend.label_text_font_size = "8pt"
        mp.legend.background_fill_alpha = 0.6
        mp.add_tools(HoverTool(tooltips=[("", "@series"), ("GB", "@y{0,0.000}"), ("ms", "@x{0,0.000}")],
                               mode="vline"))
        return row(Spacer(width=LABEL_PX, height=MEMORY_PX), mp, sizing_mode="stretch_width")

    def _embed_exact(self, limit: int) -> None:
        """For pages without a kernel: the events of the quietest rows (up to `limit` of them, besides those the
        first view draws exactly already) go into the page, and a zoom to a window that holds at most `limit`
        of them draws them exactly (ZOOM_JS); busier rows keep their bins and the caption says how to see them."""
        data = self.data
        first = set(np.unique(self.glyphs.exact["row"].to_numpy()).tolist()) if len(self.glyphs.exact) else set()
        ptr = data._index["ptr"]
        extra_limit = limit + sum(int(ptr[r + 1] - ptr[r]) for r in first)
        rows = embeddable_rows(data, extra_limit)
        extra = [r for r in rows if r not in first]
        idx = np.concatenate([np.arange(ptr[r], ptr[r + 1]) for r in extra]) if extra else np.empty(0, np.int64)
        e = exact_frame(data, idx)
        self.embedded_rows = sorted(first | set(extra))
        busy_rows = {int(r) for r in data.rows["row"]} - set(self.embedded_rows) - set(data._index["util"])
        partial = any(int(ptr[r + 1] - ptr[r]) for r in busy_rows)
        self.all_src = ColumnDataSource({
            "left": e["left"].to_numpy(np.float64) / 1e6, "right": e["right"].to_numpy(np.float64) / 1e6,
            "row": e["row"].to_numpy().astype(np.int16), "cat": e["cat"].to_numpy().astype(np.uint8),
            "name": e["name"].to_numpy().astype(np.int32), "detail": e["detail"].to_numpy().astype(np.int32),
            "color": e["color"].to_numpy().astype(np.int16), "bytes": e["bytes"].to_numpy().astype(np.float32),
            "link": e["link"].to_numpy().astype(np.int32)})
        self._refresh_tables(e)  # the embedded events' names too: a zoom in the page draws them
        zoom = CustomJS(args={"all": self.all_src, "exact": self.exact_src, "agg": self.agg_src, "plot": self.figure,
                              "rows": self.rows_src, "embedded": self.embedded_rows, "budget": int(limit),
                              "width": self.width, "partial": partial}, code=ZOOM_JS)
        for attr in ("start", "end"):
            self.figure.x_range.js_on_change(attr, zoom)

    def _label_plot(self, p: figure) -> figure:
        """The rows' names as a tree on the left, sharing the timeline's y range; a click on a process, thread,
        GPU or context folds or unfolds it (FOLD_JS, the same in saved pages and in the live view)."""
        lp = figure(name=f"{self.plot_name}-rowlabels", width=LABEL_PX, height=p.height, y_range=p.y_range,
                    x_range=Range1d(0, 1), tools=[], toolbar_location=None, min_border_left=4, min_border_right=0,
                    outline_line_alpha=0)
        lp.axis.visible = False
        lp.grid.visible = False
        lp.title.text = " "  # the same top margin as the timeline's caption
        # the toolbar above the timeline: the same offset here
        lp.min_border_top = p.min_border_top
        r = lp.text(x="x", y="y", text="text", source=self.rows_src, text_font_size="8pt", text_baseline="middle",
                    text_font_style={"field": "weight"}, text_color="#222222")
        lp.add_tools(TapTool(renderers=[r]))
        self.rows_src.selected.js_on_change("indices", CustomJS(args={
            "rows": self.rows_src, "plot": p, "labels": lp, "band": self.band_glyph.glyph}, code=FOLD_JS))
        return lp

    def fit_labels(self) -> None:
        """Names on the wide bars of the current x range (the first view, or one set from outside: linked
        timelines), so that a page shows them before any interaction."""
        e = self.exact_src.data
        x0, x1 = self.figure.x_range.start, self.figure.x_range.end
        px = min(self.width, INITIAL_LABEL_PX) / max(x1 - x0, 1e-12)
        tc = text_colors(self.data.palette or ["#4c78a8"])
        X, Y, T, C = [], [], [], []
        taken: dict[float, float] = {}  # as _LABELS_JS: a row's labels never overlap
        for left, right, y, nm, col in zip(e["left"], e["right"], e["y"], e["name"], e["color"]):
            room = (min(right, x1) - max(left, x0)) * px - 6
            if not np.isfinite(y) or room < 24 or max(left, x0) < taken.get(y, -np.inf):
                continue
            name = str(self.data.names[nm]) if 0 <= nm < len(self.data.names) else ""
            fit = int(room // 6.2)
            if fit < 3:
                continue
            text = name if len(name) <= fit else name[: fit - 1] + "…"
            X.append(max(left, x0) + 3 / px)
            Y.append(float(y))
            T.append(text)
            C.append(tc[col] if 0 <= col < len(tc) else "#111111")
            taken[y] = max(left, x0) + (len(text) * 6.2 + 6) / px
            if len(X) >= 600:
                break
        self.label_src.data = {"x": X, "y": Y, "text": T, "tcol": C}

    # ---- live updates ---------------------------------------------------------------------------------------
    def set_window(self, t0_ms: float, t1_ms: float, budget: int | None = None) -> Glyphs:
        """Refill the sources with the glyphs of [t0_ms, t1_ms] (exact events when they fit the budget)."""
        t0 = max(int(t0_ms * 1e6), self.data.first_ns)
        t1 = min(int(t1_ms * 1e6), self.data.span_ns)
        if t1 <= t0:
            t1 = t0 + 1
        self._sync_folds()
        g = view_glyphs(self.data, t0, t1, width_px=self.width, budget=budget or self.budget)
        self.glyphs = g
        self._refresh_tables()  # before the events that need them
        self.exact_src.data = _exact_columns(g, self.event_y)
        self.agg_src.data = _agg_columns(g, self.event_y, self.util_cat)
        self.figure.title.text = g.caption
        return g

    def _table(self, full: Sequence[str], column: str, *more: Any) -> list[str] | dict[str, str]:
        """shown_table for the current glyphs (and `more` frames of events) and one code column."""
        g = self.glyphs
        return shown_table(full, *(f[column].to_numpy() for f in (g.exact, g.agg, *more) if column in f))

    def _refresh_tables(self, *more: Any) -> None:
        """Long tables (NAMES_INLINE) replaced with the names and details of the events shown now."""
        data = self.data
        if len(data.names) > NAMES_INLINE:
            names = self._table(data.names, "name", *more)
            self._names_hover.args = {"table": names}
            self._relabel.args = {**self._relabel.args, "names": names}
        if len(data.details) > NAMES_INLINE:
            self._details_hover.args = {"table": self._table(data.details, "detail", *more)}

    def fold(self, key: str, folded: bool | None = None) -> None:
        """Fold (or unfold; toggle when folded is None) the group `key` and re-lay out the rows (what a click on
        its label does in the browser)."""
        now = key not in self.folded if folded is None else folded
        self.folded = (self.folded | {key}) if now else (self.folded - {key})
        self._relayout()

    def _relayout(self) -> None:
        self.rows_y = fold_layout(self.data.rows, self.folded)
        self.event_y = fold_layout(self.data.rows, self.folded, strip=True)
        d = dict(self.rows_src.data)
        d["folded"] = [k in self.folded for k in d["key"]]
        d["y"] = self.rows_y.astype(float).tolist()
        d["strip"] = self.event_y.astype(float).tolist()
        d["text"] = [_label_text(lab, g, f) for lab, g, f in zip(d["label"], d["group"], d["folded"])]
        self.rows_src.data = d
        for src in (self.exact_src, self.agg_src, self.hl_src):
            cur = dict(src.data)
            cur["y"] = _y(self.event_y, np.asarray(cur["row"], dtype=np.int64)) if len(cur["row"]) else []
            src.data = cur
        n = self._n_visible()
        p = self.figure
        p.y_range.update(start=n - 0.5, end=-0.5)
        p.ygrid.ticker = FixedTicker(ticks=list(range(n)))
        self.band_glyph.glyph.top = n - 0.5
        p.height = self.label_plot.height = self._height()
        self.fit_labels()

    def _sync_folds(self) -> None:
        """Take the folds made in the browser (the rows source's `folded`, synced back by jupyter_bokeh)."""
        folded = {k for k, f in zip(self.rows_src.data["key"], self.rows_src.data["folded"]) if f}
        if folded != self.folded:
            self.folded = folded
            self.rows_y = fold_layout(self.data.rows, self.folded)
            self.event_y = fold_layout(self.data.rows, self.folded, strip=True)

    def show_range(self, t0_ms: float, t1_ms: float, bands_ms: Sequence[tuple[float, float]] = ()) -> None:
        """Zoom to [t0_ms, t1_ms] (a little margin) and shade `bands_ms`; live, the zoom fetches exact events."""
        pad = max((t1_ms - t0_ms) * 0.05, 1e-3)
        self.band_src.data = {"left": [a for a, _ in bands_ms], "right": [b for _, b in bands_ms]}
        self.figure.x_range.update(start=t0_ms - pad, end=t1_ms + pad)

    def attach_live_refresh(self) -> None:
        """Python-side callback: when the visible range changes, fetch that window's events."""

        last: dict[str, tuple[Any, Any]] = {}

        def _on_range(attr: str, old: object, new: object) -> None:
            xr = self.figure.x_range
            window = (xr.start, xr.end)
            # jupyter_bokeh may deliver one change twice; a window already served costs nothing
            if None not in window and last.get("w") != window:
                last["w"] = window
                self.set_window(*window)

        self.figure.x_range.on_change("end", _on_range)

    def rows_source(self) -> ColumnDataSource:
        """One entry per row: key, ancestors, label, level, whether it is a foldable group and folded, and where
        its label sits (y, x = indentation, text with the fold mark); the label plot draws it, the fold code
        (in the browser, or `fold` in Python) rewrites it."""
        rows = self.data.rows
        group = [k in ("process", "thread", "util", "context") for k in rows["kind"]]
        folded = [k in self.folded for k in rows["key"]]
        return ColumnDataSource({
            "key": rows["key"].astype(str).tolist(), "anc": rows["ancestors"].astype(str).tolist(),
            "label": rows["label"].astype(str).tolist(), "level": rows["level"].astype(int).tolist(),
            "group": group, "folded": folded, "y": self.rows_y.astype(float).tolist(),
            "strip": self.event_y.astype(float).tolist(),  # where the row's events are drawn (a folded group's header)
            "x": [0.02 + 0.07 * lv for lv in rows["level"].astype(int)],
            "text": [_label_text(lab, g, f) for lab, g, f in zip(rows["label"].astype(str), group, folded)],
            "weight": ["bold" if lv == 0 else "normal" for lv in rows["level"].astype(int)],
        }, name=f"{self.plot_name}-rows")


def _label_text(label: str, group: bool, folded: bool) -> str:
    return (("▸ " if folded else "▾ ") if group else "") + label


# A click on a group's label folds or unfolds it: the same layout as fold_layout(), applied to every source's y.
FOLD_JS = timeline_js("fold")


# Static pages (no kernel to ask): a zoom to a window holding at most `budget` of the embedded events draws them
# exactly, with the events the first view drew exactly already; the bins of those rows go.  Back out, the first view.
ZOOM_JS = timeline_js("zoom")


def legend_html(categories: Iterable[str], colors: Iterable[str]) -> str:
    """Category labels are ours (kernel, memcpy HtoD pageable...), but escape anyway: kinds come from the file."""
    from html import escape

    items = "".join(
        f'<span style="margin-right:10px;white-space:nowrap"><span style="display:inline-block;width:10px;'
        f'height:10px;background:{escape(c)};margin-right:3px"></span>{escape(n)}</span>'
        for n, c in zip(categories, colors) if n not in (KERNEL_CAT, "NVTX"))
    names = ('<span style="margin-right:10px">kernels: a colour per name</span>'
             '<span style="margin-right:10px">NVTX: the colour the code gave, else one per name</span>')
    return f'<div style="font:11px sans-serif">{names}{items}</div>'


def build_timeline(data: TimelineData, *, width: int = 1100, budget: int = 10000,
                   folded: Iterable[str] | None = None, name: str | None = None, embed: int = 0) -> TimelineView:
    """The Bokeh timeline for prepared data (coarse level for the whole capture); `name`: the plot's name;
    `embed`: events kept in the page for exact zoom without a kernel (static pages)."""
    return TimelineView(data, width=width, budget=budget, folded=folded, name=name, embed=embed)
