"""The views' browser side as package files: view.js (tabs, tables, advice, zoom) and view.css; lines.css and
modules.js (the Lines and Modules tabs); timeline/*.js, the bodies of the timeline's Bokeh callbacks (CustomJS:
selection, labels, folding, static zoom, hover formats).

Every static view carries them inline (`head()`): a saved notebook, an nbconvert page or view.html works offline and
alone.  view.js guards itself, so a page with many views runs it once."""
from __future__ import annotations

import functools
from importlib.resources import files


@functools.lru_cache(maxsize=None)
def _read(*parts: str) -> str:
    return files(__name__).joinpath(*parts).read_text(encoding="utf-8")


def asset(name: str) -> str:
    """The text of one of these files."""
    return _read(name)


def timeline_js(name: str) -> str:
    """The body of one of the timeline's Bokeh callbacks (timeline/NAME.js)."""
    return _read("timeline", f"{name}.js")


def view_js() -> str:
    return _read("view.js")


def view_css() -> str:
    return _read("view.css")


def head() -> str:
    """The style and the behaviour of views, for the start of a fragment or page."""
    return f"<style>{view_css()}</style><script>{view_js()}</script>"


# After a view's root element: turn its plain-HTML form into the interactive one (view.js's nmView.setup).
SETUP = ("<script>(function(r){while(r&&!(r.classList&&r.classList.contains('nm-report')))r=r.previousElementSibling;"
         "if(window.nmView&&r)nmView.setup(r);})(document.currentScript);</script>")


def noscript(what: str = "the timeline is a picture") -> str:
    """The line a view shows where no script runs (an untrusted notebook, a static renderer): what is missing and
    how to get it.  view.js removes it."""
    return ('<p class="nm-noscript" style="color:#555;font:12px sans-serif;margin:2px 0 6px">Static copy: scripts did '
            f"not run here (an untrusted notebook, or a viewer without scripts), so {what} and the tables do not "
            "sort. Trust the notebook (command palette: Trust Notebook) to make it interactive, or open view.html in "
            "the profile folder.</p>")
