"""Build a large Nsight Systems SQLite export by replicating the rows of a small one.

`make_big_trace(src, dst, kernels)` copies `src` and appends shifted copies of its kernel rows, of the
runtime-API rows that launched GPU work (those whose correlationId a kernel/memcpy/memset references),
and of its memcpy, memset and NVTX rows.  Copy k is shifted by k * span in time and by k * (max correlation
id + 1) in correlation id, so copies never overlap and kernel -> API joins stay unique.  All in SQL.

    python benchmarks/bigtrace.py SRC.sqlite DST.sqlite 1600000 [--number-calls]
"""
from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
GPU_TABLES = (KERNEL, "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
OTHER_TABLES = ("NVTX_EVENTS",)


def _tables(con) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _columns(con, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


def _replicate(con, table: str, where: str, copies: int, shift: int, corr_step: int) -> None:
    """Append copies 1..copies of the rows of `table` matching `where`, shifted in time and correlation id."""
    cols = _columns(con, table)
    exprs = []
    for c in cols:
        if c in ("start", "end"):
            exprs.append(f'b."{c}" + r.k * {shift}')
        elif c == "correlationId":
            exprs.append(f'b."{c}" + r.k * {corr_step}')
        else:
            exprs.append(f'b."{c}"')
    con.execute(f'CREATE TEMP TABLE base AS SELECT * FROM "{table}" WHERE {where}')
    con.execute(
        f"""WITH RECURSIVE r(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM r WHERE k < {copies})
            INSERT INTO "{table}" ({", ".join(f'"{c}"' for c in cols)})
            SELECT {", ".join(exprs)} FROM r CROSS JOIN base AS b"""
    )
    con.execute("DROP TABLE temp.base")


def make_big_trace(src_sqlite, dst_sqlite, kernels: int, number_calls: bool = False) -> Path:
    """Copy `src_sqlite` to `dst_sqlite` and replicate its GPU work until it holds exactly `kernels` kernels.

    number_calls: every NVTX range named the way PyTorch's emit_nvtx (and nsys --pytorch) names them, ", op_id = N",
    gets a number of its own, as a real run numbers every operator call (copies would repeat the source's few
    thousand names; a real run of a million kernels has millions).  Returns the destination path.  Replaces
    `dst_sqlite` if it exists.
    """
    src, dst = Path(src_sqlite), Path(dst_sqlite)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".part")
    shutil.copyfile(src, tmp)
    con = sqlite3.connect(tmp)
    try:
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        con.execute("PRAGMA temp_store=FILE")
        present = _tables(con)
        if KERNEL not in present:
            raise ValueError(f"{src}: no {KERNEL} table to replicate")
        n_base = con.execute(f"SELECT count(*) FROM {KERNEL}").fetchone()[0]
        if n_base == 0:
            raise ValueError(f"{src}: the kernel table is empty")
        event_tables = [t for t in GPU_TABLES + (RUNTIME,) + OTHER_TABLES if t in present]
        lo, hi = None, None
        for t in event_tables:
            a, b = con.execute(f'SELECT min(start), max(coalesce("end", start)) FROM "{t}"').fetchone()
            if a is not None:
                lo = a if lo is None else min(lo, a)
                hi = b if hi is None else max(hi, b)
        shift = hi - lo + 1000  # 1 us gap between copies
        corr_step = 1 + max(
            con.execute(f'SELECT coalesce(max(correlationId), 0) FROM "{t}"').fetchone()[0]
            for t in event_tables
            if "correlationId" in _columns(con, t)
        )
        copies = -(-kernels // n_base) - 1  # ceil, minus the original
        if copies > 0:
            gpu = [t for t in GPU_TABLES if t in present]
            for t in gpu + [t for t in OTHER_TABLES if t in present]:
                _replicate(con, t, "1", copies, shift, corr_step)
            if RUNTIME in present:
                launched = " UNION ".join(f'SELECT correlationId FROM "{t}"' for t in gpu)
                # only the original rows (correlationId < corr_step) are the base: copies are appended after
                where = f"correlationId IN ({launched}) AND correlationId < {corr_step}"
                _replicate(con, RUNTIME, where, copies, shift, corr_step)
        extra = n_base * (copies + 1) - kernels
        if extra > 0:  # trim the last copy to the exact count
            con.execute(
                f"DELETE FROM {KERNEL} WHERE rowid IN (SELECT rowid FROM {KERNEL} ORDER BY start DESC LIMIT {extra})"
            )
        if number_calls and "NVTX_EVENTS" in present:
            tag = "', op_id = '"
            at = f"instr(text, {tag})"
            number = f"CAST(substr(text, {at} + 10) AS INTEGER)"  # its digits: SQLite reads the leading ones
            con.execute(f"UPDATE NVTX_EVENTS SET text = substr(text, 1, {at} + 9) || rowid || "
                        f"substr(text, {at} + 10 + length(CAST({number} AS TEXT))) WHERE {at} > 0")
        if "ANALYSIS_DETAILS" in present and copies > 0:
            con.execute(
                f"UPDATE ANALYSIS_DETAILS SET stopTime = stopTime + {copies * shift},"
                f" duration = duration + {copies * shift}"
            )
        con.commit()
    finally:
        con.close()
    tmp.replace(dst)
    return dst


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--number-calls"]
    if len(args) != 3:
        sys.exit("usage: python benchmarks/bigtrace.py SRC.sqlite DST.sqlite KERNELS [--number-calls]")
    print(make_big_trace(args[0], args[1], int(args[2]), number_calls="--number-calls" in sys.argv))
