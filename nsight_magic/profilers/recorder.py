"""One way to record a cell, whoever runs it: a Recorder takes a CellRequest and returns the Recording (the record
stage done; Recording.finish() writes, imports and exports the report).  Four recorders:

    fresh or warm %%nsys    frontend.Frontend.recorder("nsys"): a process of its own (cold) or the warm worker
    fresh %%ncu             frontend.Frontend.recorder("ncu")
    in place %%nsys         inplace.InPlaceSession: the kernel itself, between `nsys start` and `nsys stop`
    in place %%ncu          inplace_ncu.InPlaceNcu: the kernel itself, under the ncu that started it

The magics (cell_run.py) choose one and hand it the request; what the request names that a recorder has no use
for (a fresh process has no shell to run in; in place nothing is sent) is left unused.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

from .process import OutputCallback, Recording, StatusCallback


@dataclass(frozen=True)
class CellRequest:
    """A cell to record, and where what it does is said."""

    cell: str
    opts: Any                                # options.NsysOptions (%%nsys) or options.RunOptions (%%ncu)
    tool_opts: Any = None                    # %%ncu: options.NcuOptions
    shell: Any = None                        # the IPython shell: its namespace is sent; in place, the cell runs in it
    on_output: OutputCallback | None = None  # the profiled process's output as it comes (fresh, warm)
    on_status: StatusCallback | None = None  # the run's phases
    on_prepared: Callable | None = None      # given the sent variables' manifest, before the profiler starts
    cell_first_line: int = 1                 # the editor's number of the cell's first line (2 under a %%nsys line)
    number: int | None = None                # the cell's prompt number (in place: its traceback names it)
    header: str = ""                         # the magic's line as the editor shows it (in place)

    @property
    def namespace(self) -> dict | None:
        return getattr(self.shell, "user_ns", None)


class Recorder(Protocol):
    """Records cells with one tool (`tool`: nsys | ncu)."""

    tool: str

    def record(self, req: CellRequest) -> Recording:
        """The record stage of `req`'s cell: it has run when this returns (NsightMagicError: it could not)."""
        ...
