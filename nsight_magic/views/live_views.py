"""The live parts of views that a kernel keeps: the newest few.  A live timeline holds what its zoom reads (the
report's prepared events, its Bokeh sources), tens of MB for a report of 60k ranges; a notebook that profiles many
cells would keep them all.  Past the limit the oldest live part is closed: its output shows the view's saved copy
(the Lab renderer falls back to it when the widget goes) and the kernel frees what it held."""
from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ipywidgets

KEEP = 4  # NsightMagics.live_views sets it

_held: deque[ipywidgets.Widget] = deque()
_lock = threading.Lock()


def hold(widget: ipywidgets.Widget) -> None:
    """Count `widget` (a view's new live part) among the newest; close the ones past the limit."""
    with _lock:
        _held.append(widget)
        past = _past_limit()
    for w in past:
        close(w)


def keep(n: int) -> None:
    """Keep the newest `n` live parts from now on (0: none); those past it are closed now."""
    global KEEP
    with _lock:
        KEEP = max(0, int(n))
        past = _past_limit()
    for w in past:
        close(w)


def held() -> list[ipywidgets.Widget]:
    with _lock:
        return list(_held)


def _past_limit() -> list[ipywidgets.Widget]:
    return [_held.popleft() for _ in range(max(0, len(_held) - KEEP))]


def close(widget: ipywidgets.Widget) -> None:
    """Close a live part and the widgets it contains (ipywidgets closes only the one it is asked to), and let go
    of what our timeline hung on it."""
    from ipywidgets import Widget

    for child in getattr(widget, "children", ()) or ():
        close(child)
    try:
        # the comm only: jupyter_bokeh's own close() also unhooks its Bokeh document, and runs again when the
        # widget is collected, where a second unhooking raises (KeyError, printed by __del__)
        Widget.close(widget)
    except Exception:  # noqa: BLE001 - a widget whose comm is already gone (kernel shutting down)
        pass
    if hasattr(widget, "_nsight_timeline"):
        widget._nsight_timeline = None
