"""nsys 2022.4's agent stuck at the end of a run.  With CPU sampling or context-switch tracing on a busy machine,
Debian's nsys 2022.4 finishes the profiled process, then its agent spins at 100% of a core and never writes the
report (shared/nsys-on-cpu.md; measured: 3-4 runs of 5 hung under a CPU hog, 0 of 4 on an idle machine, raw
`nsys profile --sample=cpu`).  Left alone the cell's view never comes; the recording is lost either way (its raw
stream is cut short).  This watch tells that state from a long report being written: the profiled process is
gone, the agent keeps burning CPU, and the raw stream in nsys's TMPDIR has not grown, for SPIN_S seconds.  A good
run's agent writes its stream within 2 s of spinning up (a 30 s sampled loop: 3.5 s from the end to the report)."""
from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from ..tools.argv import flag_name
from .process import RUN_ID_ENV, is_machinery, process_argv, run_processes

SPIN_S = 30.0   # the stuck state held this long: the run is stopped
BUSY = 0.3      # the agent's share of what one runnable process gets, counted as spinning: an idle one takes ~0;
#                 a spinning one gets a core on an idle machine, cores / load on a busy one (0.22 of a core was
#                 measured with four CPU hogs on two cores)


def may_spin(version: str, user_args: tuple[str, ...]) -> bool:
    """Whether this run can end in that state: nsys 2022 with the user's --nsys-args turning on CPU sampling or
    context switches (our defaults turn both off)."""
    if not version.startswith("2022."):
        return False
    for i, tok in enumerate(user_args):
        if not tok.startswith("-"):
            continue
        name = flag_name(tok)
        value = tok.split("=", 1)[1] if "=" in tok else (user_args[i + 1] if i + 1 < len(user_args) else "")
        sample = name == "-s" or (name.startswith("--sa") and "--sample".startswith(name))
        ctxsw = name.startswith("--cpu") and "--cpuctxsw".startswith(name)
        if (sample or ctxsw) and value.strip().lower() != "none":
            return True
    return False


class AgentSpin:
    """Called once a second after the cell ended (process.ChildRun.finish's `stuck`): None while all is well,
    the reason to stop the profiler once the agent has spun for SPIN_S seconds with nothing written."""

    def __init__(self, run_id: str, raw_dir: Path, spin_s: float | None = None):
        self.run_id, self.raw_dir = run_id, raw_dir
        self.spin_s = SPIN_S if spin_s is None else spin_s
        # since when nothing was written and no user process ran: (when, the agent's CPU seconds, the raw bytes)
        self.start: tuple[float, float, int] | None = None

    def __call__(self) -> str | None:
        pids = run_processes(RUN_ID_ENV, self.run_id)
        argvs = {p: process_argv(p) for p in pids}
        agents = [p for p, a in argvs.items() if b"--start-agent" in a]
        if not agents or any(not is_machinery(a) for p, a in argvs.items() if p not in agents):
            self.start = None  # the profiled process still runs (or nsys is between steps)
            return None
        now, cpu, size = time.monotonic(), _cpu_s(agents), _bytes(self.raw_dir)
        if self.start is None or size != self.start[2] or cpu < self.start[1]:
            self.start = (now, cpu, size)  # a report being written: all is well
            return None
        spun = now - self.start[0]
        if spun < self.spin_s:
            return None
        # its share of a core over the whole stretch, not per call: on a busy machine a spinning agent gets less
        # than BUSY in some seconds, and such a second must not start the stretch again
        if (cpu - self.start[1]) / spun < BUSY * _fair_share():
            self.start = (now, cpu, size)  # idle (waiting for something): not stuck
            return None
        return (f"nsys's agent kept spinning on the CPU for {spun:.0f} s after the profiled process "
                "ended, writing nothing: nsys 2022.4 hangs so with CPU sampling or context switches on a busy "
                "machine, and its recording is lost")


def _fair_share() -> float:
    """The share of a core a process that never waits gets now: 1 on an idle machine, cores / load on a busy one
    (the 1-minute load average: the runnable processes)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return 1.0
    cores = len(os.sched_getaffinity(0)) or 1
    return min(1.0, cores / load) if load > 0 else 1.0


def _cpu_s(pids: list[int]) -> float:
    """The CPU time (user + system, seconds) these processes have used."""
    total = 0.0
    for p in pids:
        try:
            t = psutil.Process(p).cpu_times()
            total += t.user + t.system
        except (psutil.Error, OSError):
            continue
    return total


def _bytes(folder: Path) -> int:
    total = 0
    for p in folder.glob("*.qdstrm"):
        try:
            total += p.stat().st_size
        except OSError:
            continue
    return total
