"""The profiled process, seen from the notebook: its environment, streaming its output and progress, stopping it.

The profiler's process group is ours alone (new session): a timeout or an interrupt stops it with SIGINT (the
profiler then writes what it has), then SIGTERM, then SIGKILL, and strays that carry this run's id in their
environment (nsys's agent outlives its parent) are killed too.
"""
from __future__ import annotations

import codecs
import json
import os
import re
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Callable

from ..inside import procs
from ..inside.child import rank_suffix
from ..inside.tool_files import remove_tool_files, sweep_tool_files, tool_files_named_in
from ..inside.marks import EXIT_CELL_ERROR
from ..errors import NsightMagicError
from ..store import ProfileFolder
from ..tools import orphan_guard, parent_pid
from ..tools.environment import profiled_environment

OutputCallback = Callable[[str, str], None]      # (stream name "stdout"|"stderr", text)
StatusCallback = Callable[[str, float], None]    # (phase, seconds since start)

RUN_ID_ENV = "NSIGHT_MAGIC_RUN_ID"
POLL_S = 0.05
CELL_STOP_S = 5.0       # a stopped cell's processes get this long to end before the profiler is stopped


class RunFailed(NsightMagicError):
    """The run could not start; the message says why and where the kept files are."""



class RunStatus(StrEnum):
    """How a profiled run ended (RunResult.status, ChildOutcome.status).  Members are their strings: a status read
    back from run.json or compared with "ok" is the same value."""
    OK = "ok"                     # the cell ran to its end
    CELL_ERROR = "cell-error"     # the cell raised (its traceback is in the output)
    SETUP_ERROR = "setup-error"   # the %%nsight_setup code raised before the cell
    STATE_ERROR = "state-error"   # the sent variables could not be loaded
    EXITED = "exited"             # the cell called sys.exit() with a non-zero status
    TIMEOUT = "timeout"           # --timeout stopped it
    INTERRUPTED = "interrupted"   # Ctrl-C stopped it
    FAILED = "failed"             # the process or the profiler died

@dataclass
class RunResult:
    """What one profiled run left behind."""

    folder: ProfileFolder
    status: str                      # ok | cell-error | setup-error | state-error | failed | timeout | interrupted
    returncode: int | None
    wall_s: float
    report_file: Path | None = None  # .nsys-rep / .ncu-rep
    sqlite: Path | None = None
    messages: list[str] = field(default_factory=list)
    returned: dict = field(default_factory=dict)
    manifest: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)   # seconds: run (tool + child), report (import/export), ...
    notes: list[str] = field(default_factory=list)  # informational lines (messages are problems)
    # what open() reads the report with: the runner the user calls (nsight_magic.run) gives the facade's
    # open_report, which this floor cannot import; readers.read_report (the data alone) otherwise
    opener: Callable[[Path], Any] | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def open(self):
        """The report, or None when no report was written: from nsight_magic.run's runners an NsysReport /
        NcuReport, as nsight_magic.open_report gives it."""
        from ..readers import read_report

        target = self.sqlite or self.report_file
        return (self.opener or read_report)(target) if target else None


@dataclass
class Recording:
    """What the record stage leaves: the cell has run, its output was streamed and its --return values are back;
    the profiler may still be writing its report.  finish() does the rest (waits for the report, imports and
    exports it) and returns the RunResult; the notebook runs it in the background (nsight_magic.background)."""

    folder: ProfileFolder
    tool: str                        # nsys | ncu
    status: str                      # the cell's outcome as the record stage knows it (RunResult.status is final)
    record_s: float                  # how long the record stage took: what the notebook's cell waited
    returned: dict
    manifest: list
    messages: list[str]              # problems known when the cell ended (already said to the user)
    notes: list[str]
    _finish: Callable = field(default=None, repr=False)
    _result: RunResult | None = field(default=None, repr=False)
    opener: Callable[[Path], Any] | None = field(default=None, repr=False)  # given to the RunResult

    def finish(self, on_status: StatusCallback | None = None, cancel=None) -> RunResult:
        """Wait for the report and export it (once; later calls return the same RunResult).  `cancel`, a
        threading.Event that Ctrl-C sets, stops what can be stopped and keeps what the profiler wrote."""
        if self._result is None:
            self._result = self._finish(on_status, cancel)
            if self.opener is not None:
                self._result.opener = self.opener
        return self._result

    @property
    def finished(self) -> bool:
        return self._result is not None


def child_environment(base: dict | None = None, passed=()) -> dict:
    """The profiled process's environment: the allow-list of tools/environment.py plus the names `passed`.

    nsys stores the target's whole environment inside the report, and reports get shared."""
    env, _ = profiled_environment(base, passed)
    # ipykernel's inline backend means nothing outside the kernel.
    if env.get("MPLBACKEND", "").startswith("module://"):
        env["MPLBACKEND"] = "Agg"
    env["PYTHONUNBUFFERED"] = "1"
    return env


class _Prefix:
    """Puts "[rank R] " before each line of rank R > 0 (text arrives in pieces: remembers where lines begin).  With
    several ranks (`whole_lines`) a line is passed on once it is complete, so that two ranks printing at once do
    not cut each other's lines; a piece without its end is passed on after HOLD_S (a progress bar's `\r`
    ends a line too) or by flush() when the run is over."""

    HOLD_S = 0.5

    def __init__(self, rank: int, whole_lines: bool = False):
        self.tag = f"[rank {rank}] " if rank else ""
        self.at_start = True
        self.whole_lines = whole_lines
        self.held, self.held_since = "", 0.0

    def __call__(self, text: str) -> str:
        if self.whole_lines:
            if text and not self.held:
                self.held_since = time.monotonic()
            text, self.held = self.held + text, ""
            cut = max(text.rfind("\n"), text.rfind("\r")) + 1
            if cut < len(text) and time.monotonic() - self.held_since < self.HOLD_S:
                text, self.held = text[:cut], text[cut:]
        return self._tagged(text)

    def flush(self) -> str:
        text, self.held = self.held, ""
        return self._tagged(text)

    def _tagged(self, text: str) -> str:
        if not self.tag or not text:
            return text
        out = re.sub(r"([\r\n])(?=[^\r\n])", lambda m: m.group(1) + self.tag, text)  # each line's start, not empty ones
        if self.at_start and text[0] not in "\r\n":
            out = self.tag + out
        self.at_start = text[-1] in "\r\n"
        return out


class Tail:
    """Follow a file the child appends to; decode UTF-8 across read boundaries."""

    def __init__(self, path: Path):
        self.path, self.pos = path, 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def read(self) -> str:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except FileNotFoundError:
            return ""
        self.pos += len(data)
        return self.decoder.decode(data)


def run_processes(env_name: str, run_id: str) -> list[int]:
    """Live processes (not this one) carrying this run's (or session's) id in their environment."""
    me = os.getpid()
    # (one gone meanwhile, a zombie, or another user's has no environment to read)
    return [p for p in procs.pids() if p != me and (procs.environ(p) or {}).get(env_name) == run_id]


def process_argv(pid: int) -> list[bytes]:
    """A process's command line ([b""] when it is gone or a zombie)."""
    return [os.fsencode(a) for a in procs.cmdline(pid)] or [b""]


def kill_strays(run_id: str, env_name: str = RUN_ID_ENV) -> None:
    """Kill processes carrying this run's id in their environment (nsys's agent escapes the process group)."""
    for pid in run_processes(env_name, run_id):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue


def _ns_pid(pid: int) -> str | None:
    """A process's pid in its own PID namespace (the last NSpid), None when gone or a zombie.  psutil has no
    NSpid: it is read from the process's status file."""
    if not procs.alive(pid):
        return None
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return next((ln.split()[-1] for ln in status.splitlines() if ln.startswith("NSpid:")), str(pid))


def _is_tool(argv: list[bytes]) -> bool:
    """A process of the profiler (nsys, its launcher and agent) or of our isolation, by its command line."""
    exe = os.path.basename(argv[0].decode(errors="replace"))
    return not exe or exe.startswith(("nsys", "unshare", "setpriv"))


def is_machinery(argv: list[bytes]) -> bool:
    """A process of the profiler, of our isolation or of ours (`-m nsight_magic.inside.*`): not the user's."""
    return _is_tool(argv) or argv[1:2] == [b"-m"] and bool(argv[2:3]) and argv[2].startswith(b"nsight_magic.inside.")


def stop_orphans(env_name: str, run_id: str) -> list[str]:
    """The run's processes other than the profiler's (nsys, its launcher and agent), unshare, setpriv and ours
    (`-m nsight_magic.inside.*`): what the profiled process started and left when it died (os._exit, a crash), which
    the profiler waits for.  Stopped: SIGTERM, then SIGKILL.  Returns their descriptions ("pid: command")."""
    found: dict[int, str] = {}
    for pid in run_processes(env_name, run_id):
        argv = process_argv(pid)
        if is_machinery(argv):
            continue
        found[pid] = " ".join(x.decode(errors="replace") for x in argv if x)[:80]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in found:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        end = time.monotonic() + 1.0
        while time.monotonic() < end and any(process_argv(pid)[0] for pid in found):
            time.sleep(0.05)
    return [f"{pid}: {cmd}" for pid, cmd in found.items()]


class OrphanWatch:
    """Watches a running cell's profiled process (or warm worker) by the pid it wrote in its first record, as its
    PID namespace numbers it (matched through NSpid, not its command line, which the cell may change).  When it has
    been gone LOOK_S while the profiler still runs, what it left running is stopped (stop_orphans), once: the
    profiler waits for those processes, which would hold the cell until its --timeout."""

    def __init__(self, env_name: str, run_id: str):
        self.env_name, self.run_id = env_name, run_id
        self.last = self.gone_since = None
        self.stopped: list[str] | None = None

    def tick(self, now: float, ns_pid) -> list[str] | None:
        """Called in the wait loop (`ns_pid`: a callable giving the pid, None until written); the processes it
        stopped, the one time it does, else None."""
        if self.stopped is not None or self.last is not None and now - self.last < LOOK_S:
            return None
        self.last = now
        pid = ns_pid()
        if pid is None or any(_ns_pid(p) == str(pid) for p in run_processes(self.env_name, self.run_id)):
            self.gone_since = None
            return None
        self.gone_since = now if self.gone_since is None else self.gone_since
        if now - self.gone_since < LOOK_S:
            return None
        self.stopped = stop_orphans(self.env_name, self.run_id)
        return self.stopped


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _interrupt_cell(proc: subprocess.Popen, run_id: str, wait_s: float = CELL_STOP_S) -> None:
    """SIGINT to the profiled process the profiler started (the cell's, or torchrun, which passes it on to its
    ranks), as nsys would pass it on; then until the cell's processes have ended, at most wait_s.  Stopped through
    the profiler instead, they had about 0.3-0.7 s: nsys exits once it has written its report, and as the first
    process of the PID namespace its exit kills every process left there, one still printing its KeyboardInterrupt
    traceback (where a hung rank was) included."""
    cell = {pid for pid in run_processes(RUN_ID_ENV, run_id) if not _is_tool(process_argv(pid))}
    top = [pid for pid in cell if parent_pid(pid) not in cell]
    for pid in top:
        try:
            os.kill(pid, signal.SIGINT)
        except OSError:
            continue
    end = time.monotonic() + wait_s
    while top and proc.poll() is None and time.monotonic() < end and any(process_argv(p)[0] for p in cell):
        time.sleep(POLL_S)


def _stop(proc: subprocess.Popen, run_id: str, grace_s: float) -> None:
    """SIGINT to the cell's processes (their tracebacks written), then the profiler's: SIGINT (it writes its report)
    -> SIGTERM -> SIGKILL, then strays."""
    try:
        _interrupt_cell(proc, run_id)
    except KeyboardInterrupt:  # a second Ctrl-C: on to the profiler
        pass
    for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        _signal_group(proc, sig)
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
        except KeyboardInterrupt:  # a second Ctrl-C: skip the grace period
            continue
    kill_strays(run_id)


@dataclass
class ChildOutcome:
    returncode: int | None
    status: str
    wall_s: float
    phases: list[str]
    timings: dict = field(default_factory=dict)  # seconds of the capture's steps (warm: setup, load, start, ...)
    failed_rank: int | None = None                # --nproc: the rank (> 0) whose failure decided the status
    details: dict = field(default_factory=dict)   # what the messages say besides the status: exit_status (the
    #   cell's sys.exit code), leftovers (processes the cell left running, stopped), interrupted_writing (Ctrl-C
    #   after the cell ended), ranks_done (--nproc timeout: the ranks that had finished their cell)


LOOK_S = 0.5            # how often a running cell's profiled process is looked for (a /proc scan)
FINALIZE_WARN_S = 20.0  # a profiler still writing its report this long after the cell ended gets a word
STUCK_GRACE_S = 5.0     # a profiler found stuck (finish's `stuck`) gets this long after SIGINT, as it ignores it
FINISHED_PHASES = ("finished", "setup-error", "state-error")  # a rank whose part is over (values written)
CELL_OVER_PHASES = ("cell-done", *FINISHED_PHASES)               # a rank whose cell is over


class ChildRun:
    """The profiler over a fresh profiled process (or torchrun and its ranks), seen from the notebook, in two stages:

    record()  streams the cell's output and progress until every rank has finished its cell and written its
              --return values (or the process ended, the --timeout, Ctrl-C): what the notebook's cell waits for;
    finish()  waits for the profiler to write its report and exit (in the background); `cancel` stops that writing
              the way Ctrl-C does (SIGINT: the profiler writes what it has, then SIGTERM, SIGKILL).

    The --timeout is the cell's: once every rank has finished its cell it no longer applies, and Ctrl-C from then on
    stops only the profiler's writing (the cell's outcome stands).  ranks > 1 (--nproc): every rank's output is
    streamed, lines of rank R > 0 prefixed with "[rank R] "; the phases reported are rank 0's."""

    def __init__(self, argv: list[str], prep, env: dict, on_output: OutputCallback | None = None,
                 on_status: StatusCallback | None = None, ranks: int = 1):
        folder = prep.folder
        self.folder, self.ranks = folder, ranks
        self.run_id = uuid.uuid4().hex
        self.t0 = time.monotonic()
        self.status_cb = on_status or (lambda phase, t: None)
        self.output_cb = on_output or (lambda stream, text: None)
        self.status_cb("starting", 0.0)
        tool_log = open(folder.tool_log, "wb")
        try:
            # orphan_guard: if the notebook's kernel dies, the profiler and everything it started die with it
            self.proc = subprocess.Popen([*orphan_guard(), *argv], cwd=prep.cwd, env={**env, RUN_ID_ENV: self.run_id},
                                         stdin=subprocess.DEVNULL, stdout=tool_log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        except OSError as e:
            raise RunFailed(f"could not start {argv[0]}: {e}; kept: {folder.path}/") from None
        finally:
            tool_log.close()
        self.tails = [(stream, Tail(folder.path / f"{stream}{rank_suffix(r)}.txt"), _Prefix(r, ranks > 1))
                      for r in range(ranks) for stream in ("stdout", "stderr")]
        self.progress = [Tail(folder.path / f"progress{rank_suffix(r)}.jsonl") for r in range(ranks)]
        self.phases: list[str] = []                # rank 0's
        self.rank_phases: list[set[str]] = [set() for _ in range(ranks)]  # what each rank recorded
        self.cell_over = [False] * ranks           # each rank finished its cell
        self.finished = [False] * ranks            # ... and wrote what the notebook needs
        self.extras: dict = {}
        self.outcome: str | None = None            # decided by us: timeout, interrupted
        self.cell_ended: float | None = None       # when every rank had finished its cell (seconds since t0)
        self.record_s: float | None = None
        self.child_pid: int | None = None          # rank 0's pid in its PID namespace (its first record)
        self.lingering: list[str] = []             # rank 0's threads that keep it alive after the cell

    def _pump(self, stream_output: bool = True, last: bool = False) -> None:
        for stream, tail, prefix in self.tails:
            text = tail.read()
            if not stream_output:
                continue
            text = prefix(text) + (prefix.flush() if last else "")
            if text:
                self.output_cb(stream, text)
        for r, tail in enumerate(self.progress):
            for rec in json_records(tail.read()):
                phase = rec.get("phase")
                if phase in CELL_OVER_PHASES:
                    self.cell_over[r] = True
                if phase in FINISHED_PHASES:
                    self.finished[r] = True
                if phase == "leftovers":
                    self.extras.setdefault("leftovers", []).extend(rec.get("processes", []))
                self.rank_phases[r].add(str(phase))
                if phase == "threads":
                    names = [str(x)[:80] for x in rec.get("names") or [] if isinstance(x, str)]
                    self.extras.setdefault("threads", []).extend(names)
                    if not r:
                        self.lingering = names
                if r:
                    continue
                if phase == "importing" and isinstance(rec.get("pid"), int):
                    self.child_pid = rec["pid"]  # in its PID namespace
                self.phases.append(phase)
                if phase == "exited":
                    self.extras["exit_status"] = rec.get("status")
                if phase == "cell-done":
                    self.extras["cell_status"] = rec.get("status")
                self.status_cb(phase, time.monotonic() - self.t0)
        if self.cell_ended is None and all(self.cell_over):
            self.cell_ended = time.monotonic() - self.t0

    def _exited(self) -> bool:
        try:
            self.proc.wait(timeout=POLL_S)
            return True
        except subprocess.TimeoutExpired:
            return False

    def record(self, timeout: float | None, stop_grace_s: float = 30.0) -> None:
        """Until every rank has finished (its --return values written), the process ended, the --timeout or Ctrl-C
        (which stops the whole run, as before the cell ended)."""
        last_tick = 0.0
        watch = OrphanWatch(RUN_ID_ENV, self.run_id)
        try:
            while not self._exited():
                self._pump()
                if all(self.finished):
                    break
                now = time.monotonic() - self.t0
                if self.ranks == 1:  # (a rank that dies is torchrun's to handle)
                    left = watch.tick(now, lambda: self.child_pid)
                    if left is not None:
                        self.extras["orphans"] = left
                if now - last_tick >= 1.0:  # lets a status line show the elapsed time
                    last_tick = now
                    self.status_cb(self.phases[-1] if self.phases else "starting", now)
                if timeout is not None and self.cell_ended is None and now > timeout:
                    self.extras["ranks_done"] = [r for r, d in enumerate(self.cell_over) if d]  # before the stop
                    self.status_cb("stopping (timeout)", now)
                    _stop(self.proc, self.run_id, stop_grace_s)
                    self.outcome = RunStatus.TIMEOUT
                    break
        except KeyboardInterrupt:
            self._pump()
            self.status_cb("stopping (interrupted)", time.monotonic() - self.t0)
            _stop(self.proc, self.run_id, stop_grace_s)
            if all(self.cell_over):
                self.extras["interrupted_writing"] = True
            else:
                self.outcome = RunStatus.INTERRUPTED
        self._pump(last=True)
        self.record_s = time.monotonic() - self.t0

    @property
    def status_so_far(self) -> str:
        """The cell's outcome as the record stage knows it (finish() decides it for good, with the exit status)."""
        if self.outcome or self.proc.returncode is not None:
            return self._status()
        for bad in ("setup-error", "state-error"):
            if bad in self.phases:
                return bad
        if "exited" in self.phases:
            return RunStatus.OK if not self.extras.get("exit_status") else RunStatus.EXITED
        cs = self.extras.get("cell_status", 0)
        return RunStatus.OK if cs == 0 else RunStatus.CELL_ERROR if cs == EXIT_CELL_ERROR else RunStatus.EXITED

    def finish(self, on_status: StatusCallback | None = None, cancel=None, stop_grace_s: float = 30.0,
               stuck: Callable[[], str | None] | None = None) -> ChildOutcome:
        """Until the profiler has written its report and exited.  `cancel` (a threading.Event, set by Ctrl-C) stops
        its writing: SIGINT (it writes what it has), then SIGTERM, then SIGKILL.  `stuck`, asked once a second,
        says why a profiler that will never finish is stopped the same way.  Output is no longer streamed."""
        status_cb = on_status or self.status_cb
        last_tick = 0.0
        try:
            while self.proc.returncode is None and not self._exited():
                self._pump(stream_output=False)
                now = time.monotonic() - self.t0
                if cancel is not None and cancel.is_set():
                    status_cb("stopping the profiler's writing (interrupted)", now)
                    _stop(self.proc, self.run_id, stop_grace_s)
                    self.extras["interrupted_writing"] = True
                    break
                if now - last_tick >= 1.0:
                    last_tick = now
                    why = stuck() if stuck is not None else None
                    if why:
                        status_cb(f"{why}; stopping it", now)
                        _stop(self.proc, self.run_id, STUCK_GRACE_S)
                        self.extras["profiler_stuck"] = why
                        break
                    since = now - (self.cell_ended if self.cell_ended is not None else now)
                    if self.lingering:  # (once they end, nsys writes a few seconds more under these words)
                        status_cb(f"the cell ended {since:.0f} s ago; its process waits for its thread"
                                  f"{'s' if len(self.lingering) > 1 else ''} {', '.join(self.lingering)} to end "
                                  "(not a daemon: Python waits for it at exit); nsys writes the report after "
                                  "(Ctrl-C stops it and keeps what it wrote)", now)
                    elif since >= FINALIZE_WARN_S:
                        status_cb(f"the cell ended {since:.0f} s ago; the profiler is still writing its report "
                                  "(Ctrl-C stops it and keeps what it wrote)", now)
                    else:
                        status_cb("the profiler is writing its report", now)
        except KeyboardInterrupt:  # finish() in the notebook's own thread (--wait, the command line)
            _stop(self.proc, self.run_id, stop_grace_s)
            self.extras["interrupted_writing"] = True
        # The profiler has exited; helpers it started must not outlive the run, nor its files in /tmp.
        kill_strays(self.run_id)
        self._pump(stream_output=False)
        remove_tool_files(tool_files_named_in(self.folder.path))  # named in the ranks' first records
        sweep_tool_files()  # and those of an attempt that failed at start-up, which named none
        return ChildOutcome(self.proc.returncode, self._status(), time.monotonic() - self.t0, self.phases,
                             details=self.extras)

    def _status(self) -> str:
        rc = self.proc.returncode
        if self.outcome:
            return self.outcome
        if (self.extras.get("interrupted_writing") or self.extras.get("profiler_stuck")) and \
                "cell_status" in self.extras:
            cs = self.extras["cell_status"]  # the cell had ended: only the profiler's writing was stopped
            return RunStatus.OK if cs == 0 else RunStatus.CELL_ERROR if cs == EXIT_CELL_ERROR else RunStatus.EXITED
        return status_from(rc, self.phases, self.extras.get("cell_status"))


def status_from(rc: int | None, phases: list[str], cell_status: int | None = None) -> RunStatus:
    """The run's outcome from the exit status and the phases the child recorded; `cell_status`: the status the
    child's cell-done record gave, when there was one."""
    if "setup-error" in phases:  # the child's phases, named as the statuses they end in
        return RunStatus.SETUP_ERROR
    if "state-error" in phases:
        return RunStatus.STATE_ERROR
    if "exited" in phases:
        return RunStatus.OK if rc == 0 else RunStatus.EXITED
    if "finished" in phases or "cell-done" in phases:
        if rc and cell_status == 0:
            # the cell ended well by its own record: the non-zero exit is the profiler's (ncu exits 1 when it
            # cannot attach, the number the child exits with when the cell raised: seen on a loaded machine)
            return RunStatus.FAILED
        return RunStatus.OK if rc == 0 else (RunStatus.CELL_ERROR if rc == EXIT_CELL_ERROR else RunStatus.FAILED)
    return RunStatus.FAILED


def rank_outcome(outcome: ChildOutcome, folder: ProfileFolder, nproc: int) -> ChildOutcome:
    """With --nproc: a rank other than 0 that raised, exited or failed to load decides the outcome when rank 0
    did not fail itself (torchrun then stopped the others); `failed_rank` names it for the message."""
    own = [x for x in _progress_records(folder.progress) if x.get("phase") == "finished"]
    if outcome.status in ("timeout", "interrupted") or (own and own[-1].get("status")):
        return outcome  # rank 0's own failure (or ours) speaks for itself
    for r in range(1, nproc):
        recs = _progress_records(folder.path / f"progress{rank_suffix(r)}.jsonl")
        phases = [x.get("phase") for x in recs]
        finished = [x for x in recs if x.get("phase") == "finished"]
        bad = next((RunStatus(p) for p in ("setup-error", "state-error") if p in phases), None)
        if bad is None and finished and finished[-1].get("status"):
            bad = RunStatus.CELL_ERROR if finished[-1]["status"] == EXIT_CELL_ERROR else RunStatus.EXITED
        if bad is None and "running" in phases and not finished:
            bad = RunStatus.FAILED
        if bad:
            return ChildOutcome(outcome.returncode, bad, outcome.wall_s, outcome.phases, outcome.timings,
                                 failed_rank=r, details={**outcome.details,
                                                         "rank_exit": torchrun_exit_codes(folder.tool_log).get(r)})
    return outcome


_TORCHRUN_FAILURE = re.compile(r"rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+)")


def torchrun_exit_codes(tool_log: Path) -> dict[int, int]:
    """rank -> exit code, from the failure summary torchrun prints ("rank : 1 (local_rank: 1)" then
    "exitcode : -9 (pid: ...)"); empty when it printed none."""
    try:
        text = tool_log.read_text(errors="replace")[-200_000:]
    except OSError:
        return {}
    return {int(r): int(c) for r, c in _TORCHRUN_FAILURE.findall(text)}


def _exit_words(code: int | None) -> str:
    if code is None:
        return "no exit status recorded"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def json_records(text: str) -> list[dict]:
    """The JSON lines of `text`; a line still being written (or garbled) is skipped."""
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def rank_finished(folder: ProfileFolder, rank: int) -> bool:
    """Whether this rank's process wrote its last progress record (its cell ran to its end)."""
    return any(x.get("phase") == "finished"
               for x in _progress_records(folder.path / f"progress{rank_suffix(rank)}.jsonl"))


def _progress_records(path: Path) -> list[dict]:
    try:
        return json_records(path.read_text())
    except OSError:
        return []


def describe_outcome(outcome: ChildOutcome, tool: str, timeout: float | None, folder: ProfileFolder,
                     ranks: int = 1) -> str | None:
    """One line for anything but success; always says where the files are."""
    where = f"everything is kept in {folder.path}/"
    rc = outcome.returncode
    log = f" (see {folder.tool_log.name})" if folder.tool_log.exists() else ""
    if outcome.status == "ok":
        if outcome.details.get("interrupted_writing"):
            return (f"interrupted after the cell had finished: {tool} was stopped while writing its report (what it "
                    f"wrote is kept); {where}")
        return None
    if outcome.failed_rank is not None:
        r = outcome.failed_rank
        what = {"cell-error": "raised an exception (traceback above)",
                "setup-error": "could not run the %%nsight_setup code (traceback above)",
                "state-error": "could not load the sent variables (see above)",
                "exited": "called sys.exit() with a non-zero status"}.get(outcome.status, "died while running the cell")
        code = outcome.details.get("rank_exit")
        if code is not None and outcome.status not in ("cell-error", "setup-error", "state-error"):
            what += f" ({_exit_words(code)})"
        return (f"rank {r} {what}; torchrun stopped the other ranks; its output is in stdout.rank{r}.txt and "
                f"stderr.rank{r}.txt; {where}")
    if outcome.status == "timeout":
        done = outcome.details.get("ranks_done")
        if done is not None and ranks > 1 and len(done) < ranks:
            late = [r for r in range(ranks) if r not in done]
            who = ", ".join(map(str, late))
            waiting = f"; rank{'s' if len(done) > 1 else ''} {', '.join(map(str, done))} had finished and " \
                      f"{'were' if len(done) > 1 else 'was'} waiting for it" if done else ""
            return (f"stopped after the --timeout of {timeout:g} s: rank{'s' if len(late) > 1 else ''} {who} had not "
                    f"finished the cell (where it was stopped: stderr.rank{late[0]}.txt){waiting}; {where}"
                    .replace("stderr.rank0.txt", "stderr.txt"))
        return f"stopped after the --timeout of {timeout:g} s; {where}"
    if outcome.status == "interrupted":
        return f"interrupted; {where}"
    if outcome.status == "cell-error":
        return f"the cell raised an exception (traceback above); the report covers the run up to it; {where}"
    if outcome.status == "setup-error":
        return f"the %%nsight_setup code raised an exception in the profiled process (traceback above); {where}"
    if outcome.status == "state-error":
        return f"the sent variables could not be loaded in the profiled process (see above); {where}"
    if outcome.status == "exited":
        code = outcome.details.get("exit_status", rc)
        return f"the cell called sys.exit() with exit status {code}; the report covers the run up to it; {where}"
    if rc is not None and rc < 0:
        return f"the profiled process was {_exit_words(rc)}; {where}"
    if "finished" not in outcome.phases and "running" in outcome.phases:
        return f"the profiled process died while running the cell ({_exit_words(rc)}); {where}"
    if "importing" not in outcome.phases:
        return f"{tool} exited with status {rc} before the cell started{log}; {where}"
    return f"{tool} exited with status {rc}{log}; {where}"


def outcome_notes(outcome: ChildOutcome) -> list[str]:
    """Informational lines about a run that went as it should (processes the cell left behind)."""
    notes = []
    left = outcome.details.get("leftovers") or []
    if left:
        n = len(left)
        notes.append(f"the cell left {n} process{'es' if n > 1 else ''} running ({'; '.join(left[:3])}"
                     f"{'; ...' if n > 3 else ''}); {'they were' if n > 1 else 'it was'} stopped when the cell ended")
    threads = outcome.details.get("threads") or []
    if threads:
        notes.append(f"the cell left thread{'s' if len(threads) > 1 else ''} {', '.join(threads[:3])} running (not "
                     "daemon): its process, and so the report, waited for "
                     f"{'them' if len(threads) > 1 else 'it'} to end; join it in the cell or make it a daemon")
    orphans = outcome.details.get("orphans") or []
    if orphans:
        n = len(orphans)
        notes.append(f"the profiled process died while {n} process{'es' if n > 1 else ''} it had started still ran "
                     f"({'; '.join(orphans[:3])}{'; ...' if n > 3 else ''}); {'they were' if n > 1 else 'it was'} "
                     "stopped so that nsys could write the report")
    return notes
