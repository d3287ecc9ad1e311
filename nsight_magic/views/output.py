"""A profile's output in its cell: the view of its report (live widget, static HTML, plain text) under the lines
the run has to say, as one display bundle; and its standalone page, view.html, written whole or not at all."""
from __future__ import annotations

from html import escape
from pathlib import Path

from .pages import write_page

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
        if folder is not None:
            page = Path(folder) / "view.html"
            try:
                write_page(page, view.html_page())
            except OSError as e:  # a read-only or full folder: the view still shows, saying once what is missing
                lines.append(f"view.html could not be saved in {folder} ({e.strerror or e}); the view is shown "
                             "here only")
        return _bundle(view, lines)
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
