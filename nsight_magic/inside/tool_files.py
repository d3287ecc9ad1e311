"""nsys's settings files for the profiled process (/tmp/injection_config_*): named, removed, swept.

nsys writes them for every process it launches and removes them when it ends normally, not when it is stopped,
killed or fails as it starts; each mode removes the files its processes named, and the sweep removes those that no
living process names any more, whoever left them.
"""
from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path

from . import procs

# nsys hands its injection in the profiled process its settings in files under /tmp named in the environment; it
# removes them when it ends normally, not when it is stopped or killed: the notebook side removes them after the run
TOOL_FILE_ENV = ("QUADD_INJECTION_CONFIG", "QUADD_OS_RUNTIME_CONFIG")


def tool_files() -> list[str]:
    """The settings files nsys wrote for this process (reported in the first progress record)."""
    return sorted({os.environ[k] for k in TOOL_FILE_ENV if os.environ.get(k)})


def remove_tool_files(paths) -> None:
    """Remove such settings files once their run is over: only regular files of ours named `injection_config_*`
    (the paths come from a profiled process's record, trusted no further)."""
    for p in paths or ():
        p = str(p)
        if not re.fullmatch(r"injection_config_\w+", os.path.basename(p)):
            continue
        try:
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid():
                os.unlink(p)
        except OSError:
            pass


TOOL_FILES_NAME = "tool-files.json"  # in a warm session's folder: the worker's settings files


def session_tool_files(session_dir: Path) -> list[str]:
    """The settings files a warm session's worker wrote down in the session's folder."""
    try:
        got = json.loads((Path(session_dir) / TOOL_FILES_NAME).read_text())
    except (OSError, ValueError):
        return []
    return [str(x) for x in got] if isinstance(got, list) else []


def tool_files_named_in(folder: Path) -> list[str]:
    """The settings files the profiled processes of a profile folder named in their progress records."""
    out = []
    for f in Path(folder).glob("progress*.jsonl"):
        try:
            lines = f.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("tool_files"), list):
                out += [str(x) for x in rec["tool_files"]]
    return out


TOOL_FILE_DIR = "/tmp"  # where nsys 2022.4-2025.3 write them, whatever TMPDIR says
TOOL_FILE_PATTERN = "injection_config_*"
SWEEP_MIN_AGE_S = 60.0  # nsys writes the file before it starts the process that names it: leave young ones be


def sees_every_process() -> bool:
    """Whether /proc shows the whole machine (the kernel's own thread, kthreadd, is pid 2 only there): inside a pid
    namespace (the in-place kernel's, an isolated run's, a container's) a file's owner may be out of sight."""
    return procs.name(2) == "kthreadd"


def tool_files_of(pids=None, carrying: str | None = None) -> list[str]:
    """The settings files that these processes (every one in sight when None; only those whose environment holds
    `carrying`, "NAME=value", when given) were started with: learnt from the living, before they are stopped, since
    one killed as it starts has not written them down yet."""
    key, _, value = (carrying or "").partition("=")
    named: set[str] = set()
    for pid in procs.pids() if pids is None else pids:
        env = procs.environ(int(pid))
        if env is None or (carrying is not None and env.get(key) != value):
            continue
        named.update(env[k] for k in TOOL_FILE_ENV if env.get(k))
    return sorted(named)


def sweep_tool_files(folder=None, min_age_s: float = SWEEP_MIN_AGE_S) -> list[str]:
    """Remove our settings files that no living process names and that are older than min_age_s (left by a run
    that failed as it started, was killed, or by another tool's run): returns what was removed.  Does nothing
    where some processes are out of sight."""
    folder = Path(folder or TOOL_FILE_DIR)
    if not sees_every_process():
        return []
    now, uid, old = time.time(), os.getuid(), []
    try:
        candidates = list(folder.glob(TOOL_FILE_PATTERN))
    except OSError:
        return []
    for p in candidates:
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode) and st.st_uid == uid and now - st.st_mtime >= min_age_s:
            old.append(p)
    if not old:
        return []
    named = {os.path.basename(p) for p in tool_files_of()}  # as named, whatever the path's spelling
    gone = [str(p) for p in old if p.name not in named]
    remove_tool_files(gone)
    return [p for p in gone if not os.path.lexists(p)]
