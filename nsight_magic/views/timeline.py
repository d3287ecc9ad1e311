"""Timeline build: TimelineData + Glyphs -> a Bokeh layout (WebGL), and the live window refresh.

Numbers travel as typed arrays: float64 ms for event edges (float32 resolves only ~4 us at 40 s, so a
microsecond event late in a long capture would get width 0), float32 for durations and sizes, small ints.
Names and details travel once, as lists held by the hover formatters, and are looked up by code in the
browser.  Tooltips use `@field` placeholders, which Bokeh escapes, and the custom formatters return plain
strings (escaped by the same template path).
"""
from __future__ import annotations

import uuid

import numpy as np
from bokeh.models import (BoxZoomTool, ColumnDataSource, CustomJS, CustomJSHover, CustomJSTransform, FixedTicker,
                          HoverTool, NumeralTickFormatter,
                          LinearColorMapper, PanTool, Range1d, ResetTool, TapTool, Title, WheelZoomTool)
from bokeh.plotting import figure

from .timeline_prepare import KERNEL_CAT, Glyphs, TimelineData, view_glyphs

ROW_PX = 22


def _exact_columns(g: Glyphs) -> dict:
    e = g.exact
    return {
        "left": e["left"].to_numpy(np.float64) / 1e6,
        "right": e["right"].to_numpy(np.float64) / 1e6,
        "row": e["row"].to_numpy().astype(np.int16),
        "cat": e["cat"].to_numpy().astype(np.uint8),
        "name": e["name"].to_numpy().astype(np.int32),
        "detail": e["detail"].to_numpy().astype(np.int32),
        "dur_us": e["dur_us"].to_numpy().astype(np.float32),
        "bytes": e["bytes"].to_numpy().astype(np.float32),
        "link": e["link"].to_numpy().astype(np.int32),
    }


def _agg_columns(g: Glyphs) -> dict:
    a = g.agg
    return {
        "left": a["left"].to_numpy(np.float64) / 1e6,
        "right": a["right"].to_numpy(np.float64) / 1e6,
        "row": a["row"].to_numpy().astype(np.int16),
        "cat": a["cat"].to_numpy().astype(np.uint8),
        "name": a["name"].to_numpy().astype(np.int32),
        "count": a["count"].to_numpy().astype(np.int32),
        "busy": a["busy"].to_numpy().astype(np.float32),
    }


_LOOKUP_JS = "const s = (value >= 0 && value < table.length) ? table[value] : ''; return String(s);"
_DUR_JS = """
const us = Number(value);
if (!isFinite(us)) return '';
if (us >= 1000) return (us / 1000).toFixed(3) + ' ms';
return us.toFixed(3) + ' us';
"""
_BYTES_JS = """
const b = Number(value);
if (!(b > 0)) return '-';
const i = special_vars.index;
const us = src.data.dur_us[i];
const size = b >= 1048576 ? (b / 1048576).toFixed(2) + ' MiB' : b >= 1024 ? (b / 1024).toFixed(1) + ' KiB'
  : b.toFixed(0) + ' B';
return us > 0 ? size + ', ' + (b / (us * 1e3)).toFixed(2) + ' GB/s' : size;
"""
_BUSY_JS = """
const i = special_vars.index;
const n = src.data.count[i];
const pct = (100 * Number(value)).toFixed(1) + '% busy';
return n >= 0 ? n + ' events, ' + pct : pct;
"""

# Selecting an API call (or kernel) highlights everything sharing its launch link (pid, correlation id);
# selecting an NVTX range highlights the kernels launched by API calls of the same thread inside it.
_SELECT_JS = """
const hl_empty = {left: [], right: [], row: []};
const idx = src.selected.indices;
if (idx.length == 0) { hl.data = hl_empty; return; }
const d = src.data, n = d.left.length, i = idx[0];
const links = new Set();
if (d.cat[i] == nvtx_cat) {
  const ar = api_row[d.row[i]];
  const t0 = d.left[i], t1 = d.left[i] + d.dur_us[i] / 1e3;
  if (ar >= 0) for (let j = 0; j < n; j++)
    if (d.row[j] == ar && d.left[j] >= t0 && d.left[j] <= t1 && d.link[j] >= 0) links.add(d.link[j]);
} else if (d.link[i] >= 0) {
  links.add(d.link[i]);
}
const L = [], R = [], Y = [];
for (let j = 0; j < n; j++)
  if (j != i && links.has(d.link[j]) && (d.cat[j] == kernel_cat || d.cat[i] == kernel_cat)) {
    L.push(d.left[j]); R.push(d.right[j]); Y.push(d.row[j]);
  }
hl.data = {left: L, right: R, row: Y};
note.text = links.size ? ('highlighted ' + L.length + ' launched event(s)') : '';
"""


class TimelineView:
    """A Bokeh layout for one report; `set_window` refreshes it with exact events (live kernel only)."""

    def __init__(self, data: TimelineData, *, width: int = 1100, budget: int = 10000):
        self.data = data
        self.width = width
        self.budget = budget
        self.plot_name = f"nsight-timeline-{uuid.uuid4().hex[:8]}"
        g = view_glyphs(data, width_px=width, budget=budget)
        self.glyphs = g
        self.exact_src = ColumnDataSource(_exact_columns(g))
        self.agg_src = ColumnDataSource(_agg_columns(g))
        self.layout = self._build()

    def _build(self):
        data = self.data
        nrows = max(len(data.rows), 1)
        span_ms = data.span_ns / 1e6
        height = min(max(120 + ROW_PX * nrows, 220), 1400)
        first_ms = data.first_ns / 1e6
        x_range = Range1d(first_ms, span_ms, bounds=(first_ms - 0.02 * span_ms, 1.02 * span_ms), min_interval=1e-4)
        p = figure(name=self.plot_name, width=self.width, height=height, output_backend="webgl",
                   x_range=x_range, y_range=Range1d(nrows - 0.5, -0.5), tools=[],
                   x_axis_label="ms from capture start", toolbar_location="above")
        wheel = WheelZoomTool(dimensions="width")
        p.add_tools(wheel, PanTool(dimensions="width"), BoxZoomTool(), ResetTool(), TapTool())
        p.toolbar.active_scroll = wheel
        mapper = LinearColorMapper(palette=list(data.colors) or ["#4c78a8"], low=-0.5,
                                   high=max(len(data.colors), 1) - 0.5)
        color = {"field": "cat", "transform": mapper}
        # a bin with any event shows at least faintly; busier bins are darker (the hover gives the exact %)
        shade = CustomJSTransform(v_func="return xs.map(x => 0.25 + 0.75 * Math.min(Math.max(x, 0), 1));")
        # the evidence of a finding (Advice tab), shaded across every row
        self.band_src = ColumnDataSource({"left": [], "right": []}, name=f"{self.plot_name}-bands")
        p.quad(left="left", right="right", bottom=-0.5, top=nrows - 0.5, source=self.band_src, fill_color="#f4d03f",
               fill_alpha=0.3, line_alpha=0, level="underlay")
        agg_r = p.hbar(y="row", left="left", right="right", height=0.8, source=self.agg_src, fill_color=color,
                       fill_alpha={"field": "busy", "transform": shade}, line_alpha=0)
        ex_r = p.hbar(y="row", left="left", right="right", height=0.8, source=self.exact_src, fill_color=color,
                      line_color=color, line_alpha=0.6, selection_line_color="black",
                      nonselection_fill_alpha=0.35)
        hl = ColumnDataSource({"left": [], "right": [], "row": []})
        p.hbar(y="row", left="left", right="right", height=0.95, source=hl, fill_alpha=0, line_color="black",
               line_width=2)
        names = CustomJSHover(args={"table": data.names}, code=_LOOKUP_JS)
        details = CustomJSHover(args={"table": data.details}, code=_LOOKUP_JS)
        dur = CustomJSHover(code=_DUR_JS)
        nbytes = CustomJSHover(args={"src": self.exact_src}, code=_BYTES_JS)
        busy = CustomJSHover(args={"src": self.agg_src}, code=_BUSY_JS)
        p.add_tools(HoverTool(renderers=[ex_r], tooltips=[
            ("name", "@name{custom}"), ("start", "@left{0,0.000} ms"), ("duration", "@dur_us{custom}"),
            ("details", "@detail{custom}"), ("bytes", "@bytes{custom}")],
            formatters={"@name": names, "@detail": details, "@dur_us": dur, "@bytes": nbytes}))
        p.add_tools(HoverTool(renderers=[agg_r], tooltips=[
            ("e.g.", "@name{custom}"), ("from", "@left{0,0.000} ms"), ("to", "@right{0,0.000} ms"),
            ("busy", "@busy{custom}")], formatters={"@name": names, "@busy": busy}))
        labels = [f"{g} | {lab}" for g, lab in zip(data.rows["group"], data.rows["label"])]
        p.yaxis.ticker = FixedTicker(ticks=list(range(len(labels))))
        p.yaxis.major_label_overrides = {i: s for i, s in enumerate(labels)}  # drawn on canvas: plain text
        p.yaxis.major_label_text_font_size = "8pt"
        p.ygrid.grid_line_alpha = 0.3
        p.xaxis.formatter = NumeralTickFormatter(format="0,0.[000]")  # 12,000,000 ms, never 1.2e+7
        # Titles are canvas text (never markup) and live in BokehJS core: no widgets bundle needed.
        p.title.text = self.glyphs.caption
        p.title.text_font_style = "normal"
        note = Title(text="", align="left", text_font_style="italic")
        p.add_layout(note, "below")
        cats = data.categories
        self.exact_src.selected.js_on_change("indices", CustomJS(args={
            "src": self.exact_src, "hl": hl, "note": note, "api_row": data.api_row_of_row.astype(np.int32).tolist(),
            "nvtx_cat": cats.index("NVTX") if "NVTX" in cats else -1,
            "kernel_cat": cats.index(KERNEL_CAT) if KERNEL_CAT in cats else -1}, code=_SELECT_JS))
        self.figure = p
        return p

    def set_window(self, t0_ms: float, t1_ms: float, budget: int | None = None) -> Glyphs:
        """Refill the sources with the glyphs of [t0_ms, t1_ms] (exact events when they fit the budget)."""
        t0 = max(int(t0_ms * 1e6), self.data.first_ns)
        t1 = min(int(t1_ms * 1e6), self.data.span_ns)
        if t1 <= t0:
            t1 = t0 + 1
        g = view_glyphs(self.data, t0, t1, width_px=self.width, budget=budget or self.budget)
        self.glyphs = g
        self.exact_src.data = _exact_columns(g)
        self.agg_src.data = _agg_columns(g)
        self.figure.title.text = g.caption
        return g

    def show_range(self, t0_ms: float, t1_ms: float, bands_ms=()) -> None:
        """Zoom to [t0_ms, t1_ms] (a little margin) and shade `bands_ms`; live, the zoom fetches exact events."""
        pad = max((t1_ms - t0_ms) * 0.05, 1e-3)
        self.band_src.data = {"left": [a for a, _ in bands_ms], "right": [b for _, b in bands_ms]}
        self.figure.x_range.update(start=t0_ms - pad, end=t1_ms + pad)

    def attach_live_refresh(self) -> None:
        """Python-side callback: when the visible range changes, fetch that window's events."""

        last = {}

        def _on_range(attr, old, new):
            xr = self.figure.x_range
            window = (xr.start, xr.end)
            # jupyter_bokeh may deliver one change twice; a window already served costs nothing
            if None not in window and last.get("w") != window:
                last["w"] = window
                self.set_window(*window)

        self.figure.x_range.on_change("end", _on_range)


def legend_html(categories, colors) -> str:
    """Category labels are ours (kernel, memcpy HtoD pageable...), but escape anyway: kinds come from the file."""
    from html import escape

    items = "".join(
        f'<span style="margin-right:10px;white-space:nowrap"><span style="display:inline-block;width:10px;'
        f'height:10px;background:{escape(c)};margin-right:3px"></span>{escape(n)}</span>'
        for n, c in zip(categories, colors))
    return f'<div style="font:11px sans-serif">{items}</div>'


def build_timeline(data: TimelineData, *, width: int = 1100, budget: int = 10000) -> TimelineView:
    """The Bokeh timeline for prepared data (coarse level for the whole capture)."""
    return TimelineView(data, width=width, budget=budget)
