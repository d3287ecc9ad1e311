"""IPython magics: %%nsys, %%ncu, %nsys_load, %nsys_diff, %nsys_session, %%nsight_setup.  Thin glue over the
profilers, readers, analysis and views."""
from __future__ import annotations

import argparse

from IPython.core.magic import Magics, cell_magic, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import TraitError, observe, validate

from . import idle
from .cell_display import diff_command, open_again, session_command
from .cell_run import CellRuns, say_previous_end
from .errors import NsightMagicError
from .heap import after_cell
from .magic_args import arguments_from, cell_magic_help, parse_line
from .options import COMMON_ARGS, NCU_ARGS, NSYS_ARGS
from .settings import NsightSettings, use


@magics_class
class NsightMagics(Magics, NsightSettings):
    """%%nsys, %%ncu and their companions.  The user's settings (settings.NsightSettings) are theirs:
    `%config NsightMagics.NAME = ...`."""

    @observe("live_views")
    def _keep_live_views(self, change) -> None:
        from .views.live_views import keep

        keep(change["new"])

    @validate("trace")
    def _valid_trace(self, proposal) -> str:
        from .profilers.nsys import check_trace

        value = proposal["value"].strip()
        if value:
            try:
                check_trace(value)
            except NsightMagicError as e:
                raise TraitError(str(e)) from None
        return value

    def __init__(self, shell, **kwargs):
        super().__init__(shell, **kwargs)
        self.cells = CellRuns(shell, self)  # the cells' work: where they run, their record and finish stages
        self.frontend = self.cells.frontend

    def prewarm(self) -> None:
        """Prepare the warm worker for the next %%nsys in the background (CellRuns.prewarm)."""
        self.cells.prewarm()

    # ---- %%nsight_setup -------------------------------------------------------------------------------------
    @magic_arguments()
    @argument("-t", "--trace", default=None, help="what the warm worker prepared for the next %%%%nsys traces (default: "
                                                  "the trace of the last %%%%nsys, else cuda,nvtx)")
    @argument("--reset", action="store_true", help="forget all remembered setup code first")
    @argument("--list", action="store_true", help="print the remembered setup code and run nothing")
    @argument("--name", default=None, help="a key for this setup code: running a cell with the same --name "
                                           "replaces the earlier version (default: the notebook cell's id, or the "
                                           "code itself when the frontend sends no cell id)")
    @line_cell_magic
    def nsight_setup(self, line, cell=None):
        """Run this cell in the notebook as usual and remember it as setup code.

        The remembered setup code runs in the profiled process before every %%nsys / %%ncu cell, outside the
        capture: imports, model definitions, data.  It must be plain Python (no %magics or !commands).  Once the
        cell has run here, a warm worker runs it too, in the background, so the next %%nsys finds it ready.
        As a line magic, `%nsight_setup --list` / `--reset` only lists / forgets.
        """
        self.cells.setup(parse_line(self.nsight_setup, line), cell)

    # ---- %%nsys ---------------------------------------------------------------------------------------------
    @magic_arguments()
    @arguments_from(NSYS_ARGS, COMMON_ARGS)
    @argument("--cell-line", type=int, default=2, metavar="N", help=argparse.SUPPRESS)
    @cell_magic
    def nsys(self, line, cell):
        """Profile this cell with Nsight Systems in a separate process; the notebook's kernel is never instrumented.

        The cell's free variables are sent with cloudpickle and the result is saved in nsight-profiles/<name>-<time>/
        beside the notebook and shown inline.  The first %%nsys starts a warm session: a process that ran the
        %%nsight_setup code once and runs every later cell with the same setup and trace, recorded one by one
        (`%nsys_session` shows it; --fresh runs one cell in a fresh process instead).
        """
        self.cells.nsys(line, cell, lambda text: parse_line(self.nsys, text))

    # ---- %nsys_session -------------------------------------------------------------------------------------
    @magic_arguments()
    @argument("--env", action="store_true", help="name the kernel's environment variables the profiled process "
                                                 "does not get (their values are never shown)")
    @argument("--stop", action="store_true", help="end the warm session (the next %%%%nsys starts a new one)")
    @argument("--restart", action="store_true", help="end the warm session and start a new one now (runs the "
                                                     "setup code again)")
    @line_magic
    def nsys_session(self, line):
        """Show the warm %%nsys session (worker pid, age, cells run, memory); --stop ends it, --restart renews it."""
        session_command(parse_line(self.nsys_session, line), self.frontend, self.cells.inplace(), self.pass_env)

    # ---- %nsys_diff -----------------------------------------------------------------------------------------
    @magic_arguments()
    @argument("profiles", nargs="*", help="two profiles: folders, report files, or names of profiles in "
                                          "nsight-profiles (default: the last two profiles made in this notebook)")
    @argument("--match", choices=("name", "order"), default="name",
              help="order: number kernels repeated within a step (gemm #0, gemm #1, ...) and compare them in turn")
    @argument("--dir", default=None, help="where profiles given by name are (default: nsight-profiles beside the "
                                          "notebook)")
    @argument("--no-render", action="store_true", help="print the comparison as text")
    @argument("--fail-above", type=float, default=None, metavar="PCT",
              help="the CI gate of `nsight-magic diff`: say whether the cell, a --range or a top kernel got slower "
                   "by more than PCT percent beyond the run-to-run noise (the result is also in `_nsys_gate`)")
    @argument("--range", action="append", default=[], metavar="NAME", help="an NVTX range the gate checks")
    @argument("--top-kernels", type=int, default=5, metavar="N", help="how many top kernels the gate checks")
    @argument("--force", action="store_true", help="compare even when the two reports need more memory than this "
                                                   "kernel has room for (memory_limit_gb, else what is available)")
    @line_magic
    def nsys_diff(self, line):
        """Compare two profiles: capture and GPU busy time, the biggest changes (chart), kernels / NVTX / CUDA API /
        memory tables with before, after, change and status (new, gone, changed, same), findings that came or
        went, and both timelines on linked axes.  The result is also in `_nsys_diff` (a ProfileDiff)."""
        diff_command(parse_line(self.nsys_diff, line), self.frontend, self.shell.user_ns)

    # ---- %%ncu ----------------------------------------------------------------------------------------------
    @magic_arguments()
    @arguments_from(NCU_ARGS, COMMON_ARGS)
    @cell_magic
    def ncu(self, line, cell):
        """Profile this cell's CUDA kernels with Nsight Compute in a fresh process (in the Nsight Compute in-place
        kernel, `nsight-magic kernel install --ncu`: in the kernel itself).

        Each cell picks its own sections and filters: no kernel restart. Defaults: --set basic plus
        MemoryWorkloadAnalysis, NVTX ranges recorded, at most 50 kernels, only the cell's own kernels (setup code
        excluded) unless --nvtx-include/--module choose other ranges. Saved in nsight-profiles/<name>-<time>/ with
        report.ncu-rep and its raw/details CSV pages.
        """
        self.cells.ncu(line, cell, lambda text: parse_line(self.ncu, text))

    # ---- %nsys_load -----------------------------------------------------------------------------------------
    @magic_arguments()
    @argument("path", help="a saved profile folder, a folder of profiles (nsight-profiles: lists them and shows the "
                           "newest), or a .nsys-rep/.qdrep/.sqlite (or .ncu-rep/.csv) report")
    @argument("--pick", default=None, metavar="NAME|INDEX",
              help="in a folder of profiles: which one to show (0 = newest, or the profile's name or part of it)")
    @argument("--all", action="store_true", help="in a folder of profiles: also list the runs that left no report")
    @argument("--pattern", default=None, metavar="GLOB",
              help="in a folder of a job's per-rank reports: which files are the reports (default: every "
                   ".nsys-rep/.sqlite whose name ends in its rank, as report.%%q{RANK} makes them)")
    @argument("--scheduler", default=None, metavar="ADDRESS",
              help="a job's reports: analyse them on this running Dask scheduler (default: a local cluster)")
    @argument("--no-render", action="store_true", help="print a text summary instead of the interactive view")
    @argument("--force", action="store_true", help="load a report even when it needs more memory than this kernel "
                                                   "has room for (memory_limit_gb, else what is available)")
    @line_magic
    def nsys_load(self, line):
        """Show a saved profile or any Nsight report again; on a folder of profiles, list them and show one."""
        open_again(parse_line(self.nsys_load, line))


for _name in ("nsys", "ncu", "nsight_setup"):
    cell_magic_help(getattr(NsightMagics, _name), _name)


def register(ipython) -> None:
    magics = NsightMagics(ipython, parent=ipython)
    ipython.register_magics(magics)
    use(magics)  # the settings in force for the readers and tools this kernel runs
    if magics not in ipython.configurables:  # %config NsightMagics.pass_env = [...] reaches it
        ipython.configurables.append(magics)
    if after_cell not in ipython.events.callbacks["post_run_cell"]:
        ipython.events.register("post_run_cell", after_cell)
    # a notebook without setup code gets its worker while the user writes the next cell; Run All's next cell
    # (often %%nsight_setup, which needs another worker) comes at once, before any would be used (idle.py)
    ip = magics.cells.inplace()  # made here, on the kernel's thread, not first in the idle prewarm's
    if ip is not None:
        say_previous_end(ipython)
    idle.when_idle(ipython, magics.prewarm)
    from .background import import_finish_stage

    import_finish_stage()
