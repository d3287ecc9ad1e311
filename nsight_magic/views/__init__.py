"""Views: prepare (DataFrames -> plot-ready frames) and build (Bokeh models, ipywidgets).

Public API, used by the magics and the command line:
show_nsys(report, folder=None) -> ProfileView (displays as the bundle a notebook saves; .live is the live widget);
display_nsys(report, folder=None) -> None; nsys_html(report, folder=None) -> str;
write_view_html(report, path, folder=None) -> Path; nsys_text(report) -> str; show_ncu(report, folder=None) -> ProfileView.

Imported on first use (PEP 562): a module of this package that needs no Bokeh (bokehjs, output) loads without it.
"""
from __future__ import annotations

from typing import Any

__all__ = ["show_nsys", "display_nsys", "nsys_html", "write_view_html", "nsys_text", "show_ncu"]


def __getattr__(name: str) -> Any:
    if name == "show_ncu":
        from .ncu import show_ncu

        return show_ncu
    if name in __all__:
        from . import report_view

        return getattr(report_view, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
