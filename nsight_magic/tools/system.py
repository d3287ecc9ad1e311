"""The machine as the profilers see it: visible GPUs, and the PID namespace nsys runs in.

Everything here is an argv list (never a shell string).
"""
from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..inside import procs
from ..inside.isolate import NO_KERNEL_SYMBOLS
from ..settings import ENV, setting
from .injection import tool_environment


def gpu_visible() -> bool:
    """Whether an NVIDIA GPU is visible to processes started from here."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    if glob.glob("/proc/driver/nvidia/gpus/*") or glob.glob("/dev/nvidia[0-9]*"):
        return True
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, env=tool_environment())
            return out.returncode == 0 and "GPU" in out.stdout
        except (OSError, subprocess.TimeoutExpired):
            return False
    return False


def gpu_names() -> list[str]:
    """Names of the visible GPUs from nvidia-smi (empty when there is none); asked once per process (nvidia-smi takes
    a tenth of a second or more, and a profiled cell's time counts)."""
    return list(_gpu_names())


@functools.lru_cache(maxsize=1)
def _gpu_names() -> tuple[str, ...]:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return ()
    try:
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20, env=tool_environment())
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(ln.strip() for ln in out.stdout.splitlines() if ln.strip()) if out.returncode == 0 else ()


ISOLATE_ENV = ENV["isolate"][0]  # NSIGHT_MAGIC_ISOLATE, spelled once (settings.py)


def isolation_prefix() -> tuple[tuple[str, ...], str | None]:
    """argv prefix that runs the profiler in its own PID namespace, and a note when that is impossible.

    nsys records the process list of the machine with every readable process's environment (the notebook
    kernel's and the user's shells' included) into the report.  In a fresh PID namespace with its own /proc it
    sees only itself and the profiled process; `--kill-child` also ends everything left inside when we stop it.
    `nsight_magic.inside.isolate` then gives nsys a private /dev/shm and /tmp/nvidia (ids restart inside the namespace).
    Off where the settings say so (isolate, NSIGHT_MAGIC_ISOLATE=0), with the note.
    """
    if not setting("isolate"):
        return (), (f"{ISOLATE_ENV}=0 (or %config NsightMagics.isolate = False): the report may hold every process "
                    "of this machine with its command line and environment, this kernel's (and its secrets) included")
    return _namespace_prefix()


@functools.lru_cache(maxsize=1)
def _namespace_prefix() -> tuple[tuple[str, ...], str | None]:
    """The probe of isolation_prefix, made once per process (it starts a namespace)."""
    unshare = shutil.which("unshare")
    if not unshare:
        return (), ("unshare (util-linux) not found: the report may hold every process of this machine with its "
                    "command line and environment, this kernel's included")
    isolate = [sys.executable, "-m", "nsight_magic.inside.isolate"]
    ns = ["--pid", "--fork", "--mount-proc", "--kill-child"]
    attempts = [[unshare, *ns, *isolate]] if os.geteuid() == 0 else []
    attempts.append([unshare, "--user", "--map-root-user", *ns, *isolate])
    for prefix in attempts:
        try:
            # from an in-place kernel without its profiler's injection: injected, the namespace's first process
            # cannot reach the kernel's nsys agent and fails (it would be profiled by the kernel's session)
            ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=20,
                                env=tool_environment()).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return tuple(prefix), None
    return (), ("could not start nsys in its own PID namespace (unshare was refused): the report may hold every "
                "process of this machine with its command line and environment, this kernel's included; set "
                "NSIGHT_MAGIC_ISOLATE=0 to silence this note")


def isolated_argv(argv: list[str], *, kernel_symbols: bool = True) -> tuple[list[str], str | None]:
    """argv in its own PID namespace (isolation_prefix), and the note when that is impossible.  Without
    kernel_symbols, nsys there finds /proc/kallsyms empty (inside/isolate.py): for runs that record no kernel frame."""
    prefix, note = isolation_prefix()
    flags = [NO_KERNEL_SYMBOLS] if prefix and not kernel_symbols else []
    return [*prefix, *flags, *argv], note


def orphan_guard() -> tuple[str, ...]:
    """argv prefix that kills a process when the thread that started it dies (the notebook's kernel, killed with
    SIGKILL or crashed): util-linux's `setpriv --pdeathsig KILL`.  Before `unshare --kill-child` it takes the whole
    PID namespace with it.  Empty where setpriv is missing or refuses, or the settings turn it off (orphan_guard,
    NSIGHT_MAGIC_ORPHAN_GUARD=0)."""
    return _setpriv_prefix() if setting("orphan_guard") else ()


@functools.lru_cache(maxsize=1)
def _setpriv_prefix() -> tuple[str, ...]:
    setpriv = shutil.which("setpriv")
    if not setpriv:
        return ()
    try:
        ok = subprocess.run([setpriv, "--pdeathsig", "KILL", "--", "true"], capture_output=True,
                            timeout=20, env=tool_environment()).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return (setpriv, "--pdeathsig", "KILL", "--") if ok else ()


def process_identity(pid: int | None = None) -> dict:
    """A process as it can be recognised later: its pid and start time (a pid alone can be reused)."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "start": procs.started(pid)}


def jupyter_kernel_id() -> str | None:
    """The id Jupyter's server knows this kernel by (its connection file is kernel-<id>.json); None outside a
    Jupyter kernel."""
    try:
        from ipykernel.connect import get_connection_file

        name = Path(get_connection_file()).name
    except Exception:  # noqa: BLE001 - not in a kernel (a script, the command line, a test)
        return None
    m = re.fullmatch(r"kernel-(.+)\.json", name)
    return m.group(1) if m else None


def identity_alive(ident: dict | None) -> bool:
    """Whether the process a process_identity() names still runs."""
    if not ident or ident.get("start") is None:
        return False
    try:
        return procs.started(int(ident["pid"])) == ident["start"]
    except (TypeError, ValueError, KeyError):
        return False


def parent_pid(pid: int) -> int | None:
    """The parent of a running process; None when it is gone."""
    return procs.parent(pid)
