"""The Advice tab: findings sorted by time at stake; a click zooms the timeline to the evidence and shades it.

Static (`advice_html`): each finding carries its evidence ranges in ms from the timeline's origin; a click (view.js)
zooms the Bokeh plot and fills its band source.  Live (`advice_widget`): buttons that do the same through Python.
Every text is escaped; `code` spans of the suggestions are escaped first, then wrapped in <code>.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from html import escape
from typing import TYPE_CHECKING, Protocol

import pandas as pd

from ..analysis.findings import Finding
from .assets import view_css
from .tables import table_html

if TYPE_CHECKING:
    import ipywidgets


class Verdict(Protocol):
    """A verdict the Advice tab shows: analysis.bottleneck.Bottleneck, or a job's (jobs.job.JobVerdict)."""

    @property
    def kind(self) -> str: ...

    @property
    def summary(self) -> str: ...

    @property
    def breakdown(self) -> pd.DataFrame: ...    # category, pct, time_ns

MAX_FINDINGS = 30         # more than this is noise; the rest are in report.findings()
MAX_EVIDENCE_ROWS = 8     # rows of evidence shown under each finding
SEVERITY_COLORS = {"high": "#c0392b", "medium": "#d68910", "low": "#2e86c1", "info": "#7f8c8d"}
EVIDENCE_COLUMNS = ("name", "start_ns", "duration_ns", "nvtx_range", "bytes", "cpu_nvtx", "cpu_cuda_api", "cpu_osrt",
                    "in_use_pct", "blocks", "sm_count", "launch_ns", "speedup_pct", "section", "stream_id", "tid")

def _code(text: str) -> str:
    """Escape, then turn `...` spans into <code> (the backticks themselves are not markup in escaped text)."""
    parts = re.split(r"`([^`]*)`", escape(text))
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def bands_ms(finding: Finding, origin_ns: int) -> list[tuple[float, float]]:
    return [((a - origin_ns) / 1e6, (b - origin_ns) / 1e6) for a, b in finding.ranges]


def focus_ms(bands: list[tuple[float, float]], share: float = 0.8) -> tuple[float, float]:
    """Where a click zooms: around the longest bands that hold `share` of the evidence's time (a few long copies,
    not the whole run because of one tiny copy at start-up)."""
    order = sorted(bands, key=lambda b: b[1] - b[0], reverse=True)
    total = sum(b - a for a, b in order) or 1.0
    chosen, acc = [], 0.0
    for a, b in order:
        chosen.append((a, b))
        acc += b - a
        if acc >= share * total:
            break
    return min(a for a, _ in chosen), max(b for _, b in chosen)


def _evidence_table(f: Finding, uid: str, origin_ns: int) -> str:
    ev = f.evidence
    cols = [c for c in EVIDENCE_COLUMNS if c in ev.columns and ev[c].notna().any()]
    if not cols:
        return ""
    shown = f.longest(MAX_EVIDENCE_ROWS)[cols].reset_index(drop=True)
    if "start_ns" in shown:  # where it is on the timeline's axis (the report's own clock stays in the evidence)
        shown.insert(cols.index("start_ns"), "at_ms", (shown.pop("start_ns") - origin_ns) / 1e6)
    return table_html(shown, table_id=f"nm-ev-{uid}", formats={"at_ms": "float"},
                      filter_box=False, max_rows=MAX_EVIDENCE_ROWS,
                      caption=f"evidence: {_count(f.count, 'event')}, the longest {min(len(ev), MAX_EVIDENCE_ROWS)} shown")


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _fmt_ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms" if ns >= 1e5 else f"{ns / 1e3:,.1f} µs"


CATEGORY_COLORS = {"compute": "#2e7d32", "communication": "#6a1b9a", "copy": "#ef6c00", "input": "#c62828",
                   "sync": "#f9a825", "allocator": "#00838f", "module load": "#8d6e63", "host wait": "#546e7a",
                   "launch": "#1565c0",
                   "host running": "#1565c0", "host blocked": "#546e7a"}


def verdict_html(verdict: Verdict | None) -> str:
    """The verdict above the findings: its kind, its summary and the breakdown as one stacked bar."""
    if verdict is None:
        return ""
    b = verdict.breakdown
    b = b[b["pct"] > 0]
    bar = "".join(f'<span style="width:{p:.3f}%;background:{CATEGORY_COLORS.get(c, "#999")}" '
                  f'title="{escape(str(c))}: {p:.1f}% ({t / 1e6:,.1f} ms)"></span>'
                  for c, p, t in zip(b["category"], b["pct"], b["time_ns"]))
    # spaces between the parts: where no style sheet applies (a static copy) they are what keeps the words apart
    legend = " ".join(f'<i style="background:{CATEGORY_COLORS.get(c, "#999")}"></i>{escape(str(c))} {p:.0f}%'
                      for c, p in zip(b["category"], b["pct"]))
    return (f'<div class="nm-verdict"><span class="nm-kind">{escape(verdict.kind)}'
            f'</span> {escape(verdict.summary)}<div class="nm-bar">{bar}</div>'
            f'<div class="nm-bar-legend">{legend}</div></div>')


def verdict_text(verdict: Verdict | None) -> str:
    return f"Verdict: {verdict.summary}" if verdict is not None else ""


def advice_html(findings: Sequence[Finding], *, origin_ns: int, plot_name: str, uid: str,
                verdict: Verdict | None = None) -> str:
    if not findings:
        return verdict_html(verdict) + "<p>No findings: none of the rules found anything to change in this profile.</p>"
    items = []
    for i, f in enumerate(findings[:MAX_FINDINGS]):
        bands = bands_ms(f, origin_ns)
        attrs = ""
        where = ""
        if bands:
            t0, t1 = focus_ms(bands)
            attrs = (f' data-plot="{escape(plot_name)}" data-t0="{t0:.6f}" data-t1="{t1:.6f}" '
                     f'data-bands="{escape(json.dumps([[round(a, 6), round(b, 6)] for a, b in bands]))}" '
                     f'title="show on the timeline"')
            where = f'<span class="nm-where"> at {t0:,.3f} – {t1:,.3f} ms</span>'
        color = SEVERITY_COLORS.get(f.severity, "#999")
        items.append(
            f'<div class="nm-finding" style="border-left-color:{color}" data-rule="{escape(f.rule)}"{attrs}>'
            f'<span class="nm-sev" style="background:{color}">{escape(f.severity)}</span> '
            f'<span class="nm-title">{escape(f.title)}</span> — {escape(_fmt_ms(f.time_at_stake_ns))} at stake'
            f'{where}<p>{_code(f.explanation)}</p><p><b>Change:</b> {_code(f.suggestion)}</p>'
            f'<p class="nm-where">estimate: {escape(f.estimate)}; rule {escape(f.rule)}</p>'
            f"{_evidence_table(f, f'{uid}-{i}', origin_ns)}</div>")
    more = (f"<p>{len(findings) - MAX_FINDINGS} more in report.findings()</p>" if len(findings) > MAX_FINDINGS
            else "")
    return (verdict_html(verdict)
            + f"<p>{_count(len(findings), 'finding')}, most time at stake first; click one to see it on the "
            "timeline.</p>"
            + "".join(items) + more)


def advice_text(findings: Sequence[Finding], limit: int = 5) -> str:
    if not findings:
        return "Advice: no findings"
    lines = [f"Advice (top {min(limit, len(findings))} of {len(findings)}, most time at stake first)"]
    for f in findings[:limit]:
        lines.append(f"- [{f.severity}] {f.title}: {_fmt_ms(f.time_at_stake_ns)} at stake ({f.rule})")
        lines.append(f"    change: {f.suggestion[:200]}")
    return "\n".join(lines)


def advice_widget(findings: Sequence[Finding], *, on_show: Callable[[Finding], object],
                  verdict: Verdict | None = None) -> ipywidgets.VBox:
    """Live Advice tab: the verdict, then one block per finding with a 'show on timeline' button calling
    on_show(finding)."""
    import ipywidgets as w

    if not findings:
        return w.HTML(verdict_html(verdict)
                      + "<p>No findings: none of the rules found anything to change in this profile.</p>")
    blocks = [w.HTML(f"<style>{view_css()}</style>{verdict_html(verdict)}<p>{_count(len(findings), 'finding')}, "
                     "most time at stake first.</p>")]
    for i, f in enumerate(findings[:MAX_FINDINGS]):
        color = SEVERITY_COLORS.get(f.severity, "#999")
        html = w.HTML(
            f'<div class="nm-finding" style="border-left-color:{color};cursor:default">'
            f'<span class="nm-sev" style="background:{color}">{escape(f.severity)}</span> '
            f'<span class="nm-title">{escape(f.title)}</span> — {escape(_fmt_ms(f.time_at_stake_ns))} at stake'
            f'<p>{_code(f.explanation)}</p><p><b>Change:</b> {_code(f.suggestion)}</p>'
            f'<p class="nm-where">estimate: {escape(f.estimate)}; rule {escape(f.rule)}</p></div>')
        row = [html]
        if f.ranges:
            b = w.Button(description="show on timeline", tooltip="zoom the timeline to the evidence",
                         layout=w.Layout(width="14em"))
            b.on_click(lambda _, f=f: on_show(f))
            row.append(b)
        blocks.append(w.VBox(row))
    return w.VBox(blocks)
