"""Merge several nsys SQLite exports of one machine (one report per rank) into one export on one clock.

`merge_exports([rank0.sqlite, rank1.sqlite, ...], out)` copies the first export and appends the others' rows, so
that every reader and view works on the result as on a report that recorded all processes at once:

- clock: each export's events are on its own session clock; `utcEpochNs - systemClockNs` (systemClockNs is 0
  where the column does not exist: the events are then relative to the session start) maps them to UTC, and each
  later export is shifted onto the first's clock;
- strings: every column the schema marks `REFERENCES StringIds(id)` is mapped to the merged StringIds, where a
  text has one id as in any export (readers group names by id); other `REFERENCES T(id)` columns (backtraces)
  get an id offset, and T's own ids the same;
- rows that describe the machine rather than events (GPUs, system environment, enums, process lists) are not
  repeated; threads and processes already present are kept once.

The schema comments nsys writes into every CREATE TABLE say which columns are timestamps and which reference
StringIds; exports without them fall back to column names.  Correlation ids and NVTX domain ids are per
process in the reader (joined with the pid), so they need no offset.  All work is INSERT ... SELECT in SQLite.
"""
from __future__ import annotations

import re
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ReportError
from .nsys_sql import refuse_code

_REF = re.compile(r"REFERENCES\s+(\w+)\((\w+)\)")
_TIME_NAMES = {"start", "end", "timestamp", "startTime", "stopTime"}
_KEYED = {"ThreadNames": "globalTid", "PROCESSES": "globalPid"}   # machine-wide lists: one row per key
_SKIP = {"TARGET_INFO_SESSION_START_TIME"}                          # the first export's clock is the merged one


@dataclass
class _Column:
    name: str
    is_time: bool = False
    ref: tuple[str, str] | None = None   # (table, column) this column references


@dataclass
class _Table:
    name: str
    columns: list[_Column] = field(default_factory=list)

    @property
    def timed(self) -> bool:
        return any(c.is_time for c in self.columns)


def _parse_table(name: str, sql: str, con: sqlite3.Connection, schema: str) -> _Table:
    """Columns of one table with what the schema comments say of them (time, reference)."""
    comments = {}
    for line in (sql or "").splitlines():
        m = re.match(r"\s*\"?(\w+)\"?\s+[A-Z]+.*?--(.*)$", line)
        if m:
            comments[m.group(1)] = m.group(2)
    table = _Table(name)
    for _, col, *_rest in con.execute(f'PRAGMA {schema}.table_info("{name}")'):
        note = comments.get(col)
        ref = _REF.search(note) if note else None
        if note is not None:
            low = note.lower()
            is_time = ref is None and "timestamp" in low and ("(ns)" in low or "nanosecond" in low)
        else:
            is_time = col in _TIME_NAMES
        table.columns.append(_Column(col, is_time, (ref.group(1), ref.group(2)) if ref else None))
    return table


def _tables(con: sqlite3.Connection, schema: str) -> dict[str, _Table]:
    rows = con.execute(f"SELECT name, sql FROM {schema}.sqlite_master WHERE type = 'table'").fetchall()
    return {n: _parse_table(n, s, con, schema) for n, s in rows if not n.startswith("sqlite_")}


def clock_offset_ns(con: sqlite3.Connection, schema: str = "main") -> int:
    """UTC epoch ns minus the report's own clock: add it to an event time to get UTC."""
    cols = {r[1] for r in con.execute(f"PRAGMA {schema}.table_info(TARGET_INFO_SESSION_START_TIME)")}
    row = None
    if "utcEpochNs" in cols:
        sys_col = "systemClockNs" if "systemClockNs" in cols else "0"
        row = con.execute(f"SELECT utcEpochNs, {sys_col} FROM {schema}.TARGET_INFO_SESSION_START_TIME").fetchone()
    if row is None or row[0] is None:
        raise ReportError("no session start time (TARGET_INFO_SESSION_START_TIME.utcEpochNs): its clock cannot be "
                          "aligned with the other exports; open the reports one by one")
    return int(row[0]) - int(row[1] or 0)


def merge_exports(exports: list[Path], out: Path) -> Path:
    """One SQLite export holding every export's events on the first one's clock (see the module docstring)."""
    if not exports:
        raise ReportError("no exports to merge")
    out = Path(out)
    tmp = out.with_name(out.name + ".part")
    shutil.copyfile(exports[0], tmp)
    con = sqlite3.connect(tmp.resolve().as_uri(), uri=True)  # uri: the sources are attached read-only
    try:
        # the rows we write must not run a report's code: no trigger, no view anywhere, the schema untrusted
        con.execute("PRAGMA trusted_schema = OFF")
        refuse_code(con, exports[0])
        base = _offset_of(con, "main", exports[0])
        for other in exports[1:]:
            con.execute("ATTACH DATABASE ? AS src", (Path(other).resolve().as_uri() + "?mode=ro",))
            try:
                refuse_code(con, other, "src")
                with con:
                    _append(con, _offset_of(con, "src", other) - base)
            finally:
                con.execute("DETACH DATABASE src")
        con.close()
    except BaseException:
        con.close()
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(out)
    return out


def _offset_of(con: sqlite3.Connection, schema: str, path: Path) -> int:
    try:
        return clock_offset_ns(con, schema)
    except ReportError as e:
        raise ReportError(f"{Path(path).name}: {e}") from None


def _max(con: sqlite3.Connection, table: str, col: str) -> int:
    return int(con.execute(f'SELECT coalesce(max("{col}"), -1) FROM main."{table}"').fetchone()[0]) + 1


def _map_strings(con: sqlite3.Connection) -> None:
    """temp.smap(old -> new): src's string ids on main's, adding the texts main lacks under fresh ids."""
    con.execute('CREATE INDEX IF NOT EXISTS main."nsight_magic_StringIds_value" ON "StringIds"(value)')
    con.execute("DROP TABLE IF EXISTS temp.smap")
    con.execute("CREATE TEMP TABLE smap (old INTEGER PRIMARY KEY, new INTEGER)")
    con.execute("INSERT INTO temp.smap SELECT s.id, (SELECT m.id FROM main.StringIds m WHERE m.value = s.value "
                "ORDER BY m.id LIMIT 1) FROM src.StringIds s")
    fresh = _max(con, "StringIds", "id")
    con.execute("UPDATE temp.smap SET new = old + ? WHERE new IS NULL", (fresh,))
    con.execute("INSERT INTO main.StringIds (id, value) SELECT s.id + ?, s.value FROM src.StringIds s "
                "JOIN temp.smap ON smap.old = s.id WHERE smap.new = s.id + ?", (fresh, fresh))


def _append(con: sqlite3.Connection, shift: int) -> None:
    """Append schema src's rows to main: times shifted by `shift`, references by their tables' offsets."""
    main, src = _tables(con, "main"), _tables(con, "src")
    # id offsets of referenced tables (backtraces...), taken before any row is appended; strings are mapped by text
    offsets = {}
    for t in src.values():
        for c in t.columns:
            ref = c.ref[0] if c.ref and c.ref[1] == "id" else None
            if ref and ref != "StringIds" and not ref.startswith("ENUM_") and ref in main:
                offsets.setdefault(ref, _max(con, ref, "id"))
    strings = "StringIds" in main and "StringIds" in src
    if strings:
        _map_strings(con)
    for name, t in src.items():
        if name in _SKIP or name not in main or name == "StringIds":
            continue
        have = {c.name for c in main[name].columns}
        cols = [c for c in t.columns if c.name in have]
        if not cols:
            continue
        exprs = []
        for c in cols:
            q = f'"{c.name}"'
            if c.is_time:
                exprs.append(f"{q} + {shift}")
            elif strings and c.ref == ("StringIds", "id"):
                exprs.append(f"(SELECT new FROM temp.smap WHERE old = {q})")
            elif c.ref and c.ref[1] == "id" and c.ref[0] in offsets:
                exprs.append(f"{q} + {offsets[c.ref[0]]}")
            elif c.name == "id" and name in offsets:
                exprs.append(f"{q} + {offsets[name]}")
            else:
                exprs.append(q)
        names = ", ".join(f'"{c.name}"' for c in cols)
        select = f'SELECT {", ".join(exprs)} FROM src."{name}"'
        verb = "INSERT" if t.timed else "INSERT OR IGNORE"   # a machine-wide row the first export has wins
        key = _KEYED.get(name)
        if key and key in have:
            select += f' WHERE "{key}" NOT IN (SELECT "{key}" FROM main."{name}" WHERE "{key}" IS NOT NULL)'
        elif not t.timed and name not in offsets and not any(c.ref and c.ref[0] in offsets for c in cols):
            select += f' EXCEPT SELECT {names} FROM main."{name}"'   # machine description: not repeated
        con.execute(f'{verb} INTO main."{name}" ({names}) {select}')
