"""`python -m nsight_magic.inside.session_host SESSION_DIR LIFELINE_FD`: the nsys side of a warm session.

Started in the session's own PID namespace (tools.isolation_prefix), where nsys keeps a private /dev/shm and
/tmp/nvidia, so only a process inside can reach the session: this one starts `nsys launch --session-new=NAME ...
python -m nsight_magic.inside.worker SESSION_DIR`, then runs the notebook's `nsys start` / `nsys stop` commands (FIFO
SESSION_DIR/host.fifo) and answers in SESSION_DIR/host.jsonl.  It ends when the launched worker ends (nsys then
writes the report of a recording in progress itself) and exits with the worker's status.  When LIFELINE_FD (a
pipe only the notebook's kernel writes to) reaches end-of-file, the kernel is gone: the host kills its process
group at once; in the PID namespace its own end takes everything inside with it.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .commands import Inbox
from .marks import SESSION_ID_ENV
from .tool_files import TOOL_FILES_NAME, remove_tool_files, session_tool_files, tool_files_of

LAUNCH_ATTEMPTS = 4  # as profilers/nsys.py START_ATTEMPTS


def _answer(sdir: Path, msg: dict) -> None:
    with open(sdir / "host.jsonl", "a") as f:
        f.write(json.dumps({**msg, "t": time.time()}) + "\n")


def _serve(inbox: Inbox, nsys: str, session: dict, sdir: Path) -> None:
    for cmd in inbox:
        argv = [nsys, cmd["verb"], f"--session={session['name']}", *cmd.get("args", [])]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=cmd.get("timeout", 300),
                               stdin=subprocess.DEVNULL)
            rc, out = p.returncode, p.stdout + p.stderr
        except (OSError, subprocess.TimeoutExpired) as e:
            rc, out = None, f"{type(e).__name__}: {e}"
        _answer(sdir, {"seq": cmd["seq"], "argv": argv, "rc": rc, "output": out})


def _watch_lifeline(fd: int, sdir: Path) -> None:
    while os.read(fd, 1):
        pass
    # The kernel that would have removed the session folder is gone: remove it before the kill, because the kill
    # also reaches unshare (outside the namespace, in our process group), whose --kill-child then ends us at once.
    # the files of a worker still starting, which has not written them down yet, from its environment
    sid = os.environ.get(SESSION_ID_ENV)
    mine = tool_files_of(carrying=f"{SESSION_ID_ENV}={sid}") if sid else []
    remove_tool_files([*mine, *session_tool_files(sdir)])
    shutil.rmtree(sdir, ignore_errors=True)
    os.kill(0, signal.SIGKILL)  # our process group: nsys launch and the worker
    shutil.rmtree(sdir, ignore_errors=True)  # anything they wrote meanwhile (when we are still here)
    os._exit(1)                 # as PID 1 of the namespace the signal spared us; our end ends the rest


def main(argv: list[str]) -> int:
    sdir = Path(argv[0]).resolve()
    if len(argv) > 1:
        threading.Thread(target=_watch_lifeline, args=(int(argv[1]), sdir), daemon=True).start()
    cfg = json.loads((sdir / "session.json").read_text())
    session = {"name": cfg["name"]}
    inbox = Inbox(sdir / "host.fifo")  # open before the launch: the notebook may send as soon as the worker is ready
    threading.Thread(target=_serve, args=(inbox, cfg["nsys"], session, sdir), daemon=True).start()
    for attempt in range(1, LAUNCH_ATTEMPTS + 1):
        # a new name for a new attempt: what the failed one left of its session must not stand in the way
        session["name"] = cfg["name"] if attempt == 1 else f"{cfg['name']}-{attempt}"
        launch = [cfg["nsys"], "launch", f"--session-new={session['name']}", f"--trace={cfg['trace']}",
                  *cfg.get("launch_args", []), sys.executable, "-m", "nsight_magic.inside.worker", str(sdir)]
        with open(sdir / "launch-output.txt", "ab") as log:
            log.write(f"$ {' '.join(launch)}\n".encode())
            log.flush()
            proc = subprocess.Popen(launch, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        _answer(sdir, {"event": "launched", "attempt": attempt, "session": session["name"]})
        rc = proc.wait()
        # nsys 2022.4 sometimes fails at start-up ("Local Endpoint is not available"; "Connection to the Agent
        # lost." with exit status 0) before it starts the worker; nothing of the user's has run then, so the launch
        # is made again (the worker's first file says it ran)
        if rc is None or rc < 0 or (sdir / TOOL_FILES_NAME).exists() or not sdir.exists():
            break
        with open(sdir / "launch-output.txt", "ab") as log:
            log.write(f"nsight-magic: nsys launch exited {rc} before the worker started (attempt {attempt} of "
                      f"{LAUNCH_ATTEMPTS})\n".encode())
        time.sleep(0.2 * attempt)
    _answer(sdir, {"event": "ended", "rc": rc})
    return 0 if rc is None else (rc if rc >= 0 else 128 - rc)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
