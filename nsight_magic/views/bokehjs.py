"""BokehJS for static pages and saved notebooks: inline (no CDN, works offline).

Two loaders, both from the installed bokeh package:
- `bokehjs_html()`: deflated and base64'd (1.46 MB of JavaScript in 0.54 MB), inflated by the browser's own
  DecompressionStream; `window.nmBokehReady` is the promise every plot script of ours waits for (embed_script).
  For pages whose plots are ours: view.html, the diff and ncu pages, the static part of saved notebooks.
- `bokehjs_html(sync=True)`: the plain script, run as it is inserted, so `window.Bokeh` exists as soon as that
  output has run.  For the notebook output that precedes a live view: jupyter_bokeh's widget needs Bokeh the moment
  its view is created, and does not wait for a promise (an asynchronous loader lost that race now and then).
A page that already has the same BokehJS reuses it.
"""
from __future__ import annotations

import base64
import functools
import json
import re
import zlib

LOADER_MARKER = "nsight-magic BokehJS loader"  # in the loader's script: tests and tools find the output by it


@functools.lru_cache(maxsize=1)
def _bokehjs() -> tuple[str, str]:
    import bokeh
    from bokeh.resources import Resources

    res = Resources(mode="inline", components=["bokeh", "bokeh-gl"])
    return bokeh.__version__, "\n;\n".join(res.js_raw)


@functools.lru_cache(maxsize=2)
def bokehjs_html(sync: bool = False) -> str:
    """A <script> that loads BokehJS (core + WebGL) from an inline copy; once per page (see the module doc)."""
    version, code = _bokehjs()
    head = f"""<script type="text/javascript">
/* {LOADER_MARKER} */
(function(root) {{
  if (root.nmBokehReady && root.Bokeh) return;
  const version = {json.dumps(version)};
  if (root.Bokeh && root.Bokeh.version === version) {{ root.nmBokehReady = Promise.resolve(); return; }}
"""
    if sync:
        # the code itself, as a JSON string: no </script> inside can end this script early
        literal = json.dumps(code).replace("</", "<" + "\\" + "/")
        return head + f"""  const s = document.createElement("script");
  s.text = {literal};
  document.head.appendChild(s);  // an inline script runs as it is inserted: Bokeh is defined from here on
  root.nmBokehReady = Promise.resolve();
}})(window);
</script>"""
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate: DecompressionStream("deflate-raw")
    raw = code.encode("utf-8")
    packed = base64.b64encode(deflate.compress(raw) + deflate.flush()).decode("ascii")
    return head + f"""  const bin = atob("{packed}"), bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
  root.nmBokehReady = new Response(stream).text().then(function(text) {{
    if (root.Bokeh && root.Bokeh.version === version) return;
    const s = document.createElement("script");
    s.text = text;
    document.head.appendChild(s);
  }}).catch(function(e) {{ console.error("nsight-magic: could not load BokehJS", e); throw e; }});
}})(window);
</script>"""


_SCRIPT = re.compile(r"^\s*<script[^>]*>(.*)</script>\s*$", re.S)


def embed_script(script: str) -> str:
    """A bokeh.embed.components() script that waits for bokehjs_html()'s loader before it draws."""
    m = _SCRIPT.match(script)
    if not m:
        return script
    return ('<script type="text/javascript">(window.nmBokehReady || Promise.resolve()).then(function() {'
            f"{m.group(1)}}});</script>")


# Where BokehJS went inline in this kernel: the cell id of that output (None: not yet sent).  It goes into
# an output of its own, text/html only, so it runs both live (JupyterLab renders the widget view of the
# report bundle, never its text/html) and in saved/nbconvert'd notebooks.
_bokehjs_cell: list = []


def _current_cell_id():
    try:
        from IPython import get_ipython

        kernel = getattr(get_ipython(), "kernel", None)
        return (kernel.get_parent() or {}).get("metadata", {}).get("cellId") if kernel else None
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
