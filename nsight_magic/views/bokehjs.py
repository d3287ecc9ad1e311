"""BokehJS for static pages and saved notebooks: inline (no CDN, works offline) and gzip-compressed.

BokehJS core + WebGL are 1.46 MB of JavaScript; gzip'd and base64'd they are 0.54 MB.  The loader decompresses
them in the browser (DecompressionStream, in every current browser) and sets `window.nmBokehReady`, a promise
that every plot script of ours waits for (embed_script).  A page that already has the same BokehJS reuses it.
"""
from __future__ import annotations

import base64
import functools
import gzip
import json
import re


@functools.lru_cache(maxsize=1)
def bokehjs_html() -> str:
    """A <script> that loads BokehJS (core + WebGL) from an inline, compressed copy; once per page."""
    import bokeh
    from bokeh.resources import Resources

    res = Resources(mode="inline", components=["bokeh", "bokeh-gl"])
    code = "\n;\n".join(res.js_raw)
    packed = base64.b64encode(gzip.compress(code.encode("utf-8"), 9, mtime=0)).decode("ascii")
    return f"""<script type="text/javascript">
(function(root) {{
  if (root.nmBokehReady) return;
  const version = {json.dumps(bokeh.__version__)};
  if (root.Bokeh && root.Bokeh.version === version) {{ root.nmBokehReady = Promise.resolve(); return; }}
  const packed = "{packed}";
  root.nmBokehReady = (async function() {{
    const bin = atob(packed), bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    const code = await new Response(stream).text();
    const s = document.createElement("script");
    s.text = code;
    document.head.appendChild(s);
  }})();
  root.nmBokehReady.catch(function(e) {{ console.error("nsight-magic: could not load BokehJS", e); }});
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
