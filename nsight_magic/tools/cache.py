"""This user's private cache folder, and what the tools' `--version` and `--help` said, kept there per binary.

Every new kernel (and every profiled run's helpers) asked nsys for its version and for the switches of `profile`,
`launch` and `start`: four short nsys processes (0.1-0.2 s and 0.06-0.1 CPU-s here), though the answers change
only when nsys does.  They are kept on disk, keyed by the binary's path, inode, size and time of change, so
that a reinstalled or upgraded nsys is asked again.
"""
from __future__ import annotations

import functools
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Callable

ANSWERS_FILE = "tool-answers.json"
MAX_ANSWERS = 64  # a handful per nsys; a bound keeps machines with many tool versions from growing it forever


@functools.lru_cache(maxsize=8)
def home_cache(name: str) -> Path | None:
    """$XDG_CACHE_HOME/nsight-magic/NAME, a folder no other user can write to or plant files in (mode 0700, checked
    to be ours); None where it cannot be used (not ours, a link, open to others, unwritable)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nsight-magic" / name
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        st = os.lstat(base)
        if not stat.S_ISLNK(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077 and \
                os.access(base, os.W_OK):
            return base
    except OSError:
        pass
    return None


@functools.lru_cache(maxsize=8)
def private_cache(name: str) -> Path:
    """home_cache(NAME), or where it cannot be used, a fresh private temporary folder."""
    return home_cache(name) or Path(tempfile.mkdtemp(prefix=f"nsight-magic-{name}-"))


def _key(exe: str, question: str) -> str | None:
    try:
        real = os.path.realpath(exe)
        st = os.stat(real)
    except OSError:
        return None
    return f"{real}|{st.st_dev}:{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{question}"


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def remembered(exe: str, question: str, ask: Callable[[], str], keep: Callable[[str], object] = bool) -> str:
    """What `exe QUESTION` answered: from the cache while the binary is unchanged, else ask() (which may raise),
    kept on disk where keep(answer) holds (by default: not empty) and this user's cache folder can be used."""
    folder = home_cache("tools")
    key = _key(exe, question) if folder is not None else None
    if key is None:
        return ask()
    path = folder / ANSWERS_FILE
    got = _load(path).get(key)
    if isinstance(got, str):
        return got
    answer = ask()
    if not keep(answer):
        return answer
    # read again just before writing: another process may have added its answers meanwhile (a lost race only
    # means a question asked once more)
    data = _load(path)
    data.pop(key, None)
    data[key] = answer
    data = dict(list(data.items())[-MAX_ANSWERS:])
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".answers-")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written only costs the question next time
    return answer
