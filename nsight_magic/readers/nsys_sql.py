"""Low-level reading of Nsight Systems SQLite exports: open/validate, find tables, read columns fast.

Integer columns are read with `group_concat` in SQLite and parsed by numpy (3-4x faster than fetching
Python tuples, and the transient memory is one string per column and chunk instead of a tuple per row).
"""
from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import ReportError
from .nsys_schema import ENUM_PREFIXES, ENUMS, TableSpec

NULL = -(2**63) + 1  # stands for SQL NULL while integers travel as text
CHUNK_ROWS = 1 << 19

# Tables whose presence says "this is an Nsight Systems export"; at least one of the event/meta tables must exist
# besides StringIds for the file to be a complete export.
NSYS_MARKERS = ("StringIds", "ThreadNames", "TARGET_INFO_SESSION_START_TIME", "ProcessStreams")
COMPLETE_MARKERS = ("META_DATA_EXPORT", "EXPORT_META_DATA", "ANALYSIS_DETAILS", "CUPTI_ACTIVITY_KIND_RUNTIME",
                    "CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS", "OSRT_API", "PROFILER_OVERHEAD")


def connect(path: Path) -> tuple[sqlite3.Connection, set[str]]:
    """Open read-only and check it is a complete nsys export; returns the connection and its table names."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError as e:
        raise ReportError(f"{path}: cannot read ({e.strerror})") from None
    if not head:
        raise ReportError(f"{path}: empty file (0 bytes); the export or the copy did not finish")
    if head != b"SQLite format 3\x00":
        raise ReportError(f"{path}: not an SQLite file; pass an nsys export (.sqlite) or a .nsys-rep/.qdrep")
    uri = path.resolve().as_uri() + "?mode=ro"
    try:
        con = sqlite3.connect(uri, uri=True, check_same_thread=False)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    except sqlite3.DatabaseError as e:
        raise ReportError(f"{path}: damaged SQLite file ({e}); re-export it with `nsys export --type sqlite`") from None
    reexport = "re-export the report with `nsys export --type sqlite --force-overwrite true REPORT.nsys-rep`"
    if "StringIds" not in tables or not any(t in tables for t in NSYS_MARKERS[1:]):
        con.close()
        missing = ["no StringIds table"] if "StringIds" not in tables else []
        if not any(t in tables for t in NSYS_MARKERS[1:]):
            missing.append(f"none of {', '.join(NSYS_MARKERS[1:])} (every export has one)")
        has = f"{len(tables)} table{'s' if len(tables) != 1 else ''}" + (
            ", StringIds among them" if "StringIds" in tables else "")
        raise ReportError(f"{path}: an SQLite file, but not an Nsight Systems export: {' and '.join(missing)} "
                          f"({has}); pass an nsys export, or {reexport}")
    if not any(t in tables or find_table(tables, t) for t in COMPLETE_MARKERS):
        con.close()
        raise ReportError(
            f"{path}: incomplete Nsight Systems export: none of the meta-data, analysis or event tables "
            f"({', '.join(COMPLETE_MARKERS[:3])}, CUPTI_ACTIVITY_KIND_*, NVTX_EVENTS, OSRT_API) is there, only "
            f"{len(tables)} tables: the export was cut short; {reexport}"
        )
    return con, tables


def find_table(tables: set[str], name: str) -> str | None:
    """`name` itself, else the highest versioned variant `name_V<n>` (newer exports suffix some tables)."""
    if name in tables:
        return name
    pat = re.compile(re.escape(name) + r"_V(\d+)$")
    found = sorted(((int(m.group(1)), t) for t in tables if (m := pat.match(t))), reverse=True)
    return found[0][1] if found else None


def find_spec_table(tables: set[str], spec: TableSpec) -> str | None:
    for name in spec.tables:
        t = find_table(tables, name)
        if t:
            return t
    return None


def columns_of(con, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


def read_ints(con, table: str, exprs: list[str], where: str | None = None, path: Path | None = None
              ) -> list[np.ndarray]:
    """Integer SQL expressions over `table`, in rowid order, as int64 arrays (NULL -> `NULL`).

    With `path` (the database file) and ADBC's SQLite driver installed, the columns travel as Arrow arrays, about
    twice as fast and without holding the GIL; anything ADBC cannot type as int64 falls back to the text path."""
    if path is not None and exprs:
        got = _read_ints_adbc(path, table, exprs, where)
        if got is not None:
            return got
    cond = f" AND ({where})" if where else ""
    lo, hi = con.execute(f'SELECT min(rowid), max(rowid) FROM "{table}"').fetchone()
    if lo is None:
        return [np.empty(0, np.int64) for _ in exprs]
    sel = ", ".join(f"group_concat(ifnull({e}, {NULL}))" for e in exprs)
    sql = f'SELECT {sel} FROM "{table}" WHERE rowid >= ? AND rowid < ?{cond}'
    parts: list[list[np.ndarray]] = [[] for _ in exprs]
    for a in range(lo, hi + 1, CHUNK_ROWS):  # chunks bound the transient text to a few MB per column
        for i, s in enumerate(con.execute(sql, (a, a + CHUNK_ROWS)).fetchone()):
            if s:
                parts[i].append(np.fromstring(s, dtype=np.int64, sep=","))
    return [np.concatenate(p) if p else np.empty(0, np.int64) for p in parts]


def _read_ints_adbc(path: Path, table: str, exprs: list[str], where: str | None) -> list[np.ndarray] | None:
    try:
        import adbc_driver_sqlite.dbapi as adbc
    except ImportError:
        return None
    cond = f" WHERE {where}" if where else ""
    sel = ", ".join(f"ifnull({e}, {NULL}) AS c{i}" for i, e in enumerate(exprs))
    try:
        with adbc.connect(Path(path).resolve().as_uri() + "?mode=ro") as con, con.cursor() as cur:
            cur.execute(f'SELECT {sel} FROM "{table}"{cond} ORDER BY rowid')
            t = cur.fetch_arrow_table()
    except Exception:  # a value ADBC cannot read as int64 (its types come from the first rows): the text path
        return None
    out = []
    for col in t.columns:
        if str(col.type) != "int64" or col.null_count:
            return None
        out.append(col.to_numpy())
    return out


_US, _NUL = "\x1f", "\x1e"  # ASCII unit separator between values, record separator standing for NULL


def read_texts(con, table: str, expr: str, where: str | None = None) -> np.ndarray:
    """A text column in rowid order as an object array (None for NULL).

    Fetched as one string joined in SQLite and split in C; when a value itself holds the separator (the
    count does not match) it falls back to fetching rows."""
    cond = f" WHERE {where}" if where else ""
    n, joined = con.execute(
        f"SELECT count(*), group_concat(ifnull({expr}, char(30)), char(31)) "
        f'FROM (SELECT {expr} FROM "{table}"{cond} ORDER BY rowid)').fetchone()
    if n == 0:
        return np.empty(0, dtype=object)
    parts = joined.split(_US)
    if len(parts) == n:
        arr = np.array(parts, dtype=object)
        arr[arr == _NUL] = None
        return arr
    rows = con.execute(f'SELECT {expr} FROM "{table}"{cond} ORDER BY rowid').fetchall()
    return np.array([r[0] for r in rows], dtype=object)


class Strings:
    """StringIds: id -> text, decoded column-wise into pandas Categoricals."""

    def __init__(self, con, tables: set[str]):
        if "StringIds" in tables:
            rows = con.execute("SELECT id, value FROM StringIds").fetchall()
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            self._s = pd.Series(np.array([r[1] for r in rows], dtype=object), index=ids, dtype=object)
        else:
            self._s = pd.Series([], dtype=object)

    def decode(self, ids: np.ndarray) -> pd.Categorical:
        uniq, inv = np.unique(ids, return_inverse=True)
        return _categorical(self._s.reindex(uniq).to_numpy(object), inv)

    def lookup(self, ids) -> np.ndarray:
        return self._s.reindex(np.asarray(ids, np.int64)).to_numpy(object)


def to_categorical(values) -> pd.Categorical:
    """Categorical with plain-object categories (no Arrow string conversion: several times faster)."""
    codes, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
    return pd.Categorical.from_codes(np.asarray(codes), categories=pd.Index(uniques, dtype=object))


def _categorical(labels: np.ndarray, inv: np.ndarray) -> pd.Categorical:
    """Categorical whose row i is labels[inv[i]] (labels may repeat or be None)."""
    codes, cats = pd.factorize(pd.Series(labels, dtype=object), use_na_sentinel=True)
    codes = np.asarray(codes)
    rows = codes[inv] if len(inv) else np.empty(0, np.int64)
    return pd.Categorical.from_codes(rows, categories=pd.Index(cats, dtype=object))


def decode_enum(con, tables: set[str], key: str, ids: np.ndarray) -> pd.Categorical:
    """ENUM ids -> labels: our fallback spelling for ids we know, else the report's ENUM table, else 'id N'."""
    table, fallback = ENUMS[key]
    from_report: dict[int, str] = {}
    if table in tables:
        prefix = ENUM_PREFIXES.get(key, "")
        for i, name in con.execute(f'SELECT id, name FROM "{table}"'):
            from_report[int(i)] = str(name).removeprefix(prefix)
    uniq, inv = np.unique(ids, return_inverse=True)
    labels = np.array([None if u == NULL else fallback.get(int(u), from_report.get(int(u), f"id {u}"))
                       for u in uniq.tolist()], dtype=object)  # one per distinct id, not per row
    return _categorical(labels, inv)
