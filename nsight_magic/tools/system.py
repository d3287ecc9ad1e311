"""The machine as the profilers see it: visible GPUs, and the PID namespace nsys runs in.

Everything here is an argv list (never a shell string).
"""
from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys


def gpu_visible() -> bool:
    """Whether an NVIDIA GPU is visible to processes started from here."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    if glob.glob("/proc/driver/nvidia/gpus/*") or glob.glob("/dev/nvidia[0-9]*"):
        return True
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
            return out.returncode == 0 and "GPU" in out.stdout
        except (OSError, subprocess.TimeoutExpired):
            return False
    return False


def gpu_names() -> list[str]:
    """Names of the visible GPUs from nvidia-smi (empty when there is none)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip()] if out.returncode == 0 else []


ISOLATE_ENV = "NSIGHT_MAGIC_ISOLATE"


@functools.lru_cache(maxsize=1)
def isolation_prefix() -> tuple[tuple[str, ...], str | None]:
    """argv prefix that runs the profiler in its own PID namespace, and a note when that is impossible.

    nsys records the process list of the machine with every readable process's environment (the notebook
    kernel's and the user's shells' included) into the report.  In a fresh PID namespace with its own /proc it
    sees only itself and the profiled process; `--kill-child` also ends everything left inside when we stop it.
    `nsight_magic.inside.isolate` then gives nsys a private /dev/shm and /tmp/nvidia (ids restart inside the namespace).
    """
    if os.environ.get(ISOLATE_ENV, "1") == "0":
        return (), f"{ISOLATE_ENV}=0: nsys may record other processes' environment variables in the report"
    unshare = shutil.which("unshare")
    if not unshare:
        return (), "unshare (util-linux) not found: nsys may record other processes' environment variables"
    isolate = [sys.executable, "-m", "nsight_magic.inside.isolate"]
    ns = ["--pid", "--fork", "--mount-proc", "--kill-child"]
    attempts = [[unshare, *ns, *isolate]] if os.geteuid() == 0 else []
    attempts.append([unshare, "--user", "--map-root-user", *ns, *isolate])
    for prefix in attempts:
        try:
            ok = subprocess.run([*prefix, "true"], capture_output=True, timeout=20).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return tuple(prefix), None
    return (), ("could not start nsys in its own PID namespace (unshare was refused): the report may hold "
                "other processes' environment variables; set NSIGHT_MAGIC_ISOLATE=0 to silence this note")
