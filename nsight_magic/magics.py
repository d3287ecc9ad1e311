"""IPython magics: %%nsys, %%ncu, %nsys_load, %nsys_diff, %nsys_session, %%nsight_setup.  Thin glue over the
profilers, readers, analysis and views."""
from __future__ import annotations

import argparse
import hashlib
import os
import re
import shlex
import sys
from dataclasses import replace
from pathlib import Path

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Bool, List, TraitError, Unicode, default, validate

from . import idle
from .cell_display import (catch_idle_interrupts, diff_command, draws_later, open_again, print_manifest,
                           session_command, watched)
from .cell_output import LiveStatus, ProfileOutput
from .errors import CellRaised, NsightMagicError
from .heap import after_cell
from .magic_args import arguments_from, cell_magic_help, parse_line
from .options import COMMON_ARGS, NCU_ARGS, NSYS_ARGS, ncu_options_from_args, nsys_options_from_args


# the defaults of NsightMagics.prewarm_worker and .wait where no %config reaches (headless runs, CI)
PREWARM_ENV = "NSIGHT_MAGIC_PREWARM"  # 0: no warm worker prepared ahead of the first %%nsys
WAIT_ENV = "NSIGHT_MAGIC_WAIT"        # 1: every profiled cell waits for its profile (as --wait)
TRACE_FLAG = re.compile(r"(^|\s)(-t|--trace)(\s|=|$)")


@magics_class
class NsightMagics(Magics):
    """%%nsys, %%ncu and their companions.  Settings users change live here, as %config NsightMagics.NAME = ..."""

    pass_env = List(Unicode(), help="environment variables passed to every profiled process beyond the allow-list "
                                    "(nsight_magic/tools/environment.py); each is recorded in the reports, as nsys "
                                    "records the profiled process's environment").tag(config=True)
    trace = Unicode("", help="what %%nsys traces when its line gives no --trace (nsys's list, e.g. 'cuda,nvtx'); "
                             "empty: cuda,nvtx; add osrt for the OS calls it waits in").tag(config=True)
    wait = Bool(help="every profiled cell waits for its profile, as --wait (default: on where NSIGHT_MAGIC_WAIT=1)"
                ).tag(config=True)
    prewarm_worker = Bool(help="prepare the warm worker for the next %%nsys in the background (default: on, off "
                               "where NSIGHT_MAGIC_PREWARM=0)").tag(config=True)

    @default("wait")
    def _wait_default(self) -> bool:
        return os.environ.get(WAIT_ENV, "0") == "1"

    @default("prewarm_worker")
    def _prewarm_default(self) -> bool:
        return os.environ.get(PREWARM_ENV, "1") != "0"

    @validate("pass_env")
    def _valid_pass_env(self, proposal) -> list:
        from .options import valid_names

        names = [str(n).strip() for n in proposal["value"]]
        try:
            valid_names(tuple(n for n in names if n))
        except NsightMagicError as e:  # said when set, not in every later %%nsys as an --env nobody passed
            raise TraitError(str(e).replace("--env", "NsightMagics.pass_env", 1)) from None
        return [n for n in names if n]

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
        self._said_env = False  # the withheld variables are counted once per kernel
        self._in_place = None  # this kernel's in-place session (False: not an in-place kernel)
        from .frontend import Frontend

        self.frontend = Frontend()  # setup code, the warm worker, the profiles made in this kernel

    def prewarm(self) -> None:
        """Prepare the warm worker for the next %%nsys in the background (the setup code, trace and environment as
        they are now), while the user writes the next cell.  Nothing to see, nothing when nsys is missing or
        NsightMagics.prewarm_worker is off; a worker that cannot start is started by the next %%nsys as before."""
        idle.drop(self.shell)  # asked for now: one waiting for an idle kernel is not needed
        if not self.prewarm_worker or self._inplace() is not None:  # in place: no worker
            return
        self.frontend.prewarm(self.pass_env, self.trace)

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
        args = parse_line(self.nsight_setup, line)
        fe = self.frontend
        if args.trace:
            fe.worker_trace = args.trace
        if args.reset:
            fe.forget_setup()
        if args.list:
            print("\n\n".join(fe.setups) or "no setup code remembered")
        if cell is None or args.list:
            if args.reset:
                print("nsight-magic: setup code forgotten")
                self.prewarm()
            return
        try:
            compile(cell, "<nsight_setup>", "exec")
        except SyntaxError as e:
            raise UsageError(f"setup code must be plain Python: line {e.lineno}: {e.msg} (IPython magics and shell "
                             f"escapes do not run in the profiled process); nothing was run") from None
        result = self.shell.run_cell(cell, store_history=False)
        if not result.success:
            print("nsight-magic: the setup cell failed, so it was not remembered", file=sys.stderr)
            return
        fe.remember_setup(args.name or self._cell_key(cell), cell)
        print(f"nsight-magic: remembered as setup code ({len(fe.setups)} setup cell"
              f"{'s' if len(fe.setups) != 1 else ''})")
        self.prewarm()

    def _inplace(self):
        """This kernel's in-place session (profilers/inplace.py) when it runs under nsys launch, else None."""
        if self._in_place is None:
            from .profilers.inplace import InPlaceSession, inplace_config

            cfg = inplace_config()
            if cfg is None:
                self._in_place = False
            elif cfg.get("tool") == "ncu":
                from .profilers.inplace_ncu import InPlaceNcu

                self._in_place = InPlaceNcu(cfg)
            else:
                self._in_place = InPlaceSession(cfg)
        return self._in_place or None

    @staticmethod
    def _guard_gpu_memory(fresh: bool) -> None:
        """Subprocess mode starting a new process: say at once when the notebook's own GPU memory would not fit a
        second time, instead of an out-of-memory error in the worker."""
        if not fresh:
            return
        from .profilers.inplace import gpu_memory_guard

        said = gpu_memory_guard()
        if said:
            raise UsageError(said)

    def _with_env(self, opts):
        """The options with %config NsightMagics.pass_env added to --env, and, once per kernel, a line saying how
        many of the kernel's variables the profiled process does not get."""
        from .options import valid_names
        from .tools.environment import profiled_environment

        passed = valid_names(tuple(dict.fromkeys([*self.pass_env, *opts.pass_env])))
        # in place the kernel is the profiled process: its launcher gave it the allow-listed environment already
        if not self._said_env and not opts.quiet and self._inplace() is None:
            self._said_env = True
            _, withheld = profiled_environment(passed=passed)
            if withheld:
                print(f"nsight-magic: {len(withheld)} of this kernel's environment variables are not passed to the "
                      "profiled process (it gets what Python, CUDA, NCCL, PyTorch and the locale need: secrets "
                      "hide in any name, and nsys records the environment); %nsys_session --env names them, "
                      "--env NAME or %config NsightMagics.pass_env = ['NAME'] passes one")
        return replace(opts, pass_env=passed)

    def _prompt_number(self) -> int:
        """The number of the cell being run as the user sees it ([2]): the shell's counter is already one ahead
        while a cell runs; its display hook knows the prompt's."""
        hook = getattr(self.shell, "displayhook", None)
        n = getattr(hook, "prompt_count", None)
        return int(n) if isinstance(n, int) else int(self.shell.execution_count)

    def _cell_key(self, cell: str) -> str:
        header = getattr(self.shell, "parent_header", None) or {}
        cell_id = (header.get("metadata") or {}).get("cellId")
        return cell_id or hashlib.sha1(cell.encode()).hexdigest()

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
        header = f"%%nsys {line}".strip()  # the magic's line as the editor shows it
        if self.trace and not TRACE_FLAG.search(line):  # %config NsightMagics.trace: the line's own comes first
            line = f"--trace {shlex.quote(self.trace)} {line}"
        try:
            args = parse_line(self.nsys, line)
            opts = self._with_env(nsys_options_from_args(args, default_name=f"cell{self._prompt_number()}"))
        except NsightMagicError as e:
            raise UsageError(str(e)) from None
        status = LiveStatus("nsys", opts.quiet)
        ip = self._inplace()
        if ip is not None:  # a kernel under nsys launch: the cell runs here, recorded in place
            from .profilers.inplace import why_not_in_place

            given = args.trace if TRACE_FLAG.search(line) else None
            why = ("this kernel runs under Nsight Compute (its %%ncu measures cells in place)" if ip.tool == "ncu"
                   else why_not_in_place(opts, given, ip.trace))
            if why is None:
                try:
                    rec = ip.record(cell, opts, self.shell, on_status=status, cell_first_line=args.cell_line,
                                    number=self._prompt_number(), header=header)
                except NsightMagicError as e:
                    raise UsageError(str(e)) from None
                self._after_record(self.frontend.made(rec), status, opts.render, opts.thresholds, args.wait)
                return
            print(f"nsight-magic: in a fresh process, not in place: {why}")
            opts = replace(opts, fresh=True)
        else:  # a new worker starts unless the warm one has this setup
            self._guard_gpu_memory(fresh=opts.fresh or not self.frontend.warm_for_setup())
        try:
            rec = self.frontend.record_nsys(cell, opts, namespace=self.shell.user_ns, on_output=status.output,
                                            on_status=status, on_prepared=None if opts.quiet else print_manifest,
                              # the editor's number of the cell's first line: 2 under the %%nsys line; the JupyterLab
                              # buttons run a cell's own text under a magic line the editor does not show (1)
                              cell_first_line=args.cell_line)
        except NsightMagicError as e:
            raise UsageError(str(e)) from None
        self._after_record(rec, status, opts.render, opts.thresholds, args.wait)

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
        session_command(parse_line(self.nsys_session, line), self.frontend, self._inplace(), self.pass_env)

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
        try:
            args = parse_line(self.ncu, line)
            opts, ncu_opts = ncu_options_from_args(args, default_name=f"cell{self._prompt_number()}")
            opts = self._with_env(opts)
        except NsightMagicError as e:
            raise UsageError(str(e)) from None
        from . import tools

        if not tools.gpu_visible():  # said before the cell runs: ncu would replay no kernel, however long it ran
            raise UsageError("no NVIDIA GPU is visible to this kernel, so Nsight Compute has no kernel to profile "
                             "and the cell was not run; %%nsys shows its CPU activity and NVTX ranges")
        status = LiveStatus("ncu", opts.quiet)
        ip = self._inplace()
        if ip is not None and ip.tool == "ncu":  # a kernel under ncu: its kernels are measured here, in place
            why = ip.why_not_in_place(ncu_opts, fresh=bool(args.fresh))
            if why is None:
                try:
                    rec = ip.record(cell, opts, ncu_opts, self.shell, on_status=status, cell_first_line=2,
                                    number=self._prompt_number(), header=f"%%ncu {line}".strip())
                except NsightMagicError as e:
                    raise UsageError(str(e)) from None
                self._after_record(self.frontend.made(rec), status, opts.render, None, args.wait)
                return
            print(f"nsight-magic: in a fresh process, not in place: {why}")
        self._guard_gpu_memory(fresh=True)  # otherwise %%ncu runs the cell in a process of its own

        try:
            rec = self.frontend.record_ncu(cell, opts, ncu_opts, namespace=self.shell.user_ns,
                                           on_output=status.output, on_status=status,
                                           on_prepared=None if opts.quiet else print_manifest)
        except NsightMagicError as e:
            raise UsageError(str(e)) from None
        self._after_record(rec, status, opts.render, None, args.wait)

    def _after_record(self, rec, status: LiveStatus, render: bool, thresholds: dict | None, wait: bool) -> None:
        """The cell's code has finished: say what the record stage knows, give back the --return values, and leave
        the rest (the report, the view) to a background job that fills the output below; the cell waits for it
        only with --wait or when nobody would see the output change (nbclient, nbconvert, papermill)."""
        from . import background

        later = not (wait or self.wait) and draws_later(self.shell)
        status.recorded(rec, later)
        for m in rec.notes:
            print(f"nsight-magic: {m}")
        for m in rec.messages:
            print(f"nsight-magic: {m}", file=sys.stderr)
        if rec.returned:
            self.shell.user_ns.update(rec.returned)
            print(f"nsight-magic: returned {', '.join(rec.returned)}")
        sys.stdout.flush()
        sys.stderr.flush()
        from .views.bokehjs import needs_bokehjs

        out = ProfileOutput(rec.tool, status, Path(rec.folder.path))
        sessions = self.frontend.sessions
        stops = sessions.stops

        def done(job) -> None:
            out.done(job)
            # its worker was let go: prepare the next, unless the user stopped the sessions meanwhile
            # (%nsys_session --stop while this finished in the background)
            if sessions.session is None and rec.tool == "nsys" and sessions.stops == stops:
                self.prewarm()

        job = background.start(rec, render=render, thresholds=thresholds, on_phase=out.phase, on_done=done,
                               loader=render and needs_bokehjs(), live=watched(self.shell))
        catch_idle_interrupts(self.shell)
        if not later:
            try:
                job.wait()
            except KeyboardInterrupt:
                job.interrupt()
                print("nsight-magic: interrupted: the profile is not loaded; what the profiler wrote is kept "
                      f"(%nsys_load {rec.folder.path} shows it)", file=sys.stderr)
                try:
                    job.wait()
                except KeyboardInterrupt:  # a second Ctrl-C: stop waiting, the job ends by itself
                    pass
        if rec.status == "cell-error":  # after the profile is on its way: the cell fails as it would unprofiled
            raise CellRaised(f"the profiled cell raised (its traceback is above); its profile is kept in "
                             f"{rec.folder.path}")

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
    @line_magic
    def nsys_load(self, line):
        """Show a saved profile or any Nsight report again; on a folder of profiles, list them and show one."""
        open_again(parse_line(self.nsys_load, line))


for _name in ("nsys", "ncu", "nsight_setup"):
    cell_magic_help(getattr(NsightMagics, _name), _name)


def _say_previous_end(ipython) -> None:
    """In a restarted in-place kernel: what ended the previous one's processes, under the first cell run."""
    from .profilers.inplace import inplace_config, previous_end_note

    said = previous_end_note(inplace_config() or {})
    if not said:
        return

    def once(*_):
        ipython.events.unregister("post_run_cell", once)
        print(f"nsight-magic: the previous kernel: {said}", file=sys.stderr)

    ipython.events.register("post_run_cell", once)


def register(ipython) -> None:
    magics = NsightMagics(ipython, parent=ipython)
    ipython.register_magics(magics)
    if magics not in ipython.configurables:  # %config NsightMagics.pass_env = [...] reaches it
        ipython.configurables.append(magics)
    if after_cell not in ipython.events.callbacks["post_run_cell"]:
        ipython.events.register("post_run_cell", after_cell)
    # a notebook without setup code gets its worker while the user writes the next cell; Run All's next cell
    # (often %%nsight_setup, which needs another worker) comes at once, before any would be used (idle.py)
    ip = magics._inplace()  # made here, on the kernel's thread, not first in the idle prewarm's
    if ip is not None:
        _say_previous_end(ipython)
    idle.when_idle(ipython, magics.prewarm)
    from .background import import_finish_stage

    import_finish_stage()
