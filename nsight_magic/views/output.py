"""A profile's output in its cell: the view of its report (live widget, static HTML, plain text) under the lines
the run has to say, as one display bundle; and its standalone page, view.html, written whole or not at all."""
from __future__ import annotations

import os
import secrets
from html import escape
from pathlib import Path

READY_KEY = "application/vnd.nsight-magic+json"  # display metadata: {"state": "ready" | "failed", "folder": ...}


def profile_bundle(report, folder=None, *, render: bool = True, thresholds: dict | None = None,
                   lines=()) -> dict:
    """The bundle that shows `report` (NsysReport or NcuReport): with render, the live widget, the static HTML
    and text (and view.html beside an nsys report in a profile folder); without, the text summary."""
    from ..readers.nsys import NsysReport

    lines = [str(x) for x in lines]
    if isinstance(report, NsysReport):
        if not render:
            from .report_view import nsys_text

            return {"text/plain": _joined(lines, nsys_text(report, thresholds))}
        from .report_view import NsysView

        view = NsysView(report, folder, thresholds=thresholds)
        bundle = _bundle(view, lines)
        if folder is not None:
            write_page(Path(folder) / "view.html", view.html_page())
        return bundle
    from .ncu import NcuView, ncu_text

    if not render:
        return {"text/plain": _joined(lines, ncu_text(report))}
    return _bundle(NcuView(report, folder), lines)


def _joined(lines: list[str], text: str) -> str:
    return "\n".join([*lines, text]) if lines else text


def _bundle(view, lines: list[str]) -> dict:
    import ipywidgets as w

    widget = view.widget()
    html = view.static_fragment(include_bokehjs=False)
    if lines:
        said = f'<pre class="nm-messages">{escape(chr(10).join(lines))}</pre>'
        widget = w.VBox([w.HTML(said), widget])
        html = said + html
    return {"text/plain": _joined(lines, view.text()), "text/html": html,
            "application/vnd.jupyter.widget-view+json": {"model_id": widget.model_id, "version_major": 2,
                                                         "version_minor": 0}}


def write_page(path: Path, html: str) -> Path:
    """Write an HTML page whole or not at all: into a new file beside it, then renamed over it (a symbolic link
    at `path` is replaced, never written through)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.partial")
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            f.write(html)
        os.replace(tmp, path)
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass
    return path
