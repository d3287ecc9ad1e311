"""Nsight Systems reports (.sqlite exports, or .nsys-rep/.qdrep exported with the installed nsys) -> pandas.

    rep = open_nsys_report("run.nsys-rep")
    rep.kernels, rep.memcpy, rep.cuda_api, rep.nvtx, ...   # one row per event, sorted by start_ns
    rep.kernel_summary()                                    # = `nsys stats --report cuda_gpu_kern_sum`

Column meanings follow issue 3: integer `*_ns` times, names resolved, ENUMs decoded, pid/tid from globalTid.
Frames are read lazily (functools.cached_property); absent tables give empty frames with the same columns.
"""
from __future__ import annotations

import functools
import json
import hashlib
import warnings
import weakref
from typing import Any, Callable
from concurrent.futures import Future, ThreadPoolExecutor
import os
import re
import stat
import threading
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import NsightMagicError, OptionError, ReportError, ReportWarning
from ..heap import give_back_freed_memory
from ..tools.cache import private_cache
from . import nsys_schema as S
from .nsys_frames import build_nvtx, empty_frame, launch_tids, nvtx_frame, read_frame, sort_by_start
from .capture_span import CaptureSpan, foreign_span, own_span
from .constant_columns import one_value
from .nsys_sql import (TS_LIMIT, Strings, check_ints, columns_of, connect, find_spec_table, find_table, open_ro,
                       read_ints)
from ..inside.marks import CAPTURE_DOMAIN
from .nsys_tables import NsysSummaries

REP_SUFFIXES = (".nsys-rep", ".qdrep")
RAW_SUFFIX = ".qdstrm"  # nsys's raw recording, before its import into a .nsys-rep


@dataclass(frozen=True)
class ReportMeta:
    """What the export says about itself.  Times are in the report's own clock (ns)."""

    nsys_version: str | None  # nsys that exported the file (EXPORT_PRODUCT_VERSION), None before 2021
    schema_version: str | None  # EXPORT_SCHEMA_VERSION
    start_ns: int  # capture span (readers.capture_span): our cell range(s), else proven bounds, else the events
    end_ns: int
    duration_ns: int
    utc_start_ns: int | None = None  # TARGET_INFO_SESSION_START_TIME.utcEpochNs
    tables: tuple[str, ...] = ()
    span_source: str = "capture bounds"  # "cell range" | "ranks' cell ranges" | "process marks" | "capture bounds"
    #                                        | "events" | "none"
    span_note: str | None = None  # how the span was decided (why the capture bounds were not used)


def open_nsys_report(path) -> "NsysData":
    """Open a .sqlite export, or export a .nsys-rep/.qdrep with the installed nsys first (cached beside it)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ReportError(f"{p}: no such file")
    if p.is_dir():
        raise ReportError(f"{p}: is a folder; pass the .sqlite/.nsys-rep inside it or use open_report()")
    if not p.is_file():  # a pipe or a socket: reading it would block forever
        raise ReportError(f"{p}: not a regular file (a pipe, socket or device); pass the report file itself")
    if p.suffix.lower() == RAW_SUFFIX:
        return NsysData(export_report(import_raw(p)), source=p)
    if p.suffix.lower() in REP_SUFFIXES:
        return NsysData(export_report(p), source=p)
    return NsysData(p)


def import_raw(qdstrm: Path, timeout: float = 600) -> Path:
    """The .nsys-rep of a raw .qdstrm (what nsys leaves when it is stopped while writing, or when it cannot find
    its importer): `X.nsys-rep` beside it when newer, else imported with QdstrmImporter there (or into the
    private cache when that folder is not writable)."""
    from .. import tools

    beside = qdstrm.with_suffix(".nsys-rep")
    if beside.exists() and beside.stat().st_mtime >= qdstrm.stat().st_mtime:
        return beside
    out = beside if os.access(qdstrm.parent, os.W_OK) else _private_path(qdstrm, ".nsys-rep")
    if out.exists() and out.stat().st_mtime >= qdstrm.stat().st_mtime:
        return out
    try:
        return tools.import_qdstrm(qdstrm, tools.find_nsys(), timeout=timeout, out=out)
    except ReportError as e:
        raise ReportError(f"{e} (a .qdstrm is nsys's raw recording; one cut short while it was written cannot be "
                          f"imported)") from None


def export_report(rep: Path, timeout: float = 600) -> Path:
    """The .sqlite of a .nsys-rep/.qdrep: `X.sqlite` beside it when newer, else exported there (or into the
    private cache when that folder is not writable).  A failed export leaves no file behind."""
    from .. import tools

    beside = rep.with_suffix(".sqlite")
    if _export_of(beside, rep):
        return beside
    out = beside if os.access(rep.parent, os.W_OK) else _private_path(rep, ".sqlite")
    if _export_of(out, rep):
        return out
    nsys = tools.find_nsys()
    try:
        tools.export_sqlite(rep, nsys=nsys, out=out, timeout=timeout)
    except ReportError as e:
        raise ReportError(_explain_export_failure(rep, str(e), tools.nsys_version(nsys))) from None
    return out


def _export_of(sqlite_path: Path, rep: Path) -> bool:
    """Whether `sqlite_path` is taken as the export of `rep`: a regular file (a link could name another report's
    export, shown under this one's name), newer than the report, complete.  Otherwise the report is exported again
    (the new export replaces a link, never what it points to)."""
    try:
        st = os.lstat(sqlite_path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_mtime >= rep.stat().st_mtime and _is_complete(sqlite_path)


def _private_path(rep: Path, suffix: str) -> Path:
    """Where the export of a report in a folder we may not write goes: a cache only this user can write
    ($XDG_CACHE_HOME/nsight-magic/exports, mode 0700, checked to be ours), named after the report's path."""
    h = hashlib.sha1(str(rep.resolve()).encode()).hexdigest()[:16]
    return private_cache("exports") / f"{rep.stem}-{h}{suffix}"


def _read_error(path: Path, con, e: sqlite3.DatabaseError) -> BaseException:
    """What a failed read raises: Ctrl-C or the time limit when they stopped it, else a one-line ReportError."""
    got = con.stopped(path, e) if hasattr(con, "stopped") else None
    return got or ReportError(f"{path}: cannot read ({e}); re-export the report")


def _is_complete(sqlite_path: Path) -> bool:
    try:
        con, _ = connect(sqlite_path)
        con.close()
        return True
    except NsightMagicError:
        return False


_VERSION_RE = re.compile(rb"(20\d\d\.\d+\.\d+\.\d+)-[0-9a-f]{7,}")


def report_version(rep: Path) -> str | None:
    """nsys version that wrote a .nsys-rep/.qdrep, read from the container's header strings."""
    try:
        with open(rep, "rb") as f:
            m = _VERSION_RE.search(f.read(8 << 20))
    except OSError:
        return None
    return m.group(1).decode() if m else None


def _explain_export_failure(rep: Path, message: str, have: str) -> str:
    need = report_version(rep)
    from ..tools import version_tuple

    if need and version_tuple(need)[:2] > version_tuple(have)[:2]:
        return (f"{rep.name} was written by nsys {need}; the installed nsys {have} is too old to export it: "
                f"install nsys >= {'.'.join(need.split('.')[:2])} (or export it there with "
                f"`nsys export --type sqlite`)")
    if re.search(r"version number is invalid|protobuf|newer", message, re.I):
        return f"{rep.name} needs a newer nsys than {have}: {message}"
    return message


_RANK_MARK = re.compile(r"(?:^|:)rank (\d+) of (\d+)$")  # tag: "nsight-magic:rank 1 of 2"
_RANK_RANGE = re.compile(r" rank (\d+)$")  # the cell range of rank R > 0: "<profile name> rank R"


def _distinct_pairs(pid: pd.Series, device: pd.Series) -> pd.DataFrame:
    """The distinct (pid, device_id) pairs of a frame's rows: a hash of one int64 key per row when both fit (pids
    below 2**47, devices below 2**16; 10 ms for a million rows), else of the pairs (22 ms; np.unique(axis=0) sorts
    rows as records: 0.15 s for 160k)."""
    p, d = pid.to_numpy(), device.to_numpy()
    if p.dtype.kind == "i" and d.dtype.kind == "i" and len(p) and p.min() >= 0 and d.min() >= 0 \
            and p.max() < 2 ** 47 and d.max() < 2 ** 16:
        key = pd.unique((p.astype(np.int64) << 16) | d.astype(np.int64))
        return pd.DataFrame({"pid": key >> 16, "device_id": key & 0xFFFF})
    return pd.DataFrame({"pid": pid, "device_id": device}).drop_duplicates()


class NsysData:
    """An Nsight Systems export, read lazily into DataFrames (see module docstring and issue 3).  What can be done
    with it (findings, the view) is the facade's: nsight_magic.report.NsysReport."""

    tool = "nsys"   # which tool's report: what analysis and views tell the two kinds by

    def __init__(self, sqlite_path, source=None):
        self.sqlite_path = Path(sqlite_path)
        self.path = Path(source) if source else self.sqlite_path
        self._core_cache: dict[str, dict | None] = {}
        # (frame, column) -> the Series through which frames share a core column (_lend): held as long as the report
        self._lent: dict[tuple[str, str], pd.Series] = {}
        self._frame_jobs: dict[str, Future] = {}
        self._raw_spans: dict[str, tuple | None] = {}  # frame -> its core columns' nsys_frames.raw_span, once read
        self._con, self._tables = connect(self.sqlite_path)
        try:
            self._check_has_events()
            self.cached = self._load_cache()  # it also holds the events' span that the meta needs
        except BaseException:
            self.close()
            raise

    @functools.cached_property
    def meta(self) -> ReportMeta:
        """Version, capture span and session start of the report: made when first asked for, which is after the
        summaries' read has begun where one follows the open, so that the events' span comes from the columns it
        reads (event_span) rather than from scans of its own."""
        return self._read_meta()

    _CACHED = ("kernels", "memcpy", "memset", "cuda_api", "nvtx")

    def _load_cache(self) -> bool:
        """Take the core columns from the columnar cache beside the export (readers.nsys_cache), when valid."""
        from . import nsys_cache

        got = nsys_cache.load(self.sqlite_path)
        if got is None or not set(self._CACHED) <= set(got[0]) or not self._cache_agrees(*got):
            return False
        parts, extra = got
        for f in self._CORE:
            self._core_cache[f] = parts[f]
        if parts["nvtx"] is not None:
            self.__dict__["nvtx_arrays"] = parts["nvtx"]
            self.__dict__["nvtx_maxts"] = extra.get("nvtx_maxts")
        if isinstance(extra.get("event_span"), list) and len(extra["event_span"]) == 2:
            self.__dict__["event_span"] = tuple(extra["event_span"])
        return True

    def _cache_agrees(self, parts: dict, extra: dict) -> bool:
        """A cache is only what the export says faster: a frame it marks absent must be absent from the export,
        and its times pass the checks a read from the export passes (at most TS_LIMIT); else it is ignored (a
        planted or damaged cache; a profile made again writes a new one)."""
        for f in self._CORE:
            if parts.get(f) is None and find_spec_table(self._tables, S.ALL_SPECS[f]) is not None:
                return False
            for c in ("start_ns", "end_ns"):
                a = (parts.get(f) or {}).get(c)
                if a is None:
                    continue
                v = pd.to_numeric(pd.Series(a), errors="coerce")
                if (v.abs() > TS_LIMIT).any():
                    return False
                if c == "start_ns" and len(v) and v.isna().all():  # starts that are no numbers at all
                    return False
        span = extra.get("event_span")
        if span is not None and not (isinstance(span, list) and all(
                v is None or isinstance(v, int) and not isinstance(v, bool) and abs(v) <= TS_LIMIT for v in span)):
            return False
        return True

    def write_cache(self) -> Path | None:
        """Write the columnar cache of the core columns beside the export (done when a profile is made); returns
        its folder, or None when it could not be written."""
        from . import nsys_cache

        parts = {f: self.core(f) for f in self._CORE}
        nv = self.nvtx_arrays
        parts["nvtx"] = nv if len(nv["start"]) else None
        return nsys_cache.save(self.sqlite_path, parts, {"nvtx_maxts": self.nvtx_maxts,
                                                         "event_span": list(self.event_span)})

    def __repr__(self):
        m = self.meta
        return f"<{type(self).__name__} {self.path.name} nsys={m.nsys_version} {m.duration_ns / 1e9:.3f}s>"

    def close(self):
        if self._con is not None:
            if hasattr(self, "cached") and "meta" not in self.__dict__:  # opened: its meta stays readable closed
                try:
                    self.meta
                except Exception:  # noqa: BLE001 - a damaged report closes all the same; its reads said why
                    pass
            self._con.close()
            self._con = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_has_events(self):
        """An export with tables but not one event (nothing traced, or the program ended at once) is an error."""
        data = [t for t in self._tables if t.startswith(("CUPTI_ACTIVITY_KIND_", "NVTX_EVENTS", "OSRT_API"))
                or (t.endswith(("_EVENTS", "_EVENTS_V2", "_EVENTS_V3")) and not t.startswith("DIAGNOSTIC"))]
        for t in data:
            if self._query(lambda: self._con.execute(f'SELECT 1 FROM "{t}" LIMIT 1').fetchone()):
                return
        raise ReportError(f"{self.path}: empty capture (no CUDA, NVTX, OS runtime or sampling events); "
                          "check that the profiled code ran and that nsys traced its APIs (-t cuda,nvtx,osrt)")

    # -- reading ---------------------------------------------------------------------------------------------
    def _query(self, fn, *args):
        """Run a read; a damaged file becomes a one-line ReportError instead of an sqlite traceback."""
        if self._con is None:
            raise ReportError(f"{self.path}: report is closed")
        try:
            return fn(*args)
        except sqlite3.DatabaseError as e:
            raise _read_error(self.sqlite_path, self._con, e) from None

    @functools.cached_property
    def strings(self) -> Strings:
        if "strings" in self._core_cache:  # read in parallel with the core tables
            return self._core_cache["strings"].result()
        return self._query(Strings, self._con, self._tables)

    def _frame(self, name: str) -> pd.DataFrame:
        job = self._frame_jobs.pop(name, None)
        if job is not None:  # being read in a thread (prefetch)
            return job.result()
        return self._read_frame(name, self._con)

    def _read_frame(self, name: str, con) -> pd.DataFrame:
        # the core columns the summaries read (or are reading) are not read a second time
        have = self.core(name) if name in self._CORE and name in self._core_cache else None
        df = self._query(read_frame, con, self._tables, self.strings, S.ALL_SPECS[name], self.sqlite_path, have,
                         functools.partial(self._lend, name))
        return sort_by_start(df) if "start_ns" in df else df

    _PREFETCH = ("kernels", "memcpy", "memset", "graphs", "cuda_api", "osrt", "sync")

    def prefetch(self, *frames: str) -> None:
        """Start reading these frames (of `_PREFETCH`), each in a thread on a connection of its own, for the
        properties to take when asked: SQLite scans without the GIL, so a reader that needs several frames (the
        diagnosis) computes on the first while the others are read.  Frames already read or reading are left."""
        todo = [f for f in frames if f in self._PREFETCH and f not in self.__dict__ and f not in self._frame_jobs
                and find_spec_table(self._tables, S.ALL_SPECS[f]) is not None]
        if not todo or (os.cpu_count() or 1) == 1 or self._con is None:
            return
        if any(f in self._CORE and f not in self._core_cache for f in todo):
            self._prefetch_core()  # the core columns' reads start before any thread asks for them
        self.strings  # noqa: B018 - read once, here, rather than by several threads at once
        self._frame_jobs.update(self._in_threads([(f, lambda con, f=f: self._read_frame(f, con)) for f in todo],
                                                 min(len(todo), os.cpu_count() or 1)))

    def columns(self, frame: str, cols: list[str]) -> pd.DataFrame:
        """A few columns of an event frame (kernels, memcpy, memset, cuda_api, ...), decoded as the frame has them,
        without building the rest of it: the frame's own when it was read, else the core columns the summaries
        scanned plus a narrow read of the others.  Rows in the table's order, which the frame may sort (by start).
        For work that needs two columns of a table of a million rows; duration_ns is end_ns - start_ns."""
        from .nsys_frames import convert

        spec = S.ALL_SPECS[frame]
        by_name = {c.name: c for c in spec.cols}
        bad = [c for c in cols if c != "duration_ns" and (c not in by_name or by_name[c].how == "text")]
        if bad:
            raise OptionError(f"report.columns: {bad} are not integer or id columns of {frame!r}; use "
                              f"report.{frame}")
        if frame in self.__dict__:
            return self.__dict__[frame][cols]
        raw = list(dict.fromkeys((["start_ns", "end_ns"] if "duration_ns" in cols else [])
                                 + [c for c in cols if c != "duration_ns"]))
        core = (self.core(frame) if frame in self._CORE else None) or {}
        rest = [c for c in raw if c not in core]
        got = dict(zip(rest, self.narrow(spec, rest) or ())) if rest else {}
        if rest and not got:  # the table is absent
            return empty_frame(frame)[cols]
        out = {c: self._lend(frame, c, functools.partial(convert, self._con, self._tables, self.strings,
                                                          by_name[c], core[c])) if c in core else
               convert(self._con, self._tables, self.strings, by_name[c], got[c]) for c in raw}
        if "duration_ns" in cols:
            out["duration_ns"] = out["end_ns"] - out["start_ns"]
        # the core columns lent (no copy: the memo's operations at 10M kernels), the others made here
        return pd.DataFrame({c: out[c] for c in cols}, copy=False)

    def _lend(self, frame: str, col: str, make: Callable[[], Any]) -> pd.Series:
        """The core column `col` of `frame` as the frames have it (`make()`, once), in a Series that this report
        holds: every frame and columns() that use the column share its memory, and pandas' copy-on-write, seeing
        the Series, copies on an edit of one of them rather than writing into what the others (and the summaries)
        read."""
        got = self._lent.get((frame, col))
        if got is None:  # two threads may make it at once: the first kept serves both from then on
            # one value (a one-GPU run's process and GPU) held once: the Series kept here makes an edit copy it
            got = self._lent.setdefault((frame, col), pd.Series(one_value(make()), copy=False))
        return got

    def _table(self, name: str) -> str | None:
        return find_table(self._tables, name)

    def _read_meta(self) -> ReportMeta:
        kv: dict[str, str] = {}
        for t in S.META_TABLES:
            if t in self._tables:
                kv = dict(self._query(lambda: self._con.execute(f"SELECT name, value FROM {t}").fetchall()))
                break
        span = self.capture
        utc = None
        if "TARGET_INFO_SESSION_START_TIME" in self._tables:
            try:
                utc = self._con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
                utc = utc[0] if utc else None
            except sqlite3.DatabaseError:
                utc = None
        return ReportMeta(kv.get("EXPORT_PRODUCT_VERSION"), kv.get("EXPORT_SCHEMA_VERSION"), span.start_ns,
                          span.end_ns, span.duration_ns, utc, tuple(sorted(self._tables)), span.source, span.note)

    @functools.cached_property
    def capture(self) -> CaptureSpan:
        """The capture span (readers.capture_span): nsight-magic's cell range(s) or process marks in our reports,
        else the capture bounds where their clock is proven, else the events' span."""
        ranges, marks = self._own_rows()
        if ranges or marks:
            own = own_span(ranges, marks, self.event_span[1])
            if own is not None:
                return own
        bounds = None
        if "ANALYSIS_DETAILS" in self._tables:
            cols = set(columns_of(self._con, "ANALYSIS_DETAILS"))
            dur = "max(duration)" if "duration" in cols else "NULL"
            bounds = self._query(lambda: self._con.execute(
                f"SELECT min(startTime), max(stopTime), {dur} FROM ANALYSIS_DETAILS").fetchone())
        return foreign_span(bounds, self.event_span)

    def _own_rows(self) -> tuple[list, list]:
        """nsight-magic's rows in the NVTX table (its domain): the cell ranges [(pid, start, end or None)] and the
        marks [(pid, t, text)], read with SQL (a few rows; the NVTX frame is not needed for them)."""
        t = self._table("NVTX_EVENTS")
        if not t or not {"domainId", "eventType", "globalTid"} <= set(columns_of(self._con, t)):
            return [], []
        cols = set(columns_of(self._con, t))
        text = "coalesce(text, (SELECT value FROM StringIds WHERE id = textId))" if "textId" in cols and \
            "StringIds" in self._tables else "text"
        doms = self._query(lambda: self._con.execute(
            f'SELECT DISTINCT domainId, globalTid >> 24 FROM "{t}" WHERE eventType = {S.NVTX_DOMAIN_CREATE} '
            f"AND {text} = ?", (CAPTURE_DOMAIN,)).fetchall())
        if not doms:
            return [], []
        ranges, marks = [], []
        kinds = S.NVTX_PUSH_POP + S.NVTX_START_END + S.NVTX_MARK
        ids = ", ".join(str(int(d)) for d in {d for d, _ in doms})
        rows = self._query(lambda: self._con.execute(
            f'SELECT globalTid >> 24, start, "end", eventType, {text} FROM "{t}" WHERE domainId IN ({ids}) '
            f"AND eventType IN ({', '.join(map(str, kinds))})").fetchall())
        mine = {(int(d), int(p) & 0xFFFFFF) for d, p in doms}
        for gpid, start, end, et, label in rows:
            pid = int(gpid) & 0xFFFFFF
            if not any(p == pid for _, p in mine):
                continue
            if et in S.NVTX_MARK:
                marks.append((pid, int(start), label))
            elif start is not None:
                ranges.append((pid, int(start), None if end is None else int(end)))
        return ranges, marks

    def _event_tables(self) -> list[tuple[str, str, str]]:
        """(table, SQL condition, frame) of every table of timed events; NVTX without its registration rows (domain
        creation and the like carry timestamps from before the capture, even negative ones), OS runtime without
        nsys's start/stop markers."""
        out = []
        for spec in S.ACTIVITY_SPECS.values():
            t = find_spec_table(self._tables, spec)
            if t:
                out.append((t, spec.where or "1", spec.frame))
        t = self._table("NVTX_EVENTS")
        if t:
            kinds = ", ".join(map(str, S.NVTX_PUSH_POP + S.NVTX_START_END + S.NVTX_MARK))
            out.append((t, f"eventType IN ({kinds})", "nvtx"))
        return out

    @functools.cached_property
    def event_span(self) -> tuple[int | None, int | None]:
        """(first start, last end) over every timed event of the report, on its clock; (None, None) when none.

        A table whose core columns are being read, or were (the summaries'), gives its span from them
        (nsys_frames.raw_span, taken as read): a scan of its own cost about a sixth of the cold read.  The others
        are scanned in SQL, in parallel, meanwhile."""
        tables = self._event_tables()
        nvtx_read = "nvtx" in self._core_cache or "nvtx_arrays" in self.__dict__
        from_core = {t for t, _, f in tables if f in self._CORE and f in self._core_cache or f == "nvtx" and nvtx_read}
        scans = self._span_scans([(t, c) for t, c, _ in tables if t not in from_core])
        spans: dict[str, tuple | None] = {}
        for t, _, f in tables:
            if t in from_core:  # its read ends (and says what is wrong with the table, as a summary would)
                if f == "nvtx":
                    self.nvtx_arrays
                else:
                    self.core(f)
                spans[t] = self._raw_spans.get(f)
        late = self._span_scans([(t, c) for t, c, _ in tables if t in from_core and spans[t] is None])
        lo = hi = None
        for t, c, _ in tables:
            known = spans.get(t)
            if known is not None:
                a, b = known[0], known[1]
            else:  # scanned: its values checked as a read checks them
                a, b, *ends = self._query((scans.get(t) or late[t]).result)
                vals = [v for v in (a, b, *ends) if v is not None]
                if not all(isinstance(v, int) for v in vals) or any(abs(v) > TS_LIMIT for v in vals):
                    self._query(check_ints, self._con, t, ["start", '"end"' if "end" in columns_of(self._con, t)
                                                           else "start"], c, self.sqlite_path)
            if a is not None:
                lo = a if lo is None else min(lo, a)
            if b is not None:
                hi = b if hi is None else max(hi, b)
        return lo, hi

    def _span_scans(self, tables: list[tuple[str, str]]) -> dict[str, Future]:
        """What event_span asks of each (table, condition) in SQL, as futures by table: full scans of millions of
        rows, each on a connection of its own in parallel (done here, in order, where there is one core or one
        table)."""
        # on a recording's own clock, ranges opened before it began start below 0: the recording starts at 0
        sql = {t: f'SELECT min(CASE WHEN start >= 0 THEN start END), max(coalesce("end", start)), min(start), '
                  f'max(start) FROM "{t}" WHERE {c}' for t, c in tables}
        if len(sql) > 1 and (os.cpu_count() or 1) > 1:
            return self._in_threads([(t, lambda con, q=q: con.execute(q).fetchone()) for t, q in sql.items()],
                                    min(len(sql), os.cpu_count() or 1))
        out: dict[str, Future] = {}
        for t, q in sql.items():
            out[t] = Future()
            out[t].set_result(self._query(lambda q=q: self._con.execute(q).fetchone()))
        return out

    @property
    def time_span(self) -> CaptureSpan:
        """The capture span with the time origin and axis end that timelines and findings use: x = 0 is the
        capture start, the axis covers every event."""
        return self.capture.with_events(self.event_span)

    # -- frames ----------------------------------------------------------------------------------------------
    @functools.cached_property
    def kernels(self) -> pd.DataFrame:
        """GPU kernels; launch_tid is the thread of the runtime API call with the same (pid, correlation id)."""
        df = self._frame("kernels")
        if len(df) == 0:
            return df
        api = self.core("cuda_api")
        if api is None:
            df["launch_tid"] = pd.array([pd.NA] * len(df), dtype="Int64")
            return df
        df["launch_tid"] = launch_tids(df, api["pid"], api["tid"], api["correlation_id"])
        return df

    @functools.cached_property
    def memcpy(self) -> pd.DataFrame:
        """GPU copies: kind HtoD/DtoH/DtoD/HtoH/PtoP/...; src_kind/dst_kind pageable/pinned/device/managed/..."""
        return self._frame("memcpy")

    @functools.cached_property
    def memset(self) -> pd.DataFrame:
        return self._frame("memset")

    @functools.cached_property
    def graphs(self) -> pd.DataFrame:
        """CUDA graph launches as one GPU interval each (nsys's default --cuda-graph-trace=graph lists no kernels
        of a graph): start_ns, end_ns, device_id, stream_id, correlation_id, pid, graph_id."""
        return self._frame("graphs")

    @functools.cached_property
    def cuda_api(self) -> pd.DataFrame:
        """CUDA runtime/driver API calls (name as recorded, e.g. cudaLaunchKernel_v7000)."""
        return self._frame("cuda_api")

    @functools.cached_property
    def osrt(self) -> pd.DataFrame:
        """OS runtime calls of the profiled program; those our Python sampler caused are `instrument_waits`."""
        return self._osrt_split[0]

    @property
    def instrument_waits(self) -> pd.DataFrame:
        """OS runtime calls our own instruments caused or made (readers/instrument_waits.py): the program's
        threads waiting for the GIL while our sampler held it, and the sampler's own thread."""
        return self._osrt_split[1]

    @functools.cached_property
    def _osrt_split(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        from .instrument_waits import instrument_rows

        df = self._frame("osrt")
        if len(df) == 0:
            return df, df
        ps = self.python_samples
        ours = instrument_rows(df, ps.passes, ps.sampler_threads)
        if not ours.any():
            return df, df.iloc[:0]
        return df[~ours].reset_index(drop=True), df[ours].reset_index(drop=True)

    @functools.cached_property
    def sync(self) -> pd.DataFrame:
        return self._frame("sync")

    @functools.cached_property
    def overhead(self) -> pd.DataFrame:
        """nsys's own overhead intervals (PROFILER_OVERHEAD: buffer flushes...), with the thread they hit."""
        return self._frame("overhead")

    @functools.cached_property
    def cublas(self) -> pd.DataFrame:
        return self._frame("cublas")

    @functools.cached_property
    def cudnn(self) -> pd.DataFrame:
        return self._frame("cudnn")

    @functools.cached_property
    def nvtx_arrays(self):
        if "nvtx" in self._core_cache:  # read (and built) in parallel with the core tables
            return self._core_cache.pop("nvtx").result()
        return self._read_nvtx(self._con)

    def _read_nvtx(self, con):
        span: list = []  # the ranges' and marks' event span, from the columns read (event_span)
        kinds = ("eventType", tuple(S.NVTX_PUSH_POP + S.NVTX_START_END + S.NVTX_MARK))
        raw = self._query(read_frame, con, self._tables, self.strings, S.NVTX_RAW, self.sqlite_path, None, None,
                          span, kinds)
        self._raw_spans["nvtx"] = span[0] if span else None
        if "nvtx_maxts" not in self.__dict__:  # where ranges never closed end: the last NVTX start or end
            ends = raw["end_ns"].to_numpy(np.float64, na_value=np.nan)
            self.__dict__["nvtx_maxts"] = (None if len(raw) == 0 else
                                            int(max(raw["start_ns"].max(), np.nanmax(ends, initial=-np.inf))))
        if len(raw) == 0:  # no NVTX table, or an empty one
            return {k: np.empty(0, t) for k, t in (("start", np.int64), ("end", np.float64), ("tag", object),
                                                   ("kind", np.int8), ("is_range", bool), ("same_thread", bool),
                                                   ("has_domain", bool), ("pid", np.int64), ("tid", np.int64),
                                                   ("ours", bool))}
        return build_nvtx(raw, self.strings)

    @functools.cached_property
    def python_samples(self):
        """The Python call stacks sampled in the profiled process during the cell (readers/python_samples.py:
        samples, stacks, frames; empty when none were recorded), placed on this report's clock."""
        from .python_samples import empty_samples, read_python_samples

        _, marks = self._own_rows()
        try:
            return read_python_samples(self.path.parent, marks)
        except ReportError as e:  # an optional file: the report shows without it, saying so once
            said = f"{e}: the profile is shown without its Python samples"
            warnings.warn(said, ReportWarning, stacklevel=2)
            return empty_samples(problem=said)

    @functools.cached_property
    def subject(self) -> str:
        """What was profiled, as the words about it say: "the script" (`nsight-magic profile script.py`, run.json's
        script) or "the cell"."""
        try:
            cfg = json.loads((self.path.parent / "run.json").read_text())
            return "the script" if isinstance(cfg, dict) and cfg.get("script") else "the cell"
        except (OSError, ValueError):
            return "the cell"

    @functools.cached_property
    def gpu_metrics(self):
        """GPU metrics nsys sampled (`--gpu-metrics-devices`; readers/gpu_metrics.py): every sample, with the
        metrics' names and the known ones' keys; empty when none were recorded."""
        from .gpu_metrics import read_gpu_metrics

        return self._query(read_gpu_metrics, self._con, self._tables, self.sqlite_path)

    @functools.cached_property
    def gpu_memory(self):
        """GPU memory during the cell (readers/gpu_memory.py): torch's allocator history beside the export and
        nsys's record of device allocations (`--cuda-memory-usage`); empty when neither was recorded."""
        from .gpu_memory import read_gpu_memory

        t = self._table("CUDA_GPU_MEMORY_USAGE_EVENTS")
        raw = None
        if t:
            cols = ["start", "deviceId", "bytes", "memKind", "memoryOperationType"]
            # device memory only (host kinds left in SQL), as integer columns (a million events: no row objects)
            got = self._query(read_ints, self._con, t, cols, "memKind IN (2, 3, 4)", self.sqlite_path)
            raw = pd.DataFrame(dict(zip(cols, got)))
        gpus = self.gpus
        capacity = {int(i): int(m) for i, m in zip(gpus["id"], gpus["memory_bytes"]) if pd.notna(i) and pd.notna(m)}
        try:
            return read_gpu_memory(self.path.parent, self.meta.utc_start_ns, raw, capacity)
        except ReportError as e:  # a damaged snapshot (optional): nsys's own record still shows, said once
            said = f"{e}: the profile is shown without torch's memory history"
            warnings.warn(said, ReportWarning, stacklevel=2)
            return read_gpu_memory(self.path.parent, self.meta.utc_start_ns, raw, capacity, snapshots=False,
                                   problem=said)

    def memory_timeline(self) -> pd.DataFrame:
        """GPU memory in use over time: start_ns, device_id, bytes, allocated and reserved (where torch's
        allocator history was recorded), source ('torch' or 'nsys'); empty when memory was not recorded."""
        return self.gpu_memory.timeline

    @functools.cached_property
    def cell_range(self) -> tuple[int, int] | None:
        """(start, end) of nsight-magic's own cell range (domain nsight-magic) when the report has a closed one."""
        a = self.nvtx_arrays
        if not len(a["start"]):
            return None
        idx = np.flatnonzero(a["ours"] & a["is_range"] & ~np.isnan(a["end"]))
        return (int(a["start"][idx[0]]), int(a["end"][idx[0]])) if len(idx) else None

    @functools.cached_property
    def nvtx(self) -> pd.DataFrame:
        """NVTX ranges and marks: name, domain, kind (push_pop/start_end/mark), pid, tid, depth (ranges of the
        same thread open at its start), color as an integer ARGB value 0xAARRGGBB (NA when not set), label
        ('domain:name' when the row has a domain, else name: the `name` nvtx_summary() gives the row's range).
        Marks have NA end_ns; ranges never closed have NA end_ns too."""
        a = self.nvtx_arrays
        return nvtx_frame(a) if len(a["start"]) else empty_frame("nvtx")

    @functools.cached_property
    def threads(self) -> pd.DataFrame:
        return self._frame("threads")

    @functools.cached_property
    def processes(self) -> pd.DataFrame:
        """Processes: pid, name, rank and world_size (known for %%nsys --nproc profiles: each rank marks itself in
        nsight-magic's NVTX domain; NA otherwise), devices (the GPUs its kernels, copies and memsets ran on).
        Processes that appear in the activity tables but not in PROCESSES get a row with an NA name."""
        df = self._frame("processes").drop_duplicates("pid").reset_index(drop=True)
        ranks = self.ranks_by_pid
        devices = self._devices_by_pid
        seen = set(devices) | set(ranks)
        missing = sorted(p for p in seen if p not in set(df["pid"].tolist()))
        if missing:
            df = pd.concat([df, pd.DataFrame({"pid": np.array(missing, np.int64),
                                              "name": pd.array([pd.NA] * len(missing), dtype="string")})],
                           ignore_index=True)
        pids = df["pid"].to_numpy(np.int64)
        df["rank"] = pd.array([ranks.get(int(p), (None, None))[0] for p in pids], dtype="Int64")
        df["world_size"] = pd.array([ranks.get(int(p), (None, None))[1] for p in pids], dtype="Int64")
        df["devices"] = pd.Series([devices.get(int(p), ()) for p in pids], dtype=object)
        return df

    @functools.cached_property
    def ranks_by_pid(self) -> dict[int, tuple[int, int]]:
        """pid -> (rank, world size) of %%nsys --nproc profiles: the "rank R of W" marks each rank leaves in
        nsight-magic's NVTX domain, else its cell range's name (rank R > 0 pushes "<profile> rank R", rank 0 the
        profile's own name: a rank killed early may have left no mark that was recorded)."""
        a = self.nvtx_arrays
        if not len(a["start"]):
            return {}
        ours = a["ours"]
        out: dict[int, tuple[int, int]] = {}
        for pid, tag in zip(a["pid"][ours & ~a["is_range"]], a["tag"][ours & ~a["is_range"]]):
            m = _RANK_MARK.search(str(tag))
            if m:
                out[int(pid)] = (int(m.group(1)), int(m.group(2)))
        named: dict[int, int | None] = {}
        for pid, name in zip(a["pid"][ours & a["is_range"]], a["name"][ours & a["is_range"]]):
            m = _RANK_RANGE.search(str(name))
            named.setdefault(int(pid), int(m.group(1)) if m else None)
        if any(r is not None for r in named.values()):  # a multi-rank report: the unsuffixed range is rank 0's
            world = max([w for _, w in out.values()] + [r + 1 for r in named.values() if r is not None])
            for pid, r in named.items():
                out.setdefault(pid, (0 if r is None else r, world))
        return out

    @functools.cached_property
    def _devices_by_pid(self) -> dict[int, tuple[int, ...]]:
        pairs = []
        for frame in ("kernels", "memcpy", "memset"):
            got = self.columns(frame, ["pid", "device_id"])  # the frame's own columns once it is read
            if len(got):
                pairs.append(_distinct_pairs(got["pid"], got["device_id"]))
        if not pairs:
            return {}
        both = pd.concat(pairs).drop_duplicates().sort_values(["pid", "device_id"])
        out: dict[int, tuple[int, ...]] = {}
        for pid, dev in zip(both["pid"].tolist(), both["device_id"].tolist()):
            out[pid] = out.get(pid, ()) + (dev,)
        return out

    @functools.cached_property
    def gpus(self) -> pd.DataFrame:
        """GPUs from TARGET_INFO_GPU (or TARGET_INFO_CUDA_GPU before 2021); when the report has neither, the
        device ids seen in GPU activity, with NA names."""
        df = self._frame("gpus")
        if len(df):
            return df.drop_duplicates("id").sort_values("id").reset_index(drop=True)
        ids = set()
        for name in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            t = self._table(name)
            if t:
                ids |= {r[0] for r in self._query(lambda: self._con.execute(
                    f'SELECT DISTINCT deviceId FROM "{t}"').fetchall())}
        if not ids:
            return df
        out = empty_frame("gpus").reindex(range(len(ids)))
        out["id"] = np.array(sorted(ids), np.int64)
        return out

    def decode(self, enum: str, ids: np.ndarray) -> np.ndarray:
        """An ENUM's integer ids (nsys_schema.ENUMS) as our labels, an object array."""
        from .nsys_sql import decode_enum

        return np.asarray(self._query(decode_enum, self._con, self._tables, enum, ids), dtype=object)

    def memcpy_labels(self) -> dict[str, str]:
        """Our memcpy kind -> the label in the report's own ENUM_CUDA_MEMCPY_OPER (what nsys 2023.3+ prints)."""
        table = S.ENUMS["memcpy_kind"][0]
        if table not in self._tables or "label" not in columns_of(self._con, table):
            return {}
        rows = self._query(lambda: self._con.execute(
            f'SELECT id, label FROM "{table}" WHERE typeof(id) = \'integer\'').fetchall())  # odd ids: decode_enum says
        ids = np.array([r[0] for r in rows], np.int64)
        kinds = self.decode("memcpy_kind", ids)
        return {k: str(lab) for k, (_, lab) in zip(kinds, rows) if lab is not None}


    # -- the core columns -------------------------------------------------------------------------------------
    # what the summaries (readers.nsys_tables) read: integer ids and times of a few columns, not the frames
    def narrow(self, spec: S.TableSpec, cols: list[str]) -> list[np.ndarray] | None:
        """Raw integer columns of a spec's table by our column names; None when the table is absent."""
        from .nsys_frames import read_raw
        from .nsys_sql import find_spec_table

        table = find_spec_table(self._tables, spec)
        if table is None:
            return None
        got = self._query(read_raw, self._con, table, spec, cols, self.sqlite_path)
        return [got[c] for c in cols]

    # columns the summaries and the NVTX projection share: one scan of each table.  The GPU operations' device_id
    # too: the summaries by device and the diagnosis's operations (analysis.bottleneck) need it, and the diagnosis
    # then starts without waiting for the whole kernels frame, which it reads meanwhile
    _CORE = {
        "kernels": ["start_ns", "end_ns", "pid", "correlation_id", "name", "device_id"],
        "memcpy": ["start_ns", "end_ns", "pid", "correlation_id", "kind", "bytes", "device_id"],
        "memset": ["start_ns", "end_ns", "pid", "correlation_id", "bytes", "device_id"],
        "cuda_api": ["start_ns", "end_ns", "pid", "tid", "correlation_id", "name"],
    }

    def core(self, frame: str) -> dict[str, np.ndarray] | None:
        """Raw integer columns (ids undecoded) of a table, by our column names; None when the table is absent.

        The first call reads every core table at once, each on its own read-only connection in a thread of its
        own: SQLite releases the GIL while it scans, so the tables are read in parallel (the summaries and the NVTX
        projection need all of them; a view asks for all four summaries)."""
        if frame not in self._core_cache:
            self._prefetch_core()
        got = self._core_cache[frame]
        return got.result() if isinstance(got, Future) else got

    def _prefetch_core(self) -> None:
        todo = [f for f in self._CORE if f not in self._core_cache]
        tables = {f: find_spec_table(self._tables, S.ALL_SPECS[f]) for f in todo}
        for f in todo:
            if tables[f] is None:
                self._core_cache[f] = None
        todo = [f for f in todo if tables[f] is not None]
        if not todo:
            return
        if len(todo) == 1 or (os.cpu_count() or 1) == 1:
            for f in todo:
                self._core_cache[f] = self._read_core(f, tables[f], self._con)
            return
        # in the order the summaries use them, so that each summary computes while later tables are still read
        jobs = [("strings", lambda con: Strings(con, self._tables))] if "strings" not in self.__dict__ else []
        jobs += [(f, lambda con, f=f: self._read_core(f, tables[f], con)) for f in todo]
        if "nvtx_arrays" not in self.__dict__ and find_spec_table(self._tables, S.NVTX_RAW):
            jobs.append(("nvtx", self._read_nvtx))
        futures = self._in_threads(jobs, min(len(todo) + 1, os.cpu_count() or 1))
        self._core_cache.update(futures)
        _trim_when_done(list(futures.values()))

    def _in_threads(self, jobs: list, workers: int) -> dict[str, Future]:
        """Each (key, fn) of `jobs` started as fn(connection) in a pool of `workers` threads (_in_thread); their
        futures by key.  The pool ends by itself once the last job has run."""
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nsight-magic-read")
        futures = {key: pool.submit(self._in_thread, fn) for key, fn in jobs}
        pool.shutdown(wait=False)
        return futures

    def _in_thread(self, fn):
        """fn(connection) on a read-only connection of its own (SQLite connections are not shared by threads)."""
        con = None
        try:
            con = open_ro(self.sqlite_path)
            return fn(con)
        except sqlite3.DatabaseError as e:
            raise _read_error(self.sqlite_path, con, e) from None
        finally:
            if con is not None:
                con.close()

    def _read_core(self, frame: str, table: str, con) -> dict[str, np.ndarray]:
        from .nsys_frames import read_raw

        span: list = []  # the table's event span, from the columns read (event_span)
        got = self._query(read_raw, con, table, S.ALL_SPECS[frame], self._CORE[frame], self.sqlite_path, None, span)
        self._raw_spans[frame] = span[0] if span else None
        return {c: got[c] for c in self._CORE[frame]}

    @functools.cached_property
    def nvtx_maxts(self) -> int | None:
        """Where nsys ends ranges never closed: the last NVTX start or end (of any NVTX row)."""
        self.nvtx_arrays  # reading the NVTX rows sets it
        return self.__dict__.get("nvtx_maxts")

    # -- summaries (readers.nsys_tables: each equal to an `nsys stats` report) ---------------------------------
    @functools.cached_property
    def summaries(self) -> NsysSummaries:
        # through a weak reference: a cycle would keep a dropped report's arrays until the next garbage collection
        return NsysSummaries(weakref.proxy(self))

    def kernel_summary(self, base: bool = False, by_launch: bool = False, by: str | None = None) -> pd.DataFrame:
        """Per kernel name, as `nsys stats --report cuda_gpu_kern_sum` (NsysSummaries.kernel)."""
        return self.summaries.kernel(base, by_launch, by)

    def memcpy_summary(self, by: str | None = None) -> pd.DataFrame:
        """Per memory operation, as gpumemtimesum + gpumemsizesum (NsysSummaries.memcpy)."""
        return self.summaries.memcpy(by)

    def cuda_api_summary(self, by: str | None = None) -> pd.DataFrame:
        """Per CUDA API function, as cudaapisum/cuda_api_sum (NsysSummaries.cuda_api)."""
        return self.summaries.cuda_api(by)

    def nvtx_summary(self, by: str | None = None) -> pd.DataFrame:
        """Per NVTX range name and style, as nvtxsum/nvtx_sum, plus gpu_ns and gpu_ops (NsysSummaries.nvtx)."""
        return self.summaries.nvtx(by)

    def nvtx_gpu_projection(self) -> pd.DataFrame:
        """One row per NVTX range that launched GPU work, as nvtxgpuproj (NsysSummaries.nvtx_gpu_projection)."""
        return self.summaries.nvtx_gpu_projection()

    def gpu_utilization(self, bins: int = 200) -> pd.DataFrame:
        """Per GPU and time bin, the busy fraction (NsysSummaries.gpu_utilization)."""
        return self.summaries.gpu_utilization(bins)


def _trim_when_done(futures: list[Future]) -> None:
    """Once the last of these reads ends, the heap their threads grew goes back to the system: each reading thread
    allocates from an arena of its own, which keeps the read's freed transients resident (at 10M kernels 0.5 GB,
    and what the NVTX summary then builds came on top of them)."""
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_: Future) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            give_back_freed_memory()

    for f in futures:
        f.add_done_callback(one_done)
