"""What a front end keeps between profiles, and the requests both front ends make: the magics (magics.py) and the
command line (cli.py) are thin wrappers over this.

    fe = Frontend()
    fe.remember_setup("model", "import torch; ...")   # runs before every profiled cell, outside the capture
    rec = fe.record_nsys(cell, opts, namespace=ns)     # the warm worker, its setup, this front end's history
    fe.diff()                                          # the last two Nsight Systems profiles made here

No IPython here: the magics add display and the notebook's namespace, the command line its arguments.
"""
from __future__ import annotations

import atexit
from pathlib import Path
from typing import TYPE_CHECKING

from . import background
from .errors import NsightMagicError, OptionError

if TYPE_CHECKING:
    from .profilers.process import Recording
    from .profilers.recorder import CellRequest

__all__ = ["Frontend", "diff_profiles", "is_job", "worker_environment"]


class FreshRecorder:
    """A Recorder (profilers/recorder.py) for `tool` in a process of its own, with the front end's setup code
    (%%nsys: its warm worker when it can); the request's shell gives the namespace that is sent."""

    def __init__(self, frontend: "Frontend", tool: str):
        self.frontend, self.tool = frontend, tool

    def record(self, req: CellRequest) -> Recording:
        common = dict(namespace=req.namespace, on_output=req.on_output, on_status=req.on_status,
                      on_prepared=req.on_prepared)
        if self.tool == "nsys":
            return self.frontend._record_nsys(req.cell, req.opts, cell_first_line=req.cell_first_line, **common)
        return self.frontend._record_ncu(req.cell, req.opts, req.tool_opts, **common)


def worker_environment(pass_env=()) -> dict:
    """The environment of a profiled process (the allow-list plus `pass_env`), with NVTX registering every range
    (a warm worker is recorded one cell at a time: its ranges must reach each recording)."""
    from .profilers import child_environment

    return {**child_environment(passed=tuple(pass_env)), "NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}


class Frontend:
    """The setup code, the warm %%nsys worker (profilers.session.SessionManager) and the profiles made here."""

    def __init__(self):
        from .profilers.session import SessionManager

        self.setup_sources: dict[str, str] = {}  # key (a cell id, a --name) -> source, in run order
        self.history: list[Path] = []            # profile folders made here, oldest first (for diff())
        self.last_result = None                  # the last Recording
        self.worker_trace: str | None = None     # what the next warm worker traces (%%nsight_setup --trace, else
        #                                          the last %%nsys's)
        self.sessions = SessionManager()         # the warm %%nsys process; stopped when this process exits
        # at exit (handlers run last registered, first), the background jobs end first: a profile cut short is
        # marked interrupted before its warm worker is stopped, never left as a failed run
        atexit.unregister(background.shutdown)
        atexit.register(background.shutdown)

    # -- setup code and the warm worker ------------------------------------------------------------------------
    @property
    def setups(self) -> list[str]:
        return list(self.setup_sources.values())

    def remember_setup(self, key: str, source: str) -> None:
        self.setup_sources[key] = source

    def forget_setup(self) -> None:
        self.setup_sources.clear()

    def warm_for_setup(self) -> bool:
        """Whether the warm worker has run this front end's setup code (a %%nsys would find it ready)."""
        s = self.sessions.session
        return s is not None and not s.retired and s.setup_sources == tuple(self.setups)

    @staticmethod
    def _launch(trace: str | None) -> dict:
        """nsys, trace (None: nsight-magic's default; fitted to this machine), launch args, cwd and umask of a new
        warm worker."""
        from . import tools
        from .options import DEFAULT_TRACE, trace_for_machine
        from .profilers.nsys import default_launch_args
        from .profilers.prepare import current_umask
        from .store import notebook_dir

        nsys = tools.find_nsys()
        trace, _ = trace_for_machine(trace or DEFAULT_TRACE, tools.gpu_visible())
        return dict(nsys=nsys, trace=trace, launch_args=default_launch_args(nsys, trace), cwd=notebook_dir(),
                    umask=current_umask())

    def prewarm(self, pass_env=(), default_trace: str = "") -> None:
        """Prepare the warm worker for the next %%nsys in the background (the setup code, trace and environment as
        they are now).  Nothing when nsys is missing or the notebook's GPU memory would not fit a second time (the
        next %%nsys says so); a worker that cannot start is started by the next %%nsys."""
        from .profilers.inplace import gpu_memory_guard

        if gpu_memory_guard():
            return
        try:
            launch = self._launch(self.worker_trace or default_trace or None)
        except NsightMagicError:
            return
        self.sessions.prewarm(env=worker_environment(pass_env), setup_sources=self.setups, **launch)

    def start_session(self, trace: str | None, pass_env=(), output=None, status=None) -> str | None:
        """Start a warm worker now (running the setup code); None once it is ready, else why there is none."""
        from .profilers.session import SessionUnavailable

        session = self.sessions.new(env=worker_environment(pass_env), setup_sources=self.setups,
                                    **self._launch(trace))
        try:
            records = session.start(None, None, output, status)
        except SessionUnavailable as e:
            self.sessions.stop()
            return str(e)
        if "ready" not in records.phases:
            self.sessions.stop()
            return "the setup code failed in the warm session (traceback above); no session is running"
        return None

    # -- profiles ----------------------------------------------------------------------------------------------
    def record_nsys(self, cell: str, opts, **kw):
        """run.record_nsys with this front end's setup code and warm worker; remembered in the history."""
        return self.made(self._record_nsys(cell, opts, **kw))

    def record_ncu(self, cell: str, opts, ncu_opts, **kw):
        return self.made(self._record_ncu(cell, opts, ncu_opts, **kw))

    def _record_nsys(self, cell: str, opts, **kw):
        from .run import record_nsys

        rec = record_nsys(cell, opts, setup_sources=self.setups, sessions=self.sessions, **kw)
        self.worker_trace = opts.trace
        return rec

    def _record_ncu(self, cell: str, opts, ncu_opts, **kw):
        from .run import record_ncu

        return record_ncu(cell, opts, ncu_opts, setup_sources=self.setups, **kw)

    def recorder(self, tool: str) -> "FreshRecorder":
        """The Recorder (profilers/recorder.py) of a cell in a process of its own, or %%nsys's warm worker."""
        return FreshRecorder(self, tool)

    def made(self, rec):
        """A recording (made here, or elsewhere: in place) into this front end's history."""
        self.last_result = rec
        self.history.append(Path(rec.folder.path))
        return rec

    def last_two(self, root: Path, say=None) -> tuple[Path, Path]:
        """The last two Nsight Systems profiles with a report made here (a failed run, or an %%ncu profile in
        between, is skipped), else the newest two in `root`."""
        from .store import folder_tool, has_report, list_profiles

        background.wait_for(self.history[-2:], say=say)
        made = [p for p in self.history if p.exists() and has_report(p) and folder_tool(p) == "nsys"]
        if len(made) >= 2:
            return made[-2], made[-1]
        profiles = list_profiles(root)
        profiles = profiles[profiles["folder"].map(lambda f: folder_tool(Path(f)) == "nsys")]
        if len(profiles) < 2:
            raise OptionError(f"%nsys_diff needs two Nsight Systems profiles with a report; {root} has "
                              f"{len(profiles)}: profile two cells with %%nsys first, or name two profiles")
        return Path(profiles.iloc[1]["folder"]), Path(profiles.iloc[0]["folder"])

    def diff(self, profiles=(), directory=None, match: str = "name", say=None, room: str | None = None):
        """Compare two profiles (names in `directory`, folders or report files); none given: the last two made
        here.  Profiles still loading are waited for.  room: the command that compares them, to check that both
        fit in this process's memory before they are read (memory_room.py); None: not checked."""
        from .store import profiles_root

        root = profiles_root(directory)
        if not profiles:
            before, after = self.last_two(root, say)
            return diff_profiles(before, after, root, match, say, room)
        if len(profiles) != 2:
            raise OptionError("give two profiles (or none: the last two of this notebook)")
        return diff_profiles(*profiles, root, match, say, room)


def diff_profiles(before, after, root: Path, match: str = "name", say=None, room: str | None = None):
    """analysis.diff of two profiles named by name (in `root`), folder or report file, once neither is loading;
    with `room` (the command, for its message), refused before their tables are read where both together need
    more memory than this process has room for (memory_room.check_room)."""
    from .analysis.diff import diff
    from .readers import report_and_label
    from .store import find_profile

    background.wait_under(root, say=say)  # a profile named by name may be loading
    b, a = find_profile(before, root), find_profile(after, root)
    background.wait_for((b, a), say=say)
    (b, bl), (a, al) = report_and_label(b), report_and_label(a)
    if room is not None:
        from .memory_room import check_room

        check_room(b, room, a)
    return diff(b, a, match=match, labels=(bl, al))


def is_job(path: Path, pattern: str | None = None) -> bool:
    """A folder of one job's per-rank reports (one or more, named after their ranks).  A folder whose ranks
    cannot be told apart (a rank twice) is a job too: loading it says which files clash."""
    from .jobs.discover import RankClash, find_rank_reports

    try:
        return len(find_rank_reports(path, pattern)) >= 1 or pattern is not None
    except RankClash:
        return True
    except NsightMagicError:
        return False
