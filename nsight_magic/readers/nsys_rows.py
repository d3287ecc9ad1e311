"""How many events an export holds, counted before anything is read (memory_room.py asks)."""
from __future__ import annotations

import sqlite3
from pathlib import Path

from . import nsys_schema as S
from .nsys_sql import find_spec_table, open_ro

# the tables the reader turns into frames, each of its rows a row of a frame
EVENT_SPECS = (S.KERNELS, S.MEMCPY, S.MEMSET, S.GRAPHS, S.CUDA_API, S.OSRT, S.SYNC, S.OVERHEAD, S.CUBLAS, S.CUDNN,
               S.NVTX_RAW)


def event_rows(path: Path) -> int:
    """The rows of the export's event tables: each table's largest rowid (an index lookup, not a scan; nsys writes
    its rows once and deletes none), 0 for a file SQLite cannot read (the reader then says what is wrong)."""
    try:
        con = open_ro(Path(path))
    except sqlite3.Error:
        return 0
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        total = 0
        for spec in EVENT_SPECS:
            t = find_spec_table(tables, spec)
            if t is not None:
                total += int(con.execute(f'SELECT max(rowid) FROM "{t}"').fetchone()[0] or 0)
        return total
    except sqlite3.Error:
        return 0
    finally:
        con.close()
