"""Warm Nsight Systems sessions: a worker started once under `nsys launch`, each cell recorded by start/stop.

The cold path pays `import torch`, CUDA context creation, the model's construction and the profiler's own start for
every cell.  A session pays them once, and can pay them before the first cell (`SessionManager.prewarm`, called when
%%nsight_setup runs and when the extension loads):

    kernel --(host.fifo)--> session_host: nsys launch --session-new=S ... python -m nsight_magic.inside.worker DIR
                                          nsys start --session=S --output=FOLDER/report / nsys stop --session=S
    kernel --(worker.fifo)-> worker: load FOLDER (fresh namespace + the cell's variables), run

A cell has two stages with a seam between them:
  record_cell  the notebook prepares the profile folder, the worker loads the variables, `nsys start`, the worker
               runs the cell and writes its --return values; `nsys stop` is sent (the host runs its commands in
               order, so the next cell's `nsys start` waits behind it): what the notebook's cell waits for;
  finish_cell  the answer of that `nsys stop` (the report is written), in the background.

Isolation as cold: the host runs in its own PID namespace (tools.isolation_prefix) with the secret-free
environment; nsys keeps the session's files in that namespace's private /tmp/nvidia, which is why start/stop are
run by the host, inside.  Lifetime: the host reads a pipe whose other end only the kernel holds, so when the kernel
dies, for whatever reason, the host sees end-of-file and everything in the namespace is killed; stop() ends it
in order (worker exit, then the process group, then anything carrying the session's id).  A crash, a timeout or a
failed setup retires the session (stopped once its last recording is written); the next cell starts a new one.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .. import tools
from ..errors import NsightMagicError
from ..inside import commands, procs
from ..inside.child import write_setup
from ..inside.marks import SESSION_ID_ENV, USER_TMPDIR_ENV
from ..inside.tool_files import remove_tool_files, session_tool_files, sweep_tool_files, tool_files_of
from ..options import nsys_default_args  # `nsys start` takes our --sample/--cpuctxsw defaults (launch refuses them)
from .process import (POLL_S, OrphanWatch, ChildOutcome, kill_strays, status_from, Tail, json_records,
                      process_argv, run_processes)

STOP_TIMEOUT_S = 300


class SessionUnavailable(NsightMagicError):
    """nsys could not start a session (not the user's code): the cell runs cold instead."""


def session_key(nsys: Path, trace: str, env: dict, setup_sources, cwd: Path, launch_args=()) -> str:
    """What must match for a cell to run in an existing session: tool, traced APIs (in any order), what `nsys
    launch` records beyond them (device memory), environment, setup, folder."""
    h = hashlib.sha1()
    traced = ",".join(sorted({t.strip() for t in trace.split(",") if t.strip()}))
    for part in (str(nsys), traced, json.dumps(sorted(launch_args)), json.dumps(sorted(env.items())), str(cwd),
                 *setup_sources):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


@dataclass
class _Records:
    """JSON lines a process appends (a profile folder's progress, the session host's answers), read incrementally."""

    path: Path
    items: list = field(default_factory=list)

    def __post_init__(self):
        self.tail = Tail(self.path)

    def read(self) -> list[dict]:
        new = json_records(self.tail.read())
        self.items += new
        return new

    @property
    def phases(self) -> list[str]:
        return [r.get("phase") for r in self.items]


@dataclass
class WarmCell:
    """One cell's recording in a session, between its record stage and its finish stage."""

    folder: Path
    records: _Records
    t0: float
    outcome: str | None                 # decided by us: interrupted, timeout, state-error
    steps: dict                         # seconds: load_s, nsys_start_s, cell_s
    stop_seq: int | None = None         # the `nsys stop` sent at the end of the record stage
    keep: bool = True                   # the worker may run the next cell
    stop_failed: str | None = None      # how that `nsys stop` ended when it did not end well (killed, an error)

    @property
    def status_so_far(self) -> str:
        finished = [r for r in self.records.items if r.get("phase") == "finished"]
        return self.outcome or status_from(finished[-1].get("status", 0) if finished else None, self.records.phases)


class NsysSession:
    """One warm worker under `nsys launch`; see the module docstring."""

    def __init__(self, *, nsys: Path, trace: str, env: dict, setup_sources, cwd: Path, umask: int, launch_args=()):
        self.nsys, self.trace, self.cwd = Path(nsys), trace, Path(cwd)
        self.launch_args = tuple(launch_args)  # what `nsys launch` records beyond the trace (profilers/extras.py)
        self.key = session_key(self.nsys, trace, env, setup_sources, self.cwd, self.launch_args)
        self.setup_sources = tuple(setup_sources)
        self.id = uuid.uuid4().hex[:12]
        self.name = f"nsight-magic-{self.id}"
        self.dir = Path(tempfile.mkdtemp(prefix=f"{SESSION_DIR_PREFIX}{self.id}-"))
        write_setup(self.dir / "setup.py", setup_sources)
        self.umask = umask
        self.env = {**env, SESSION_ID_ENV: self.id, "NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
        self.proc: subprocess.Popen | None = None
        self.lifeline: int | None = None
        self.started_at: float | None = None
        self.worker_started: float | None = None
        self.setup_folder: Path = self.dir   # where the setup's output and progress go
        self.setup_records: _Records | None = None
        self.cells = 0
        self.seq = 0
        self.busy = False       # the worker is running the setup or a cell (it reads no command then)
        self.retired = False    # takes no more cells; stopped once its last recording is written
        self.pending: dict[int, str] = {}   # `nsys stop`s sent and not yet answered: seq -> profile folder name
        self._lock = threading.RLock()
        self._answers: dict[int, dict] = {}
        self.host_answers = _Records(self.dir / "host.jsonl")
        (self.dir / OWNER_FILE).write_text(json.dumps(tools.process_identity()))

    # ---- lifetime ---------------------------------------------------------------------------------------------
    def launch(self, folder=None) -> None:
        """Start the host and the worker, which runs the setup code; its output goes to `folder` (the profile folder
        of a cell that waits for it) or, prepared in the background, to the session's own folder."""
        path = Path(folder.path) if folder is not None else self.dir
        self.setup_folder = path
        self.setup_records = _Records(path / "progress.jsonl")
        (self.dir / "session.json").write_text(json.dumps({
            "nsys": str(self.nsys), "name": self.name, "trace": self.trace, "cwd": str(self.cwd),
            "launch_args": list(self.launch_args),
            "umask": self.umask, "folder": str(path)}))
        commands.make(self.dir / "host.fifo")
        commands.make(self.dir / "worker.fifo")
        read_end, self.lifeline = os.pipe()
        # a warm session takes no --nsys-args (a cell with them runs fresh): its nsys records no kernel frame
        argv, _ = tools.isolated_argv([sys.executable, "-m", "nsight_magic.inside.session_host", str(self.dir),
                                       str(read_end)], kernel_symbols=False)
        (self.dir / "command.txt").write_text(" ".join(argv) + "\n")
        with open(self.dir / "host-output.txt", "wb") as log:
            try:
                # nsys's raw streams go to the session's folder (removed with it), not /tmp; the worker gets the
                # user's TMPDIR back (inside.child.USER_TMPDIR_ENV)
                env = {**self.env, "TMPDIR": str(self.dir), USER_TMPDIR_ENV: os.environ.get("TMPDIR", "")}
                self.proc = subprocess.Popen(argv, cwd=self.cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, start_new_session=True, pass_fds=(read_end,))
            except OSError as e:
                raise SessionUnavailable(f"could not start the session host: {e}") from None
            finally:
                os.close(read_end)
        self.started_at = time.time()
        self.busy = True

    def wait_ready(self, folder=None, timeout: float | None = None, on_output=None, on_status=None,
                   t0: float | None = None) -> _Records:
        """Wait for the worker's setup to end, streaming its output (a cell that waits shows it).  Returns the
        setup's progress records ("ready" among them when it worked); SessionUnavailable when nsys itself failed
        before the worker started."""
        t0 = time.monotonic() if t0 is None else t0
        records = self.setup_records
        self._pump(self.setup_folder, records, ("ready", "setup-error"), timeout, on_output, on_status, t0)
        if "ready" in records.phases:
            self._ready()
            if folder is not None and Path(folder.path) != self.setup_folder:
                self._copy_setup_output(Path(folder.path))
            return records
        launched = "importing" in records.phases
        log = self.log_tail()
        if folder is not None and Path(folder.path) != self.setup_folder:
            self._copy_setup_output(Path(folder.path))
        self.stop()
        if not launched:
            raise SessionUnavailable(f"nsys launch did not start the worker ({log or 'no output'})")
        return records

    def _ready(self) -> None:
        """The setup has run: the worker reads commands."""
        if self.worker_started is None:
            self.busy = False
            try:
                self.worker_started = json.loads((self.dir / "worker.json").read_text())["started"]
            except (OSError, ValueError, KeyError):
                self.worker_started = time.time()

    def start(self, folder=None, timeout: float | None = None, on_output=None, on_status=None,
              t0: float | None = None) -> _Records:
        """launch() and wait_ready(): the setup's output goes to `folder` (the first cell's profile folder)."""
        self.launch(folder)
        return self.wait_ready(folder, timeout, on_output, on_status, t0)

    def _copy_setup_output(self, dest: Path) -> None:
        """A worker prepared in the background printed its setup's output into the session's folder: the first cell
        that uses it keeps a copy (setup-stdout.txt, setup-stderr.txt), since that folder goes with the session."""
        for stream in ("stdout", "stderr"):
            src = self.setup_folder / f"{stream}.txt"
            try:
                if src.stat().st_size:
                    shutil.copyfile(src, dest / f"setup-{stream}.txt")
            except OSError:
                pass

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def state(self) -> str:
        """starting | ready | busy | finishing | failed | ended."""
        if not self.alive():
            return "failed" if self.setup_records and "setup-error" in self.setup_records.phases else "ended"
        if self.setup_records is not None and self.worker_started is None:
            self.setup_records.read()
            if "setup-error" in self.setup_records.phases:
                return "failed"
            if "ready" not in self.setup_records.phases:
                return "starting"
            self._ready()
        if self.busy:
            return "busy"
        return "finishing" if self.pending else "ready"

    def retire(self) -> None:
        """No more cells: stopped (in the background: nobody waits for it) now, or when the recordings still being
        written are done."""
        with self._lock:
            self.retired = True
            if not self.pending:
                threading.Thread(target=self.stop, name=f"nsight-magic stop {self.name}", daemon=True).start()

    def stop(self, polite: bool = True) -> None:
        """End the worker (politely: asked to exit, when it is between cells and reads commands; a worker busy
        with its setup or a cell is stopped at once), the namespace and anything carrying the session's id;
        remove the session folder."""
        self.retired = True
        # a worker stopped as it starts has not written its settings files down yet: learnt while it lives
        tool_files = tool_files_of(run_processes(SESSION_ID_ENV, self.id))
        if self.proc is not None and self.alive() and polite and not self.busy:
            commands.send(self.dir / "worker.fifo", {"cmd": "exit"})
            try:
                self.proc.wait(timeout=3)  # the worker stops what its cells left running, exits; the host follows
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None:
            # a worker still starting records nothing yet: no report for nsys to write on SIGTERM, and unshare and
            # the namespace's first process ignore it (the 5 s wait for them made a kernel's exit right after
            # %load_ext take 6.5 s)
            starting = self.alive() and not self.pending and self.state() == "starting"
            for sig in (signal.SIGKILL,) if starting else (signal.SIGTERM, signal.SIGKILL):
                if self.proc.poll() is not None:
                    break
                try:
                    os.killpg(self.proc.pid, sig)
                    self.proc.wait(timeout=5)
                except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
                    pass
        if self.lifeline is not None:
            os.close(self.lifeline)
            self.lifeline = None
        kill_strays(self.id, SESSION_ID_ENV)
        remove_tool_files([*tool_files, *session_tool_files(self.dir)])  # nsys leaves them when it is stopped
        sweep_tool_files()  # and those of a launch that failed at start-up
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- one cell: record ------------------------------------------------------------------------------------
    def record_cell(self, folder, timeout: float | None, on_output=None, on_status=None, stop_grace_s: float = 10.0,
                    t0: float | None = None, records: _Records | None = None, start_args=()) -> WarmCell:
        """Load the cell's variables, `nsys start` (with `start_args`: what this cell records beyond the trace
        that `nsys start` takes, Python samples), run the cell until its --return values are written, send
        `nsys stop`; see the module docstring."""
        t0 = time.monotonic() if t0 is None else t0
        path = Path(folder.path)
        records = records or _Records(path / "progress.jsonl")
        tool_log = path / "tool-output.txt"
        steps: dict[str, float] = {}
        mark = time.monotonic()

        def step(name: str) -> None:
            nonlocal mark
            now = time.monotonic()
            steps[name] = round(now - mark, 3)
            mark = now

        cell = WarmCell(path, records, t0, None, steps)
        if not commands.send(self.dir / "worker.fifo", {"cmd": "load", "folder": str(path)}):
            # nobody reads the worker's commands (it ended): nothing of the cell has run, a fresh process runs it
            self.retired = True
            raise SessionUnavailable("its worker no longer reads commands")
        self.busy = True
        try:
            self._pump(path, records, ("loaded", "state-error"), timeout, on_output, on_status, t0)
        except KeyboardInterrupt:
            cell.outcome = "interrupted"
        step("load_s")
        if "loaded" not in records.phases:
            cell.outcome = cell.outcome or ("state-error" if "state-error" in records.phases else
                                            "timeout" if self.alive() else None)
            cell.keep = False
            self.retired = True  # its worker may still be loading: not used again
            return cell
        if self.pending and on_status:
            on_status("waiting for the previous profile's recording to be written", time.monotonic() - t0)
        start = [*nsys_default_args(start_args), *start_args]  # START_ARGS but what the cell records instead
        seq = self._send("start", *start, f"--output={path / 'report'}", timeout=120)
        try:
            answer = self._answer(seq, timeout=STOP_TIMEOUT_S + 120)  # behind the previous cell's `nsys stop`
        except KeyboardInterrupt:
            # the cell has not run; the host starts the recording anyway (its commands run in order): let it, and
            # stop it at once, so that the session stays usable
            cell.outcome = "interrupted"
            answer = self._answer(seq, timeout=STOP_TIMEOUT_S + 120)
            _append(tool_log, answer)
            if answer.get("rc") == 0:
                cell.stop_seq = self._send("stop", timeout=STOP_TIMEOUT_S)
                if cell.stop_seq is not None:
                    with self._lock:
                        self.pending[cell.stop_seq] = path.name
            self.busy = False
            return cell
        step("nsys_start_s")
        _append(tool_log, answer)
        if answer.get("rc") != 0:
            self.stop()
            raise SessionUnavailable(f"nsys start failed ({answer.get('output', '').strip()[-300:]})")
        self.cells += 1
        commands.send(self.dir / "worker.fifo", {"cmd": "run"})
        try:
            self._pump(path, records, ("idle",), timeout, on_output, on_status, t0)
            if "idle" not in records.phases and self.alive():
                cell.outcome = "timeout"
        except KeyboardInterrupt:
            cell.outcome = "interrupted"
            if on_status:
                on_status("stopping (interrupted)", time.monotonic() - t0)
            self._interrupt_worker()
            try:
                self._pump(path, records, ("idle",), time.monotonic() - t0 + stop_grace_s, on_output, None, t0)
            except KeyboardInterrupt:  # a second Ctrl-C: no more waiting
                pass
        step("cell_s")
        cell.keep = "idle" in records.phases and self.alive() and cell.outcome in (None, "interrupted")
        if self.alive():
            cell.stop_seq = self._send("stop", timeout=STOP_TIMEOUT_S)
            if cell.stop_seq is not None:
                with self._lock:
                    self.pending[cell.stop_seq] = path.name
        if cell.keep:
            self.busy = False
        else:
            self.retired = True  # a timed-out, stuck or dead worker takes no more cells
        return cell

    # ---- one cell: finish ------------------------------------------------------------------------------------
    def finish_cell(self, cell: WarmCell, on_status=None) -> ChildOutcome:
        """The answer of the cell's `nsys stop` (the report is written then), or, when the worker died, the end of
        `nsys launch` (which writes the report of the recording in progress itself).  The stop is always waited
        for: it is what keeps the report, and the session's next recording starts after it."""
        tool_log = cell.folder / "tool-output.txt"
        t_stop = time.monotonic()
        if cell.stop_seq is not None:
            if on_status:
                on_status("stopping the recording", time.monotonic() - cell.t0)
            try:
                answer = self._answer(cell.stop_seq, timeout=STOP_TIMEOUT_S)
            finally:  # answered or not, it is no longer waited for: %nsys_session --stop must not wait on it
                with self._lock:
                    self.pending.pop(cell.stop_seq, None)
            _append(tool_log, answer)
            rc = answer.get("rc")
            if rc != 0:
                cell.stop_failed = (f"was killed by {signal.Signals(-rc).name}" if isinstance(rc, int) and rc < 0
                                    and -rc in signal.valid_signals() else
                                    f"exited {rc}" if isinstance(rc, int) else str(answer.get("output") or "failed"))
        elif not self.alive() and self.proc is not None:
            self._wait_ended()
            _append(tool_log, {"output": self.log_tail()})
        cell.steps["nsys_stop_s"] = round(time.monotonic() - t_stop, 3)
        out = self._end_cell(cell)
        out.timings.update(cell.steps)
        with self._lock:
            if self.retired and not self.pending:
                self.stop(polite=cell.keep)
        return out

    def _end_cell(self, cell: WarmCell) -> ChildOutcome:
        records = cell.records
        records.read()
        rc = None
        if not self.alive() and self.proc is not None:
            with self._lock:
                self.host_answers.read()
            ended = [a for a in self.host_answers.items if a.get("event") == "ended"]
            rc = ended[-1].get("rc") if ended else self.proc.returncode
        finished = [r for r in records.items if r.get("phase") == "finished"]
        status = cell.outcome or status_from(finished[-1].get("status", 0) if finished and rc is None else rc,
                                              records.phases)
        details = {}
        exited = [r for r in records.items if r.get("phase") == "exited"]
        if exited:
            details["exit_status"] = exited[-1].get("status")  # the worker lives on: its own status says nothing
        if cell.stop_failed:
            details["stop_failed"] = cell.stop_failed
        for key, orphans in (("leftovers", False), ("orphans", True)):
            left = [p for r in records.items if r.get("phase") == "leftovers" and bool(r.get("orphans")) == orphans
                    for p in r.get("processes", [])]
            if left:
                details[key] = left
        if rc is not None and rc > 128 and rc - 128 in signal.valid_signals():
            rc = -(rc - 128)  # nsys launch exits with 128 + the signal that killed the worker
        return ChildOutcome(rc, status, time.monotonic() - cell.t0, records.phases, details=details)

    def _interrupt_worker(self) -> None:
        """SIGINT to the worker: a KeyboardInterrupt in the cell, as in a notebook."""
        for pid in _worker_pids(self.id):
            try:
                os.kill(pid, signal.SIGINT)
            except OSError:
                pass

    # ---- plumbing ---------------------------------------------------------------------------------------------
    def _send(self, verb: str, *args: str, timeout: float) -> int | None:
        """Ask the host to run `nsys VERB --session=S ARGS` (in order, one at a time); the command's sequence
        number, None when the host is gone."""
        with self._lock:
            self.seq += 1
            seq = self.seq
        if not commands.send(self.dir / "host.fifo", {"seq": seq, "verb": verb, "args": list(args),
                                                      "timeout": timeout}):
            return None
        return seq

    def _answer(self, seq: int | None, timeout: float) -> dict:
        """The host's answer to command `seq` (the record stage and the finish stages of earlier cells ask in
        different threads: answers are kept by number)."""
        if seq is None:
            return {"rc": None, "output": "the session host is gone"}
        end = time.monotonic() + timeout + 10
        while time.monotonic() < end:
            with self._lock:
                for a in self.host_answers.read():
                    if "seq" in a:
                        self._answers[a["seq"]] = a
                if seq in self._answers:
                    return self._answers.pop(seq)
            if not self.alive():
                return {"rc": None, "output": "the session ended"}
            time.sleep(POLL_S)
        return {"rc": None, "output": f"no answer from nsys within {timeout:g} s"}

    def _host(self, verb: str, *args: str, timeout: float) -> dict:
        """Run `nsys VERB --session=S ARGS` inside the namespace; the host's answer."""
        return self._answer(self._send(verb, *args, timeout=timeout), timeout)

    def _wait_ended(self, timeout: float = 60) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        with self._lock:
            self.host_answers.read()

    def _pump(self, folder: Path, records: _Records, until, timeout, on_output, on_status, t0) -> None:
        """Stream the folder's stdout/stderr and progress until a phase in `until`, the session's end or timeout."""
        if str(folder) not in self._tails:  # one cell at a time: the earlier cells' readers go (one pair a cell)
            self._tails.clear()
        tails = self._tails.setdefault(str(folder), {"stdout": Tail(folder / "stdout.txt"),
                                                     "stderr": Tail(folder / "stderr.txt")})
        last_tick = 0.0
        watch = OrphanWatch(SESSION_ID_ENV, self.id)  # a worker that died with its setup's processes alive

        def relay() -> None:
            for stream, tail in tails.items():
                text = tail.read()
                if text and on_output:
                    on_output(stream, text)

        while True:
            alive = self.alive()
            relay()
            for r in records.read():
                if on_status and r.get("phase") not in ("loaded", "idle", "ready"):
                    on_status(r.get("phase"), time.monotonic() - t0)
            if any(p in records.phases for p in until) or not alive:
                # what the worker wrote before the phase that ends the wait (a setup's traceback, then
                # "setup-error") may have come after this pass read its output: read it once more
                relay()
                return
            now = time.monotonic() - t0
            left = watch.tick(now, self._worker_ns_pid)
            if left:
                records.items.append({"phase": "leftovers", "processes": left, "orphans": True})
            if on_status and now - last_tick >= 1.0:
                last_tick = now
                on_status(records.phases[-1] if records.phases else "starting", now)
            if timeout is not None and now > timeout:
                return
            time.sleep(POLL_S)

    def _worker_ns_pid(self) -> int | None:
        """The worker's pid in the session's PID namespace, as its first record says (None before it wrote it)."""
        if self.setup_records is None:
            return None
        if not any(r.get("phase") == "importing" for r in self.setup_records.items):
            self.setup_records.read()
        return next((r["pid"] for r in self.setup_records.items
                     if r.get("phase") == "importing" and isinstance(r.get("pid"), int)), None)

    @property
    def _tails(self) -> dict:
        if not hasattr(self, "_tails_by_folder"):
            self._tails_by_folder = {}
        return self._tails_by_folder

    def log_tail(self, chars: int = 600) -> str:
        out = []
        for name in ("host-output.txt", "launch-output.txt"):
            try:
                out.append((self.dir / name).read_text(errors="replace")[-chars:].strip())
            except OSError:
                pass
        return "\n".join(x for x in out if x)

    def describe(self) -> dict:
        """state, pid, age, cells run and memory of the worker (for %nsys_session)."""
        pids = _worker_pids(self.id)
        rss = next((r for r in map(procs.rss_bytes, reversed(pids)) if r is not None), None)
        with self._lock:
            self.host_answers.read()
        # the host names a launch made again after nsys failed at start-up anew (inside.session_host)
        names = [a["session"] for a in self.host_answers.items if a.get("event") == "launched" and a.get("session")]
        return {"session": names[-1] if names else self.name, "alive": self.alive(), "state": self.state(),
                "finishing": sorted(self.pending.values()), "worker_pid": pids[0] if pids else None,
                "age_s": round(time.time() - self.started_at, 1) if self.started_at else None,
                "cells": self.cells, "worker_rss_bytes": rss, "trace": self.trace}


OWNER_FILE = "owner.json"
SESSION_DIR_PREFIX = "nsight-magic-session-"


def remove_stale_session_dirs(root: Path | None = None) -> list[Path]:
    """Session folders whose kernel is gone (killed with SIGKILL, so nothing cleaned up): removed.  Called when
    the extension loads in a kernel.  Returns what was removed."""
    removed = []
    for d in Path(root or tempfile.gettempdir()).glob(f"{SESSION_DIR_PREFIX}*"):
        try:
            owner = json.loads((d / OWNER_FILE).read_text())
        except (OSError, ValueError):
            owner = None
        if owner is not None and tools.identity_alive(owner):
            continue  # its kernel is alive
        if owner is None and time.time() - d.stat().st_mtime < 3600:
            continue  # no owner file: being created right now, or an older version's; leave it an hour
        remove_tool_files(session_tool_files(d))
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


def _append(path: Path, answer: dict) -> None:
    """nsys's answer to the profile's tool-output.txt; nothing when its folder was deleted or made read-only
    meanwhile (the finish stage says so)."""
    try:
        with open(path, "a") as f:
            if answer.get("argv"):
                f.write(f"$ {' '.join(answer['argv'])}  (exit status {answer.get('rc')})\n")
            f.write(answer.get("output", "") + "\n")
    except OSError:
        pass


def _worker_pids(session_id: str) -> list[int]:
    """Host pids of this session's worker: `python -m nsight_magic.inside.worker` with the session's id in its
    environment (not `nsys launch ... nsight_magic.inside.worker`, whose command line also names it)."""
    return [pid for pid in run_processes(SESSION_ID_ENV, session_id)
            if process_argv(pid)[1:3] == [b"-m", b"nsight_magic.inside.worker"]]


class SessionManager:
    """The notebook's warm session: at most one that takes cells, replaced when a cell needs another (the replaced
    one is stopped once its recordings are written), prepared ahead with prewarm(); all stopped when Python exits."""

    def __init__(self):
        self.session: NsysSession | None = None
        self.retiring: list[NsysSession] = []
        self.stops = 0  # how many times stop() ended the sessions: background work must not start one after it
        self._lock = threading.RLock()
        self._preparing: threading.Thread | None = None
        self.prepare_error: str | None = None   # why the last background preparation did not start a worker
        atexit.register(self.shutdown)
        remove_stale_session_dirs()
        sweep_tool_files()  # nsys's settings files that runs killed or failed at start-up left

    def current(self, *, nsys: Path, trace: str, env: dict, setup_sources, cwd: Path,
                launch_args=()) -> NsysSession | None:
        """The session if the cell can use it (started, starting or prepared in the background); otherwise None
        (and a session that died, failed its setup or was retired is let go)."""
        self._wait_preparing()
        with self._lock:
            s = self.session
            if s is None:
                return None
            state = s.state()
            if s.retired or state in ("ended", "failed"):
                self._let_go(s)
                return None
            if s.key == session_key(Path(nsys), trace, env, setup_sources, Path(cwd), launch_args):
                return s
            return None

    def new(self, **kw) -> NsysSession:
        with self._lock:
            if self.session is not None:
                self._let_go(self.session)
            self.session = NsysSession(**kw)
            return self.session

    def prewarm(self, **kw) -> None:
        """Prepare a session for these settings in the background (the setup code runs in the worker while the
        user writes the next cell), unless the current one already matches.  Silent: a failure is remembered for
        %nsys_session and the next cell starts a session as usual."""
        def work():
            try:
                key = session_key(Path(kw["nsys"]), kw["trace"], kw["env"], kw["setup_sources"], Path(kw["cwd"]),
                                  kw.get("launch_args", ()))
                with self._lock:
                    s = self.session
                    if s is not None and s.key == key and not s.retired and s.state() not in ("ended", "failed"):
                        return
                    s = self.new(**kw)
                    s.launch(None)
                self.prepare_error = None
                tools.nsys_version(kw["nsys"])  # asked by the first cell otherwise (half a second)
            except Exception as e:  # noqa: BLE001 - background preparation never disturbs the notebook
                self.prepare_error = f"{type(e).__name__}: {e}"

        self._wait_preparing()
        self._preparing = threading.Thread(target=work, name="nsight-magic prewarm", daemon=True)
        self._preparing.start()

    def _wait_preparing(self) -> None:
        t = self._preparing
        if t is not None and t is not threading.current_thread():
            t.join()

    def _let_go(self, s: NsysSession) -> None:
        """Retire a session: stopped now, or by the finish stage of its last recording."""
        if self.session is s:
            self.session = None
        s.retire()
        if s.alive():
            self.retiring.append(s)
        self.retiring = [r for r in self.retiring if r.alive()]

    def stop(self, replaced: bool = False, say=None) -> bool:
        """End the session now (%nsys_session --stop): its recordings still being written are waited for (`say`,
        when given, is told so in one line).  With `replaced`, also the replaced sessions still ending in the
        background, so that nothing of them runs on (the user asked for it; a failed cell does not wait for them).
        Whether there was a session."""
        self._wait_preparing()
        with self._lock:
            self.stops += 1
            s, self.session = self.session, None
            ending = [x for x in (s, *(self.retiring if replaced else ())) if x is not None]
            if replaced:
                self.retiring = []
        end = time.monotonic() + STOP_TIMEOUT_S
        if say is not None and any(x.pending and x.alive() for x in ending):
            say("waiting for nsys to finish writing the last recording before the session stops")
        for x in ending:
            while x.pending and x.alive() and time.monotonic() < end:
                time.sleep(POLL_S)
            x.stop()
        return s is not None

    def shutdown(self) -> None:
        """The kernel exits: every session ends at once (a recording still being written is lost with it)."""
        t = self._preparing
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5)
        for s in [self.session, *self.retiring]:
            if s is not None:
                s.stop(polite=not s.pending)
        self.session, self.retiring = None, []

    def describe(self) -> dict | None:
        self._wait_preparing()
        if self.session is None or self.session.state() == "ended":
            return None
        return self.session.describe()
