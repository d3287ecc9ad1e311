"""A columnar cache of an export's core columns beside it: `report.sqlite` -> `report.nsight-cache/`.

Written when a profile is made (run.py) so that re-opening the profile skips the SQLite scans: Arrow IPC files,
memory-mapped on load.  Arrow IPC, not Parquet: the columns are read back whole and at once, and a mapped IPC file
costs no decoding (Parquet's compression would save disk for a cache that is a fraction of the export).

The cache is keyed to the export's content and to CACHE_VERSION: its size, SQLite's file change counter (header
bytes 24-27, which every write transaction increments) and a hash of its first and last MiB (the header, the
schema, the latest pages), not its modification time, which a copy or an archive may keep or lose.  A key that
does not match is never trusted; a re-exported report (or a newer nsight-magic) writes a new one.  Writing happens
under an advisory lock (flock) on the export (two kernels finishing the same profile build it once) and is
atomic (a temporary folder renamed into place); a cache that cannot be written or read is simply not used.
"""
from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.ipc as ipc

CACHE_VERSION = 5  # 4: text columns dictionary-encoded; 5: NVTX kind as int8, no style or thread column
CATEGORICAL = {"nvtx": frozenset({"name", "domain", "tag"})}  # text a part holds as codes (readers.nsys_frames)
KEY_FILE = "key.json"
HASHED_BYTES = 1 << 20  # at each end of the export


def cache_dir(sqlite_path: Path) -> Path:
    return Path(sqlite_path).with_suffix(".nsight-cache")


def _key(sqlite_path: Path) -> dict:
    """What the cache is valid for: CACHE_VERSION and the export's content (see the module docstring)."""
    with open(sqlite_path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        h = hashlib.blake2b(digest_size=16)
        head = f.read(HASHED_BYTES)
        h.update(head)
        if size > HASHED_BYTES:
            f.seek(max(HASHED_BYTES, size - HASHED_BYTES))
            h.update(f.read(HASHED_BYTES))
    counter = int.from_bytes(head[24:28], "big") if head.startswith(b"SQLite format 3\0") else None
    return {"version": CACHE_VERSION, "size": size, "change_counter": counter, "hash": h.hexdigest()}


def _table(arrays: dict[str, np.ndarray]) -> pa.Table:
    cols = {}
    for name, a in arrays.items():
        if isinstance(a, pd.Categorical):  # text held as codes (the NVTX names): its own codes and categories
            cols[name] = pa.DictionaryArray.from_arrays(
                pa.array(np.asarray(a.codes, np.int32), mask=np.asarray(a.codes) < 0),
                pa.array(np.asarray(a.categories, dtype=object), type=pa.large_string()))
        elif isinstance(a, np.ndarray) and a.dtype != object:
            cols[name] = pa.array(a)
        elif isinstance(a, np.ndarray):  # text (None or NaN for missing): each distinct text stored once
            cols[name] = _dictionary(a)
        else:  # nullable integers
            cols[name] = pa.array(a, from_pandas=True)
    return pa.table(cols)


def _dictionary(text: np.ndarray) -> pa.DictionaryArray:
    """An object array of texts (None or NaN: missing) dictionary-encoded from its distinct values: the rows' texts
    are never copied into one string array first (3M NVTX names: 100 MB for each text column)."""
    codes, uniques = pd.factorize(text)
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32), mask=codes < 0),
                                          pa.array(np.asarray(uniques, dtype=object), type=pa.large_string()))


class Columns(MutableMapping):
    """A cached table's columns by name, each made into the reader's array (_column) when first asked for: a
    reopen that shows a kept page reads none of them (3.15M NVTX ranges: 0.26 s and 240 MB less at the open), a
    summary only its own.  The table stays memory-mapped."""

    def __init__(self, table: pa.Table, categorical: frozenset[str] = frozenset()) -> None:
        self._table, self._categorical = table, categorical
        self._names = list(table.column_names)
        self._made: dict[str, Any] = {}
        self._lock = threading.Lock()  # the reader's threads may ask for one column at once: made once

    def __getitem__(self, name: str) -> Any:
        got = self._made.get(name)
        if got is None:
            if name not in self._names:
                raise KeyError(name)
            with self._lock:
                got = self._made.get(name)
                if got is None:
                    got = self._made[name] = _column(self._table.column(name), name in self._categorical)
        return got

    def __setitem__(self, name: str, value: Any) -> None:
        with self._lock:
            if name not in self._names:
                self._names.append(name)
            self._made[name] = value

    def __delitem__(self, name: str) -> None:
        with self._lock:
            if name not in self._names:
                raise KeyError(name)
            self._names.remove(name)
            self._made.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names))

    def __len__(self) -> int:
        return len(self._names)

    def made(self) -> list[str]:
        """The columns made so far (tests)."""
        return list(self._made)


def _kept_type(t: pa.DataType) -> bool:
    """A column type _table writes (numbers, text, text dictionary-encoded)."""
    text = pa.types.is_string(t) or pa.types.is_large_string(t)
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_null(t)
            or text or pa.types.is_dictionary(t) and pa.types.is_integer(t.index_type)
            and (pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)))


def _column(col: pa.ChunkedArray, categorical: bool) -> Any:
    if pa.types.is_dictionary(col.type):  # rows refer to one Python string per distinct text
        d = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if categorical:  # held as codes, as the reader holds them
            codes = d.indices.fill_null(-1).to_numpy(zero_copy_only=False)
            cats = pd.Index(d.dictionary.to_pylist(), dtype=object)
            return pd.Categorical.from_codes(codes, categories=cats)
        texts = np.asarray(d.dictionary.to_pylist() + [None], dtype=object)
        return texts[d.indices.fill_null(len(texts) - 1).to_numpy(zero_copy_only=False)]
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type) or pa.types.is_null(col.type):
        return np.asarray(col.to_pylist(), dtype=object)
    if col.null_count:  # nullable integers -> pandas' masked array, as the reader makes them
        return col.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get).array
    return col.to_numpy()


def save(sqlite_path: Path, parts: dict[str, dict[str, np.ndarray] | None], extra: dict) -> Path | None:
    """Write `parts` (name -> arrays, None for an absent table) and `extra` (JSON) beside the export, under the
    lock; a valid cache another process wrote meanwhile is kept."""
    target = cache_dir(sqlite_path)
    try:  # the lock: flock on the export itself (SQLite's own locks are fcntl's, apart), no file left behind
        lock = open(sqlite_path, "rb")
    except OSError:
        return None
    with lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        except OSError:
            return None
        try:
            key = _key(sqlite_path)
        except OSError:
            return None
        if _valid_key(target, key) is not None:
            return target
        return _write(key, target, parts, extra)


def _write(key: dict, target: Path, parts: dict, extra: dict) -> Path | None:
    try:
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    except OSError:
        return None
    try:
        absent = [name for name, arrays in parts.items() if arrays is None]
        # each table made as it is written, then dropped: never all of them at once
        tables: dict[str, pa.Table | Callable[[], pa.Table]] = {
            name: functools.partial(_table, arrays) for name, arrays in parts.items() if arrays is not None}
        return _publish(tmp, target, tables, {**key, "absent": absent, "extra": extra})
    except (OSError, pa.ArrowException):
        shutil.rmtree(tmp, ignore_errors=True)
        return None


def _publish(tmp: Path, target: Path, tables: dict[str, pa.Table | Callable[[], pa.Table]], key: dict,
             options: ipc.IpcWriteOptions | None = None) -> Path:
    """Write `tables` (Arrow IPC files; a function that makes one is called as it is written) and `key`
    (KEY_FILE) into the new folder `tmp`, then put it in `target`'s place (a valid one there is replaced whole)."""
    for name, made in tables.items():
        t = made() if callable(made) else made
        with ipc.new_file(tmp / f"{name}.arrow", t.schema, options=options) as w:
            w.write_table(t)
        del t
    (tmp / KEY_FILE).write_text(json.dumps(key))
    if target.exists():
        shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return target


def _valid_key(d: Path, want: dict) -> dict | None:
    """The cache's key file when it matches `want`, else None."""
    try:
        key = json.loads((d / KEY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return key if isinstance(key, dict) and {k: key.get(k) for k in want} == want else None


def load(sqlite_path: Path) -> tuple[dict[str, dict[str, np.ndarray] | None], dict] | None:
    """(parts, extra) when a valid cache lies beside the export, else None."""
    d = cache_dir(sqlite_path)
    try:
        if not (d / KEY_FILE).is_file():
            return None
        key = _valid_key(d, _key(sqlite_path))
        if key is None:
            return None
        parts: dict = {name: None for name in key.get("absent", [])}
        for f in d.glob("*.arrow"):  # memory-mapped: the arrays keep the mapping alive
            table = ipc.open_file(pa.memory_map(str(f))).read_all()
            if not all(map(_kept_type, table.schema.types)):  # made into arrays later: not what we write
                return None
            parts[f.stem] = Columns(table, CATEGORICAL.get(f.stem, frozenset()))
        return parts, key.get("extra", {})
    except (OSError, ValueError, KeyError, pa.ArrowException):
        return None


# ---- results computed from a report, kept beside its columns ---------------------------------------------------
RESULTS_DIR = "results"
RESULTS_KEPT = 4  # result sets kept beside one export (other code versions, thresholds): the latest used
STALE_TMP_S = 3600  # a folder being written for longer than this was left by a process that died


def _results_dir(sqlite_path: Path, key: dict) -> Path:
    digest = hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=12).hexdigest()
    return cache_dir(sqlite_path) / RESULTS_DIR / digest


def save_results(sqlite_path: Path, key: dict, doc: dict, frames: dict[str, pd.DataFrame]) -> Path | None:
    """Keep `doc` (JSON) and `frames` (Arrow IPC) computed from the export under `key` (what they depend on
    besides the export: the code that computed them, its settings), inside a valid columnar cache only; written
    whole (a temporary folder renamed into place) or not at all."""
    try:
        export_key = _key(sqlite_path)
    except OSError:
        return None
    if _valid_key(cache_dir(sqlite_path), export_key) is None:  # no columns kept for this export: nothing either
        return None
    target = _results_dir(sqlite_path, key)
    tmp = None
    try:
        target.parent.mkdir(exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
        tables = {name: pa.Table.from_pandas(df, preserve_index=False) for name, df in frames.items()}
        # compressed: a finding's evidence may be every kernel of a million (LZ4: 47 -> 12 MB, read back in ms)
        got = _publish(tmp, target, tables, {**export_key, "results": key, "doc": doc},
                       ipc.IpcWriteOptions(compression="lz4"))
        _prune_results(target.parent, got)
        return got
    except BaseException as e:  # Ctrl-C too: no half-written folder left beside the export
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, (OSError, ValueError, TypeError, pa.ArrowException)):  # a frame Arrow cannot hold
            return None
        raise


def _prune_results(folder: Path, written: Path) -> None:
    """Leave the RESULTS_KEPT result sets used last in `folder` (`written` among them): each new version of
    nsight-magic, other thresholds or a new sidecar file make a set of their own, and a 1M-kernel one holds 50 MB.
    Also removes temporary folders that a process which died while writing left."""
    def used(d: Path) -> int:
        try:
            return d.stat().st_mtime_ns
        except OSError:  # removed meanwhile by another process
            return 0

    try:
        found = list(folder.iterdir())
    except OSError:
        return
    sets = sorted((d for d in found if "." not in d.name and d != written), key=used, reverse=True)
    old = sets[RESULTS_KEPT - 1:]
    old += [d for d in found if "." in d.name and 0 < used(d) < time.time_ns() - STALE_TMP_S * 10**9]
    for d in old:
        shutil.rmtree(d, ignore_errors=True)


def _mark_used(d: Path) -> None:
    """A result set read is as recent as one written (_prune_results keeps the ones used last)."""
    try:
        os.utime(d)
    except OSError:  # a folder this user may read but not change
        pass


def kept_doc(sqlite_path: Path, key: dict) -> dict | None:
    """The doc save_results kept for this export and `key` (its frames not read), else None."""
    d = _results_dir(sqlite_path, key)
    try:
        if not (d / KEY_FILE).is_file():
            return None
        got = _valid_key(d, _key(sqlite_path))
    except (OSError, ValueError):
        return None
    if got is None or got.get("results") != json.loads(json.dumps(key)) or not isinstance(got.get("doc"), dict):
        return None
    return got["doc"]


def load_results(sqlite_path: Path, key: dict, skip: tuple[str, ...] = (),
                 only: tuple[str, ...] | None = None) -> tuple[dict, dict[str, pd.DataFrame]] | None:
    """(doc, frames) that save_results kept for this export and `key`, else None (never a stale or damaged one);
    frames whose names start with one of `skip` are not read, nor, given `only`, any not named there."""
    doc = kept_doc(sqlite_path, key)
    if doc is None:
        return None
    try:
        d = _results_dir(sqlite_path, key)
        files = [d / f"{name}.arrow" for name in only] if only is not None else d.glob("*.arrow")
        frames = {f.stem: ipc.open_file(pa.memory_map(str(f))).read_all().to_pandas() for f in files
                  if not f.stem.startswith(skip)}
        _mark_used(d)
        return doc, frames
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return None
