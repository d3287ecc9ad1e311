"""Warm Nsight Systems sessions: a worker started once under `nsys launch`, each cell recorded by start/stop.

The cold path pays `import torch`, CUDA context creation, the model's construction and the profiler's own start for
every cell.  A session pays them once:

    kernel --(host.fifo)--> session_host: nsys launch --session-new=S ... python -m nsight_magic.inside.worker DIR
                                          nsys start --session=S --output=FOLDER/report / nsys stop --session=S
    kernel --(worker.fifo)-> worker: load FOLDER (fresh namespace + the cell's variables), run

Per cell: the notebook prepares the profile folder as always, the worker loads the variables, `nsys start` begins
the recording, the worker runs the cell, `nsys stop` writes the report; import/export/views follow as cold.

Isolation as cold: the host runs in its own PID namespace (tools.isolation_prefix) with the secret-free
environment; nsys keeps the session's files in that namespace's private /tmp/nvidia, which is why start/stop are
run by the host, inside.  Lifetime: the host reads a pipe whose other end only the kernel holds, so when the kernel
dies, for whatever reason, the host sees end-of-file and everything in the namespace is killed; stop() ends it
in order (worker exit, then the process group, then anything carrying the session's id).  A crash, a timeout or a
failed setup ends the session; the next cell starts a new one.
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
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .. import tools
from ..inside import commands
from ..errors import NsightMagicError
from .process import POLL_S, _ChildOutcome, _kill_strays, _status_from, _Tail, json_records

SESSION_ID_ENV = "NSIGHT_MAGIC_SESSION_ID"
START_ARGS = ("--sample=none", "--cpuctxsw=none")   # refused by `nsys launch`, taken by `nsys start`


class SessionUnavailable(NsightMagicError):
    """nsys could not start a session (not the user's code): the cell runs cold instead."""


def session_key(nsys: Path, trace: str, env: dict, setup_sources, cwd: Path) -> str:
    """What must match for a cell to run in an existing session: tool, traced APIs, environment, setup, folder."""
    h = hashlib.sha1()
    for part in (str(nsys), trace, json.dumps(sorted(env.items())), str(cwd), *setup_sources):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


@dataclass
class _Records:
    """JSON lines a process appends (a profile folder's progress, the session host's answers), read incrementally."""

    path: Path
    items: list = field(default_factory=list)

    def __post_init__(self):
        self.tail = _Tail(self.path)

    def read(self) -> list[dict]:
        new = json_records(self.tail.read())
        self.items += new
        return new

    @property
    def phases(self) -> list[str]:
        return [r.get("phase") for r in self.items]


class NsysSession:
    """One warm worker under `nsys launch`; see the module docstring."""

    def __init__(self, *, nsys: Path, trace: str, env: dict, setup_sources, cwd: Path, umask: int):
        self.nsys, self.trace, self.cwd = Path(nsys), trace, Path(cwd)
        self.key = session_key(self.nsys, trace, env, setup_sources, self.cwd)
        self.id = uuid.uuid4().hex[:12]
        self.name = f"nsight-magic-{self.id}"
        self.dir = Path(tempfile.mkdtemp(prefix=f"{SESSION_DIR_PREFIX}{self.id}-"))
        (self.dir / "setup.py").write_text("\n\n".join(s.rstrip() for s in setup_sources) + "\n")
        self.umask = umask
        self.env = {**env, SESSION_ID_ENV: self.id, "NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
        self.proc: subprocess.Popen | None = None
        self.lifeline: int | None = None
        self.started_at: float | None = None
        self.worker_started: float | None = None
        self.cells = 0
        self.seq = 0
        self.busy = False  # the worker is running the setup or a cell (it reads no command then)
        self.host_answers = _Records(self.dir / "host.jsonl")
        (self.dir / OWNER_FILE).write_text(json.dumps(_owner()))

    # ---- lifetime ---------------------------------------------------------------------------------------------
    def start(self, folder=None, timeout: float | None = None, on_output=None, on_status=None,
              t0: float | None = None):
        """Start the host and the worker, whose setup output goes to `folder` (the first cell's profile folder, or
        the session's own), and wait for it to be ready.  Returns the progress records; SessionUnavailable when nsys itself failed."""
        t0 = time.monotonic() if t0 is None else t0
        path = Path(folder.path) if folder is not None else self.dir
        (self.dir / "session.json").write_text(json.dumps({
            "nsys": str(self.nsys), "name": self.name, "trace": self.trace, "cwd": str(self.cwd),
            "umask": self.umask, "folder": str(path)}))
        commands.make(self.dir / "host.fifo")
        commands.make(self.dir / "worker.fifo")
        prefix, _ = tools.isolation_prefix()
        read_end, self.lifeline = os.pipe()
        argv = [*prefix, sys.executable, "-m", "nsight_magic.inside.session_host", str(self.dir), str(read_end)]
        (self.dir / "command.txt").write_text(" ".join(argv) + "\n")
        with open(self.dir / "host-output.txt", "wb") as log:
            try:
                self.proc = subprocess.Popen(argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, start_new_session=True, pass_fds=(read_end,))
            except OSError as e:
                raise SessionUnavailable(f"could not start the session host: {e}") from None
            finally:
                os.close(read_end)
        self.started_at = time.time()
        records = _Records(path / "progress.jsonl")
        self.busy = True
        self._pump(path, records, ("ready", "setup-error"), timeout, on_output, on_status, t0)
        if "ready" in records.phases:
            self.busy = False
            try:
                self.worker_started = json.loads((self.dir / "worker.json").read_text())["started"]
            except (OSError, ValueError, KeyError):
                pass
            return records
        launched = "importing" in records.phases
        log = self.log_tail()
        self.stop()
        if not launched:
            raise SessionUnavailable(f"nsys launch did not start the worker ({log or 'no output'})")
        return records

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, polite: bool = True) -> None:
        """End the worker (politely: asked to exit, when it is between cells and reads commands; a worker busy
        with its setup or a cell is stopped at once), the namespace and anything carrying the session's id;
        remove the session folder."""
        if self.proc is not None and self.alive() and polite and not self.busy:
            commands.send(self.dir / "worker.fifo", {"cmd": "exit"})
            try:
                self.proc.wait(timeout=3)  # the worker stops what its cells left running, exits; the host follows
            except subprocess.TimeoutExpired:
                pass
            for sig in (signal.SIGTERM, signal.SIGKILL):
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
        _kill_strays(self.id, SESSION_ID_ENV)
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- one cell ---------------------------------------------------------------------------------------------
    def run_cell(self, folder, timeout: float | None, on_output=None, on_status=None, stop_grace_s: float = 10.0,
                 t0: float | None = None, records: _Records | None = None) -> _ChildOutcome:
        """Load the cell's variables, record the cell between `nsys start` and `nsys stop`; like run_child()."""
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

        commands.send(self.dir / "worker.fifo", {"cmd": "load", "folder": str(path)})
        self.busy = True
        outcome = None
        try:
            self._pump(path, records, ("loaded", "state-error"), timeout, on_output, on_status, t0)
        except KeyboardInterrupt:
            outcome = "interrupted"
        step("load_s")
        if "loaded" not in records.phases:
            return self._end_cell(records, t0, outcome or ("state-error" if "state-error" in records.phases else
                                                           "timeout" if self.alive() else None), keep=False)
        answer = self._host("start", *START_ARGS, f"--output={path / 'report'}", timeout=120)
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
                outcome = "timeout"
        except KeyboardInterrupt:
            outcome = "interrupted"
            if on_status:
                on_status("stopping (interrupted)", time.monotonic() - t0)
            self._interrupt_worker()
            try:
                self._pump(path, records, ("idle",), time.monotonic() - t0 + stop_grace_s, on_output, None, t0)
            except KeyboardInterrupt:  # a second Ctrl-C: no more waiting
                pass
        step("cell_s")
        if self.alive():
            if on_status:
                on_status("stopping the recording", time.monotonic() - t0)
            _append(tool_log, self._host("stop", timeout=300))
        else:  # the worker died: nsys launch wrote the report of the recording as it ended
            self._wait_ended()
            _append(tool_log, {"output": self.log_tail()})
        step("nsys_stop_s")
        if "idle" in records.phases:
            self.busy = False
        out = self._end_cell(records, t0, outcome, keep="idle" in records.phases)
        out.timings.update(steps)
        return out

    def _end_cell(self, records: _Records, t0: float, outcome: str | None, keep: bool) -> _ChildOutcome:
        records.read()
        rc = None
        if not self.alive():
            ended = [a for a in self.host_answers.items if a.get("event") == "ended"]
            rc = ended[-1].get("rc") if ended else (self.proc.returncode if self.proc else None)
        finished = [r for r in records.items if r.get("phase") == "finished"]
        status = outcome or _status_from(finished[-1].get("status", 0) if finished and rc is None else rc,
                                         records.phases)
        details = {}
        exited = [r for r in records.items if r.get("phase") == "exited"]
        if exited:
            details["exit_status"] = exited[-1].get("status")  # the worker lives on: its own status says nothing
        if rc is not None and rc > 128 and rc - 128 in signal.valid_signals():
            rc = -(rc - 128)  # nsys launch exits with 128 + the signal that killed the worker
        if not keep or not self.alive():
            self.stop(polite=False)  # a timed-out, stuck or dead worker is not used again
        return _ChildOutcome(rc, status, time.monotonic() - t0, records.phases, details=details)

    def _interrupt_worker(self) -> None:
        """SIGINT to the worker: a KeyboardInterrupt in the cell, as in a notebook."""
        for pid in _worker_pids(self.id):
            try:
                os.kill(pid, signal.SIGINT)
            except OSError:
                pass

    # ---- plumbing ---------------------------------------------------------------------------------------------
    def _host(self, verb: str, *args: str, timeout: float) -> dict:
        """Run `nsys VERB --session=S ARGS` inside the namespace; the host's answer."""
        self.seq += 1
        seq = self.seq
        if not commands.send(self.dir / "host.fifo", {"seq": seq, "verb": verb, "args": list(args),
                                                      "timeout": timeout}):
            return {"rc": None, "output": "the session host is gone"}
        end = time.monotonic() + timeout + 10
        while time.monotonic() < end:
            for a in self.host_answers.read():
                if a.get("seq") == seq:
                    return a
            if not self.alive():
                return {"rc": None, "output": "the session ended"}
            time.sleep(POLL_S)
        return {"rc": None, "output": f"no answer from nsys {verb} within {timeout:g} s"}

    def _wait_ended(self, timeout: float = 60) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        self.host_answers.read()

    def _pump(self, folder: Path, records: _Records, until, timeout, on_output, on_status, t0) -> None:
        """Stream the folder's stdout/stderr and progress until a phase in `until`, the session's end or timeout."""
        tails = self._tails.setdefault(str(folder), {"stdout": _Tail(folder / "stdout.txt"),
                                                     "stderr": _Tail(folder / "stderr.txt")})
        last_tick = 0.0
        while True:
            alive = self.alive()
            for stream, tail in tails.items():
                text = tail.read()
                if text and on_output:
                    on_output(stream, text)
            for r in records.read():
                if on_status and r.get("phase") not in ("loaded", "idle", "ready"):
                    on_status(r.get("phase"), time.monotonic() - t0)
            if any(p in records.phases for p in until) or not alive:
                return
            now = time.monotonic() - t0
            if on_status and now - last_tick >= 1.0:
                last_tick = now
                on_status(records.phases[-1] if records.phases else "starting", now)
            if timeout is not None and now > timeout:
                return
            time.sleep(POLL_S)

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
        """pid, age, cells run and memory of the worker (for %nsys_session)."""
        pids = _worker_pids(self.id)
        rss = None
        for pid in pids:
            try:
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1]) * 1024
            except OSError:
                pass
        return {"session": self.name, "alive": self.alive(), "worker_pid": pids[0] if pids else None,
                "age_s": round(time.time() - self.started_at, 1) if self.started_at else None,
                "cells": self.cells, "worker_rss_bytes": rss, "trace": self.trace}


OWNER_FILE = "owner.json"
SESSION_DIR_PREFIX = "nsight-magic-session-"


def _owner() -> dict:
    """The kernel that owns a session folder: its pid and start time (a pid alone can be reused)."""
    return {"pid": os.getpid(), "start": _start_time(os.getpid())}


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def remove_stale_session_dirs(root: Path | None = None) -> list[Path]:
    """Session folders whose kernel is gone (killed with SIGKILL, so nothing cleaned up): removed.  Called when
    the extension loads in a kernel.  Returns what was removed."""
    removed = []
    for d in Path(root or tempfile.gettempdir()).glob(f"{SESSION_DIR_PREFIX}*"):
        try:
            owner = json.loads((d / OWNER_FILE).read_text())
        except (OSError, ValueError):
            owner = None
        if owner is not None and _start_time(int(owner.get("pid", -1))) == owner.get("start"):
            continue  # its kernel is alive
        if owner is None and time.time() - d.stat().st_mtime < 3600:
            continue  # no owner file: being created right now, or an older version's; leave it an hour
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


def _append(path: Path, answer: dict) -> None:
    with open(path, "a") as f:
        if answer.get("argv"):
            f.write(f"$ {' '.join(answer['argv'])}  (exit status {answer.get('rc')})\n")
        f.write(answer.get("output", "") + "\n")


def _worker_pids(session_id: str) -> list[int]:
    """Host pids of this session's worker: `python -m nsight_magic.inside.worker` with the session's id in its environment
    (not `nsys launch ... nsight_magic.inside.worker`, whose command line also names it)."""
    needle = f"{SESSION_ID_ENV}={session_id}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
            if argv[1:3] == [b"-m", b"nsight_magic.inside.worker"] and needle in (d / "environ").read_bytes().split(b"\0"):
                out.append(int(d.name))
        except OSError:
            continue
    return out


class SessionManager:
    """The notebook's warm session: at most one, replaced when a cell needs another; stopped when Python exits."""

    def __init__(self):
        self.session: NsysSession | None = None
        atexit.register(self.stop)
        remove_stale_session_dirs()

    def current(self, *, nsys: Path, trace: str, env: dict, setup_sources, cwd: Path) -> NsysSession | None:
        """The running session if the cell can use it; otherwise None (and a session that died is cleared)."""
        s = self.session
        if s is not None and not s.alive():
            self.stop()
            return None
        if s is not None and s.key == session_key(Path(nsys), trace, env, setup_sources, Path(cwd)):
            return s
        return None

    def new(self, **kw) -> NsysSession:
        self.stop()
        self.session = NsysSession(**kw)
        return self.session

    def stop(self) -> bool:
        s, self.session = self.session, None
        if s is None:
            return False
        s.stop()
        return True

    def describe(self) -> dict | None:
        if self.session is None or not self.session.alive():
            return None
        return self.session.describe()
