"""A report view's static page kept with its results (saved_analysis.py), so that a profile opened again is drawn
from it at once, before its live part is made (issue 62: 0.6 s at 1M kernels, most of it Bokeh's Python side).

A page shown twice in one notebook, or in a notebook and its view.html in one browser, must not share an id (BokehJS
keys its views by model id, the tables' clicks find their plot by name): every id the view made for itself (its
uid, Bokeh's document, models and elements, all UUIDs) is made anew each time the page is shown.  Only those ids
are: a UUID in the user's own text (an NVTX range named after a request) stays as it was.
"""
from __future__ import annotations

import re
import uuid
from collections import Counter
from dataclasses import dataclass

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
FILES_SLOT = "<!--nm-files-->"  # where the Files tab's listing goes, made when shown (user text is escaped: no "<")


def new_id() -> str:
    """A UUID that starts with a letter: usable as an HTML id and in a CSS selector, as Bokeh's element ids."""
    while True:
        u = str(uuid.uuid4())
        if u[0].isalpha():
            return u


@dataclass(frozen=True)
class Page:
    """A view's static fragment (FILES_SLOT for its Files listing) and text, with what they were made for."""

    html: str
    text: str
    uid: str                 # the view's own id (its element ids, its plot's name)
    ids: tuple[str, ...]     # every id made for this page, the uid among them
    width: int
    folder: str | None       # the profile folder the view listed
    path: str                # the report the text names
    bokeh: str               # the Bokeh version whose BokehJS draws it

    def made_for(self, width: int, folder: str | None) -> bool:
        """Whether this page is the one a view of this width and profile folder (its text) would make."""
        return self.width == width and self.folder == folder

    def renewable(self) -> bool:
        """Whether each id is a UUID found wherever it occurs in the page (so each is made anew wherever it is)."""
        if not self.ids or self.uid not in self.ids or not all(UUID.fullmatch(i) for i in self.ids):
            return False
        ids = set(self.ids)
        found = Counter(m for m in UUID.findall(self.html) if m in ids)
        return all(found[i] == self.html.count(i) for i in ids)

    def renewed(self) -> tuple[str, str]:
        """(uid, html): the page with every id of its own made anew."""
        fresh = {i: new_id() for i in self.ids}
        return fresh[self.uid], UUID.sub(lambda m: fresh.get(m.group(), m.group()), self.html)
