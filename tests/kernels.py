"""Kernels as JupyterLab starts and drives them, for tests and benchmarks: the in-place kernel (issue 44)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from conftest import READY_KEY

VIEW_MIME = "application/vnd.nsight-magic.view+json"  # views.profile_view: an update that shows a view


def nsys_of(session: str) -> list[str]:
    """Processes whose command line names this nsys session (nsys launch, its agents)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if session in cmd:
                out.append(f"{d.name} {cmd[:160]}")
    return out


def install_inplace_kernel(prefix: Path, trace: str) -> Path:
    """`nsight-magic kernel install --prefix PREFIX --trace TRACE`; the folder Jupyter finds kernels in."""
    subprocess.run([sys.executable, "-m", "nsight_magic.cli", "kernel", "install", "--prefix", str(prefix),
                    "--trace", trace], check=True, capture_output=True, timeout=60)
    return prefix / "share" / "jupyter" / "kernels"


STARTS_WITHIN_S = 60.0  # from sending a cell to the kernel's first message about it


class DrivenKernel:
    """A kernel (`name`: a kernelspec; kernels_dir: where more are) driven as JupyterLab drives it (allow_stdin:
    profiles load in the background and fill their output after the cell returns)."""

    def __init__(self, cwd: Path, name: str = "python3", kernels_dir: Path | None = None, env: dict | None = None):
        from jupyter_client.manager import KernelManager

        self.cwd = cwd
        self.cwd.mkdir(parents=True, exist_ok=True)
        self.km = KernelManager(kernel_name=name)
        if kernels_dir is not None:
            self.km.kernel_spec_manager.kernel_dirs.insert(0, str(kernels_dir))
        self.km.start_kernel(cwd=str(cwd), env={**os.environ, **(env or {})})
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=180)

    @property
    def session(self) -> str | None:
        raw = self.run("import os; print(os.environ.get('NSIGHT_MAGIC_INPLACE', '{}'))")
        return json.loads(raw).get("session")

    def run(self, code: str, timeout: float = 300, interrupt_after: float | None = None,
            interrupt_when: Callable[[], bool] | None = None) -> str:
        """Run a cell; its output once it settles (a profile's view fills its output after the cell returns).
        The kernel's stop button is pressed `interrupt_after` s in, or once `interrupt_when()` is true."""
        msg_id = self.kc.execute(code, allow_stdin=True)
        out, done, started, t0 = [], False, False, time.monotonic()
        # displays not settled yet: a profile's status line says "loading the profile" until it is drawn, and an
        # nsys view comes first with its live part only (no READY_KEY), then whole
        unsettled: set = set()
        while True:
            if (interrupt_after is not None and time.monotonic() - t0 > interrupt_after) or \
                    (interrupt_when is not None and interrupt_when()):
                self.km.interrupt_kernel()
                interrupt_after = interrupt_when = None
            try:
                m = self.kc.get_iopub_msg(timeout=0.5)
            except Exception:  # noqa: BLE001 - no message for a moment
                if done and not unsettled:
                    return "".join(out)
                if time.monotonic() - t0 > timeout:
                    raise AssertionError(f"no answer: {''.join(out)[-2000:]}") from None
                # a live kernel says "busy" at once: without it, the kernel is gone (an in-place kernel whose nsys
                # died as it started again, seen on a loaded run), and waiting out `timeout` only hides that
                if not started and time.monotonic() - t0 > STARTS_WITHIN_S:
                    raise AssertionError(f"the kernel did not start the cell within {STARTS_WITHIN_S:.0f} s "
                                         f"(alive: {self.km.is_alive()})") from None
                continue
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            started = True
            t, c = m["header"]["msg_type"], m["content"]
            if t == "stream":
                out.append(c["text"])
            elif t in ("display_data", "execute_result", "update_display_data"):
                out.append(c["data"].get("text/plain", "") + "\n")
                did = c.get("transient", {}).get("display_id") or "(no display id)"
                loading = "loading the profile" in out[-1] or VIEW_MIME in c["data"] and READY_KEY not in c.get("metadata", {})
                (unsettled.add if loading else unsettled.discard)(did)
            elif t == "error":
                out.append(re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(c["traceback"])))  # without the colours
            elif t == "status" and c["execution_state"] == "idle":
                done = True

    @property
    def pid(self) -> int:
        return self.km.provisioner.process.pid

    def children(self) -> list[str]:
        """The command lines of the kernel's child processes."""
        out = []
        for d in Path("/proc").iterdir():
            try:
                if d.name.isdigit() and (d / "stat").read_text().rsplit(")", 1)[1].split()[1] == str(self.pid):
                    out.append((d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except (OSError, IndexError):
                continue
        return out

    def descendants(self) -> dict[int, str]:
        """pid -> command line of every process below the kernel (its children, theirs, ...): a forkserver's
        workers are its children, forked without a command line of their own."""
        parent = {}
        for d in Path("/proc").iterdir():
            try:
                if d.name.isdigit():
                    parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
        below, todo = [], [self.pid]
        while todo:
            p = todo.pop()
            kids = [c for c, pp in parent.items() if pp == p]
            below += kids
            todo += kids
        out = {}
        for pid in below:
            try:
                out[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
        return out

    def close(self, now: bool = False) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=now)


def inplace_kernel(tmp: Path, trace: str = "nvtx", env: dict | None = None) -> DrivenKernel:
    """An in-place kernel tracing what the test kernels trace by default (conftest.TEST_TRACE)."""
    kernels = install_inplace_kernel(tmp / "prefix", trace)
    return DrivenKernel(tmp / "work", "nsight-magic", kernels, env)
