"""Low-level reading of Nsight Systems SQLite exports: open/validate, find tables, read columns fast.

Integer columns are read with `group_concat` in SQLite and parsed by numpy (3-4x faster than fetching
Python tuples, and the transient memory is one string per column and chunk instead of a tuple per row).
"""
from __future__ import annotations

import functools
import os
import re
import sqlite3
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..errors import ReportError, ReportWarning
from ..settings import setting
from .nsys_schema import ENUM_PREFIXES, ENUMS, TableSpec

NULL = -(2**63) + 1  # stands for SQL NULL while integers travel as text
# No recording's clock goes this far (36 years in ns) either way; a timestamp beyond it is damage, and it would
# overflow the sums, differences and float conversions downstream
TS_LIMIT = 1 << 60
CHUNK_ROWS = 1 << 19

# Tables whose presence says "this is an Nsight Systems export"; at least one of the event/meta tables must exist
# besides StringIds for the file to be a complete export.
NSYS_MARKERS = ("StringIds", "ThreadNames", "TARGET_INFO_SESSION_START_TIME", "ProcessStreams")
COMPLETE_MARKERS = ("META_DATA_EXPORT", "EXPORT_META_DATA", "ANALYSIS_DETAILS", "CUPTI_ACTIVITY_KIND_RUNTIME",
                    "CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS", "OSRT_API", "PROFILER_OVERHEAD")


# A report is data: no query may run longer than this (a table is bounded; only a planted view or a damaged file
# makes a read endless), and Ctrl-C stops a query between SQLite's steps.
def query_limit_s() -> float:
    """The seconds a statement may run (settings: query_limit_s, else NSIGHT_MAGIC_QUERY_LIMIT_S, else
    settings.QUERY_LIMIT_S), as they are when a report is opened: set in a running kernel, it applies to the next
    report."""
    return float(setting("query_limit_s"))


_STEPS = 20_000  # SQLite VM steps between two checks (a few ms)


class ReadOnly(sqlite3.Connection):
    """A report's connection: read-only, untrusted schema, each statement bounded in time and stoppable by Ctrl-C.

    SQLite calls the progress handler every few thousand steps; returning 1 aborts the statement with
    "interrupted", and `stopped()` says why (Ctrl-C or the time limit) so the caller raises the right error."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.why: str | None = None
        self._t0 = time.monotonic()
        self.limit_s = query_limit_s()
        # a string that is not UTF-8 (a damaged or planted name) reads with U+FFFD instead of failing the report
        self.text_factory = functools.partial(str, encoding="utf-8", errors="replace")  # C calls only: fast
        self.execute("PRAGMA query_only = ON")
        self.execute("PRAGMA trusted_schema = OFF")
        self.set_progress_handler(self._progress, _STEPS)

    def _progress(self) -> int:
        try:
            if time.monotonic() - self._t0 > self.limit_s:
                self.why = "limit"
                return 1
            return 0
        except KeyboardInterrupt:  # a signal is raised in Python code: here, between SQLite's steps
            self.why = "interrupt"
            return 1

    def execute(self, *args):
        self._t0, self.why = time.monotonic(), None
        return super().execute(*args)

    def stopped(self, path, e: BaseException) -> BaseException | None:
        """The error to raise for `e` when our handler stopped the statement, else None."""
        if not (isinstance(e, sqlite3.OperationalError) and "interrupt" in str(e)):
            return None
        if self.why == "limit":
            return ReportError(f"{path}: a query ran past {self.limit_s:g} s and was stopped; the report may be "
                               "damaged or planted: re-export it (%config NsightMagics.query_limit_s or "
                               "NSIGHT_MAGIC_QUERY_LIMIT_S raises the limit)")
        return KeyboardInterrupt()  # Ctrl-C (also when it came before our handler's try)


def open_ro(path: Path) -> ReadOnly:
    """A read-only connection to a report file (see ReadOnly)."""
    return sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True, check_same_thread=False,
                           factory=ReadOnly)


def refuse_code(con: sqlite3.Connection, path, schema: str = "main") -> None:
    """A report holding views, triggers, virtual tables or virtual generated columns is refused: an export holds
    plain tables only, and SQLite would run their code when we read a view or write a merge (an endless view, a
    trigger deleting rows, a column computing 60 MB per row)."""
    rows = con.execute(f"SELECT type, name FROM {schema}.sqlite_master WHERE type IN ('view', 'trigger') "
                       "ORDER BY type, name").fetchall()
    if rows:
        what = ", ".join(f"{t} {n!r}" for t, n in rows[:3]) + (f" and {len(rows) - 3} more" if len(rows) > 3 else "")
        raise ReportError(f"{path}: holds {what}: an Nsight Systems export holds tables only and a report is read "
                          "as data, never as code; re-export it from its .nsys-rep")
    # a table whose rows are computed when read (a virtual table, a virtual generated column: one expression can
    # cost seconds per row, inside one SQLite call that Ctrl-C cannot stop) is code too
    tables = con.execute(f"SELECT name, sql FROM {schema}.sqlite_master WHERE type = 'table'").fetchall()
    for name, sql in tables:
        if (sql or "").lstrip()[:20].upper().replace(" ", "").startswith("CREATEVIRTUALTABLE"):
            raise ReportError(f"{path}: table {name!r} is a virtual table (computed when read): an Nsight Systems "
                              "export holds plain tables only; re-export it from its .nsys-rep")
        computed = [r[1] for r in con.execute(f'PRAGMA {schema}.table_xinfo("{name}")') if r[6] == 2]
        if computed:
            raise ReportError(f"{path}: column {computed[0]!r} of table {name!r} is computed when read (a generated "
                              "column): an Nsight Systems export stores its values; re-export it from its .nsys-rep")


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
    con = None
    try:
        con = open_ro(path)
        refuse_code(con, path)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except ReportError:
        con.close()
        raise
    except sqlite3.DatabaseError as e:
        stopped = con.stopped(path, e) if con is not None else None
        if con is not None:
            con.close()
        raise stopped or ReportError(
            f"{path}: damaged SQLite file ({e}); re-export it with `nsys export --type sqlite`") from None
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
        got = _read_ints_adbc(con, path, table, exprs, where)
        if got is not None:
            return got
    cond = f" AND ({where})" if where else ""
    lo, hi = rowid_ends(con, table)
    if lo is None:
        return [np.empty(0, np.int64) for _ in exprs]
    sel = ", ".join(f"group_concat(ifnull({e}, {NULL}))" for e in exprs)
    sql = f'SELECT {sel} FROM "{table}" WHERE rowid >= ? AND rowid < ?{cond}'
    parts: list[list[np.ndarray]] = [[] for _ in exprs]
    for a in range(lo, hi + 1, CHUNK_ROWS):  # chunks bound the transient text to a few MB per column
        for i, s in enumerate(con.execute(sql, (a, a + CHUNK_ROWS)).fetchone()):
            if s:
                try:
                    parts[i].append(np.fromstring(s, dtype=np.int64, sep=","))
                except (ValueError, TypeError):  # text, a blob or a real among the integers: say where
                    check_ints(con, table, [exprs[i]], where, path)
                    raise
    return [np.concatenate(p) if p else np.empty(0, np.int64) for p in parts]


def rowid_ends(con, table: str) -> tuple[int | None, int | None]:
    """The table's first and last rowid, read from the b-tree's two ends (one aggregate per SELECT: SQLite scans
    the whole table for `SELECT min(rowid), max(rowid)`)."""
    return con.execute(f'SELECT (SELECT min(rowid) FROM "{table}"), (SELECT max(rowid) FROM "{table}")').fetchone()


def check_ints(con, table: str, exprs: list[str], where: str | None = None, path=None) -> None:
    """A ReportError naming the first of `exprs` over `table` (the columns it reads first) that holds a value other
    than an integer or NULL, or a timestamp beyond any recording's clock."""
    cond = f" AND ({where})" if where else ""

    def typed(x: str) -> None:
        row = con.execute(f'SELECT rowid, typeof({x}) FROM "{table}" WHERE typeof({x}) NOT IN (\'integer\', '
                          f"'null'){cond} LIMIT 1").fetchone()
        if row:
            raise ReportError(f"{path or 'report'}: {table}.{x.strip(chr(34))} holds a {row[1]} value (row "
                              f"{row[0]}) where nsys writes integers: the report was damaged or altered; "
                              "re-export it from its .nsys-rep")

    for e in exprs:
        cols = re.findall(r'"(\w+)"', e) or ([e] if re.fullmatch(r"\w+", e) else [])
        for c in cols:  # an expression such as `"end" - "start"` is named by its columns
            typed(f'"{c}"')
        check_range(con, table, [c for c in cols if c in ("start", "end")], where, path)
        typed(e)


def check_range(con, table: str, cols: list[str], where: str | None = None, path=None) -> None:
    """A ReportError naming the first timestamp of `cols` over `table` beyond any recording's clock (TS_LIMIT)."""
    cond = f" AND ({where})" if where else ""
    for c in cols:
        c = c if c.startswith('"') else f'"{c}"'
        row = con.execute(f'SELECT rowid, {c} FROM "{table}" WHERE ({c} > {TS_LIMIT} OR {c} < -{TS_LIMIT}){cond} '
                          'LIMIT 1').fetchone()
        if row:
            raise ReportError(f"{path or 'report'}: {table}.{c.strip(chr(34))} holds {row[1]} (row {row[0]}), "
                              f"beyond any recording's clock (|t| > 2^60 ns, 36 years): the report was damaged or "
                              "altered; re-export it from its .nsys-rep")


# Raw reads of big tables go in rowid ranges over several connections at once: SQLite decodes rows on one core
# per connection, and ADBC hands back Arrow without holding the GIL (1M kernels, 18 columns: 0.76 s on one
# connection, 0.40 s on two, on a 2-core machine).
PARALLEL_MIN_ROWS = 200_000  # below this a connection's set-up costs more than the split saves
PARALLEL_MAX = 8


def _adbc_ranges(con, path: Path, table: str, sel: str, where: str | None,
                 each: Callable[[Any, int], Any]) -> list | None:
    """`SELECT sel FROM table [WHERE where]` in rowid order through ADBC, in rowid ranges each read on a connection
    of its own: `each(cursor, first)` takes a range's executed cursor and the range's first rowid (its rows have
    rowids from there on, fewer where `where` skips some).  Returns what it gave per range (None: ADBC is not
    installed, or could not read the values)."""
    try:
        import adbc_driver_sqlite.dbapi as adbc
    except ImportError:
        return None
    from concurrent.futures import ThreadPoolExecutor

    uri = Path(path).resolve().as_uri() + "?mode=ro"
    cond = f" AND ({where})" if where else ""
    lo, hi = rowid_ends(con, table)
    if lo is None:
        return []

    def part(a: int, b: int, whole: bool):
        rows = (f" WHERE {where}" if where else "") if whole else f" WHERE rowid >= {a} AND rowid < {b}{cond}"
        with adbc.connect(uri) as ac, ac.cursor() as cur:
            cur.execute(f'SELECT {sel} FROM "{table}"{rows} ORDER BY rowid')
            return each(cur, a)

    try:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        k = max(1, min(cores, PARALLEL_MAX, (hi - lo + 1) // PARALLEL_MIN_ROWS))
        edges = np.linspace(lo, hi + 1, k + 1).astype(np.int64).tolist()
        if k == 1:
            return [part(lo, hi + 1, True)]
        with ThreadPoolExecutor(k, thread_name_prefix="nsight-magic-read") as ex:
            return list(ex.map(part, edges[:-1], edges[1:], [False] * k))
    except Exception:  # a value ADBC cannot read as the type it took from the first rows: the caller's other path
        return None


def _adbc_parts(con, path: Path, table: str, sel: str, where: str | None) -> list | None:
    """The same as Arrow tables, one per rowid range."""
    return _adbc_ranges(con, path, table, sel, where, lambda cur, first: cur.fetch_arrow_table())


class _NotInts(Exception):
    """A column ADBC typed other than int64, or with nulls: read the other way."""


def _read_ints_adbc(con, path: Path, table: str, exprs: list[str], where: str | None) -> list[np.ndarray] | None:
    """The columns streamed batch by batch into arrays made once, each range into its own slot (a range holds at
    most as many rows as rowids): no Arrow copy of the whole table is held beside the arrays (at 10M kernels that
    doubled the read's peak memory)."""
    sel = ", ".join(f"ifnull({e}, {NULL}) AS c{i}" for i, e in enumerate(exprs))
    lo, hi = rowid_ends(con, table)
    if lo is None:
        return [np.empty(0, np.int64) for _ in exprs]
    out = [np.empty(hi - lo + 1, np.int64) for _ in exprs]

    def fill(cur, first: int) -> tuple[int, int]:
        at = n = first - lo
        for batch in cur.fetch_record_batch():
            m = batch.num_rows
            for i, col in enumerate(batch.columns):
                if str(col.type) != "int64" or col.null_count:
                    raise _NotInts(table)
                out[i][n:n + m] = col.to_numpy()
            n += m
        return at, n - at

    slots = _adbc_ranges(con, path, table, sel, where, fill)
    if slots is None:
        return None
    rows = 0
    for at, n in slots:  # close the ranges up (rows a filter skipped leave room at a range's end)
        if at != rows:
            for a in out:
                a[rows:rows + n] = a[at:at + n]
        rows += n
    # a view where nearly all rows were read; a copy that frees the rest where a filter skipped many
    return [a[:rows] if rows >= 0.9 * len(a) else a[:rows].copy() for a in out]


def read_text_codes(con, path: Path | None, table: str, expr: str, where: str | None = None
                    ) -> pd.Categorical | None:
    """A text column in rowid order as a Categorical, encoded in Arrow (a million rows of a few hundred names make
    no Python string per row); None where ADBC is missing or the values are not all UTF-8 text (the caller reads
    them with read_texts, which replaces what is not UTF-8)."""
    if path is None:
        return None
    import pyarrow as pa

    parts = _adbc_parts(con, path, table, f"{capped(expr)} AS v", where)
    if parts is None:
        return None
    chunks = [c for p in parts if p.num_rows for c in p.column(0).chunks]
    if not chunks:
        return pd.Categorical.from_codes(np.empty(0, np.int64), categories=pd.Index([], dtype=object))
    try:
        if any(not (pa.types.is_string(c.type) or pa.types.is_large_string(c.type) or pa.types.is_null(c.type))
               for c in chunks):
            return None
        col = pa.chunked_array([c.cast(pa.large_string()) for c in chunks], pa.large_string())
        for c in col.chunks:
            c.validate(full=True)  # UTF-8 throughout
        enc = col.combine_chunks().dictionary_encode()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    cats = np.asarray(enc.dictionary.to_pylist(), dtype=object)
    return coded(codes, pd.Index(cats, dtype=object))  # a dictionary's values are distinct


_US, _NUL = "\x1f", "\x1e"  # ASCII unit separator between values, record separator standing for NULL


# The longest text we keep per value: real names (C++ templates) stay whole, a planted 20 MB name does not reach
# every table, tooltip and page (it is cut, saying its length).
MAX_TEXT = 1 << 16


def capped(expr: str) -> str:
    """SQL for `expr` cut to MAX_TEXT characters, with its length said where it was cut."""
    return (f"CASE WHEN length({expr}) > {MAX_TEXT} THEN substr({expr}, 1, {MAX_TEXT}) || ' ... [' || "
            f"length({expr}) || ' characters, cut]' ELSE {expr} END")


def read_texts(con, table: str, expr: str, where: str | None = None) -> np.ndarray:
    """A text column in rowid order as an object array (None for NULL).

    Fetched as one string joined in SQLite and split in C; when a value itself holds the separator (the
    count does not match) it falls back to fetching rows."""
    cond = f" WHERE {where}" if where else ""
    expr = capped(expr)
    n, joined = con.execute(
        f"SELECT count(*), group_concat(ifnull(v, char(30)), char(31)) "
        f'FROM (SELECT {expr} AS v FROM "{table}"{cond} ORDER BY rowid)').fetchone()
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
            # an id that is not an integer (text, a real, one beyond int64) names nothing: left out, said once
            rows = con.execute(f"SELECT id, {capped('value')} FROM StringIds WHERE typeof(id) = 'integer' "
                               "ORDER BY rowid").fetchall()
            _odd_ids(con, "StringIds")
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            self._s = pd.Series(np.array([r[1] for r in rows], dtype=object), index=ids, dtype=object)
            twice = self._s.index.duplicated()
            if twice.any():  # nsys's ids are a primary key: an altered report
                warnings.warn(f"StringIds: {int(twice.sum())} id(s) given more than once (first: id "
                              f"{int(ids[twice][0])}); the first text of each is read (the report was damaged or "
                              "altered)", ReportWarning, stacklevel=2)
                self._s = self._s[~twice]
        else:
            self._s = pd.Series([], dtype=object)

    def decode(self, ids: np.ndarray) -> pd.Categorical:
        inv, uniq = pd.factorize(ids)  # a hash, not a sort: a million rows hold a few hundred ids
        return _categorical(self._s.reindex(uniq).to_numpy(object), np.asarray(inv))

    def lookup(self, ids) -> np.ndarray:
        return self._s.reindex(np.asarray(ids, np.int64)).to_numpy(object)


def _odd_ids(con, table: str) -> None:
    """Warn once about the rows of a lookup table whose id is not an integer (a damaged or altered report)."""
    got = con.execute(f'SELECT count(*), min(CAST(id AS TEXT)) FROM "{table}" WHERE typeof(id) != \'integer\''
                      ).fetchone()
    if got and got[0]:
        warnings.warn(f"{table}: {got[0]} row(s) whose id is not an integer (first: {str(got[1])[:40]!r}) were left "
                      "out (the report was damaged or altered)", ReportWarning, stacklevel=3)


def coded(codes: np.ndarray, distinct: pd.Index) -> pd.Categorical:
    """Categorical.from_codes with categories known to be distinct (made so by a hash already: an Arrow dictionary,
    a factorization), which pandas would hash again to check: 1.9 s for the 4.7M distinct names of an emit_nvtx
    run.  pandas' own fast path for categories it made itself, where this pandas has it."""
    fast = getattr(pd.CategoricalDtype, "_from_fastpath", None)
    if fast is None or not isinstance(distinct, pd.Index) or distinct.dtype != object:
        return pd.Categorical.from_codes(codes, categories=distinct)
    return pd.Categorical.from_codes(codes, dtype=fast(distinct, False))


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
        for i, name in con.execute(f'SELECT id, name FROM "{table}" WHERE typeof(id) = \'integer\''):
            from_report[int(i)] = str(name).removeprefix(prefix)
        _odd_ids(con, table)
    inv, uniq = pd.factorize(ids)
    inv = np.asarray(inv)
    labels = np.array([None if u == NULL else fallback.get(int(u), from_report.get(int(u), f"id {u}"))
                       for u in uniq.tolist()], dtype=object)  # one per distinct id, not per row
    return _categorical(labels, inv)
