"""A profiled cell from its magic line to its output, for the magics (magics.py holds their lines' grammar and the
user's settings): the kernel's settings added to the cell's options, where the cell runs (in place under a profiling
kernel, else a warm or fresh process), the record stage that blocks the cell, and the finish stage (export, read,
view) left to a background job that fills the cell's output."""
from __future__ import annotations

import hashlib
import re
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from IPython.core.error import UsageError

from . import idle
from .cell_display import catch_idle_interrupts, draws_later, print_manifest, watched
from .cell_output import LiveStatus, ProfileOutput
from .errors import CellRaised, NsightMagicError
from .options import ncu_options_from_args, nsys_options_from_args

if TYPE_CHECKING:
    from .profilers.inplace import InPlaceSession
    from .profilers.inplace_ncu import InPlaceNcu
    from .profilers.recorder import CellRequest, Recorder

TRACE_FLAG = re.compile(r"(^|\s)(-t|--trace)(\s|=|$)")


class CellRuns:
    """One kernel's profiled cells: its setup code, warm worker and profiles (a Frontend), its in-place session
    when the kernel runs under a profiler, and the settings they follow (settings.NsightSettings: the magics)."""

    def __init__(self, shell, settings):
        from .frontend import Frontend

        self.shell, self.settings = shell, settings
        self._said_env = False  # the withheld variables are counted once per kernel
        self._in_place = None  # this kernel's in-place session (False: not an in-place kernel)
        self.frontend = Frontend()  # setup code, the warm worker, the profiles made in this kernel

    def prewarm(self) -> None:
        """Prepare the warm worker for the next %%nsys in the background (the setup code, trace and environment as
        they are now), while the user writes the next cell.  Nothing to see, nothing when nsys is missing or
        NsightMagics.prewarm_worker is off; a worker that cannot start is started by the next %%nsys as before."""
        idle.drop(self.shell)  # asked for now: one waiting for an idle kernel is not needed
        if not self.settings.value("prewarm_worker") or self.inplace() is not None:  # in place: no worker
            return
        self.frontend.prewarm(self.settings.pass_env, self.settings.trace)

    def setup(self, args, cell) -> None:
        """%%nsight_setup: run the cell here and remember it as setup code (--list, --reset, --trace)."""
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
        fe.remember_setup(args.name or self.cell_key(cell), cell)
        print(f"nsight-magic: remembered as setup code ({len(fe.setups)} setup cell"
              f"{'s' if len(fe.setups) != 1 else ''})")
        self.prewarm()

    def inplace(self) -> InPlaceSession | InPlaceNcu | None:
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
    def guard_gpu_memory(fresh: bool) -> None:
        """Subprocess mode starting a new process: say at once when the notebook's own GPU memory would not fit a
        second time, instead of an out-of-memory error in the worker."""
        if not fresh:
            return
        from .profilers.inplace import gpu_memory_guard

        said = gpu_memory_guard()
        if said:
            raise UsageError(said)

    def with_env(self, opts):
        """The options with %config NsightMagics.pass_env added to --env, and, once per kernel, a line saying how
        many of the kernel's variables the profiled process does not get."""
        from .options import valid_names
        from .tools.environment import profiled_environment

        passed = valid_names(tuple(dict.fromkeys([*self.settings.pass_env, *opts.pass_env])))
        # in place the kernel is the profiled process: its launcher gave it the allow-listed environment already
        if not self._said_env and not opts.quiet and self.inplace() is None:
            self._said_env = True
            _, withheld = profiled_environment(passed=passed)
            if withheld:
                print(f"nsight-magic: {len(withheld)} of this kernel's environment variables are not passed to the "
                      "profiled process (it gets what Python, CUDA, NCCL, PyTorch and the locale need: secrets "
                      "hide in any name, and nsys records the environment); %nsys_session --env names them, "
                      "--env NAME or %config NsightMagics.pass_env = ['NAME'] passes one")
        return replace(opts, pass_env=passed)

    def prompt_number(self) -> int:
        """The number of the cell being run as the user sees it ([2]): the shell's counter is already one ahead
        while a cell runs; its display hook knows the prompt's."""
        hook = getattr(self.shell, "displayhook", None)
        n = getattr(hook, "prompt_count", None)
        return int(n) if isinstance(n, int) else int(self.shell.execution_count)

    def cell_key(self, cell: str) -> str:
        header = getattr(self.shell, "parent_header", None) or {}
        cell_id = (header.get("metadata") or {}).get("cellId")
        return cell_id or hashlib.sha1(cell.encode()).hexdigest()

    def nsys(self, line: str, cell: str, parse) -> None:
        """%%nsys: `parse` reads the magic's line (its arguments)."""
        header = f"%%nsys {line}".strip()  # the magic's line as the editor shows it
        if self.settings.trace and not TRACE_FLAG.search(line):  # %config NsightMagics.trace: the line's own first
            line = f"--trace {shlex.quote(self.settings.trace)} {line}"
        try:
            args = parse(line)
            opts = self.with_env(nsys_options_from_args(args, default_name=f"cell{self.prompt_number()}"))
        except NsightMagicError as e:
            raise UsageError(str(e)) from None
        from .profilers.recorder import CellRequest  # (the profilers load with the first profile, not the extension)

        status = LiveStatus("nsys", opts.quiet)
        # the editor's number of the cell's first line: 2 under the %%nsys line; the JupyterLab buttons run a cell's
        # own text under a magic line the editor does not show (1)
        req = CellRequest(cell, opts, shell=self.shell, on_output=status.output, on_status=status,
                          on_prepared=None if opts.quiet else print_manifest, cell_first_line=args.cell_line,
                          number=self.prompt_number(), header=header)
        recorder: Recorder = self.frontend.recorder("nsys")
        ip = self.inplace()
        if ip is not None:  # a kernel under nsys launch: the cell runs here, recorded in place
            from .profilers.inplace import InPlaceSession, why_not_in_place

            given = args.trace if TRACE_FLAG.search(line) else None
            why = (why_not_in_place(opts, given, ip.trace) if isinstance(ip, InPlaceSession)
                   else "this kernel runs under Nsight Compute (its %%ncu measures cells in place)")
            if why is None and isinstance(ip, InPlaceSession):
                recorder = ip
            else:
                print(f"nsight-magic: in a fresh process, not in place: {why}")
                req = replace(req, opts=replace(opts, fresh=True))
        else:  # a new worker starts unless the warm one has this setup
            self.guard_gpu_memory(fresh=opts.fresh or not self.frontend.warm_for_setup())
        self.record(recorder, req, status, args.wait, thresholds=req.opts.thresholds)

    def ncu(self, line: str, cell: str, parse) -> None:
        """%%ncu: `parse` reads the magic's line (its arguments)."""
        try:
            args = parse(line)
            opts, ncu_opts = ncu_options_from_args(args, default_name=f"cell{self.prompt_number()}")
            opts = self.with_env(opts)
        except NsightMagicError as e:
            raise UsageError(str(e)) from None
        from . import tools

        if not tools.gpu_visible():  # said before the cell runs: ncu would replay no kernel, however long it ran
            raise UsageError("no NVIDIA GPU is visible to this kernel, so Nsight Compute has no kernel to profile "
                             "and the cell was not run; %%nsys shows its CPU activity and NVTX ranges")
        from .profilers.inplace_ncu import InPlaceNcu
        from .profilers.recorder import CellRequest

        status = LiveStatus("ncu", opts.quiet)
        req = CellRequest(cell, opts, ncu_opts, shell=self.shell, on_output=status.output, on_status=status,
                          on_prepared=None if opts.quiet else print_manifest, cell_first_line=2,
                          number=self.prompt_number(), header=f"%%ncu {line}".strip())
        recorder: Recorder = self.frontend.recorder("ncu")
        ip = self.inplace()
        why = ip.why_not_in_place(ncu_opts, fresh=bool(args.fresh)) if isinstance(ip, InPlaceNcu) else ""
        if why is None and isinstance(ip, InPlaceNcu):  # a kernel under ncu: its kernels are measured here
            recorder = ip
        else:
            if why:
                print(f"nsight-magic: in a fresh process, not in place: {why}")
            self.guard_gpu_memory(fresh=True)  # otherwise %%ncu runs the cell in a process of its own
        self.record(recorder, req, status, args.wait, thresholds=None)

    def record(self, recorder: Recorder, req: CellRequest, status: LiveStatus, wait: bool,
               thresholds: dict | None) -> None:
        """The record stage by `recorder` (profilers/recorder.py: fresh, warm or in place), into this front end's
        history; then after_record."""
        try:
            rec = self.frontend.made(recorder.record(req))
        except NsightMagicError as e:
            raise UsageError(str(e)) from None
        self.after_record(rec, status, req.opts.render, thresholds, wait)

    def after_record(self, rec, status: LiveStatus, render: bool, thresholds: dict | None, wait: bool) -> None:
        """The cell's code has finished: say what the record stage knows, give back the --return values, and leave
        the rest (the report, the view) to a background job that fills the output below; the cell waits for it
        only with --wait or when nobody would see the output change (nbclient, nbconvert, papermill)."""
        from . import background

        later = not (wait or self.settings.value("wait")) and draws_later(self.shell)
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

        live = watched(self.shell)
        job = background.start(rec, render=render, thresholds=thresholds, on_phase=out.phase, on_done=done,
                               loader=render and needs_bokehjs(), live=live, on_drawn=out.drawn if live else None)
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


def say_previous_end(ipython) -> None:
    """In a restarted in-place kernel: what ended the previous one's processes, under the first cell run."""
    from .profilers.inplace import inplace_config, previous_end_note

    said = previous_end_note(inplace_config() or {})
    if not said:
        return

    def once(*_):
        ipython.events.unregister("post_run_cell", once)
        print(f"nsight-magic: the previous kernel: {said}", file=sys.stderr)

    ipython.events.register("post_run_cell", once)
