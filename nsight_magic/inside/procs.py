"""What we ask of other processes, through psutil: their ids, command lines, parents, states and environments.

Both sides use it: the profiled process (its leftovers), the in-place kernel's host (the first process of the
kernel's PID namespace), the tool-file sweep, and the notebook side's sessions.  A process that ends while it is
asked is reported as gone, never as an error; one we may not read (another user's) as unknown.  psutil is imported
when first asked: the profiled process's start does not wait for it.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

T = TypeVar("T")


@functools.lru_cache(maxsize=1)
def _psutil() -> Any:
    import psutil

    return psutil


def _ask(pid: int, question: Callable[[Any], T], gone: T) -> T:
    """question(psutil.Process(pid)), or `gone` when the process is gone, a zombie, or not ours to read."""
    ps = _psutil()
    try:
        return question(ps.Process(pid))
    except (ps.Error, OSError):
        return gone


def pids() -> list[int]:
    """Every process this PID namespace shows."""
    return list(_psutil().pids())


def cmdline(pid: int) -> list[str]:
    """A process's command line; [] when it is gone, a zombie, or not ours to read."""
    return _ask(pid, lambda p: list(p.cmdline()), [])


def parent(pid: int) -> int | None:
    """A running process's parent pid; None when it is gone."""
    return _ask(pid, lambda p: int(p.ppid()), None)


def started(pid: int) -> str | None:
    """When the process started (a pid is reused, a pid and its start are not), as text to keep; None when gone."""
    return _ask(pid, lambda p: f"{p.create_time():.3f}", None)


def alive(pid: int) -> bool:
    """Whether the process runs (it exists and is no zombie)."""
    ps = _psutil()
    return _ask(pid, lambda p: p.status() not in (ps.STATUS_ZOMBIE, ps.STATUS_DEAD), False)


def parents() -> dict[int, int]:
    """pid -> parent pid of every live (not zombie) process this PID namespace shows."""
    ps = _psutil()
    out = {}
    for p in ps.process_iter(["ppid", "status"]):
        if p.info["status"] not in (ps.STATUS_ZOMBIE, ps.STATUS_DEAD, None) and p.info["ppid"] is not None:
            out[p.pid] = p.info["ppid"]
    return out


def environ(pid: int) -> dict[str, str] | None:
    """A process's environment as it was started; None when it is gone or not ours to read."""
    return _ask(pid, lambda p: dict(p.environ()), None)


def name(pid: int) -> str | None:
    """A process's name (its executable's, as the kernel keeps it); None when it is gone."""
    return _ask(pid, lambda p: str(p.name()), None)


def rss_bytes(pid: int) -> int | None:
    """A process's resident memory; None when it is gone or not ours to read."""
    return _ask(pid, lambda p: int(p.memory_info().rss), None)
