"""GPU memory of the profiled process, from two records (issue 48):

    torch   memory_snapshot.pickle beside the export (inside/memory_history.py): the caching allocator's history
            during the cell (each block allocated and freed, with the Python stack that allocated it; segments
            reserved from the driver; out-of-memory events) and its state at the end
    nsys    CUDA_GPU_MEMORY_USAGE_EVENTS (`--cuda-memory-usage=true`): every device allocation and free the driver
            saw, by any library

Read into frames on the report's clock: torch's times are microseconds since the Unix epoch, placed with the
report's TARGET_INFO_SESSION_START_TIME.utcEpochNs (measured on an H100: a segment's allocation lands 5-12 us after
nsys's record of the same cudaMalloc).  The history starts with the cell, so what was held before it (the model's
weights) is found from the state at the end minus what the history added.  The snapshot is a pickle: it is read
with an unpickler that builds only plain containers and numbers, so a hostile file cannot run code.
"""
from __future__ import annotations

import io
import operator
import pickle
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import ReportError

MAX_FILE_BYTES = 1024 * 1024 * 1024
DEVICE_KINDS = (2, 3, 4)   # ENUM_CUDA_MEM_KIND: device, array, managed (pageable and pinned are host memory)
_ALLOC, _FREE = ("alloc",), ("free_completed",)
_SEG_UP, _SEG_DOWN = ("segment_alloc", "segment_map"), ("segment_free", "segment_unmap")
TIMELINE_COLUMNS = ("start_ns", "device_id", "bytes", "allocated", "reserved", "source")


@dataclass
class GpuMemory:
    """timeline: start_ns, device_id, bytes (in use on the device: the allocator's reserved memory, or nsys's
    count), allocated and reserved (torch's view; NaN in nsys's rows), source ('torch' or 'nsys');
    blocks: every block the history saw allocated: device_id, addr, size, alloc_ns, free_ns (NaN: still held
    at the end), stack (an index into `stacks`); stacks: per stack, its frames (function, file, line) from the
    leaf; ooms: start_ns, device_id, size (asked), device_free, stack; capacity: bytes per device;
    held_before: per device, what torch held when the history started; settings: the allocator's settings."""
    timeline: pd.DataFrame
    blocks: pd.DataFrame
    stacks: list = field(repr=False)
    ooms: pd.DataFrame = field(repr=False)
    capacity: dict = field(default_factory=dict)
    held_before: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    sources: tuple = ()
    placed: bool = True           # torch's history was placed on the report's clock
    files: tuple = ()
    problem: str | None = None    # a damaged snapshot left out: why, in one line
    stacks_off_ns: float | None = None  # from here on (report clock) the history has no stacks: the program had a
                                        # Python thread of its own (inside/memory_history.py)

    @property
    def empty(self) -> bool:
        return self.timeline.empty


def empty_memory(capacity=None) -> GpuMemory:
    return GpuMemory(_timeline_frame([]), _blocks_frame([], [], [], [], [], []), [], _ooms_frame([]),
                     dict(capacity or {}))


def snapshot_files(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).glob("memory_snapshot*.pickle") if p.is_file())


class _PlainUnpickler(pickle.Unpickler):
    """dicts, lists, strings and numbers only: torch's snapshot is made of nothing else."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"a memory snapshot holds only plain data, not {module}.{name}")


def load_snapshot(path: Path) -> dict:
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ReportError(f"{path}: {size / 1e9:.1f} GB, larger than a memory snapshot can be "
                          f"({MAX_FILE_BYTES / 1e9:.0f} GB)")
    try:
        data = _PlainUnpickler(io.BytesIO(path.read_bytes())).load()
    except Exception as e:  # noqa: BLE001 - any damage: one line
        raise ReportError(f"{path}: not a readable torch memory snapshot ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("device_traces", []), list) \
            or not isinstance(data.get("segments", []), list):
        raise ReportError(f"{path}: not a torch memory snapshot (no segments and device_traces)")
    return data


def read_gpu_memory(folder: Path, utc_start_ns: int | None, nsys_events: pd.DataFrame | None = None,
                    capacity: dict | None = None, snapshots: bool = True, problem: str | None = None) -> GpuMemory:
    """Both records of the report in `folder`: torch's snapshots (every rank's; not with snapshots=False) and
    `nsys_events` (the rows of CUDA_GPU_MEMORY_USAGE_EVENTS: start, deviceId, bytes, memKind,
    memoryOperationType), or an empty GpuMemory.  ReportError (one line) for a damaged snapshot."""
    files = snapshot_files(folder) if snapshots else []
    stacks: list = []
    stack_ids: dict = {}
    timeline, blocks, ooms = [], [], []
    held_before, settings = {}, {}
    stacks_off = None
    cap = dict(capacity or {})
    for path in files:
        parsed = _parsed(path)
        settings = parsed.settings or settings
        stacks_off = _stacks_off(parsed.note, utc_start_ns, stacks_off)
        try:
            t, b, o, h = _torch_view(parsed, utc_start_ns, stacks, stack_ids)
        except Exception as e:  # noqa: BLE001 - sizes or times no count can take
            raise _damaged(path, e) from None
        timeline.append(t)
        blocks.append(b)
        ooms.append(o)
        held_before.update(h)
    if nsys_events is not None and len(nsys_events):
        timeline.append(_nsys_view(nsys_events))
    sources = tuple(dict.fromkeys(s for f in timeline for s in f["source"].unique()))
    tl = pd.concat(timeline, ignore_index=True) if timeline else _timeline_frame([])
    tl = tl.sort_values(["source", "device_id", "start_ns"], kind="stable", ignore_index=True)
    return GpuMemory(tl, pd.concat(blocks, ignore_index=True) if blocks else empty_memory().blocks, stacks,
                     pd.concat(ooms, ignore_index=True) if ooms else _ooms_frame([]), cap, held_before,
                     settings if isinstance(settings, dict) else {}, sources,
                     utc_start_ns is not None or not files, tuple(str(p) for p in files), problem, stacks_off)


# ---- a snapshot parsed ahead ----------------------------------------------------------------------------------
# Parsing a snapshot (unpickling, one Python step per event) needs no report: the finish stage does it while nsys
# is still writing the recording (prefetch_snapshots), and the report's read takes the result once.

@dataclass
class _Parsed:
    events: pd.DataFrame          # device_id, t_us, action, addr, size, stack (into `stacks`), device_free
    stacks: list                  # the file's own stacks: tuples of (function, file, line)
    end_alloc: dict               # per device, at the end: bytes allocated and reserved (the segments)
    end_reserved: dict
    settings: dict
    note: object                  # our recorder's note ("nsight_magic")


_AHEAD: dict = {}   # (path, size, mtime_ns) -> _Parsed, taken (removed) by the read that uses it
_AHEAD_LOCK = threading.Lock()
_AHEAD_MAX = 4      # parsed files waiting for their read at most (a prefetch whose read never came)


def _file_key(path: Path) -> tuple:
    st = path.stat()
    return str(path.resolve()), st.st_size, st.st_mtime_ns


def prefetch_snapshots(folder: Path) -> int:
    """Parse the snapshots in `folder` ahead of the report's read; how many were parsed.  Never raises: a file
    that is damaged, missing or still being written is left to the read, which says so."""
    done = 0
    for path in snapshot_files(folder):
        try:
            key = _file_key(path)
            parsed = _parse(path)
            if _file_key(path) != key:  # written meanwhile: the read parses what is there then
                continue
        except Exception:  # noqa: BLE001
            continue
        with _AHEAD_LOCK:
            _AHEAD[key] = parsed
            while len(_AHEAD) > _AHEAD_MAX:
                _AHEAD.pop(next(iter(_AHEAD)))
        done += 1
    return done


def _parsed(path: Path) -> _Parsed:
    try:
        key = _file_key(path)
    except OSError:
        key = None
    with _AHEAD_LOCK:
        got = _AHEAD.pop(key, None) if key is not None else None
    return got if got is not None else _parse(path)


def _parse(path: Path) -> _Parsed:
    snap = load_snapshot(path)
    try:
        return _parse_snapshot(snap)
    except Exception as e:  # noqa: BLE001 - entries of the wrong shape or size
        raise _damaged(path, e) from None


def _damaged(path: Path, e: Exception) -> ReportError:
    """A snapshot whose entries cannot be read or counted: one line, naming the file."""
    return ReportError(f"{path}: a torch memory snapshot with damaged entries ({type(e).__name__}: {e}); the file "
                       "is damaged")


def _parse_snapshot(snap: dict) -> _Parsed:
    stacks: list = []
    ids: dict = {}
    rows = []   # (device, t_us, action, addr, size, stack, device_free)
    for device, trace in enumerate(snap.get("device_traces") or []):
        for e in trace or ():
            if not isinstance(e, dict):
                continue
            rows.append((device, e.get("time_us"), str(e.get("action", "")), int(e.get("addr", 0) or 0),
                         int(e.get("size", 0) or 0), _stack_id(e.get("frames"), stacks, ids),
                         int(e.get("device_free", 0) or 0)))
    ev = pd.DataFrame(rows, columns=["device_id", "t_us", "action", "addr", "size", "stack", "device_free"])
    ev["t_us"] = pd.to_numeric(ev["t_us"], errors="coerce")
    # the state at the end: what the history's deltas count back from
    end_alloc, end_reserved = {}, {}
    for s in snap.get("segments") or ():
        if not isinstance(s, dict):
            continue
        d = int(s.get("device", 0) or 0)
        end_reserved[d] = end_reserved.get(d, 0) + int(s.get("total_size", 0) or 0)
        end_alloc[d] = end_alloc.get(d, 0) + int(s.get("allocated_size", 0) or 0)
    settings = snap.get("allocator_settings")
    return _Parsed(ev, stacks, end_alloc, end_reserved, settings if isinstance(settings, dict) else {},
                   snap.get("nsight_magic"))


def _stacks_off(note, utc_start_ns: int | None, earliest: float | None) -> float | None:
    """When our recorder left the stacks out (its note in the snapshot), on the report's clock; the earliest of
    the ranks'.  Before the report's start where it cannot be placed: every stack is then said to be absent."""
    us = note.get("stacks_off_us") if isinstance(note, dict) else None
    if not isinstance(us, (int, float)) or isinstance(us, bool) or not np.isfinite(us):
        return earliest
    ns = float(us) * 1000 - utc_start_ns if utc_start_ns is not None else float("-inf")
    return ns if earliest is None else min(earliest, ns)


# ---- torch's history ------------------------------------------------------------------------------------------

_FRAME = operator.itemgetter("name", "filename", "line")


def _stack_id(frames, stacks: list, ids: dict) -> int:
    try:  # the usual frames, keyed at C speed (100,000 entries of a dozen frames each)
        key = tuple(map(_FRAME, frames or ()))
        hash(key)
    except (KeyError, TypeError):  # a frame with a key missing or a value of another type: cleaned one by one
        key = tuple((str(f.get("name", "")), str(f.get("filename", "")), int(f.get("line", 0) or 0))
                    for f in (frames or ()) if isinstance(f, dict))
    return _shared_id(key, stacks, ids)


def _shared_id(key: tuple, stacks: list, ids: dict) -> int:
    got = ids.get(key)
    if got is None:
        got = ids[key] = len(stacks)
        stacks.append(key)
    return got


def _torch_view(parsed: _Parsed, utc_start_ns, stacks: list, ids: dict):
    ev = parsed.events.copy()
    # the file's stacks join those of the files before it (ranks share their code's stacks)
    remap = np.array([_shared_id(key, stacks, ids) for key in parsed.stacks] or [0], np.int64)
    ev["stack"] = remap[ev["stack"].to_numpy(np.int64)] if len(ev) else ev["stack"]
    offset = None if utc_start_ns is None else int(utc_start_ns)
    ev["start_ns"] = (ev["t_us"] * 1000.0 - offset) if offset is not None else np.nan
    ev = ev.sort_values(["device_id", "t_us"], kind="stable", ignore_index=True)
    end_alloc, end_reserved = parsed.end_alloc, parsed.end_reserved
    size = ev["size"].to_numpy(np.int64)
    act = ev["action"].to_numpy(object)
    d_alloc = np.where(np.isin(act, _ALLOC), size, np.where(np.isin(act, _FREE), -size, 0))
    d_res = np.where(np.isin(act, _SEG_UP), size, np.where(np.isin(act, _SEG_DOWN), -size, 0))
    parts, held = [], {}
    for device, g in ev.groupby("device_id", sort=True):
        idx = g.index.to_numpy()
        ca, cr = np.cumsum(d_alloc[idx]), np.cumsum(d_res[idx])
        base_a = end_alloc.get(device, int(ca[-1]) if len(ca) else 0) - (int(ca[-1]) if len(ca) else 0)
        base_r = end_reserved.get(device, int(cr[-1]) if len(cr) else 0) - (int(cr[-1]) if len(cr) else 0)
        held[int(device)] = max(base_a, 0)
        alloc, res = base_a + ca, base_r + cr
        parts.append(pd.DataFrame({"start_ns": g["start_ns"].to_numpy(float), "device_id": int(device),
                                   "bytes": res.astype(float), "allocated": alloc.astype(float),
                                   "reserved": res.astype(float), "source": "torch"}))
    tl = pd.concat(parts, ignore_index=True) if parts else _timeline_frame([])
    blocks = _blocks(ev)
    o = ev[ev["action"] == "oom"]
    ooms = pd.DataFrame({"start_ns": o["start_ns"].to_numpy(float), "device_id": o["device_id"].to_numpy(np.int64),
                         "size": o["size"].to_numpy(np.int64), "device_free": o["device_free"].to_numpy(np.int64),
                         "stack": o["stack"].to_numpy(np.int64)})
    return tl, blocks, ooms, held


def _blocks(ev: pd.DataFrame) -> pd.DataFrame:
    """Each allocation paired with the free of the same address after it (merge_asof: no loop over rows)."""
    a = ev[ev["action"].isin(_ALLOC)][["device_id", "addr", "size", "t_us", "start_ns", "stack"]]
    f = ev[ev["action"].isin(_FREE)][["device_id", "addr", "t_us", "start_ns"]]
    if a.empty:
        return _blocks_frame([], [], [], [], [], [])
    a = a.assign(key=a["device_id"].astype(str) + ":" + a["addr"].astype(str)).sort_values("t_us", kind="stable")
    f = f.assign(key=f["device_id"].astype(str) + ":" + f["addr"].astype(str)).sort_values("t_us", kind="stable")
    f = f.rename(columns={"t_us": "free_us", "start_ns": "free_ns"})[["key", "free_us", "free_ns"]]
    m = pd.merge_asof(a, f, left_on="t_us", right_on="free_us", by="key", direction="forward",
                      allow_exact_matches=True)
    return _blocks_frame(m["device_id"], m["addr"], m["size"], m["start_ns"], m["free_ns"], m["stack"])


# ---- nsys's record ---------------------------------------------------------------------------------------------

def _nsys_view(raw: pd.DataFrame) -> pd.DataFrame:
    """Bytes in use per device from nsys's allocations and frees.  What was allocated before the capture is not in
    it: the count starts at the least that explains the record (never below zero)."""
    r = raw[raw["memKind"].isin(DEVICE_KINDS)].sort_values("start", kind="stable")
    parts = []
    for device, g in r.groupby("deviceId", sort=True):
        sign = np.where(g["memoryOperationType"].to_numpy() == 0, 1, -1)
        c = np.cumsum(sign * g["bytes"].to_numpy(np.int64))
        c = c - min(int(c.min()), 0)
        parts.append(pd.DataFrame({"start_ns": g["start"].to_numpy(float), "device_id": int(device),
                                   "bytes": c.astype(float), "allocated": np.nan, "reserved": np.nan,
                                   "source": "nsys"}))
    return pd.concat(parts, ignore_index=True) if parts else _timeline_frame([])


def _timeline_frame(rows) -> pd.DataFrame:
    return pd.DataFrame({"start_ns": pd.Series([], dtype=float), "device_id": pd.Series([], dtype=np.int64),
                         "bytes": pd.Series([], dtype=float), "allocated": pd.Series([], dtype=float),
                         "reserved": pd.Series([], dtype=float), "source": pd.Series([], dtype=object)})


def _blocks_frame(device, addr, size, alloc_ns, free_ns, stack) -> pd.DataFrame:
    return pd.DataFrame({"device_id": np.asarray(device, np.int64), "addr": np.asarray(addr, np.int64),
                         "size": np.asarray(size, np.int64), "alloc_ns": np.asarray(alloc_ns, float),
                         "free_ns": np.asarray(free_ns, float), "stack": np.asarray(stack, np.int64)})


def _ooms_frame(rows) -> pd.DataFrame:
    return pd.DataFrame({"start_ns": pd.Series([], dtype=float), "device_id": pd.Series([], dtype=np.int64),
                         "size": pd.Series([], dtype=np.int64), "device_free": pd.Series([], dtype=np.int64),
                         "stack": pd.Series([], dtype=np.int64)})
