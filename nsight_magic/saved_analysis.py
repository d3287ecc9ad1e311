"""A report's verdict, findings, prepared timeline and the view's tables kept beside its columnar cache
(readers/nsys_cache.py), so that a profile opened again (`%nsys_load`) is drawn without being analysed, prepared or
summarised again: at 1M kernels they are most of a reopen's time.

Kept as JSON and Arrow (the findings' evidence, the verdict's tables), never as pickles: a profile folder may come
from anyone.  The view's static page is HTML that a reopen shows as it is, so it is signed with a secret of this
user's (an HMAC; the key in their private cache, as Jupyter signs the notebooks it trusts): a page from anyone
else's folder, or edited, is never shown; the view is drawn from the data instead.  Keyed to the export's
content (the columnar cache's key), to the files beside it that the analysis
reads (their names, sizes and times), to the thresholds, and to the code that computed them: a hash of this
package's Python files, so that a changed rule never shows a stale finding.
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from .analysis.bottleneck import Bottleneck
from .analysis.findings import Finding, computed, remember
from .readers import nsys_cache
from .readers.contract import NsysTables
from .views.kept_page import Page
from .views.report_view import ReportTables, keep_tables, made_page, made_tables
from .views.tables import Spans
from .views.timeline_prepare import TimelineData, keep_timeline, made_timeline

FORMAT = 1
PAGE = "page"  # the frame of the view's static page
TIMELINE = "tl_"  # the prefix of the timeline's frames
TABLES = f"{TIMELINE}tb_"  # ... and of the view's tables, read with them
_TABLE_FRAMES = ("kernels", "memory", "cuda_api", "nvtx")
_TABLE_SPANS = ("kernel_zoom", "nvtx_zoom")
_FINDING_TEXT = ("rule", "severity", "title", "explanation", "suggestion", "estimate", "code")


@functools.lru_cache(maxsize=1)
def code_hash() -> str:
    """The package's own code, as the results depend on it (read once per process: 0.1 MB a module)."""
    h = hashlib.blake2b(digest_size=16)
    root = Path(__file__).resolve().parent
    for p in sorted(root.rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode())
        h.update(p.read_bytes())
    return h.hexdigest()


# the files beside the export that the analysis reads besides its Python samples and memory snapshots (the run's
# settings and code files, the cell, --modules' annotations): written before the report, never after it
SIDECARS = ("run.json", "cell.py", "annotations.json")


def _key(sqlite: Path, thresholds: dict[str, Any] | None) -> dict[str, Any]:
    from .readers.gpu_memory import snapshot_files
    from .readers.python_samples import sample_files
    from .thresholds import resolve

    d = sqlite.parent
    beside = sorted({*sample_files(d), *snapshot_files(d), *(p for n in SIDECARS if (p := d / n).is_file())})
    return {"format": FORMAT, "code": code_hash(), "thresholds": sorted(resolve(thresholds).items()),
            "beside": [[p.name, st.st_size, st.st_mtime_ns] for p in beside for st in [p.stat()]]}


def _sqlite(report: NsysTables) -> Path | None:
    path = getattr(report, "sqlite_path", None)  # readers.nsys.NsysData (a facade hands its data's on)
    return Path(path) if path is not None else None


def save(report: NsysTables, thresholds: dict[str, Any] | None = None) -> bool:
    """Keep what was computed for this report (the view asked for it) beside its columnar cache; False where
    nothing was kept (not computed, no cache, a table Arrow cannot hold, a read-only folder).  Never raises: a
    cache is no reason for a profile to fail."""
    try:
        return _save(report, thresholds)
    except Exception:  # noqa: BLE001 - an odd finding or folder: the next open analyses again
        return False


def _save(report: NsysTables, thresholds: dict[str, Any] | None) -> bool:
    sqlite = _sqlite(report)
    verdict, findings = computed(report, thresholds)
    if sqlite is None or verdict is None or findings is None:
        return False
    tl = made_timeline(report)
    page = made_page(report)
    entry = _page_entry(page) if page is not None and page.renewable() else None
    if entry is None or entry["signature"] is None:  # (unsigned: never shown)
        page = entry = None
    key = _key(sqlite, thresholds)
    kept = nsys_cache.kept_doc(sqlite, key)
    if kept is not None and ("timeline" in kept or tl is None) and (page is None or _page_doc(page) == {
            k: v for k, v in kept.get("page", {}).items() if k in _PAGE_FOR}):
        return True  # kept already, with all this would add (a page for this folder, path, width and Bokeh)
    if kept is not None and "timeline" in kept and tl is None and page is not None and entry is not None:
        return _with_page(sqlite, key, page, entry)  # only the page is new (a folder moved): the rest as kept
    frames = {"breakdown": verdict.breakdown}
    if verdict.per_rank is not None:
        frames["per_rank"] = verdict.per_rank
    docs = []
    for i, f in enumerate(findings):
        frames[f"evidence{i}"] = f.evidence
        docs.append({**{k: getattr(f, k) for k in _FINDING_TEXT}, "time_at_stake_ns": int(f.time_at_stake_ns),
                     "ranges": [[int(a), int(b)] for a, b in f.ranges], "related": list(f.related),
                     "events": None if f.events is None else int(f.events)})
    doc: dict[str, Any] = {
        "verdict": {"kind": verdict.kind, "summary": verdict.summary, "window": [int(x) for x in verdict.window],
                    "window_source": verdict.window_source, "steps": int(verdict.steps),
                    "startup_ns": int(verdict.startup_ns)},
        "findings": docs}
    if tl is not None:  # the view's prepared timeline, while the view holds it
        doc["timeline"] = {"names": tl.names, "details": tl.details, "categories": tl.categories,
                           "colors": tl.colors, "palette": tl.palette, "span_ns": int(tl.span_ns),
                           "origin_ns": int(tl.origin_ns), "first_ns": int(tl.first_ns), "last_ns": int(tl.last_ns),
                           "frame_ns": [int(x) for x in tl.frame_ns] if tl.frame_ns is not None else None}
        frames.update({f"{TIMELINE}events": tl.events, f"{TIMELINE}rows": tl.rows,
                       f"{TIMELINE}api_row": pd.DataFrame({"row": np.asarray(tl.api_row_of_row, np.int64)})})
        for name, track in ((f"{TIMELINE}memory", tl.memory), (f"{TIMELINE}metrics", tl.gpu_metrics)):
            if track is not None:
                frames[name] = track
        tables = _table_frames(made_tables(report), tl.origin_ns)
        if tables:  # the view's tables, made from the same origin: a reopen then reads no summary
            doc["tables"] = {"origin_ns": int(tl.origin_ns)}
            frames.update(tables)
    if page is not None and entry is not None:  # the view's static page: a reopen shows it before anything else
        doc["page"] = entry
        frames[PAGE] = _page_frame(page)
    return nsys_cache.save_results(sqlite, key, doc, frames) is not None


def _with_page(sqlite: Path, key: dict[str, Any], page: Page, entry: dict[str, Any]) -> bool:
    got = nsys_cache.load_results(sqlite, key, skip=(PAGE,))
    if got is None:
        return False
    doc, frames = got
    return nsys_cache.save_results(sqlite, key, {**doc, "page": entry}, {**frames, PAGE: _page_frame(page)}) \
        is not None


def _page_frame(page: Page) -> pd.DataFrame:
    """A kept page's HTML, as the frame it is kept in (LZ4-compressed Arrow, beside the doc that signs it)."""
    return pd.DataFrame({"html": [page.html]})


_PAGE_FOR = ("width", "folder", "path", "bokeh")  # what a kept page was made for


def _page_doc(page: Page) -> dict[str, Any]:
    return {k: getattr(page, k) for k in _PAGE_FOR}


def _page_entry(page: Page) -> dict[str, Any]:
    """The doc's entry of a kept page (its HTML is a frame of its own), signed."""
    entry = {"text": page.text, "uid": page.uid, "ids": list(page.ids), **_page_doc(page)}
    return {**entry, "signature": _signature(entry, page.html)}


PAGE_KEY = "page.key"  # in this user's private cache (tools.cache.home_cache("keys")): the pages' signing secret


def _page_key() -> bytes | None:
    """This user's secret for signing kept pages, made once (32 random bytes, mode 0600); None where there is no
    private cache folder (a page is then not kept, nor shown)."""
    from .tools.cache import home_cache

    d = home_cache("keys")
    if d is None:
        return None
    path = d / PAGE_KEY
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        pass
    except OSError:
        return None
    else:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(32))
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None
        key = path.read_bytes()
    except OSError:
        return None
    return key if len(key) == 32 else None  # (another process still writing it: not this time)


def _signature(entry: dict[str, Any], html: str) -> str | None:
    key = _page_key()
    if key is None:
        return None
    msg = json.dumps(entry, sort_keys=True).encode() + b"\0" + html.encode("utf-8", "surrogatepass")
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def _table_frames(tables: ReportTables | None, origin_ns: int) -> dict[str, pd.DataFrame]:
    """The view's tables as frames to keep (their zoom spans as rows name, start, end); none where they were not
    made from this origin or a table is one Arrow cannot hold (the rest is kept all the same)."""
    if tables is None or tables.origin_ns != origin_ns:
        return {}
    out = {f"{TABLES}{name}": getattr(tables, name) for name in _TABLE_FRAMES}
    for name in _TABLE_SPANS:
        spans: Spans = getattr(tables, name)
        out[f"{TABLES}{name}"] = pd.DataFrame({
            "name": pd.Series([k for k, v in spans.items() for _ in v], dtype=object),
            "start": pd.Series([a for v in spans.values() for a, _ in v], dtype=np.float64),
            "end": pd.Series([b for v in spans.values() for _, b in v], dtype=np.float64)})
    try:
        for df in out.values():
            pa.Table.from_pandas(df, preserve_index=False)
    except (ValueError, TypeError, pa.ArrowException):
        return {}
    return out


def _kept_tables(frames: dict[str, pd.DataFrame], origin_ns: int) -> ReportTables:
    spans: dict[str, Spans] = {}
    for name in _TABLE_SPANS:
        f = frames[f"{TABLES}{name}"]
        got: Spans = {}
        for k, a, b in zip(f["name"].astype(str), f["start"].to_numpy(np.float64), f["end"].to_numpy(np.float64)):
            got.setdefault(k, []).append((float(a), float(b)))
        spans[name] = got
    return ReportTables(**{name: frames[f"{TABLES}{name}"] for name in _TABLE_FRAMES}, **spans, origin_ns=origin_ns)


def restore(report: NsysTables, thresholds: dict[str, Any] | None = None, timeline: bool = False) -> bool:
    """Take the verdict and findings kept for this report, code and thresholds as computed, and with `timeline` the
    view's prepared timeline (True: all of it), or leave the report to be analysed (False: none kept, or a kept one
    that does not read back whole; a kept one without the timeline asked for still gives its verdict and
    findings)."""
    sqlite = _sqlite(report)
    try:
        # the timeline's frames (most of the bytes) only when a view will take them
        got = (nsys_cache.load_results(sqlite, _key(sqlite, thresholds),
                                       skip=(PAGE,) if timeline else (PAGE, TIMELINE))  # the page: kept_page
               if sqlite is not None else None)
        if got is None:
            return False
        doc, frames = got
        v = doc["verdict"]
        verdict = Bottleneck(str(v["kind"]), str(v["summary"]), frames["breakdown"],
                             (int(v["window"][0]), int(v["window"][1])), str(v["window_source"]), int(v["steps"]),
                             int(v["startup_ns"]), frames.get("per_rank"))
        findings = [Finding(**{k: str(d[k]) for k in _FINDING_TEXT}, time_at_stake_ns=int(d["time_at_stake_ns"]),
                            evidence=frames[f"evidence{i}"],
                            ranges=tuple((int(a), int(b)) for a, b in d["ranges"]),
                            related=tuple(str(r) for r in d["related"]),
                            events=None if d["events"] is None else int(d["events"]))
                    for i, d in enumerate(doc["findings"])]
    except Exception:  # noqa: BLE001 - a file edited by hand, an unreadable folder: analysed again instead
        return False
    remember(report, verdict, findings, thresholds)
    if not timeline:
        return True
    t: dict[str, Any] = doc.get("timeline") or {}
    try:
        api_row = frames[f"{TIMELINE}api_row"]["row"].to_numpy(np.int64)
        data = TimelineData(events=frames[f"{TIMELINE}events"], rows=frames[f"{TIMELINE}rows"],
                            names=list(t["names"]), details=list(t["details"]), categories=list(t["categories"]),
                            colors=list(t["colors"]), span_ns=int(t["span_ns"]), api_row_of_row=api_row,
                            origin_ns=int(t["origin_ns"]), first_ns=int(t["first_ns"]), palette=list(t["palette"]),
                            frame_ns=(int(t["frame_ns"][0]), int(t["frame_ns"][1])) if t["frame_ns"] is not None
                            else None,
                            last_ns=int(t["last_ns"]), memory=frames.get(f"{TIMELINE}memory"),
                            gpu_metrics=frames.get(f"{TIMELINE}metrics"))
        keep_timeline(report, data)
    except Exception:  # noqa: BLE001 - none kept (a view that was not drawn), or damaged: prepared again
        return False
    try:
        if "tables" in doc:
            keep_tables(report, _kept_tables(frames, int(doc["tables"]["origin_ns"])))
    except Exception:  # noqa: BLE001 - damaged: the summaries are read again
        pass
    return True


def kept_page(report: NsysTables, thresholds: dict[str, Any] | None = None) -> Page | None:
    """The static page a view of this report made, kept with its results (its ids to be made anew: Page.renewed;
    the folder and width it was made for: views.report_view.kept_static), else None; nothing else of the results
    is read (a reopen shows it first)."""
    import bokeh

    sqlite = _sqlite(report)
    try:
        got = nsys_cache.load_results(sqlite, _key(sqlite, thresholds), only=(PAGE,)) if sqlite is not None else None
        if got is None or "page" not in got[0]:
            return None
        d, html = got[0]["page"], got[1][PAGE]["html"].iloc[0]
        page = Page(str(html), str(d["text"]), str(d["uid"]), tuple(str(i) for i in d["ids"]), int(d["width"]),
                    None if d["folder"] is None else str(d["folder"]), str(d["path"]), str(d["bokeh"]))
        ours = _page_entry(page)["signature"]
        if ours is None or not hmac.compare_digest(ours, str(d["signature"])):  # not signed by this user
            return None
    except Exception:  # noqa: BLE001 - a file edited by hand, an unreadable folder: drawn again instead
        return None
    return page if (page.path, page.bokeh) == (str(report.path), str(bokeh.__version__)) else None


def kept_fields() -> set[str]:
    """The Finding fields kept (a test checks that every field is)."""
    return set(_FINDING_TEXT) | {"time_at_stake_ns", "ranges", "related", "evidence", "events"}
