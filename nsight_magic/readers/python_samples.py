"""Python call stacks sampled in the profiled process (inside/python_samples.py): python_samples.json beside the
export, placed on the report's clock by nsight-magic's NVTX clock mark.

    samples   DataFrame: time_ns (report clock; NaN where no mark placed the file), pid, tid, stack (int32),
              weight_ns (the time the sample stands for: since the thread's previous sample)
    stacks    per stack id: frame ids from the leaf to the root (int32 arrays), and their line numbers
    frames    DataFrame: function, file, first_line, kind (cell, user, library, stdlib, ours)
    passes    DataFrame: pid, start_ns, end_ns: when the sampler held the GIL (report clock; files that have them);
              alone: the pass saw only one thread of the program
    sampler_threads  {(pid, tid)} of the sampler's own thread
    machinery_threads  {(pid, tid)} of the threads the sampler knew as the machinery's (the kernel's, ours)
    syncs     DataFrame: time_ns, pid, tid, stack: each synchronising CUDA operation torch flagged during the cell, at
              its own Python stack (files that have them); syncs_dropped: how many more the file did not keep

Several processes (ranks) each write their own file (python_samples.rankR.json).  The readers know nothing of what
the samples mean: analysis/python_code.py says which code the host ran.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import ReportError
from ..inside.marks import CLOCK_MARK  # inside/python_samples.py writes it

MAX_FILE_BYTES = 512 * 1024 * 1024
KINDS = ("cell", "user", "library", "stdlib", "ours")

# frames of the machinery that runs the cell (ours, runpy, IPython, ipykernel and its event loop, threading's
# bootstrap): never the user's code
_OURS = re.compile(r"[/\\]nsight_magic[/\\]|^<frozen runpy>$|[/\\](IPython|ipykernel|tornado|traitlets|jupyter_client|"
                   r"zmq|comm)[/\\]|[/\\]asyncio[/\\]|[/\\]threading\.py$|[/\\]runpy\.py$|[/\\]ipykernel_launcher\.py$")
_LIBRARY = re.compile(r"[/\\](site|dist)-packages[/\\]")
_STDLIB = re.compile(r"[/\\]lib[/\\]python3\.\d+[/\\]|^<frozen ")


@dataclass(eq=False)  # one object, one set of samples: analyses memoise their results per object
class PythonSamples:
    samples: pd.DataFrame
    stacks: list = field(repr=False)
    lines: list = field(repr=False)
    frames: pd.DataFrame = field(repr=False)
    interval_ns: int = 5_000_000
    placed: bool = True                 # every file's clock mark was found in the report
    files: tuple = ()
    cell_first_line: int = 1            # the editor's number of the cell's first line (2 under %%nsys)
    thread_names: dict = field(default_factory=dict, repr=False)  # (pid, tid) -> the thread's Python name
    problem: str | None = None          # a damaged samples file left out: why, in one line
    passes: pd.DataFrame = field(default_factory=lambda: _no_passes(), repr=False)
    sampler_threads: frozenset = frozenset()
    machinery_threads: frozenset = frozenset()  # {(pid, tid)} the sampler knew as the machinery's threads
    syncs: pd.DataFrame = field(default_factory=lambda: _no_syncs(), repr=False)
    syncs_dropped: int = 0

    @property
    def empty(self) -> bool:
        return self.samples.empty


def _no_passes() -> pd.DataFrame:
    return pd.DataFrame({"pid": pd.Series([], dtype=np.int64), "start_ns": pd.Series([], dtype=np.int64),
                         "end_ns": pd.Series([], dtype=np.int64), "alone": pd.Series([], dtype=bool)})


def _no_syncs() -> pd.DataFrame:
    return pd.DataFrame({"time_ns": pd.Series([], dtype=float), "pid": pd.Series([], dtype=np.int64),
                         "tid": pd.Series([], dtype=np.int64), "stack": pd.Series([], dtype=np.int32)})


def empty_samples(problem: str | None = None) -> PythonSamples:
    return PythonSamples(pd.DataFrame({"time_ns": pd.Series([], dtype=float), "pid": pd.Series([], dtype=np.int64),
                                       "tid": pd.Series([], dtype=np.int64), "stack": pd.Series([], dtype=np.int32),
                                       "weight_ns": pd.Series([], dtype=float)}),
                         [], [], pd.DataFrame({"function": [], "file": [], "first_line": [], "kind": []}),
                         problem=problem)


def frame_kind(file: str, cell_files=()) -> str:
    if file in cell_files:
        return "cell"
    if _OURS.search(file):
        return "ours"
    if _LIBRARY.search(file):
        return "library"
    if _STDLIB.search(file):
        return "stdlib"
    return "user"


# a cell IPython compiled: ipykernel's <tempdir>/ipykernel_PID/HASH.py, IPython's <ipython-input-N-HASH>
_IPYTHON_CELL = re.compile(r"[/\\]ipykernel_\d+[/\\]\d+\.py$|^<ipython-input-\d+-[0-9a-f]+>$")


def is_cell_file(file: str, cell_names=("cell.py",), code_files=None) -> bool:
    """A cell's own code: the profile folder's cell.py (a fresh or warm run), or the profiled cell as the in-place
    kernel compiled it (run.json's code_files says which file that was).  Profiles made in place before
    code_files existed: any cell IPython compiled (analysis/python_code.py takes the outermost one)."""
    name = file.replace("\\", "/").rsplit("/", 1)[-1]
    if name in cell_names:
        return True
    if code_files:
        return bool((code_files.get(file) or {}).get("cell"))
    return _IPYTHON_CELL.search(file) is not None


def read_code_files(folder: Path) -> dict:
    """run.json's code_files (the in-place kernel's compiled cells: file -> {"label": "In [3]", "cell": bool,
    "first_line": N}), only well-formed entries; {} when absent or damaged."""
    try:
        raw = json.loads((Path(folder) / "run.json").read_text()).get("code_files")
    except (OSError, ValueError, AttributeError):
        return {}
    if not isinstance(raw, dict):
        return {}
    out = {}
    for k, v in raw.items():
        if isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("label", ""), str):
            first = v.get("first_line")
            out[k] = {"label": v.get("label") or k[-40:], "cell": v.get("cell") is True, "ours": v.get("ours") is True,
                      "first_line": first if isinstance(first, int) and 0 < first < 1_000_000 else None}
    return out


DYNAMIC_CODE = "<dynamic-code>"  # cloudpickle's co_filename for the functions it sends by value (3.1+)


def read_sent_code(folder: Path) -> dict:
    """run.json's sent_code: (function, first line) -> the notebook cell ("In [3]") or file that defined a function
    sent to the profiled process with the variables; {} when absent or damaged."""
    try:
        raw = json.loads((Path(folder) / "run.json").read_text()).get("sent_code")
    except (OSError, ValueError, AttributeError):
        return {}
    out = {}
    for item in raw if isinstance(raw, list) else ():
        if isinstance(item, list) and len(item) == 4 and isinstance(item[0], str) and _is_int(item[1]) \
                and isinstance(item[2], str):
            out.setdefault((item[0], int(item[1])), item[3] if isinstance(item[3], str) else item[2])
    return out


def _name_sent_code(fr: pd.DataFrame, sent: dict) -> None:
    """Frames of functions the notebook sent (file "<dynamic-code>") named by the cell that defined them: the
    user's code."""
    if not sent or not len(fr):
        return
    dyn = fr["file"].eq(DYNAMIC_CODE).to_numpy()
    for i in np.flatnonzero(dyn):
        where = sent.get((fr.at[i, "function"], int(fr.at[i, "first_line"])))
        if where is not None:
            fr.at[i, "file"] = where
            fr.at[i, "kind"] = "user"


def cell_first_line_of(folder: Path, code_files: dict) -> int:
    """The editor's number of the profiled cell's first compiled line: the in-place cell's own (code_files), else
    run.json's cell_first_line (cell.py under the magic's line)."""
    for v in code_files.values():
        if v.get("cell") and v.get("first_line"):
            return int(v["first_line"])
    return read_cell_first_line(folder)


def frame_kinds(files, code_files: dict, cell_names=("cell.py",)) -> list:
    """frame_kind of each file: the profiled cell by run.json's code_files where it names one, the magic's own
    cell (the `%%nsys` line's code) as ours."""
    files = list(files)
    cells = {f for f in set(files) if is_cell_file(f, cell_names, code_files)}
    return ["ours" if (code_files.get(f) or {}).get("ours") else frame_kind(f, cells) for f in files]


def shown_files(files, code_files: dict) -> list:
    """Each frame's file as it is shown: a notebook cell by its label ("In [3]"), other files as they are."""
    return [(code_files.get(f) or {}).get("label") or f for f in files]


def short_file(file: str) -> str:
    """A frame's file as a reader knows it: `torch/serialization.py`, `json/encoder.py`, `setup.py`."""
    for rx in (_LIBRARY, _STDLIB):
        m = rx.search(file)
        if m and not file.startswith("<"):
            return file[m.end():]
    return file.replace("\\", "/").rsplit("/", 1)[-1]


def sample_files(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).glob("python_samples*.json") if p.is_file())


def read_python_samples(folder: Path, marks=(), cell_names=("cell.py",)) -> PythonSamples:
    """The samples of every python_samples*.json in `folder`; `marks`: the report's nsight-magic NVTX marks
    [(pid, t_ns, text)] (NsysData._own_rows), which place each file on the report's clock."""
    files = sample_files(folder)
    if not files:
        return empty_samples()
    by_clock = {}
    for pid, t, text in marks:
        if isinstance(text, str) and text.startswith(CLOCK_MARK):
            by_clock[text[len(CLOCK_MARK):].strip()] = (int(pid), int(t))
    frames: list = []
    frame_index: dict = {}
    stacks, lines, parts = [], [], []
    names: dict = {}
    placed = True
    interval = None
    passes, samplers, machinery, syncs, dropped = [], set(), set(), [], 0
    for path in files:
        data = _load(path)
        remap = np.empty(len(data["frames"]), np.int32)
        for i, (file, func, first) in enumerate(data["frames"]):
            key = (file, func, first)
            if key not in frame_index:
                frame_index[key] = len(frames)
                frames.append(key)
            remap[i] = frame_index[key]
        base = len(stacks)
        for st in data["stacks"]:
            a = _ints(st, "a stack", path)
            if a.size % 2 or (a.size and (a[0::2].min() < 0 or a[0::2].max() >= len(remap))):
                raise ReportError(f"{path.name}: a stack names a frame it does not list; the file is damaged")
            stacks.append(remap[a[0::2]] if a.size else np.empty(0, np.int32))
            lines.append(np.clip(a[1::2], 0, 2**31 - 1).astype(np.int32))
        s = data["samples"]
        t, tid, sid = (_ints(s[k], f"samples.{k}", path) for k in ("t", "tid", "stack"))
        if not (len(t) == len(tid) == len(sid)) or (len(sid) and (sid.min() < 0 or sid.max() >= len(data["stacks"]))):
            raise ReportError(f"{path.name}: its sample lists differ in length or name unknown stacks; the file is "
                              "damaged")
        if len(t) and (np.abs(t).max() > TIME_LIMIT_NS):
            raise ReportError(f"{path.name}: a sample's time is more than {TIME_LIMIT_NS / 3.6e12:.0f} hours from its "
                              "clock; the file is damaged")
        # the first clock mark, else a later one (nsys may drop the first): t counts from the first
        clock = data["clock_ns"]
        clocks = [clock, *(c for c in (data.get("clocks") or []) if _is_int(c))]
        found = next(((by_clock[str(c)], int(c) - clock) for c in clocks if str(c) in by_clock), None)
        if found is None:
            placed = False
            pid, time_ns = data["pid"], np.full(len(t), np.nan)
        else:
            (pid, mark_ns), since = found
            time_ns = (mark_ns - since + t).astype(float)
            passes.append(_passes(data, pid, mark_ns - since, path))
        got = _syncs(data, path)
        if got is not None:
            st, stid, ssid = got
            syncs.append(pd.DataFrame({"time_ns": (mark_ns - since + st).astype(float) if found else
                                       np.full(len(st), np.nan), "pid": np.full(len(st), pid, np.int64),
                                       "tid": stid, "stack": (ssid + base).astype(np.int32)}))
            dropped += int(data["syncs_dropped"]) if _is_int(data.get("syncs_dropped")) else 0
        if _is_int(data.get("sampler_tid")) and data["sampler_tid"] > 0:
            samplers.add((int(pid), int(data["sampler_tid"])))
        tids = data.get("machinery_tids")
        if isinstance(tids, list):
            machinery.update((int(pid), int(k)) for k in tids if _is_int(k))
        threads = data.get("threads")
        if isinstance(threads, dict):
            for k, v in threads.items():
                if isinstance(v, str) and str(k).isdigit():
                    names[(pid, int(k))] = v[:200]
        interval = data["interval_ns"]
        parts.append(pd.DataFrame({"time_ns": time_ns, "pid": np.full(len(t), pid, np.int64), "tid": tid,
                                   "stack": (sid + base).astype(np.int32), "t": t}))
    samples = pd.concat(parts, ignore_index=True) if parts else empty_samples().samples
    samples = samples.sort_values(["pid", "tid", "t"], kind="stable").reset_index(drop=True)
    samples["weight_ns"] = _weights(samples, interval or 5_000_000)
    samples = samples.drop(columns="t")
    fr = pd.DataFrame(frames, columns=["file", "function", "first_line"])
    code = read_code_files(folder)
    fr["kind"] = frame_kinds(fr["file"], code, cell_names)
    fr["file"] = shown_files(fr["file"], code)  # kinds first: they read the paths
    _name_sent_code(fr, read_sent_code(folder))
    return PythonSamples(samples, stacks, lines, fr[["function", "file", "first_line", "kind"]],
                         interval or 5_000_000, placed, tuple(p.name for p in files), cell_first_line_of(folder, code),
                         names, passes=pd.concat(passes, ignore_index=True) if passes else _no_passes(),
                         sampler_threads=frozenset(samplers), machinery_threads=frozenset(machinery),
                         syncs=pd.concat(syncs, ignore_index=True) if syncs else _no_syncs(),
                         syncs_dropped=dropped)


def _syncs(data: dict, path: Path):
    """(t, tid, stack) of a file's synchronising operations, None where it has none; ReportError when damaged."""
    got = data.get("syncs")
    if got is None:
        return None
    if not isinstance(got, dict):
        raise ReportError(f"{path.name}: its syncs are not a table; the file is damaged")
    t, tid, sid = (_ints(got.get(k), f"syncs.{k}", path) for k in ("t", "tid", "stack"))
    if not (len(t) == len(tid) == len(sid)) or (len(sid) and (sid.min() < 0 or sid.max() >= len(data["stacks"]))) \
            or (len(t) and np.abs(t).max() > TIME_LIMIT_NS):
        raise ReportError(f"{path.name}: its syncs differ in length, name unknown stacks or hold impossible times; "
                          "the file is damaged")
    return t, tid, sid


def _passes(data: dict, pid: int, origin_ns: int, path: Path) -> pd.DataFrame:
    """The sampler's passes of one file on the report's clock (files written before they were kept have none)."""
    got = data.get("passes")
    if not isinstance(got, dict):
        return _no_passes()
    t, ns = _ints(got.get("t"), "passes.t", path), _ints(got.get("ns"), "passes.ns", path)
    lead = _ints(got["lead"], "passes.lead", path) if "lead" in got else np.zeros(len(t), np.int64)
    if len(t) != len(ns) or len(lead) != len(t) or (len(t) and (
            np.abs(t).max() > TIME_LIMIT_NS or min(ns.min(), lead.min()) < 0
            or max(ns.max(), lead.max()) > TIME_LIMIT_NS)):
        raise ReportError(f"{path.name}: its passes differ in length or hold impossible times; the file is damaged")
    # alone: the pass saw one thread (the cell's): once it let the GIL go, no other thread of the program could
    # take it before the waiting one (samples of a pass share its time)
    st = _ints(data["samples"]["t"], "samples.t", path)
    seen, counts = np.unique(st, return_counts=True)
    k = np.clip(np.searchsorted(seen, t), 0, max(len(seen) - 1, 0))
    alone = (seen[k] == t) & (counts[k] <= 1) if len(seen) else np.ones(len(t), bool)
    # a pass that saw the cell's thread alone held the GIL from when its sleep ended (lead before t, capped): the
    # only thread that could wait for it then is the cell's.  Beside other threads of the program the lead is the
    # sampler waiting its turn (their 5 ms switch interval), not holding the GIL
    return pd.DataFrame({"pid": np.full(len(t), pid, np.int64),
                         "start_ns": origin_ns + t - np.where(alone, np.minimum(lead, LEAD_CAP_NS), 0),
                         "end_ns": origin_ns + t + ns, "alone": alone})


def read_cell_first_line(folder: Path) -> int:
    """run.json's cell_first_line (the magic's line comes first in the editor), 1 when absent or damaged."""
    try:
        v = json.loads((Path(folder) / "run.json").read_text()).get("cell_first_line", 1)
        return int(v) if isinstance(v, int) and 0 < v < 1_000_000 else 1
    except (OSError, ValueError, AttributeError):
        return 1


LEAD_CAP_NS = 5_000_000     # of a pass's lead counted as GIL held (beyond: the sampler itself waited for the GIL)
MAX_WEIGHT_NS = 250_000_000   # a sample stands for at most this (a thread that appeared late, a stopped sampler)


def _weights(samples: pd.DataFrame, interval: int) -> np.ndarray:
    """Each sample stands for the time since its thread's previous sample: a late sample comes when the code that
    held the GIL lets go, and shows that code (the frame that made a long C call is still on the stack); the
    first of each thread for one interval."""
    t = samples["t"].to_numpy(np.int64)
    w = np.full(len(t), float(interval))
    if len(t) > 1:
        same = (samples["pid"].to_numpy()[1:] == samples["pid"].to_numpy()[:-1]) & \
               (samples["tid"].to_numpy()[1:] == samples["tid"].to_numpy()[:-1])
        gap = np.diff(t).astype(float)
        w[1:] = np.where(same, np.clip(gap, 0, MAX_WEIGHT_NS), interval)
    return w


TIME_LIMIT_NS = 30 * 24 * 3600 * 10**9  # a sample this far from its clock is no sample of a cell


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -2**62 < v < 2**62


def _ints(values, what: str, path: Path) -> np.ndarray:
    """A list of integers as int64; ReportError for anything else (a float, NaN, a string, a list, a huge number)."""
    if not isinstance(values, list):
        raise ReportError(f"{path.name}: {what} is not a list of integers; the file is damaged")
    a = np.asarray(values) if values else np.empty(0, np.int64)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise ReportError(f"{path.name}: {what} holds something other than integers; the file is damaged")
    return a.astype(np.int64)


def _load(path: Path) -> dict:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise ReportError(f"{path.name} is larger than {MAX_FILE_BYTES >> 20} MB; it was not read")
        data = json.loads(path.read_text(encoding="utf-8", errors="surrogatepass"))
    except (OSError, ValueError, RecursionError) as e:
        raise ReportError(f"{path.name} could not be read ({type(e).__name__}: {str(e)[:200]})") from None
    ok = (isinstance(data, dict) and isinstance(data.get("frames"), list) and isinstance(data.get("stacks"), list)
          and isinstance(data.get("samples"), dict) and all(isinstance(data["samples"].get(k), list)
                                                            for k in ("t", "tid", "stack")))
    if not ok or not all(isinstance(f, list) and len(f) == 3 and isinstance(f[0], str) and isinstance(f[1], str)
                         and _is_int(f[2]) for f in data["frames"]):
        raise ReportError(f"{path.name} is not a samples file nsight-magic wrote (frames, stacks, samples)")
    interval = data.get("interval_ns", 5_000_000)
    if not _is_int(data.get("clock_ns")) or not _is_int(interval) or interval <= 0 or \
            not _is_int(data.get("pid", -1)):
        raise ReportError(f"{path.name}: its clock, interval or pid is not a (positive) integer; the file is "
                          "damaged")
    return {**data, "interval_ns": interval, "pid": data.get("pid", -1)}
