"""Give the kernel's freed memory back to the system after a large read.

Reading and drawing a large report makes big temporary frames; once they are freed, glibc keeps the heap it grew
for them (1.2 GB of a kernel's 1.6 GB after %nsys_load of 3.15M NVTX ranges, of which 0.4 GB were live).
`malloc_trim(0)` returns those pages to the system: at the end of a profile's finish stage, when an older profile
lets go of its report, and after a cell that loaded a report (once the cell's output, and what building it left, are
let go).  Elsewhere (macOS, musl) nothing
is done.
"""
from __future__ import annotations

import ctypes
import sys


def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc's; musl has none
    except OSError:
        return None


_TRIM = _malloc_trim()


def give_back_freed_memory() -> None:
    """Return the heap's free pages to the system (a few milliseconds; best effort)."""
    if _TRIM is not None:
        try:
            _TRIM(0)
        except Exception:  # noqa: BLE001 - housekeeping never fails a profile
            pass


_ASKED = False


def trim_after_cell() -> None:
    """Give the freed memory back once the running cell has ended (after_cell, an IPython post_run_cell hook)."""
    global _ASKED
    _ASKED = True


def after_cell(*_) -> None:
    global _ASKED
    if _ASKED:
        _ASKED = False
        give_back_freed_memory()
