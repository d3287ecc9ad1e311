"""The job view (`%nsys_load DIR` on a folder of per-rank reports): Ranks | Advice | Timeline.

Ranks: a ranks x time heat map of GPU utilisation (and of NCCL's share, the second map), the ranks' table and the
straggler per step.  Advice: the job's verdict and findings.  Timeline (live only): choose ranks (the straggler and
a typical rank are offered) and their reports are merged on one clock and shown as a report's view.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Sequence

import pandas as pd

from ..analysis.findings import Finding
from ..readers.contract import NsysTables
from .advice import Verdict, advice_html, advice_text, advice_widget
from .assets import SETUP, head, noscript
from .bokehjs import bokehjs_html, embed, unique_ids
from .tables import static_tabs_html, table_html, table_text, table_widget

if TYPE_CHECKING:
    import ipywidgets
    from bokeh.models import LayoutDOM


class Rank(Protocol):
    """What the view reads of a rank's result (jobs.job.RankResult)."""

    @property
    def rank(self) -> int: ...


class JobFrames(Protocol):
    """What the job view reads of a job (jobs.job.Job)."""

    @property
    def errors(self) -> list[str]: ...      # one line per rank that could not be read

    @property
    def loaded(self) -> Sequence[Rank]: ...

    def utilization(self, bins: int = 300) -> pd.DataFrame: ...

    def ranks_table(self) -> pd.DataFrame: ...

    def stragglers_by_step(self) -> pd.DataFrame: ...

    def bottleneck(self) -> Verdict: ...

    def findings(self) -> list[Finding]: ...

    def suggested_ranks(self) -> list[int]: ...

    def timeline_report(self, ranks: Iterable[int], out: Path | None = None) -> NsysTables: ...


RANK_COLUMNS = ["rank", "host", "kind", "like", "gpu_busy_pct", "compute_ns", "nccl_ns", "wait_ns", "others_wait_ns",
                "straggler_steps", "steps", "step_med_ns"]


def heatmap(job: JobFrames, bins: int = 300, width: int = 1000) -> LayoutDOM | None:
    """Two Bokeh heat maps, ranks x time on the job's clock: GPU busy fraction and NCCL's share of the time."""
    from bokeh.layouts import column
    from bokeh.models import ColorBar, LinearColorMapper
    from bokeh.palettes import Purples256, Viridis256
    from bokeh.plotting import figure

    u = job.utilization(bins)
    if u.empty:
        return None
    ranks = sorted(u["rank"].unique())
    span_ms = float(u["bin_end_ns"].max()) / 1e6
    plots = []
    for col, title, pal in (("busy_fraction", "GPU busy (fraction of each bin)", Viridis256),
                            ("nccl_fraction", "NCCL kernels (fraction of each bin)", Purples256[::-1])):
        m = u.pivot(index="rank", columns="bin_start_ns", values=col).reindex(ranks).to_numpy(float)
        mapper = LinearColorMapper(palette=pal, low=0, high=1, nan_color="#eeeeee")
        p = figure(height=min(60 + 18 * len(ranks), 500), width=width, title=title, x_range=(0, span_ms),
                   y_range=(-0.5, len(ranks) - 0.5), x_axis_label="ms since the first rank's capture start",
                   y_axis_label="rank", tools="xpan,xwheel_zoom,reset,hover",
                   tooltips=[("rank", "$y{0}"), ("ms", "$x{0.0}"), ("value", "@image{0.00}")])
        p.image(image=[m], x=0, y=-0.5, dw=span_ms, dh=len(ranks), color_mapper=mapper)
        p.yaxis.ticker = list(range(len(ranks)))
        p.yaxis.major_label_overrides = {i: str(r) for i, r in enumerate(ranks)}
        p.add_layout(ColorBar(color_mapper=mapper, width=8), "right")
        plots.append(p)
    if len(plots) == 2:
        plots[1].x_range = plots[0].x_range
    return column(*plots)


def _ranks_frame(job: JobFrames) -> pd.DataFrame:
    t = job.ranks_table()
    return t[[c for c in RANK_COLUMNS if c in t.columns]]


def _errors_html(job: JobFrames) -> str:
    if not job.errors:
        return ""
    return "<p><b>Not loaded:</b> " + "; ".join(escape(e) for e in job.errors) + "</p>"


def job_html(job: JobFrames, include_bokehjs: bool = True) -> str:
    """The static view (works offline: BokehJS inline)."""
    uid = uuid.uuid4().hex[:8]
    with unique_ids():
        hm = heatmap(job)
    divs, script = embed({"heatmap": hm} if hm is not None else {})
    div = divs.get("heatmap", "<p>No GPU work in any rank.</p>")
    strag = job.stragglers_by_step()
    verdict = job.bottleneck()
    ranks_pane = (_intro(job) + _errors_html(job) + div + table_html(_ranks_frame(job), table_id=f"nm-{uid}-ranks")
                  + "<h4>Straggler per step</h4>"
                  + (table_html(strag.head(500), table_id=f"nm-{uid}-strag") if len(strag) else
                     "<p>No collectives with waiting, or no steps found.</p>"))
    advice = advice_html(job.findings(), origin_ns=0, plot_name="", uid=uid, verdict=verdict)
    timeline = ("<p>Open chosen ranks' timelines from Python: <code>job.timeline_report("
                f"{escape(str(job.suggested_ranks()))}).show()</code> (the straggler and a typical rank).</p>")
    # the live view (its rank chooser opens timelines) takes the place of the whole view (views/output.py)
    return ((bokehjs_html() if include_bokehjs else "") + head()
            + f'<div class="nm-report nm-live-slot" id="nm-{uid}">{noscript("the heat maps are not drawn")}'
            + static_tabs_html(("Ranks", "Advice", "Timeline"), [ranks_pane, advice, timeline]) + "</div>"
            + SETUP + script)


class JobView:
    """A job's view for views/output.py: the static page, the live widget, the text."""

    def __init__(self, job: JobFrames) -> None:
        self.job = job
        self._static: str | None = None

    def static_fragment(self, *, include_bokehjs: bool) -> str:
        if self._static is None:
            self._static = job_html(self.job, include_bokehjs=False)
        return (bokehjs_html() if include_bokehjs else "") + self._static

    def live_widget(self) -> ipywidgets.Widget:
        return show_job(self.job)

    def text(self) -> str:
        return job_text(self.job)


def _intro(job: JobFrames) -> str:
    n, bad = len(job.loaded), len(job.errors)
    v = job.bottleneck()
    return (f"<p><b>{n} ranks</b>{f', {bad} not loaded' if bad else ''}. {escape(v.summary)}. One row per rank: "
            "GPU busy share of its capture, kernel time outside NCCL (compute), NCCL kernel time, its collectives' "
            "waiting for later ranks (wait), the others' waiting for it (others_wait: the straggler has the most), "
            "and the steps in which the others waited for it most. Ranks that spend their time alike share one "
            "diagnosis: kind is the verdict of the rank named in like.</p>")


def job_text(job: JobFrames) -> str:
    v = job.bottleneck()
    lines = [f"Verdict: {v.summary}", f"Job: {len(job.loaded)} ranks loaded" +
             (f", {len(job.errors)} not: " + "; ".join(job.errors) if job.errors else ""), "",
             "Ranks", table_text(_ranks_frame(job), max_rows=32), "", advice_text(job.findings())]
    return "\n".join(lines)


def show_job(job: JobFrames, width: int = 1000) -> ipywidgets.Tab:
    """The live view: the same tabs, with a rank chooser that opens the chosen ranks' merged timeline."""
    import ipywidgets as w
    from IPython.display import display

    from .report_view import show_nsys

    hm = heatmap(job, width=width)
    if hm is not None:
        try:
            from jupyter_bokeh import BokehModel

            plot = BokehModel(hm)
        except ImportError:
            plot = w.HTML("<p>The heat map needs jupyter_bokeh (pip install jupyter_bokeh).</p>")
    else:
        plot = w.HTML("<p>No GPU work in any rank.</p>")
    strag = job.stragglers_by_step()
    ranks_tab = w.VBox([w.HTML(_intro(job) + _errors_html(job)), plot, table_widget(_ranks_frame(job)),
                        w.HTML("<h4>Straggler per step</h4>"),
                        table_widget(strag) if len(strag) else w.HTML("<p>No collectives with waiting.</p>")])
    advice = advice_widget(job.findings(), on_show=lambda f: None, verdict=job.bottleneck())
    loaded = [r.rank for r in job.loaded]
    pick = w.SelectMultiple(options=loaded, value=tuple(r for r in job.suggested_ranks() if r in loaded),
                            description="ranks", rows=min(8, max(2, len(loaded))))
    go = w.Button(description="show timeline", tooltip="merge the chosen ranks' reports on one clock and show them")
    out = w.Output()

    def open_timeline(_: object) -> None:
        out.clear_output()
        with out:
            try:
                display(show_nsys(job.timeline_report(list(pick.value))))
            except Exception as e:  # noqa: BLE001 - one line, the view stays
                print(f"nsight-magic: could not open ranks {list(pick.value)}: {e}")

    go.on_click(open_timeline)
    timeline = w.VBox([w.HTML("<p>The straggler and a typical rank are chosen; their reports are merged on one "
                              "clock (hosts aligned by their UTC session starts).</p>"), w.HBox([pick, go]), out])
    tab = w.Tab(children=[ranks_tab, advice, timeline])
    for i, t in enumerate(("Ranks", "Advice", "Timeline")):
        tab.set_title(i, t)
    return tab


def display_job(job: JobFrames, render: bool = True) -> None:
    """Publish a job in IPython: the static view with the live one on top (views/output.py), text."""
    if not render:
        print(job_text(job))
        return
    from IPython.display import publish_display_data

    from .bokehjs import needs_bokehjs
    from .profile_view import ProfileView

    publish_display_data(ProfileView(JobView(job)).bundle(loader=needs_bokehjs()))
