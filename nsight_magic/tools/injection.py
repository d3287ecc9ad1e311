"""What the profiler of an in-place kernel injects into its environment, and an environment without it.

The in-place kernel runs under nsys or ncu (nsight_magic/inplace_kernel.py), which add their injection to the
kernel's environment (nsys: LD_PRELOAD, NSYS_*, QUADD_*, NVTX_INJECTION64_PATH; ncu: LD_PRELOAD, a longer
LD_LIBRARY_PATH, NV_*, NVIDIA-PROCESS-TRACKING-*).  Every process the kernel starts inherits it: the processes a
cell starts are meant to be profiled with the kernel, but the tools we start (nsys, ncu, unshare, a fresh profiled
process) are not: an injected `unshare` cannot reach the kernel's agent from a new namespace and fails, and a fresh
process would be recorded by two profilers at once.
"""
from __future__ import annotations

import json
import os

from ..inside.kernel_host import INPLACE_ENV

# the in-place kernel's configuration says what its launcher gave it before the profiler started it
LAUNCHED_NAMES = "env_names"
LAUNCHED_PATHS = "env_paths"
PATH_NAMES = ("LD_PRELOAD", "LD_LIBRARY_PATH")  # the profiler changes these: their values before it did


def injection_free(env=None) -> dict:
    """`env` (os.environ) without what the profiler of an in-place kernel injected into it: a tool we start there
    (nsys, unshare, a fresh profiled process) must not be profiled by the kernel's session.  The names the cell
    set itself stay.  Elsewhere `env` as it is."""
    env = dict(os.environ if env is None else env)
    try:
        cfg = json.loads(os.environ.get(INPLACE_ENV, ""))
        launched = set(cfg[LAUNCHED_NAMES])
        before = dict(cfg.get(LAUNCHED_PATHS) or {})
    except (ValueError, KeyError, TypeError):
        return env
    injected = _injected_names(tuple(sorted(launched)))
    for name in injected:
        env.pop(name, None)
    for name in PATH_NAMES:
        if before.get(name):
            env[name] = before[name]
        elif name not in launched:
            env.pop(name, None)
    env.pop(INPLACE_ENV, None)  # a process started here is not the in-place kernel
    return env


_INJECTED: dict = {}


def _injected_names(launched: tuple) -> frozenset:
    """The names the kernel had when it started (this process's first call: the extension loads as the kernel
    starts, before any cell) that its launcher did not give it."""
    if launched not in _INJECTED:
        _INJECTED[launched] = frozenset(n for n in os.environ if n not in launched)
    return _INJECTED[launched]


def tool_environment() -> dict:
    """The environment of a tool the notebook's side starts (nsys, ncu, unshare, nvidia-smi)."""
    return injection_free()
