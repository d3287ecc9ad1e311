"""The in-place kernel: a Jupyter kernelspec whose kernel runs under `nsys launch`, so that `%%nsys` records a cell
in the kernel itself (profilers/inplace.py) instead of running it again in a second process.

    nsight-magic kernel install [--user | --sys-prefix | --prefix DIR] [--name NAME] [--trace T] [--env A,B]
                                [--memory]
    nsight-magic kernel list | remove NAME

The kernelspec starts `python -m nsight_magic.inplace_kernel -f {connection_file} ...`, which execs
`nsys launch --session-new=S --trace=T python -m ipykernel_launcher -f ...` with a session of the kernel's own
(named after its Jupyter kernel id) and the allow-listed environment (tools/environment.py): nsys records the
profiled process's environment, and here the profiled process is the kernel.  The kernel loads the IPython
extension by itself (`--ext nsight_magic`) and is interrupted by message (its process is nsys's child).
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import uuid
from pathlib import Path

from .errors import NsightMagicError

KERNEL_NAME = "nsight-magic"
DISPLAY_NAME = "Python 3 (nsight-magic, profile in place)"
DEFAULT_TRACE = "cuda,nvtx"  # no OS runtime: `nsys stop` takes 3 s instead of 8.8 s on the lent H100 (issue 44)
MODULE = "nsight_magic.inplace_kernel"


def _manager():
    from jupyter_client.kernelspec import KernelSpecManager

    return KernelSpecManager()


def install(name: str = KERNEL_NAME, *, display_name: str | None = None, trace: str = DEFAULT_TRACE,
            env_names=(), user: bool = False, prefix: str | None = None, memory: bool = False) -> Path:
    """Write the kernelspec (for this Python environment) and return where it went."""
    from .options import valid_names

    if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise NsightMagicError(f"--name {name!r}: a kernel name takes letters, digits, '.', '_' and '-'")
    if not re.fullmatch(r"[a-z0-9_,-]+", trace):
        raise NsightMagicError(f"--trace {trace!r}: nsys trace values, comma-separated (e.g. cuda,nvtx,osrt)")
    argv = [sys.executable, "-m", MODULE, "--trace", trace]
    names = valid_names(tuple(n for n in env_names if n))
    if names:
        argv += ["--env", ",".join(names)]
    if memory:
        argv.append("--memory")
    spec = {"argv": [*argv, "-f", "{connection_file}"],
            "display_name": display_name or (DISPLAY_NAME if name == KERNEL_NAME else f"{DISPLAY_NAME}: {name}"),
            "language": "python", "interrupt_mode": "message",
            "metadata": {"nsight_magic": {"trace": trace, "env": list(names), "memory": memory}}}
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
        where = _manager().install_kernel_spec(d, kernel_name=name, user=user, prefix=prefix)
    return Path(where)


def installed() -> dict[str, dict]:
    """Our kernelspecs among those Jupyter finds: name -> {"dir", "trace", "display_name"}."""
    m = _manager()
    out = {}
    for name, where in sorted(m.find_kernel_specs().items()):
        try:
            spec = json.loads((Path(where) / "kernel.json").read_text())
        except (OSError, ValueError):
            continue
        if MODULE in spec.get("argv", []):
            meta = (spec.get("metadata") or {}).get("nsight_magic") or {}
            out[name] = {"dir": where, "trace": meta.get("trace"), "display_name": spec.get("display_name")}
    return out


def remove(name: str) -> Path:
    if name not in installed():
        raise NsightMagicError(f"no in-place kernel named {name!r}; nsight-magic kernel list shows them")
    return Path(_manager().remove_kernel_spec(name))


def launch_argv(nsys: str, session: str, trace: str, connection_file: str, launch_args=()) -> list[str]:
    return [nsys, "launch", f"--session-new={session}", f"--trace={trace}", *launch_args, sys.executable, "-m",
            "ipykernel_launcher", "--ext=nsight_magic", "-f", connection_file]


def main(argv: list[str] | None = None) -> int:
    """The kernelspec's command: become `nsys launch ... ipykernel_launcher` (exec: the server's handle on the
    kernel is nsys's process, whose group holds the kernel)."""
    import argparse

    from . import tools
    from .options import trace_for_machine
    from .profilers.extras import choose, split_for_session
    from .profilers.inplace import INPLACE_ENV
    from .tools.environment import profiled_environment

    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    ap.add_argument("-f", dest="connection_file", required=True)
    ap.add_argument("--trace", default=DEFAULT_TRACE)
    ap.add_argument("--env", default="")
    ap.add_argument("--memory", action="store_true")
    a = ap.parse_args(argv)
    try:
        nsys = str(tools.find_nsys())
        version = tools.nsys_version(nsys)
    except NsightMagicError as e:
        print(f"nsight-magic: the in-place kernel cannot start: {e}", file=sys.stderr)
        return 1
    trace, _ = trace_for_machine(a.trace, tools.gpu_visible())
    m = re.fullmatch(r"kernel-(.+)\.json", Path(a.connection_file).name)
    session = f"nsight-magic-{(m.group(1) if m else uuid.uuid4().hex)[:12]}"
    # what nsys records beyond the trace (profilers/extras.py), fixed at launch: --memory adds its device-memory
    # record (Python samples and torch's allocator history are taken by the kernel itself, cell by cell)
    extras = choose(None, a.memory or None, trace, tools.nsys_switches(nsys, "profile"), version=version)
    launch_args, start_args = split_for_session(extras.args, tools.nsys_switches(nsys, "launch"))
    launch = launch_argv(nsys, session, trace, a.connection_file, launch_args)
    env, _withheld = profiled_environment(passed=[n for n in a.env.split(",") if n])
    # exec keeps this pid: the kernel watches it to know its session lives (profilers/inplace.py)
    env[INPLACE_ENV] = json.dumps({"session": session, "nsys": nsys, "trace": trace, "version": version,
                                   "launch": " ".join(launch), "pid": os.getpid(), "start_args": start_args,
                                   "memory": extras.memory})
    # our cell ranges are not registered NVTX strings: without this nsys would drop them
    env["NSYS_NVTX_PROFILER_REGISTER_ONLY"] = "0"
    os.execvpe(nsys, launch, env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
