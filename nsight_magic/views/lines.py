"""The Lines tab (`%%nsys --lines`) and the module tree of the NVTX tab (`--modules`): static HTML and text.

Lines: the cell's source with, per line, hits, CPU time, GPU time and a bar (GPU time when the cell used the GPU,
CPU time otherwise), like a line profiler.  Modules: a tree of module paths with forward / backward CPU and GPU
time; a click on ▾ folds a module's children, a click on a column head sorts siblings (MODULES_JS).
Every text is escaped.
"""
from __future__ import annotations

from html import escape

import pandas as pd

from .assets import asset
from .tables import fmt_time

LINES_CSS = asset("lines.css")

MODULES_JS = asset("modules.js")


def _time(v: float | None) -> str:
    return "" if v is None or pd.isna(v) else str(fmt_time(pd.Series([float(v)])).iloc[0])


def lines_html(lines: pd.DataFrame) -> str:
    if lines.empty:
        return "<p>No line ranges in this profile (profile with %%nsys --lines).</p>"
    use_gpu = lines["gpu_ns"].fillna(0).sum() > 0
    metric = lines["gpu_ns" if use_gpu else "cpu_ns"].fillna(0).astype(float)
    top = metric.max() or 1.0
    rows = []
    for r, m in zip(lines.itertuples(), metric):
        bar = f'<span class="nm-lbar" style="width:{int(round(160 * m / top))}px"></span>' if m > 0 else ""
        hits = "" if pd.isna(r.hits) else f"{int(r.hits):,}"
        rows.append(f'<tr><td>{int(r.line)}</td><td>{hits}</td><td data-v="{r.cpu_ns}">{_time(r.cpu_ns)}</td>'
                    f'<td>{_time(r.gpu_ns)}</td><td style="text-align:left">{bar}</td>'
                    f'<td class="nm-src">{escape(str(r.source))}</td><td class="nm-k">{escape(str(r.top_kernels))}</td>'
                    "</tr>")
    what = "GPU time (the projection of the GPU work each line launched)" if use_gpu else "CPU time"
    return (f"<style>{LINES_CSS}</style><p>Each line of the cell: how often it ran, its CPU time and the GPU time "
            f"of what it launched (loop iterations add up on their line); the bars show {escape(what)}.</p>"
            '<div class="nm-scroll"><table class="nm-lines"><thead><tr><th>line</th><th>hits</th><th>CPU</th>'
            '<th>GPU</th><th></th><th style="text-align:left">source</th><th style="text-align:left">top kernels'
            "</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def modules_html(mods: pd.DataFrame) -> str:
    if mods.empty:
        return ""
    children = set(mods["parent"])
    rows = []
    for r in mods.itertuples():
        tog = '<span class="nm-tog">▾</span> ' if r.module in children else "&nbsp;&nbsp;"
        # the last part of the path under its parent; the whole path (as PyTorch names it) on hover
        name = r.module[len(r.parent) + 1:] if r.parent and r.module.startswith(r.parent + ".") else r.module
        kind = f' <span class="nm-type">{escape(str(r.type))}</span>' if getattr(r, "type", "") else ""
        cells = "".join(f'<td data-v="{getattr(r, c)}">{_time(getattr(r, c))}</td>'
                        for c in ("forward_ns", "forward_gpu_ns", "backward_ns", "backward_gpu_ns"))
        rows.append(f'<tr data-path="{escape(r.module)}" data-parent="{escape(r.parent)}">'
                    f'<td class="nm-mod" data-v="{escape(r.module)}" title="{escape(r.module)}" '
                    f'style="padding-left:{6 + 14 * int(r.depth)}px">{tog}{escape(name)}{kind}</td>'
                    f'<td data-v="{r.calls}">{int(r.calls):,}</td>{cells}</tr>')
    return (f"<style>{LINES_CSS}</style><script>{MODULES_JS}</script>"
            "<p>Modules (forward and backward ranges of --modules / annotate_modules), named by their path in the "
            "model as PyTorch names them, with their class: CPU time of the ranges and GPU time of the work launched "
            "inside them; click ▾ to fold, a column head to sort.</p>"
            '<div class="nm-scroll"><table class="nm-lines nm-tree"><thead><tr><th style="text-align:left">module'
            "</th><th>calls</th><th>forward CPU</th><th>forward GPU</th><th>backward CPU</th><th>backward GPU</th>"
            "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")
