"""The in-place kernels: Jupyter kernelspecs whose kernel runs under a profiler, so that `%%nsys` (or `%%ncu`)
records a cell in the kernel itself (profilers/inplace.py, profilers/inplace_ncu.py) instead of running it again in
a second process.

    nsight-magic kernel install [--user | --sys-prefix | --prefix DIR] [--name NAME] [--trace T] [--env A,B]
                                [--memory] | --ncu [--set S] [--section X ...]
    nsight-magic kernel list | remove NAME

The kernelspec starts `python -m nsight_magic.inplace_kernel -f {connection_file} ...`, which becomes (exec, so
that Jupyter's handle is this pid) `unshare --pid --fork --mount-proc --kill-child ... python -m
nsight_magic.inside.kernel_host`: the kernel's own PID namespace, whose first process starts `nsys launch
--session-new=S --trace=T python -m ipykernel_launcher -f ...` (or `ncu ... python -m ipykernel_launcher`) with the
allow-listed environment (tools/environment.py).  In the namespace nsys sees and records no other process of the
machine, and whatever ends the kernel (shutdown, restart, a crash, SIGKILL) ends every process of its session
(inside/kernel_host.py).  Where no such namespace can be made, the kernel starts without a profiler and its
`%%nsys` says why in one line.  The kernel loads the IPython extension by itself (`--ext nsight_magic`) and is
interrupted by message.
"""
from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
import uuid
from pathlib import Path

from .errors import NsightMagicError

KERNEL_NAME = "nsight-magic"
NCU_KERNEL_NAME = "nsight-magic-ncu"
DISPLAY_NAME = "Python 3 (nsight-magic, profile in place)"
NCU_DISPLAY_NAME = "Python 3 (nsight-magic, Nsight Compute in place)"
DEFAULT_TRACE = "cuda,nvtx"  # no OS runtime: `nsys stop` takes 3 s instead of 8.8 s on the lent H100 (issue 44)
MODULE = "nsight_magic.inplace_kernel"
# a kernelspec's name is a folder's name: a letter or digit first ('.' and '..' would name the kernels folder
# itself or its parent, which jupyter_client removes before it copies)
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# where the ncu kernel's report grows, under the notebook's profiles folder (a dot folder: no profile of its own)
NCU_SESSIONS = ".ncu-sessions"


def _manager():
    from jupyter_client.kernelspec import KernelSpecManager

    return KernelSpecManager()


def install(name: str | None = None, *, display_name: str | None = None, trace: str = DEFAULT_TRACE,
            env_names=(), user: bool = False, prefix: str | None = None, memory: bool = False,
            ncu: bool = False, ncu_set: str | None = None, sections=None) -> Path:
    """Write the kernelspec (for this Python environment) and return where it went.  ncu=True: the kernel runs
    under Nsight Compute, whose `%%ncu` profiles a cell's kernels in place (`ncu_set`, `sections`: what every
    kernel is measured with, fixed for the kernel's life)."""
    from .options import valid_names
    from .tools.ncu import DEFAULT_SECTIONS, DEFAULT_SET

    name = name or (NCU_KERNEL_NAME if ncu else KERNEL_NAME)
    if not NAME_RE.fullmatch(name):
        raise NsightMagicError(f"--name {name!r}: a kernel name is 1-64 letters, digits, '.', '_' and '-', starting "
                               "with a letter or digit")
    m = _manager()
    found = m.find_kernel_specs().get(name.lower())
    dest = _destination(name, user, prefix)
    for where in (found, dest):
        if where and Path(where).is_dir() and not _ours(Path(where)):
            raise NsightMagicError(f"--name {name}: a kernel of that name that is not nsight-magic's is installed "
                                   f"in {where}; choose another name")
    argv = [sys.executable, "-m", MODULE]
    meta: dict = {"tool": "ncu" if ncu else "nsys"}
    names = valid_names(tuple(n for n in env_names if n))
    if ncu:
        ncu_set = ncu_set or DEFAULT_SET
        sections = tuple(DEFAULT_SECTIONS if sections is None else sections)
        for v in (ncu_set, *sections):
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", v):
                raise NsightMagicError(f"{v!r}: an Nsight Compute set or section name (ncu --list-sets, "
                                       "--list-sections)")
        argv += ["--tool", "ncu", "--set", ncu_set, *[a for x in sections for a in ("--section", x)]]
        meta.update(set=ncu_set, sections=list(sections))
        shown = display_name or (NCU_DISPLAY_NAME if name == NCU_KERNEL_NAME else f"{NCU_DISPLAY_NAME}: {name}")
    else:
        from .profilers.nsys import check_trace

        if not re.fullmatch(r"[a-z0-9_,-]+", trace):
            raise NsightMagicError(f"--trace {trace!r}: nsys trace values, comma-separated (e.g. cuda,nvtx,osrt)")
        check_trace(trace)  # the values this nsys takes, before a kernel dies at start on them
        argv += ["--trace", trace]
        if memory:
            argv.append("--memory")
        meta.update(trace=trace, memory=memory)
        shown = display_name or (DISPLAY_NAME if name == KERNEL_NAME else f"{DISPLAY_NAME}: {name}")
    if names:
        argv += ["--env", ",".join(names)]
    meta["env"] = list(names)
    spec = {"argv": [*argv, "-f", "{connection_file}"], "display_name": shown, "language": "python",
            "interrupt_mode": "message", "metadata": {"nsight_magic": meta}}
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
        where = _manager().install_kernel_spec(d, kernel_name=name, user=user, prefix=prefix)
    return Path(where)


def _destination(name: str, user: bool, prefix: str | None) -> Path:
    """Where jupyter_client installs a kernelspec of this name (its own rule: --prefix, --user, the system)."""
    from jupyter_core.paths import SYSTEM_JUPYTER_PATH, jupyter_data_dir

    if prefix:
        return Path(prefix) / "share" / "jupyter" / "kernels" / name.lower()
    return Path(jupyter_data_dir() if user else SYSTEM_JUPYTER_PATH[0]) / "kernels" / name.lower()


def _ours(folder: Path) -> bool:
    """Whether a kernelspec folder holds one of ours (its command is this module)."""
    try:
        return MODULE in json.loads((folder / "kernel.json").read_text()).get("argv", [])
    except (OSError, ValueError, AttributeError):
        return False


def installed() -> dict[str, dict]:
    """Our kernelspecs among those Jupyter finds: name -> {"dir", "tool", "trace", "display_name"}."""
    m = _manager()
    out = {}
    for name, where in sorted(m.find_kernel_specs().items()):
        try:
            spec = json.loads((Path(where) / "kernel.json").read_text())
        except (OSError, ValueError):
            continue
        if MODULE in spec.get("argv", []):
            meta = (spec.get("metadata") or {}).get("nsight_magic") or {}
            out[name] = {"dir": where, "tool": meta.get("tool", "nsys"), "trace": meta.get("trace"),
                         "set": meta.get("set"), "display_name": spec.get("display_name")}
    return out


def remove(name: str) -> Path:
    if name not in installed():
        raise NsightMagicError(f"no in-place kernel named {name!r}; nsight-magic kernel list shows them")
    return Path(_manager().remove_kernel_spec(name))


def kernel_argv(connection_file: str) -> list[str]:
    return [sys.executable, "-m", "ipykernel_launcher", "--ext=nsight_magic", "-f", connection_file]


def launch_argv(nsys: str, session: str, trace: str, connection_file: str, launch_args=()) -> list[str]:
    return [nsys, "launch", f"--session-new={session}", f"--trace={trace}", *launch_args,
            *kernel_argv(connection_file)]


def ncu_launch_argv(ncu: str, report_base: str, ncu_set: str, sections, connection_file: str) -> list[str]:
    """The kernel under Nsight Compute: only kernels inside a cell's range of ours are profiled (the rest run at
    full speed), each replayed (--replay-mode kernel), from the kernel's own process (not the tools it starts)."""
    from .profilers.inplace_ncu import LAUNCH_NVTX_INCLUDE

    argv = [ncu, "--export", report_base, "--target-processes", "application-only", "--replay-mode", "kernel",
            "--nvtx", "--nvtx-include", LAUNCH_NVTX_INCLUDE]
    if ncu_set:
        argv += ["--set", ncu_set]
    for sec in sections:
        argv += ["--section", sec]
    return [*argv, *kernel_argv(connection_file)]


def _session_name(connection_file: str, tool: str) -> str:
    m = re.fullmatch(r"kernel-(.+)\.json", Path(connection_file).name)
    kid = (m.group(1) if m else uuid.uuid4().hex)[:12]
    return f"nsight-magic-{kid}" if tool == "nsys" else f"nsight-magic-ncu-{kid}-{time.strftime('%Y%m%d-%H%M%S')}"


def main(argv: list[str] | None = None) -> int:
    """The kernelspec's command: become the kernel's PID namespace (inside/kernel_host.py), whose first process
    starts the profiler with the kernel under it."""
    import argparse

    from .inside.isolate import NO_KERNEL_SYMBOLS
    from .inside.kernel_host import INPLACE_ENV
    from .options import wants_kernel_symbols
    from .tools.environment import profiled_environment
    from .tools.injection import LAUNCHED_NAMES, LAUNCHED_PATHS, PATH_NAMES
    from .settings import setting
    from .tools.system import isolation_prefix

    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    ap.add_argument("-f", dest="connection_file", required=True)
    ap.add_argument("--tool", choices=("nsys", "ncu"), default="nsys")
    ap.add_argument("--trace", default=DEFAULT_TRACE)
    ap.add_argument("--env", default="")
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--set", dest="ncu_set", default=None)
    ap.add_argument("--section", dest="sections", action="append", default=[])
    a = ap.parse_args(argv)
    env, _withheld = profiled_environment(passed=[n for n in a.env.split(",") if n])
    from .inside.kernel_host import sweep_left_files
    from .inside.tool_files import sweep_tool_files
    from .tools.cache import home_cache

    session = _session_name(a.connection_file, a.tool)
    left = home_cache("in-place")  # what killed in-place kernels left: removed by the next one to start
    if left is not None:
        sweep_left_files(left)
    sweep_tool_files()  # and what any other run left (outside the namespace, every process is in sight)
    cfg: dict = {"tool": a.tool, "session": session, "connection_file": a.connection_file,
                 "left_dir": str(left) if left is not None else None}
    try:
        if a.tool == "nsys":
            launch = _nsys_launch(a, cfg)
        else:
            launch = _ncu_launch(a, cfg)
    except NsightMagicError as e:  # the kernel starts without a profiler: its magics say why
        cfg["refused"] = f"the in-place kernel has no profiler: {e}"
        launch = None
    # our cell ranges are not registered NVTX strings: without this nsys would drop them
    env["NSYS_NVTX_PROFILER_REGISTER_ONLY"] = "0"
    cfg[LAUNCHED_NAMES] = sorted({*env, INPLACE_ENV})
    cfg[LAUNCHED_PATHS] = {n: env.get(n) for n in PATH_NAMES}
    isolated = bool(setting("isolate"))  # the server's environment: NSIGHT_MAGIC_ISOLATE
    prefix, why = isolation_prefix() if launch is not None and isolated else ((), None)
    if launch is not None and isolated and not prefix:
        # nsys would record every process of the machine, with their command lines: refuse rather than leak
        cfg["refused"] = (f"this in-place kernel records nothing: {why.split(':')[0]}, and outside a PID namespace "
                          f"of its own {a.tool} would record every process of this machine")
        launch = None
    if launch is None:
        env[INPLACE_ENV] = json.dumps(cfg)
        kernel = kernel_argv(a.connection_file)
        os.execvpe(kernel[0], kernel, env)
    if not isolated:  # NSIGHT_MAGIC_ISOLATE=0: the profiler as the kernel's launcher, as the user asked
        launch = [x.replace("{session}", session) for x in launch]
        cfg = {k: (v.replace("{session}", session) if isinstance(v, str) else v) for k, v in cfg.items()}
        cfg.update(launch=" ".join(launch), pid=os.getpid())
        env[INPLACE_ENV] = json.dumps(cfg)
        os.execvpe(launch[0], launch, env)
    cfg["launch_argv"] = launch
    env[INPLACE_ENV] = json.dumps(cfg)
    flags = [] if wants_kernel_symbols(tuple(cfg.get("start_args") or ())) else [NO_KERNEL_SYMBOLS]
    host = [*prefix, *flags, sys.executable, "-m", "nsight_magic.inside.kernel_host"]
    os.execvpe(host[0], host, env)
    return 1  # not reached


def _nsys_launch(a, cfg: dict) -> list[str]:
    from . import tools
    from .options import trace_for_machine
    from .profilers.extras import choose, split_for_session

    nsys = str(tools.find_nsys())
    version = tools.nsys_version(nsys)
    trace, _ = trace_for_machine(a.trace, tools.gpu_visible())
    # what nsys records beyond the trace (profilers/extras.py), fixed at launch: --memory adds its device-memory
    # record (Python samples and torch's allocator history are taken by the kernel itself, cell by cell)
    extras = choose(None, a.memory or None, trace, tools.nsys_switches(nsys, "profile"), version=version)
    launch_args, start_args = split_for_session(extras.args, tools.nsys_switches(nsys, "launch"))
    cfg.update(nsys=nsys, trace=trace, version=version, start_args=start_args, memory=extras.memory)
    return launch_argv(nsys, "{session}", trace, a.connection_file, launch_args)


def _ncu_launch(a, cfg: dict) -> list[str]:
    from .tools.ncu import DEFAULT_SECTIONS, DEFAULT_SET, find_ncu, ncu_version

    ncu = str(find_ncu())
    version = ncu_version(Path(ncu))
    ncu_set = a.ncu_set or DEFAULT_SET
    sections = tuple(a.sections) if a.sections else DEFAULT_SECTIONS
    # the report grows beside the notebook (the kernel's folder) as cells are profiled: each cell's kernels are
    # read from it by their range (profilers/inplace_ncu.py)
    folder = Path.cwd() / "nsight-profiles" / NCU_SESSIONS
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise NsightMagicError(f"cannot create {folder} for the kernel's Nsight Compute report ({e.strerror})") \
            from None
    base = str(folder / "{session}")
    cfg.update(ncu=ncu, version=version, set=ncu_set, sections=list(sections), report=base + ".ncu-rep")
    return ncu_launch_argv(ncu, base, ncu_set, sections, a.connection_file)


if __name__ == "__main__":
    sys.exit(main())
