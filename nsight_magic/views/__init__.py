"""Views: prepare (DataFrames -> plot-ready frames) and build (Bokeh models, ipywidgets).

Public API, used by the magics and the command line:
show_nsys(report, folder=None) -> widget; display_nsys(report, folder=None) -> None;
nsys_html(report, folder=None) -> str; write_view_html(report, path, folder=None) -> Path; nsys_text(report) -> str;
show_ncu(report, folder=None) -> widget.
"""
from __future__ import annotations

from .ncu import show_ncu
from .report_view import display_nsys, nsys_html, nsys_text, show_nsys, write_view_html

__all__ = ["show_nsys", "display_nsys", "nsys_html", "write_view_html", "nsys_text", "show_ncu"]
