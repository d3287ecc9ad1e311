"""A profile's output in its cell: one display bundle that shows wherever the notebook is opened, and its standalone
page, view.html, written whole or not at all.

The bundle (as Bokeh's own show() and Plotly persist their figures, a representation that needs no kernel):
- `text/html`: the static view (tabs, timeline, tables, advice); with scripts (a trusted notebook, nbconvert's page,
  VS Code) interactive, without them (untrusted, static renderers) plain HTML with a picture of the timeline;
- `text/plain`: the verdict, the summaries and the top findings;
- VIEW_MIME: the live part while the kernel that made it lives, by its ipywidgets model id.  Our JupyterLab /
  Notebook 7 extension renders the static view and puts the live widget in the place the view marks
  (`.nm-live-slot`: the timeline of an nsys view, whose zoom then fetches exact events from the kernel).  When the
  model is gone (a new kernel, none, a reload after the kernel ended) the static view stays.  Frontends without
  our extension ignore this type, so no frontend ever shows "model not found".

An nsys view is sent twice (profile_bundle's `drawn`): first with its live timeline and no saved one, then whole.
The extension keeps the live view it shows when only the saved copy changes; the notebook saves the whole one.

While the finish stage runs in the background the cell shows a status line: `text/plain` plus STATUS_MIME (its
folder and kernel), with which the extension tells a profile still loading from one whose kernel stopped first.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..store import notebook_relative, write_page
from .profile_view import VIEW_MIME, Bundle, ProfileView

if TYPE_CHECKING:  # the status line is made on the cell's path: no pandas for it (readers.contract imports it)
    from ..readers.contract import Report
    from .kept_page import Page
    from .ncu import NcuView
    from .report_view import NsysView

__all__ = ["READY_KEY", "STATUS_MIME", "VIEW_MIME", "view_of", "profile_bundle", "kept_bundle", "status_bundle",
           "bundle_bytes"]

READY_KEY = "application/vnd.nsight-magic+json"  # display metadata: {"state": "ready" | "failed", "folder": ...}
STATUS_MIME = "application/vnd.nsight-magic.status+json"  # {"state": "loading", "folder", "tool", "kernel_id"}


def view_of(report: Report, folder: Path | None = None, thresholds: dict[str, Any] | None = None,
            page: Page | None = None) -> NsysView | NcuView:
    """The view of an NsysReport (views.report_view.NsysView, from its kept `page` if given) or an NcuReport
    (views.ncu.NcuView)."""
    from ..readers.contract import is_nsys

    if is_nsys(report):
        from .report_view import NsysView

        return NsysView(report, folder, thresholds=thresholds, page=page)
    from .ncu import NcuView

    return NcuView(report, folder)


def profile_bundle(report: Report, folder: Path | None = None, *, render: bool = True,
                   thresholds: dict[str, Any] | None = None, lines: Iterable[object] = (), loader: bool = False,
                   live: bool = True, drawn: Callable[[Bundle], None] | None = None,
                   page: Page | None = None) -> Bundle:
    """The bundle that shows `report` (NsysReport or NcuReport) under `lines`: with render, the static view, its
    live part (unless not `live`: a headless run, where no frontend could show it) and text (and view.html beside
    an nsys report in a profile folder); without render, the text summary.
    loader: BokehJS inline before the view (views.bokehjs.needs_bokehjs() says when).
    drawn: given the bundle of an nsys view's live part before its saved copy is made (the static timeline, about
    half of the drawing): the user sees the view sooner, and the bundle returned completes it.
    page: the nsys view's static page as kept before (saved_analysis.kept_page), not drawn again."""
    from ..readers.contract import is_nsys

    said = [str(x) for x in lines]
    if not render:
        if is_nsys(report):
            from .report_view import nsys_text

            return {"text/plain": "\n".join([*said, nsys_text(report, thresholds)])}
        from .ncu import ncu_text

        return {"text/plain": "\n".join([*said, ncu_text(report)])}
    view = view_of(report, folder, thresholds, page)
    shown = ProfileView(view, said)
    if drawn is not None and live and report.tool == "nsys" and shown.live is not None:
        drawn(shown.bundle(live=True, loader=loader, quick=True))
    if report.tool == "nsys" and folder is not None:
        try:
            write_page(Path(folder) / "view.html", view.html_page())
        except OSError as e:  # a read-only or full folder: the view still shows, saying once what is missing
            shown.lines.append(f"view.html could not be saved in {folder} ({e.strerror or e}); the view is "
                               "shown here only")
    return shown.bundle(live=live, loader=loader)


def kept_bundle(report: Report, page: Page, folder: Path | None = None) -> Bundle | None:
    """The bundle of an nsys report's view from its kept static page (saved_analysis.kept_page), its live part
    not made yet: what a reopen shows first (0.1 s at 1M kernels); None where the page was made for another
    folder.  profile_bundle(page=page) then makes the whole view around the same page.  Without BokehJS: the
    caller, once it knows the page is shown, asks needs_bokehjs() (which counts it sent)."""
    from ..readers.contract import is_nsys
    from .report_view import kept_static

    got = kept_static(report, page, folder) if is_nsys(report) else None
    if got is None:
        return None
    text, html = got
    return {"text/plain": text, "text/html": html}


def status_bundle(text: str, *, tool: str, folder: str | Path, state: str = "loading") -> Bundle:
    """The status line of a profile being loaded in the background (see the module docstring): the folder also
    relative to the notebook's (the frontend reads it through the contents API), and the kernel loading it."""
    from ..tools import jupyter_kernel_id

    rel = notebook_relative(folder)
    return {"text/plain": text, STATUS_MIME: {"state": state, "tool": tool, "folder": str(folder), "rel": rel,
                                              "kernel_id": jupyter_kernel_id()}}


def bundle_bytes(bundle: Bundle) -> int:
    """Size of a bundle as it lands in the .ipynb (JSON-encoded)."""
    return len(json.dumps(bundle).encode())
