"""Results computed once per DataFrame: several rules ask the same question about the same report's frame (its
CUDA calls by correlation id, its kernels' classes).  Keyed by the frame's identity through a weak reference, so
that a result lives no longer than its frame (and a new frame at a reused id is never mistaken for the old one)."""
from __future__ import annotations

import functools
import weakref
from typing import Any, Callable, TypeVar



K = TypeVar("K")    # what a result is computed from: a frame, a report
R = TypeVar("R")

_REPORT_MEMOS: weakref.WeakKeyDictionary[object, dict[str, Any]] = weakref.WeakKeyDictionary()


def report_memo(report: object) -> dict[str, Any]:
    """A dict of results computed once per report (the diagnosis, the enclosing ranges, ...), living as long as the
    report object: kept here rather than hung on the report, which is the reader's data.  A facade
    (report.NsysReport) and the data it holds share one memo: the view is given the one, `report.findings()` hands
    on the other."""
    data = getattr(report, "data", report)
    try:
        memo = _REPORT_MEMOS.get(data)
        if memo is None:
            memo = _REPORT_MEMOS[data] = {}
    except TypeError:  # an object without weak references (a plain namespace standing for one): nothing kept
        return {}
    return memo


def note_made(report: object, key: str, made: object) -> None:
    """Note what was made for this report (a view's timeline, its tables) for a store to keep while something
    holds it: a weak reference, which never keeps it alive."""
    report_memo(report)[key] = weakref.ref(made)


def made_for(report: object, key: str, kind: type[R]) -> R | None:
    """What note_made noted under `key`, while it is still held (else None)."""
    ref = report_memo(report).get(key)
    made = ref() if ref is not None else None
    return made if isinstance(made, kind) else None


def per_frame(fn: Callable[[K], R], keep: int = 4) -> Callable[[K], R]:
    """`fn(frame)` memoised for the last `keep` frames (or reports) still alive."""
    memo: list[tuple[weakref.ref[Any], R]] = []  # [(weak reference to a frame, fn's result)], newest last

    @functools.wraps(fn)
    def cached(frame: K) -> R:
        memo[:] = [(r, got) for r, got in memo if r() is not None]
        for r, got in memo:
            if r() is frame:
                return got
        got = fn(frame)
        memo.append((weakref.ref(frame), got))
        del memo[:-keep]
        return got

    return cached
