"""A compact summary of an Nsight Systems report: capture span, event counts, top kernels / NVTX ranges.

Stateless: `summary_text(report, folder)` and `summary_html(report, folder)`; every user-controlled string is escaped.
"""
from __future__ import annotations

import html
from pathlib import Path

TOP = 5


def _ms(ns) -> str:
    return f"{ns / 1e6:,.3f} ms"


def _counts(report) -> list[tuple[str, int]]:
    return [("kernels", len(report.kernels)), ("memory copies", len(report.memcpy)), ("memsets", len(report.memset)),
            ("CUDA API calls", len(report.cuda_api)), ("NVTX ranges", len(report.nvtx)),
            ("OS runtime calls", len(report.osrt))]


def _top(report) -> tuple[str, list[tuple[str, int, int, float]]]:
    """(title, rows of name, count, total_ns, pct): kernels when there are any, else NVTX ranges."""
    if len(report.kernels):
        df, title = report.kernel_summary(), "Top kernels by GPU time"
    elif len(report.nvtx):
        df, title = report.nvtx_summary(), "Top NVTX ranges by time"
    else:
        return "", []
    df = df.head(TOP)
    return title, list(zip(df["name"].astype(str), df["count"], df["total_ns"], df["pct"]))


def summary_text(report, folder: Path | None = None) -> str:
    meta = report.meta
    lines = [f"Nsight Systems {meta.nsys_version or ''}: capture {_ms(meta.duration_ns)}".rstrip()]
    lines.append(", ".join(f"{n:,} {what}" for what, n in _counts(report)))
    title, rows = _top(report)
    if rows:
        lines.append(f"{title}:")
        lines += [f"  {pct:5.1f}%  {_ms(total):>14}  x{count:<6} {name[:100]}" for name, count, total, pct in rows]
    if folder:
        lines.append(f"saved in {folder}")
    return "\n".join(lines)


def summary_html(report, folder: Path | None = None) -> str:
    meta = report.meta
    e = html.escape
    counts = " &middot; ".join(f"<b>{n:,}</b> {e(what)}" for what, n in _counts(report))
    parts = [f"<div class='nsight-magic-summary'><div><b>Nsight Systems {e(meta.nsys_version or '')}</b> "
             f"&mdash; capture {e(_ms(meta.duration_ns))}</div><div>{counts}</div>"]
    title, rows = _top(report)
    if rows:
        body = "".join(f"<tr><td style='text-align:right'>{pct:.1f}%</td><td style='text-align:right'>"
                       f"{e(_ms(total))}</td><td style='text-align:right'>{count:,}</td>"
                       f"<td style='text-align:left'>{e(name[:200])}</td></tr>" for name, count, total, pct in rows)
        parts.append(f"<div><i>{e(title)}</i></div><table><tr><th>%</th><th>total</th><th>count</th><th>name</th>"
                     f"</tr>{body}</table>")
    if folder:
        parts.append(f"<div>saved in <code>{e(str(folder))}</code></div>")
    return "".join(parts) + "</div>"


def summary_bundle(report, folder: Path | None = None) -> dict:
    return {"text/plain": summary_text(report, folder), "text/html": summary_html(report, folder)}
