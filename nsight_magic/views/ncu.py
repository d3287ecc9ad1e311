"""The Nsight Compute view: Kernels | Memory workload | Rules | Raw metrics | Files.

Same shape as the nsys view (`report_view.py`) and built on its generic table helpers (`views/tables.py`):
- static (`ncu_html`, the text/html of its output): HTML tables + Bokeh charts, BokehJS inline in the standalone
  page and once per notebook; without scripts, the tables;
- live (`live_widget`, views/output.py): an ipywidgets Tab whose tables filter and sort in Python over all rows
  (the static raw metrics hold the first STATIC_METRIC_ROWS), in place of the static view while its kernel lives.
Kernel and NVTX names are user-controlled: they only ever reach the page as escaped text or Bokeh data.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..analysis.memory_workload import kernel_transfers, module_scatter, range_transfers
from ..store import files_of
from .assets import SETUP, head, noscript
from .bokehjs import bokehjs_html, embed, unique_ids
from .tables import static_tabs_html, table_html, table_text, table_widget
from ..readers.contract import NcuFrames

if TYPE_CHECKING:
    import ipywidgets
    from bokeh.plotting import figure

    from .profile_view import ProfileView

TABS = ("Kernels", "Memory workload", "Rules", "Raw metrics", "Files")
KERNEL_TABLE = ("id", "short_name", "nvtx", "duration_ns", "sm_throughput_pct", "memory_throughput_pct",
                "dram_throughput_pct", "achieved_occupancy_pct", "theoretical_occupancy_pct", "l2_dram_bytes",
                "registers_per_thread", "grid_size", "block_size", "waves_per_sm", "name")
FORMATS = {"dram_bytes_read": "bytes", "dram_bytes_write": "bytes", "l2_dram_bytes": "bytes", "dram_gbps": "gbps",
           "kernels": "int", "id": "int", "kernel_id": "int", "waves_per_sm": "float"}
SOL_BARS = 40  # kernels in the Speed-of-Light chart (longest first)
RANGE_CAPTION = "Per NVTX range / module, summed with the ranges nested in it"
STATIC_METRIC_ROWS = 1000  # raw metrics in saved output (keeps a cell near 1 MB); the live widget searches all


@dataclass
class NcuTables:
    kernels: pd.DataFrame
    per_kernel: pd.DataFrame
    per_range: pd.DataFrame
    scatter: pd.DataFrame
    rule_summary: pd.DataFrame
    rules: pd.DataFrame
    metrics: pd.DataFrame
    files: pd.DataFrame


def rule_summary(rules: pd.DataFrame) -> pd.DataFrame:
    """Rules grouped by rule: how many kernels it fired on and its largest / total estimated speedup."""
    if rules.empty:
        return pd.DataFrame(columns=["rule", "section", "type", "kernels", "max_speedup_pct", "sum_speedup_pct"])
    g = rules.groupby(["rule", "section"], sort=False)
    out = g.agg(type=("type", lambda t: ",".join(sorted(set(t)))), kernels=("kernel_id", "nunique"),
                max_speedup_pct=("speedup_pct", "max"), sum_speedup_pct=("speedup_pct", lambda s: s.sum(min_count=1)))
    return out.reset_index().sort_values(["max_speedup_pct", "kernels"], ascending=False, na_position="last",
                                         kind="stable").reset_index(drop=True)


def prepare_ncu(report: NcuFrames, folder: Path | None = None) -> NcuTables:
    """Report -> the frames every tab shows (pure except for listing the folder)."""
    k = report.kernels
    rules = report.rules.merge(k[["id", "short_name"]].rename(columns={"id": "kernel_id"}), on="kernel_id",
                               how="left")
    rules = rules.sort_values(["speedup_pct", "rule"], ascending=[False, True], na_position="last", kind="stable")
    rules = rules[["kernel_id", "short_name", "rule", "type", "speedup_pct", "speedup_type", "section", "message"]]
    metrics = report.metrics
    return NcuTables(
        kernels=k[[c for c in KERNEL_TABLE if c in k.columns]].sort_values("duration_ns", ascending=False,
                                                                         na_position="last", kind="stable"),
        per_kernel=kernel_transfers(k), per_range=range_transfers(k, inclusive=True), scatter=module_scatter(k),
        rule_summary=rule_summary(report.rules), rules=rules.reset_index(drop=True),
        metrics=metrics, files=files_of(folder, report.path))


# ---- Bokeh charts -----------------------------------------------------------------------------------------

def sol_chart(kernels: pd.DataFrame, limit: int = SOL_BARS) -> figure:
    """Speed of Light: compute (SM) vs memory throughput, % of peak, one pair of bars per kernel."""
    from bokeh.models import ColumnDataSource, HoverTool, Range1d
    from bokeh.plotting import figure
    from bokeh.transform import dodge

    k = kernels.sort_values("duration_ns", ascending=False, na_position="last").head(limit)
    labels = (k["id"].astype(str) + ": " + k["short_name"].astype(str).str.slice(0, 50)).tolist()
    src = ColumnDataSource({"label": labels, "name": k["short_name"].astype(str).tolist(),
                            "compute": k["sm_throughput_pct"].fillna(0).tolist(),
                            "memory": k["memory_throughput_pct"].fillna(0).tolist(),
                            "ms": (k["duration_ns"] / 1e6).tolist()})
    fig = figure(y_range=list(reversed(labels)), x_range=Range1d(0, 100), height=max(160, 22 * len(labels) + 60),
                 width=900, title="Speed of Light: compute (SM) vs memory throughput, % of peak",
                 toolbar_location=None)
    fig.hbar(y=dodge("label", 0.18, range=fig.y_range), right="compute", height=0.34, source=src,
             color="#4c78a8", legend_label="compute (SM) %")
    fig.hbar(y=dodge("label", -0.18, range=fig.y_range), right="memory", height=0.34, source=src,
             color="#f58518", legend_label="memory %")
    fig.add_tools(HoverTool(tooltips=[("kernel", "@name"), ("duration", "@ms{0.000} ms"),
                                      ("compute", "@compute{0.0} %"), ("memory", "@memory{0.0} %")]))
    fig.legend.location = "bottom_right"
    return fig


def scatter_chart(points: pd.DataFrame) -> figure:
    """The seeds' plot: L2<->device-memory transfer bytes vs summed kernel duration, one point per module."""
    from bokeh.models import ColumnDataSource, HoverTool
    from bokeh.plotting import figure

    src = ColumnDataSource({"mb": (points["l2_dram_bytes"] / 1e6).tolist(),
                            "ms": (points["duration_ns"] / 1e6).tolist(),
                            "module": points["module"].astype(str).tolist(),
                            "nvtx": points["nvtx"].astype(str).tolist(),
                            "kernels": points["kernels"].tolist(),
                            "gbps": points["dram_gbps"].tolist()})
    fig = figure(width=700, height=420, title="L2 <-> device memory transfer vs duration, per module",
                 x_axis_label="transfer (MB)", y_axis_label="duration (ms)", toolbar_location="above")
    fig.scatter("mb", "ms", size=10, source=src, alpha=0.7, color="#4c78a8")
    fig.text("mb", "ms", text="module", source=src, x_offset=6, y_offset=-6, text_font_size="9pt")
    fig.add_tools(HoverTool(tooltips=[("range", "@nvtx"), ("kernels", "@kernels"), ("transfer", "@mb{0.00} MB"),
                                      ("duration", "@ms{0.000} ms"), ("bandwidth", "@gbps{0.0} GB/s")]))
    return fig


# ---- renderings -----------------------------------------------------------------------------------------

class NcuView:
    def __init__(self, report: NcuFrames, folder: Path | None = None) -> None:
        self.report = report
        self.folder = folder if folder is not None else getattr(report, "folder", None)
        self.t = prepare_ncu(report, self.folder)
        self.uid = uuid.uuid4().hex[:8]

    def _table(self, key: str, df: pd.DataFrame, max_rows: int = 2000, caption: str = "") -> str:
        if df is None or df.empty:
            return "<p>No rows in this report.</p>"
        return table_html(df, table_id=f"nc-{self.uid}-{key}", formats=FORMATS, max_rows=max_rows, caption=caption)

    def static_fragment(self, *, include_bokehjs: bool) -> str:
        t = self.t
        with unique_ids():
            charts = {"sol": sol_chart(t.kernels)} if not t.kernels.empty else {}
            if not t.scatter.empty:
                charts["scatter"] = scatter_chart(t.scatter)
        divs, script = embed(charts)
        js = bokehjs_html() if include_bokehjs and charts else ""
        no_bytes = ("" if not t.scatter.empty else
                    "<p>No L2 &lt;-&gt; device memory byte counts in this report (collect the "
                    "MemoryWorkloadAnalysis section).</p>")
        panes = [
            divs.get("sol", "") + self._table("kernels", t.kernels),
            divs.get("scatter", "") + no_bytes
            + self._table("ranges", t.per_range, caption=RANGE_CAPTION)
            + self._table("perkernel", t.per_kernel, caption="Per kernel"),
            self._table("rulesum", t.rule_summary, caption="Rules by estimated speedup")
            + self._table("rules", t.rules, caption="Every rule result"),
            self._table("metrics", t.metrics, max_rows=STATIC_METRIC_ROWS,
                        caption=f"{len(t.metrics):,} metrics; type in the box to search"),
            f"<p>{escape(str(self.folder or Path(self.report.path).parent))}</p>" + self._table("files", t.files),
        ]
        # the live view takes the place of the whole view (views/output.py)
        return (f"{js}{head()}"
                f'<div class="nm-report nm-live-slot" id="nc-{self.uid}">{noscript("the charts are not drawn")}'
                f'<div>{escape(self.headline())}</div>'
                f'{static_tabs_html(TABS, panes)}</div>{SETUP}{script}')

    def headline(self) -> str:
        r = self.report
        return (f"Nsight Compute report {r.path} ({r.source}): {len(r.kernels)} kernels, "
                f"{len(r.rules)} rule results")

    def html_page(self) -> str:
        title = escape(f"Nsight Compute report {self.report.path}")
        return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>'
                f"<body>{self.static_fragment(include_bokehjs=True)}</body></html>")

    def live_widget(self) -> ipywidgets.VBox:
        """The live view: an ipywidgets Tab whose tables are searched in Python over all rows."""
        import ipywidgets as w

        t = self.t

        def tbl(df: pd.DataFrame) -> ipywidgets.Widget:
            return table_widget(df, FORMATS) if df is not None and not df.empty else w.HTML("<p>No rows.</p>")

        def chart(fig: figure) -> ipywidgets.Widget:
            try:
                from jupyter_bokeh import BokehModel
            except ImportError:
                return w.HTML("<p>Charts need the jupyter_bokeh package; they are in the saved output.</p>")
            return BokehModel(fig)

        kern = [chart(sol_chart(t.kernels))] if not t.kernels.empty else []
        mem = [chart(scatter_chart(t.scatter))] if not t.scatter.empty else []
        tab = w.Tab(children=[
            w.VBox(kern + [tbl(t.kernels)]),
            w.VBox(mem + [w.HTML(f"<b>{escape(RANGE_CAPTION)}</b>"), tbl(t.per_range),
                          w.HTML("<b>Per kernel</b>"), tbl(t.per_kernel)]),
            w.VBox([w.HTML("<b>Rules by estimated speedup</b>"), tbl(t.rule_summary),
                    w.HTML("<b>Every rule result</b>"), tbl(t.rules)]),
            tbl(t.metrics),
            w.VBox([w.HTML(f"<p>{escape(str(self.folder or Path(self.report.path).parent))}</p>"), tbl(t.files)]),
        ])
        for i, n in enumerate(TABS):
            tab.set_title(i, n)
        return w.VBox([w.HTML(f"<div>{escape(self.headline())}</div>"), tab])

    def text(self) -> str:
        t = self.t
        lines = [self.headline()]
        k = t.kernels[["id", "short_name", "duration_ns", "sm_throughput_pct", "memory_throughput_pct",
                       "l2_dram_bytes"]].copy()
        k["short_name"] = k["short_name"].str.slice(0, 50)
        lines += ["", f"Kernels (longest {min(len(k), 8)} of {len(k)})", table_text(k, FORMATS, max_rows=8)]
        if not t.per_range.empty:
            r = t.per_range[["nvtx", "kernels", "duration_ns", "l2_dram_bytes", "dram_gbps"]].copy()
            r["nvtx"] = r["nvtx"].str.slice(0, 60)
            lines += ["", "Memory workload per NVTX range", table_text(r, FORMATS, max_rows=8)]
        if not t.rule_summary.empty:
            lines += ["", "Rules by estimated speedup",
                      table_text(t.rule_summary[["rule", "type", "kernels", "max_speedup_pct"]], FORMATS, max_rows=8)]
        return "\n".join(lines)


# ---- public API -----------------------------------------------------------------------------------------

def show_ncu(report: NcuFrames, folder: Path | None = None) -> ProfileView:
    """The report's view (views.output.ProfileView): displayed, the static view with the live one on top."""
    from .profile_view import ProfileView

    return ProfileView(NcuView(report, folder))


def ncu_html(report: NcuFrames, folder: Path | None = None) -> str:
    """A standalone HTML page (BokehJS inline, works offline)."""
    return NcuView(report, folder).html_page()


def ncu_text(report: NcuFrames) -> str:
    """text/plain: headline, longest kernels, memory workload per range, rules."""
    return NcuView(report).text()


def ncu_bundle(report: NcuFrames, folder: Path | None = None, *, include_bokehjs: bool = True,
               widget: bool = True) -> dict[str, Any]:
    """The display bundle (views/output.py); include_bokehjs: BokehJS inline before the view."""
    from .profile_view import ProfileView

    return ProfileView(NcuView(report, folder)).bundle(live=widget, loader=include_bokehjs)


def display_ncu(report: NcuFrames, folder: Path | None = None) -> None:
    """Publish the report in IPython as display_nsys does: one bundle, BokehJS inline the first time in a notebook
    (shared with the nsys view: one copy per notebook, sent again when the cell that carried it runs again)."""
    from IPython.display import publish_display_data

    from .bokehjs import needs_bokehjs

    publish_display_data(ncu_bundle(report, folder, include_bokehjs=needs_bokehjs()))
