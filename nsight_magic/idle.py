"""Run something once the kernel is idle: after the current cell, when no cell follows within a moment.

A user writing the next cell leaves the kernel idle for seconds; Run All, nbconvert and papermill send the next cell
at once.  What is only worth doing in that pause (preparing a warm worker that the next cell may not use) waits for
it here: each cell that starts puts it off, and it runs `IDLE_S` after a cell ends with none started since.
"""
from __future__ import annotations

import threading
import weakref

IDLE_S = 1.0


class _Idle:
    """The shell's one pending call (the latest asked for) and the timer that runs it."""

    def __init__(self, shell):
        self._fn = None
        self._delay = IDLE_S
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        shell.events.register("pre_run_cell", self._cell_starts)
        shell.events.register("post_run_cell", self._cell_ended)

    def want(self, fn, delay: float) -> None:
        with self._lock:
            self._fn, self._delay = fn, delay

    def drop(self) -> None:
        with self._lock:
            self._fn = None
            self._cancel()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _cell_starts(self, *_) -> None:
        with self._lock:
            self._cancel()

    def _cell_ended(self, *_) -> None:
        with self._lock:
            self._cancel()
            if self._fn is not None:
                self._timer = threading.Timer(self._delay, self._fire)
                self._timer.daemon = True  # never holds up the kernel's exit
                self._timer.name = "nsight-magic when idle"
                self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if threading.current_thread() is not self._timer:  # a cell started meanwhile: it re-arms at its end
                return
            fn, self._fn, self._timer = self._fn, None, None
        if fn is not None:
            try:
                fn()
            except Exception:  # noqa: BLE001 - background housekeeping never disturbs the notebook
                pass


_SHELLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _idle_of(shell) -> _Idle:
    if shell not in _SHELLS:
        _SHELLS[shell] = _Idle(shell)
    return _SHELLS[shell]


def when_idle(shell, fn, delay: float = IDLE_S) -> None:
    """Call fn() (in a background thread) once `shell` has been idle for `delay` s after the current cell; a later
    call replaces an earlier one still pending.  Outside a cell (no post_run_cell follows) nothing runs."""
    _idle_of(shell).want(fn, delay)


def drop(shell) -> None:
    """Forget the pending call (what it would have done was done otherwise)."""
    if shell in _SHELLS:
        _SHELLS[shell].drop()
