"""`python -m nsight_magic.inside.kernel_host`: PID 1 of the in-place kernel's own PID namespace.

The in-place kernelspec (nsight_magic/inplace_kernel.py) starts `unshare --pid --fork --mount-proc --kill-child
python -m nsight_magic.inside.isolate python -m nsight_magic.inside.kernel_host`.  This process then starts the
profiler with the kernel under it (`nsys launch ... python -m ipykernel_launcher -f CONNECTION` or `ncu ...`) and
stays as the namespace's first process, so that:

* nsys and its agent see only the kernel's processes (a report holds no other process of the machine), and every
  process of the kernel's session lives in the namespace: when this process ends, the kernel (Linux) ends all of
  them, whatever killed what (Jupyter's SIGKILL of `unshare` reaches us through --kill-child);
* a profiler that fails at start-up before the kernel runs (nsys 2022.4's "sem_open") is started again, up to
  ATTEMPTS times, as a warm session's host does: nothing of the user's has run then;
* when the kernel process ends (shut down, restarted, crashed, `os._exit`), its profiler gets LAUNCH_GRACE_S to
  write what it was recording and exit; processes the kernel left running (which would keep `nsys launch` waiting
  for them) are stopped first, then everything left goes with us;
* when the profiler ends while the kernel lives (its agent killed), the kernel lives on: its `%%nsys` says the
  session has ended, and it shuts down as usual.

It reads its configuration from NSIGHT_MAGIC_INPLACE (the kernel's own, see profilers/inplace.py): "launch_argv"
(the profiler's argv; "{session}" in it is this attempt's session name), "session".  Each attempt's kernel gets
the same variable with "session" set to the attempt's name.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import procs
from .tool_files import TOOL_FILE_ENV, remove_tool_files

INPLACE_ENV = "NSIGHT_MAGIC_INPLACE"
ATTEMPTS = 4  # as profilers/nsys.py START_ATTEMPTS
POLL_S = 0.1
LAUNCH_GRACE_S = 3.0   # after the kernel ended: its profiler's own exit (it writes a recording in progress)
LEFT_GRACE_S = 2.0     # then what the kernel left running: SIGTERM, this long, SIGKILL
WRITE_GRACE_S = 4.0    # then the profiler again, before the namespace goes
KERNEL_MODULE = "ipykernel_launcher"


def find_kernel() -> int | None:
    """The kernel's process: `python -m ipykernel_launcher ...` (the profiler's own command line names the same
    module further on, never as its first argument)."""
    for pid in procs.pids():
        argv = procs.cmdline(pid)
        if argv[1:3] == ["-m", KERNEL_MODULE] and procs.alive(pid):
            return pid
    return None


def _tool_files_of(pid: int) -> list[str]:
    """The settings files nsys wrote for the kernel (/tmp/injection_config_*), named in its environment."""
    env = procs.environ(pid) or {}
    return sorted({env[k] for k in TOOL_FILE_ENV if env.get(k)})


def _note_tool_files(cfg: dict, files: list[str]) -> Path | None:
    """Write down the kernel's settings files where the next in-place kernel to start looks (when this one is
    killed, SIGKILL reaches us too and nothing here can remove them): cfg["left_dir"]/SESSION.json."""
    folder = cfg.get("left_dir")
    if not folder or not files:
        return None
    record = Path(folder) / f"{cfg['session']}.json"
    try:
        record.write_text(json.dumps({"session": cfg["session"], "files": files}))
        return record
    except OSError:
        return None


def sweep_left_files(folder) -> None:
    """Remove what killed in-place kernels left (their settings files): records of sessions no process names."""
    try:
        records = list(Path(folder).glob("*.json"))
    except OSError:
        return
    if not records:
        return
    running = "\0".join("\0".join(procs.cmdline(p)) for p in procs.pids())
    for record in records:
        try:
            got = json.loads(record.read_text())
            session = str(got["session"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if session not in running:
            remove_tool_files(got.get("files") or ())
            record.unlink(missing_ok=True)


def _reap() -> None:
    """Collect every child that ended: as a namespace's first process we adopt its orphans."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _signal_all_but(keep: set[int], sig: int) -> list[int]:
    """`sig` to every process of the namespace but ours and `keep`; the pids signalled."""
    me = os.getpid()
    hit = []
    for pid in procs.pids():
        if pid != me and pid not in keep and procs.alive(pid):
            try:
                os.kill(pid, sig)
                hit.append(pid)
            except OSError:
                pass
    return hit


def _profiler_processes(launch: subprocess.Popen) -> set[int]:
    """The profiler's own processes: the launched one and those whose command is the profiler's (nsys's agent,
    launcher and tee; ncu's): not stopped with what the kernel left."""
    tool = os.path.basename(launch.args[0]) if launch.args else ""
    out = {launch.pid}
    for pid in procs.pids():
        argv = procs.cmdline(pid)
        exe = os.path.basename(argv[0]) if argv and argv[0] else ""
        if exe.startswith(("nsys", tool)) and tool:
            out.add(pid)
    return out


def _named(pid: int) -> str:
    """A process as a line names it: a copy of the kernel (a fork) by what it is, others by their command."""
    argv = [a for a in procs.cmdline(pid) if a]
    if argv[1:3] == ["-m", KERNEL_MODULE]:
        return f"{pid}: a fork of the kernel's process"
    # the program by its name (a venv's path would crowd out the arguments that tell one process from another)
    line = " ".join([os.path.basename(argv[0]), *argv[1:]]) if argv else "?"
    return f"{pid}: {line[:120]}"


NOTE_SUFFIX = ".nsight-magic-ended.json"  # beside the connection file: a restarted kernel (same file) says it


def _leave_note(connection_file: str | None, said: str) -> None:
    if not connection_file:
        return
    try:
        with open(connection_file + NOTE_SUFFIX, "w") as f:
            json.dump({"said": said, "t": time.time()}, f)
    except OSError:
        pass


def _wait(pred, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        _reap()
        if pred():
            return True
        time.sleep(POLL_S)
    _reap()
    return pred()


class _Term:
    """SIGTERM from outside (as the namespace's first process only signals we handle reach us)."""

    def __init__(self):
        self.asked = False
        signal.signal(signal.SIGTERM, self._on)
        # the kernel is interrupted by message; Ctrl-C in the server's terminal is the server's
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def _on(self, *_):
        self.asked = True


def _say(text: str) -> None:
    print(f"nsight-magic kernel host: {text}", file=sys.stderr, flush=True)


def run(cfg: dict, env: dict) -> int:
    term = _Term()
    base = cfg["session"]
    template = list(cfg["launch_argv"])
    rc = 1
    for attempt in range(1, ATTEMPTS + 1):
        name = base if attempt == 1 else f"{base}-{attempt}"
        argv = [a.replace("{session}", name) for a in template]
        mine = {k: (v.replace("{session}", name) if isinstance(v, str) else v) for k, v in cfg.items()
                if k != "launch_argv"}
        mine.update(session=name, launch=" ".join(argv))
        launch = subprocess.Popen(argv, env={**env, INPLACE_ENV: json.dumps(mine)}, stdin=subprocess.DEVNULL)
        kernel = None
        while kernel is None and launch.poll() is None and not term.asked:
            _reap()
            kernel = find_kernel()
            if kernel is None:
                time.sleep(POLL_S)
        if kernel is None and not term.asked:
            rc = launch.wait()
            # the profiler ended before it started the kernel: nothing of the user's has run, so start it again
            if attempt < ATTEMPTS:
                _say(f"{os.path.basename(argv[0])} exited {rc} before it started the kernel (attempt {attempt} of "
                     f"{ATTEMPTS}); starting it again")
                _signal_all_but(set(), signal.SIGKILL)  # what the failed start left (an agent)
                _wait(lambda: len(procs.pids()) <= 1, 2.0)
                time.sleep(0.2 * attempt)
                continue
            _say(f"{os.path.basename(argv[0])} exited {rc} before it started the kernel, {ATTEMPTS} times; see "
                 "its output above")
            return rc if rc > 0 else 1
        break
    else:
        return rc
    files = _tool_files_of(kernel) if kernel is not None else []
    record = _note_tool_files(mine, files)
    try:
        return _watch(kernel, launch, term, cfg)
    finally:
        remove_tool_files(files)  # the kernel has ended: its settings files go with it
        if record is not None:
            record.unlink(missing_ok=True)


def _watch(kernel: int | None, launch: subprocess.Popen, term: _Term, cfg: dict) -> int:
    """From the kernel's start to its end and its profiler's; the exit status to pass on."""
    while not term.asked and kernel is not None and procs.alive(kernel):
        _reap()
        time.sleep(POLL_S)
    if term.asked and kernel is not None and procs.alive(kernel):
        os.kill(kernel, signal.SIGTERM)
        _wait(lambda: not procs.alive(kernel), 3.0)
    # the kernel has ended: its profiler writes what it recorded and exits, unless processes the kernel left keep
    # it waiting for them (nsys: "Waiting for termination of re-parented processes")
    if not _wait(lambda: launch.poll() is not None, LAUNCH_GRACE_S):
        keep = _profiler_processes(launch)
        named = [_named(p) for p in procs.pids() if p != os.getpid() and p not in keep and procs.alive(p)]
        left = _signal_all_but(keep, signal.SIGTERM)
        if left:
            said = (f"the kernel ended while {len(left)} process{'es' if len(left) > 1 else ''} it had started "
                    f"still ran ({'; '.join(named[:5])}): {'they were' if len(left) > 1 else 'it was'} stopped "
                    "when the kernel ended")
            _say(said)
            _leave_note(cfg.get("connection_file"), said)
            if not _wait(lambda: not any(procs.alive(p) for p in left), LEFT_GRACE_S):
                _signal_all_but(keep, signal.SIGKILL)
        _wait(lambda: launch.poll() is not None, WRITE_GRACE_S)
    code = launch.poll()
    return 0 if code is None else (code if code >= 0 else 128 - code)


def main() -> int:
    if os.getpid() != 1:  # everything in its namespace is the kernel's; outside one it would be the machine's
        _say("runs only as the first process of a PID namespace of its own (see nsight_magic/inplace_kernel.py)")
        return 2
    env = dict(os.environ)
    try:
        cfg = json.loads(env.get(INPLACE_ENV, ""))
        if not isinstance(cfg, dict) or not cfg.get("launch_argv") or not cfg.get("session"):
            raise ValueError("launch_argv and session are missing")
    except ValueError as e:
        _say(f"no configuration in {INPLACE_ENV} ({e}); start the in-place kernel from its kernelspec")
        return 2
    try:
        return run(cfg, env)
    except Exception as e:  # noqa: BLE001 - a fault of ours must not end the user's kernel: keep it company
        _say(f"stopped watching the kernel ({type(e).__name__}: {e}); it runs on until it ends")
        while len(procs.pids()) > 1:
            _reap()
            time.sleep(POLL_S)
        return 1


if __name__ == "__main__":
    sys.exit(main())
