"""A columnar cache of an export's core columns beside it: `report.sqlite` -> `report.nsight-cache/`.

Written when a profile is made (run.py) so that re-opening the profile skips the SQLite scans: Arrow IPC files,
memory-mapped on load.  The cache is keyed by the export's size and modification time and by CACHE_VERSION; a
re-exported report (or a newer nsight-magic) ignores it.  Writing is atomic (a temporary folder renamed into
place); a cache that cannot be written or read is simply not used.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.ipc as ipc

CACHE_VERSION = 2
KEY_FILE = "key.json"


def cache_dir(sqlite_path: Path) -> Path:
    return Path(sqlite_path).with_suffix(".nsight-cache")


def _key(sqlite_path: Path) -> dict:
    st = Path(sqlite_path).stat()
    return {"version": CACHE_VERSION, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _table(arrays: dict[str, np.ndarray]) -> pa.Table:
    cols = {}
    for name, a in arrays.items():
        if isinstance(a, np.ndarray) and a.dtype != object:
            cols[name] = pa.array(a)
        else:  # object arrays of text (None for missing), nullable integers
            cols[name] = pa.array(list(a) if not hasattr(a, "to_numpy") else a, from_pandas=True)
    return pa.table(cols)


def _arrays(table: pa.Table) -> dict[str, np.ndarray]:
    out = {}
    for name in table.column_names:
        col = table.column(name)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type) or pa.types.is_null(col.type):
            out[name] = np.asarray(col.to_pylist(), dtype=object)
        elif col.null_count:  # nullable integers -> pandas' masked array, as the reader makes them
            out[name] = col.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get).array
        else:
            out[name] = col.to_numpy()
    return out


def save(sqlite_path: Path, parts: dict[str, dict[str, np.ndarray] | None], extra: dict) -> Path | None:
    """Write `parts` (name -> arrays, None for an absent table) and `extra` (JSON) beside the export."""
    target = cache_dir(sqlite_path)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    except OSError:
        return None
    try:
        absent = []
        for name, arrays in parts.items():
            if arrays is None:
                absent.append(name)
                continue
            t = _table(arrays)
            with ipc.new_file(tmp / f"{name}.arrow", t.schema) as w:
                w.write_table(t)
        (tmp / KEY_FILE).write_text(json.dumps({**_key(sqlite_path), "absent": absent, "extra": extra}))
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
        return target
    except (OSError, pa.ArrowException):
        shutil.rmtree(tmp, ignore_errors=True)
        return None


def load(sqlite_path: Path) -> tuple[dict[str, dict[str, np.ndarray] | None], dict] | None:
    """(parts, extra) when a valid cache lies beside the export, else None."""
    d = cache_dir(sqlite_path)
    try:
        key = json.loads((d / KEY_FILE).read_text())
        if {k: key.get(k) for k in ("version", "size", "mtime_ns")} != _key(sqlite_path):
            return None
        parts: dict = {name: None for name in key.get("absent", [])}
        for f in d.glob("*.arrow"):  # memory-mapped: the arrays keep the mapping alive
            parts[f.stem] = _arrays(ipc.open_file(pa.memory_map(str(f))).read_all())
        return parts, key.get("extra", {})
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return None
