"""The view of a ProfileDiff (analysis/diff.py): headline, a bar chart of the biggest changes, the tables, and the
two timelines stacked on linked axes (each from its capture start).  Static HTML (BokehJS inline, offline) and
plain text; user-controlled names are escaped by the table renderer and Bokeh."""
from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..analysis.diff import ProfileDiff
from ..analysis.gate import GateResult
from ..readers.contract import is_nsys

from .assets import SETUP, head, noscript
from .bokehjs import bokehjs_html, embed, unique_ids
from .picture import picture_html
from .tables import static_tabs_html, table_html, table_text

if TYPE_CHECKING:
    from bokeh.plotting import figure

    from .timeline import TimelineView

TITLES = {"kernels": "Kernels", "nvtx": "NVTX", "api": "CUDA API", "memcpy": "Memory"}
SLOWER, FASTER, SAME = "#d62728", "#2ca02c", "#b0b0b0"  # SAME: a change the table calls noise


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"


def _signed_ms(ns: float) -> str:
    return f"{ns / 1e6:+,.3f} ms"


def _gb(b: float | None) -> str:
    return "-" if b is None else f"{b / 1e9:,.2f} GB"


def headline_lines(d: ProfileDiff) -> list[str]:
    h = d.headline
    lines = [f"Profile diff: {d.before_label} -> {d.after_label}"]
    if "capture_before_ns" in h:
        cb, ca = h["capture_before_ns"], h["capture_after_ns"]
        gb, ga = h["gpu_busy_before_ns"], h["gpu_busy_after_ns"]
        lines.append(f"capture {_ms(cb)} -> {_ms(ca)} ({_signed_ms(ca - cb)}); GPU busy {_ms(gb)} -> {_ms(ga)} "
                     f"({_signed_ms(ga - gb)})")
        if "memory_peak_before" in h:
            mb, ma = h["memory_peak_before"], h["memory_peak_after"]
            lines.append("GPU memory peak: " + "; ".join(
                f"device {dev} {_gb(mb.get(dev))} -> {_gb(ma.get(dev))}" for dev in sorted({*mb, *ma})))
    else:
        kb, ka = h["kernel_time_before_ns"], h["kernel_time_after_ns"]
        lines.append(f"kernel time {_ms(kb)} -> {_ms(ka)} ({_signed_ms(ka - kb)})")
    if h.get("top"):
        lines.append("biggest changes: " + "; ".join(f"{w} {n[:60]} {_signed_ms(x)}" for w, n, x in h["top"]))
    if h.get("findings_gone"):
        lines.append("findings gone: " + ", ".join(h["findings_gone"]))
    if h.get("findings_new"):
        lines.append("findings new: " + ", ".join(h["findings_new"]))
    return lines


def diff_text(d: ProfileDiff, rows: int = 8) -> str:
    out = headline_lines(d)
    for key, t in d.tables().items():
        if t.empty:
            continue
        shown = t.head(rows).copy()
        shown["name"] = shown["name"].astype(str).str.slice(0, 60)
        out += ["", f"{TITLES[key]} (top {len(shown)} of {len(t)} by change)",
                table_text(shown[["name", "count_before", "count_after", "total_before_ns", "total_after_ns",
                                  "delta_ns", "status"]], max_rows=rows)]
    return "\n".join(out)


def delta_chart(d: ProfileDiff, n: int = 15, width: int = 1100) -> figure | None:
    """Horizontal bars of the n biggest changes: red slower, green faster, grey within the noise (ms)."""
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.plotting import figure

    top = d.top(n)
    if top.empty:
        return None
    labels = [f"{w}: {str(nm)[:70]}" for w, nm in zip(top["what"], top["name"])]
    # de-duplicate labels (categorical axes need unique factors)
    seen: dict[str, int] = {}
    for i, lab in enumerate(labels):
        seen[lab] = seen.get(lab, 0) + 1
        if seen[lab] > 1:
            labels[i] = f"{lab} ({seen[lab]})"
    delta_ms = top["delta_ns"].to_numpy(np.float64) / 1e6
    src = ColumnDataSource({
        "label": labels, "delta": delta_ms, "left": np.minimum(delta_ms, 0), "right": np.maximum(delta_ms, 0),
        "color": [SAME if st == "same" else SLOWER if x > 0 else FASTER
                  for x, st in zip(delta_ms, top["status"].astype(str))],
        "before": top["total_before_ns"].to_numpy(np.float64) / 1e6,
        "after": top["total_after_ns"].to_numpy(np.float64) / 1e6, "status": top["status"].astype(str).tolist()})
    p = figure(y_range=list(reversed(labels)), height=60 + 24 * len(labels), width=width, sizing_mode="stretch_width",
               tools="", toolbar_location=None, x_axis_label="change in total time (ms): red slower, green faster, grey within the noise")
    p.hbar(y="label", left="left", right="right", height=0.7, color="color", source=src)
    p.add_tools(HoverTool(tooltips=[("", "@label"), ("before", "@before{0,0.000} ms"),
                                    ("after", "@after{0,0.000} ms"), ("change", "@delta{+0,0.000} ms"),
                                    ("status", "@status")]))
    p.ygrid.grid_line_color = None
    p.outline_line_color = None
    return p


def stacked_timelines(d: ProfileDiff, width: int = 1100, budget: int = 5000) -> list[TimelineView] | None:
    """The two timelines (TimelineViews: before, after), each from its capture start, their x axes linked both
    ways (one document: views.bokehjs.embed)."""
    from .timeline import build_timeline
    from .timeline_prepare import prepare_timeline

    b, a = d.before, d.after
    if not (is_nsys(b) and is_nsys(a)):  # Nsight Compute reports have no timeline
        return None
    views = [build_timeline(prepare_timeline(r), width=width, budget=budget) for r in (b, a)]
    xs = [v.figure.x_range for v in views]
    lo = min(x.start for x in xs)
    hi = max(x.end for x in xs)
    if all(x.bounds for x in xs):
        bounds = (min(x.bounds[0] for x in xs), max(x.bounds[1] for x in xs))
        for x in xs:
            x.bounds = bounds
    for x, v in zip(xs, views):
        x.update(start=lo, end=hi)
        v.fit_labels()  # fitted to the shared range: the one each was built with was narrower (labels ran over)
    a, b = xs
    for attr in ("start", "end"):
        a.js_link(attr, b, attr)
        b.js_link(attr, a, attr)
    return views


def diff_fragment(d: ProfileDiff, include_bokehjs: bool = True) -> str:
    uid = f"nm-diff-{id(d):x}"
    head_html = "".join(f"<p>{escape(x)}</p>" if i else f"<h3>{escape(x)}</h3>"
                        for i, x in enumerate(headline_lines(d)))
    models: dict[str, Any] = {}
    with unique_ids():
        chart = delta_chart(d)
        if chart is not None:
            models["chart"] = chart
        timelines = stacked_timelines(d)
    if timelines is not None:
        models["tl_before"], models["tl_after"] = (v.layout for v in timelines)
    divs, script = embed(models)
    names, panes = [], []
    for key, t in d.tables().items():
        if t.empty:
            continue
        names.append(TITLES[key])
        panes.append(table_html(_shown(t), table_id=f"{uid}-{key}"))
    if not d.metrics.empty:
        names.append("Metrics")
        panes.append(table_html(d.metrics, table_id=f"{uid}-metrics"))
    if not d.findings.empty:
        names.append("Findings")
        panes.append(table_html(d.findings, table_id=f"{uid}-findings"))
    # the timelines stay outside the tabs: a plot laid out while hidden would get no width
    tl = ""
    if timelines is not None:
        pics = [picture_html(v) for v in timelines]  # where no script runs
        tl = ("<h4>Timelines (x = 0 at each capture's start; zoom one, the other follows)</h4>"
              f"<p><b>{escape(d.before_label)}</b></p>{pics[0]}{divs['tl_before']}"
              f"<p><b>{escape(d.after_label)}</b></p>{pics[1]}{divs['tl_after']}")
    body = (f"{head_html}{divs.get('chart', '<p>No differences.</p>')}"
            f"{static_tabs_html(tuple(names), panes) if names else ''}{tl}")
    return ((bokehjs_html() if include_bokehjs else "") + head()
            + f'<div class="nm-report nm-diff" id="{uid}">{noscript("the timelines are pictures")}{body}</div>'
            f"{SETUP}{script}")


def _shown(t: pd.DataFrame) -> pd.DataFrame:
    """The table as shown: ratio as a percentage change."""
    out = t.copy()
    out["change_pct"] = (out["ratio"] - 1.0) * 100.0
    return out.drop(columns=["ratio"])


def diff_page(d: ProfileDiff) -> str:
    title = escape(f"nsight-magic diff {d.before_label} -> {d.after_label}")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>'
            f"<body>{diff_fragment(d, include_bokehjs=True)}</body></html>")


def display_diff(d: ProfileDiff, render: bool = True) -> None:
    """Publish the diff in IPython: static HTML (BokehJS inline the first time in a notebook) and plain text."""
    from IPython.display import publish_display_data

    from .bokehjs import needs_bokehjs

    text = diff_text(d)
    if not render:
        print(text)
        return
    publish_display_data({"text/html": diff_fragment(d, include_bokehjs=needs_bokehjs()), "text/plain": text})


def diff_json(d: ProfileDiff, gate_result: GateResult | None = None, rows: int = 15) -> dict[str, Any]:
    """The comparison as JSON-ready data (`nsight-magic diff --json`): headline, the `rows` biggest changes and,
    with a gate (analysis/gate.py), its checks and verdict.  Bounded, whatever the profiles' sizes."""
    import json

    headline = {k: v for k, v in d.headline.items() if k != "top"}
    # memory peaks are {device: bytes}: JSON keys are text
    headline = json.loads(json.dumps(headline, default=lambda v: v.item() if hasattr(v, "item") else str(v)))
    return {"before": d.before_label, "after": d.after_label, "headline": headline,
            "top": json.loads(d.top(rows).to_json(orient="records")),
            "gate": gate_result.to_json() if gate_result is not None else None}
