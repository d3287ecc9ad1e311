"""A view as a notebook displays it: the bundle of views/output.py (static HTML, text, and the live part by its
widget's model id), for any view object with static_fragment(), live_widget() and text()."""
from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any, Iterable, Protocol, TypeAlias

if TYPE_CHECKING:
    import ipywidgets

    from .timeline import TimelineView

Bundle: TypeAlias = "dict[str, Any]"  # a display bundle: MIME type -> data

VIEW_MIME = "application/vnd.nsight-magic.view+json"  # {"model_id": ...}: the live part of a view


class View(Protocol):
    """A report's or a job's view (report_view.NsysView, ncu.NcuView, job.JobView)."""

    def static_fragment(self, *, include_bokehjs: bool) -> str: ...

    def live_widget(self) -> ipywidgets.Widget | None: ...

    def text(self) -> str: ...


class ProfileView:
    """A report's view as a notebook displays it (`report.show()`, `show_nsys()`): the bundle above.
    `.live` is the live widget (None where there is none); `.html()` the static fragment."""

    def __init__(self, view: View, lines: Iterable[object] = ()) -> None:
        self.view = view
        self.lines = [str(x) for x in lines]
        self._live: ipywidgets.Widget | None = None

    @property
    def live(self) -> ipywidgets.Widget | None:
        if self._live is None:
            self._live = self.view.live_widget()
            if self._live is not None:  # the kernel keeps the newest few (views/live_views.py)
                from .live_views import hold

                hold(self._live)
        return self._live

    @property
    def timeline(self) -> TimelineView | None:
        """The live timeline's TimelineView (views.timeline), for nsys views with jupyter_bokeh."""
        tv: TimelineView | None = getattr(self.live, "_nsight_timeline", None)
        return tv

    def html(self, loader: bool = False, quick: bool = False) -> str:
        """The static view; with loader, BokehJS inline before it (the first view of a notebook carries it); quick:
        without its saved timeline (an nsys view's first update, which its live timeline fills)."""
        html: str = self.view.static_fragment(include_bokehjs=loader, **({"timeline": False} if quick else {}))
        if self.lines:
            return f'<pre class="nm-messages">{escape(chr(10).join(self.lines))}</pre>' + html
        return html

    def text(self) -> str:
        return _joined(self.lines, self.view.text())

    def bundle(self, live: bool = True, loader: bool = False, quick: bool = False) -> Bundle:
        out: Bundle = {"text/plain": self.text(), "text/html": self.html(loader, quick)}
        widget = self.live if live else None
        if widget is not None:
            out[VIEW_MIME] = {"model_id": widget.model_id, "version_major": 2, "version_minor": 0}
        return out

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> Bundle:
        from .bokehjs import needs_bokehjs

        return self.bundle(loader=needs_bokehjs())


def _joined(lines: list[str], text: str) -> str:
    return "\n".join([*lines, text]) if lines else text
