"""The warm profiled process: `python -m nsight_magic.inside.worker SESSION_DIR`, started once under `nsys launch`.

It runs the %%nsight_setup code once (its output goes to the profile folder of the cell that started the session),
says "ready", then serves the notebook's cells one by one through the FIFO SESSION_DIR/worker.fifo:
  load FOLDER  a fresh namespace (a copy of the one the setup made) plus the cell's sent variables; "loaded"
  run          the cell, exactly as child.py runs it (NVTX cell range, --modules/--functions/--lines, --return)
  exit         end
Each cell's output and progress go to its own profile folder, as with a fresh process; worker.json there says
which worker ran it and how many cells it had run.  If the notebook's kernel dies, the session host (its
ancestor, see session_host.py) ends everything.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from .child import (EXIT_SETUP_ERROR, Progress, redirect_output, user_tmpdir, load_variables, new_namespace,
                    process_snapshot, run_cell, run_setup, stop_leftovers)
from .commands import Inbox
from .tool_files import TOOL_FILES_NAME, tool_files

STARTED = time.time()


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data) + "\n")


def main(argv: list[str]) -> int:
    user_tmpdir()
    sdir = Path(argv[0]).resolve()
    scfg = json.loads((sdir / "session.json").read_text())
    if "umask" in scfg:
        os.umask(scfg["umask"])
    first = Path(scfg["folder"])
    redirect_output(first / "stdout.txt", first / "stderr.txt")
    progress = Progress(first / "progress.jsonl")
    progress("importing", pid=os.getpid(), tool_files=tool_files())
    _write_json(sdir / TOOL_FILES_NAME, tool_files())  # removed with the session, also when its kernel was killed
    base = new_namespace({"cwd": scfg.get("cwd")})
    if run_setup(sdir / "setup.py", base, progress):
        return EXIT_SETUP_ERROR
    _write_json(sdir / "worker.json", {"started": STARTED, "pid_in_namespace": os.getpid()})
    # every cell starts where a fresh process would after the setup: a cell's os.chdir must not move the next ones
    home = os.getcwd()
    inbox = Inbox(sdir / "worker.fifo")  # open before "ready": the notebook's first command follows at once
    progress("ready")
    cells, folder, cfg, ns, cell_progress = 0, None, {}, {}, progress
    while True:
        try:
            for cmd in inbox:
                if cmd["cmd"] == "exit":
                    stop_leftovers()  # what cells started and left running would keep nsys launch waiting
                    return 0
                if cmd["cmd"] == "load":
                    folder = Path(cmd["folder"])
                    cfg = json.loads((folder / "run.json").read_text())
                    if folder != first:
                        redirect_output(folder / "stdout.txt", folder / "stderr.txt")
                    cell_progress = Progress(folder / "progress.jsonl")
                    cells += 1
                    _write_json(folder / "worker.json",
                                {"started": STARTED, "pid_in_namespace": os.getpid(), "cell": cells})
                    ns = dict(base)  # names the previous cells made are gone; the setup's objects are shared
                    if load_variables(folder, ns, cell_progress) == 0:
                        cell_progress("loaded")
                elif cmd["cmd"] == "run" and folder is not None:
                    try:
                        if os.getcwd() != home:
                            os.chdir(home)
                    except OSError:  # its folder went away meanwhile: the cell runs where it is
                        pass
                    before = process_snapshot()
                    run_cell(folder, cfg, ns, cell_progress)
                    ns = {}
                    # as in a fresh process: what the cell left running is named and stopped (the setup's stay)
                    stop_leftovers(cell_progress, before)
                    cell_progress("idle")
        except KeyboardInterrupt:  # an interrupt that comes between cells must not end the worker
            cell_progress("idle")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
