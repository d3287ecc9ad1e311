"""BokehJS for views: inline (no CDN, works offline), once per page or notebook.

`bokehjs_html()`: the installed bokeh's JavaScript, deflated and base64'd (1.46 MB in 0.54 MB), inflated by the
browser's own DecompressionStream; `window.nmBokehReady` is the promise every plot script of ours waits for
(`embed`), and our JupyterLab renderer waits for it before it creates a live widget.  A page that already has the
same BokehJS reuses it.  In a notebook the first view carries it inside its own HTML (`needs_bokehjs`).
"""
from __future__ import annotations

import base64
import contextlib
import functools
import json
import threading
import zlib
from collections.abc import Iterator
from typing import Any

from .assets import asset

LOADER_MARKER = "nsight-magic BokehJS loader"  # in the loader's script: tests and tools find the output by it


@functools.lru_cache(maxsize=1)
def _bokehjs() -> tuple[str, str]:
    import bokeh
    from bokeh.resources import Resources

    res = Resources(mode="inline", components=["bokeh", "bokeh-gl"])
    return bokeh.__version__, "\n;\n".join(res.js_raw)


@functools.lru_cache(maxsize=1)
def bokehjs_html() -> str:
    """A <script> that loads BokehJS (core + WebGL) from an inline copy; once per page (see the module doc)."""
    version, code = _bokehjs()
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate: DecompressionStream("deflate-raw")
    packed = base64.b64encode(deflate.compress(code.encode("utf-8")) + deflate.flush()).decode("ascii")
    # placeholders filled by plain replacement: the packed code is base64 and the version JSON, neither holds one
    code = asset("bokeh_loader.js").replace("__VERSION__", json.dumps(version)).replace("__PACKED__", packed)
    return f'<script type="text/javascript">\n/* {LOADER_MARKER} */\n{code}</script>'


# unique_ids() blocks open, in any thread (a profile drawn in the background while a cell loads another): the
# setting is Bokeh's, one for the process, so it is unset only when the last block ends
_unique_depth = [0]
_unique_lock = threading.Lock()


@contextlib.contextmanager
def unique_ids() -> Iterator[None]:
    """Bokeh models made inside get UUIDs instead of Bokeh's counter (p1001, p1002, ...): two notebooks, or a
    notebook and a page, drawn in one browser window never share a model id (BokehJS keys its views by them)."""
    from bokeh.settings import settings

    with _unique_lock:
        settings.simple_ids.set_value(False)
        _unique_depth[0] += 1
    try:
        yield
    finally:
        with _unique_lock:
            _unique_depth[0] -= 1
            if not _unique_depth[0]:
                settings.simple_ids.unset_value()


def embed(models: dict[str, Any]) -> tuple[dict[str, str], str]:
    """Bokeh models as divs (by key) and one <script> that draws them, one document for all (links between them
    hold), once BokehJS is loaded (bokehjs_html()); then it hides the pictures that stood for them
    (views/picture.py).  The script must follow the view's root element: it finds that root from its own position
    (document.currentScript), never by a page-wide id."""
    divs, script, _ = embed_with_ids(models)
    return divs, script


def embed_with_ids(models: dict[str, Any]) -> tuple[dict[str, str], str, set[str]]:
    """embed() and every id it wrote (the document's, its models', its elements'): a page kept to be shown again
    makes them anew (views/kept_page.py)."""
    from bokeh.core.json_encoder import serialize_json
    from bokeh.embed.util import OutputDocumentFor, standalone_docs_json_and_render_items

    if not models:
        return {}, "", set()
    keys, values = list(models), list(models.values())
    # the document's own models (its config) made here: UUIDs too, never one shared by every first view of a
    # kernel (BokehJS 3.9 indexes them with the plots: two pages' "p1006" made Bokeh.index list one key twice)
    with unique_ids(), OutputDocumentFor(values):
        docs_json, [item] = standalone_docs_json_and_render_items(values)
    ids = {str(d) for d in docs_json} | {str(r.elementid) for r in item.roots} | _model_ids(docs_json)
    divs = {k: f'<div class="nm-bokeh" id="{root.elementid}" data-root-id="{root.id}"></div>'
            for k, root in zip(keys, item.roots)}
    # JSON as a JS string literal: no </script> inside can end the script early
    def literal(obj: object) -> str:
        return json.dumps(serialize_json(obj, pretty=False)).replace("</", "<" + "\\" + "/")

    # the items (ids only) first, then the documents: the user's text in the documents is never searched
    script = asset("embed.js").strip().replace("__ITEMS__", literal([item.to_json()]), 1)
    script = "<script>" + script.replace("__DOCS__", literal(docs_json), 1) + "</script>"
    return divs, script, ids


def _model_ids(obj: object) -> set[str]:
    """The ids of the models in a serialized document (objects with a "type" and an "id")."""
    out: set[str] = set()
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, dict):
            if o.get("type") == "object" and isinstance(o.get("id"), str):
                out.add(o["id"])
            stack.extend(o.values())
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
    return out


# Where BokehJS went inline in this kernel: the cell id of the view that carried it (None: not yet sent).
_bokehjs_cell: list[str | None] = []


def _current_cell_id() -> str | None:
    try:
        from IPython import get_ipython

        kernel = getattr(get_ipython(), "kernel", None)
        cell = (kernel.get_parent() or {}).get("metadata", {}).get("cellId") if kernel else None
        return str(cell) if cell is not None else None
    except Exception:  # no kernel (terminal IPython): no cell ids, once per process is all we can do
        return None


def needs_bokehjs() -> bool:
    """Once per notebook: the first time, and again when the cell that carried it is run again (its old
    output, BokehJS included, is being replaced)."""
    cell = _current_cell_id()
    if not _bokehjs_cell or (cell is not None and cell == _bokehjs_cell[0]):
        _bokehjs_cell[:] = [cell]
        return True
    return False


def not_sent() -> None:
    """The output that was to carry BokehJS did not (its profile had nothing to show): the next view sends it."""
    _bokehjs_cell[:] = []
