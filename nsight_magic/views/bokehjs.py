"""BokehJS for static pages and saved notebooks: inline (no CDN, works offline) and compressed.

BokehJS core + WebGL are 1.46 MB of JavaScript; deflated and base64'd they are 0.54 MB.  The loader inflates them
in the browser synchronously (tiny-inflate, vendored in views/js/, MIT), so that `window.Bokeh` exists as soon as
the loader's output has run: the live view's jupyter_bokeh widget needs it when its view is created, and an
asynchronous loader (DecompressionStream) lost that race in JupyterLab now and then.  `window.nmBokehReady` is a
promise every plot script of ours waits for (embed_script).  A page that already has the same BokehJS reuses it.
"""
from __future__ import annotations

import base64
import functools
import json
import re
import zlib
from pathlib import Path

_INFLATE_JS = Path(__file__).with_name("js") / "tiny_inflate.js"
LOADER_MARKER = "nsight-magic BokehJS loader"  # in the loader's script: tests and tools find the output by it


@functools.lru_cache(maxsize=1)
def bokehjs_html() -> str:
    """A <script> that loads BokehJS (core + WebGL) from an inline, compressed copy; once per page."""
    import bokeh
    from bokeh.resources import Resources

    res = Resources(mode="inline", components=["bokeh", "bokeh-gl"])
    code = "\n;\n".join(res.js_raw).encode("utf-8")
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate: what tinf_uncompress reads
    packed = base64.b64encode(deflate.compress(code) + deflate.flush()).decode("ascii")
    return f"""<script type="text/javascript">
/* {LOADER_MARKER} */
(function(root) {{
  if (root.nmBokehReady) return;
  const version = {json.dumps(bokeh.__version__)};
  if (root.Bokeh && root.Bokeh.version === version) {{ root.nmBokehReady = Promise.resolve(); return; }}
  try {{
    const tinf_uncompress = (function() {{
{_INFLATE_JS.read_text()}
      return tinf_uncompress;
    }})();
    const bin = atob("{packed}"), bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    const out = tinf_uncompress(bytes, new Uint8Array({len(code)}));
    const s = document.createElement("script");
    s.text = new TextDecoder("utf-8").decode(out);
    document.head.appendChild(s);  // an inline script runs as it is inserted: Bokeh is defined from here on
    root.nmBokehReady = Promise.resolve();
  }} catch (e) {{
    console.error("nsight-magic: could not load BokehJS", e);
    root.nmBokehReady = Promise.reject(e);
  }}
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
