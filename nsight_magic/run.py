"""cell -> profile folder -> child process under a profiler -> report files.

`run_nsys(cell, opts)` works without IPython: the magic, the command line and the tests all call it.
The profiler's process group is ours alone (new session): a timeout or an interrupt stops it with
SIGINT (the profiler then writes what it has), then SIGTERM, then SIGKILL, and strays that carry this run's
id in their environment (nsys's agent outlives its parent) are killed too.
"""
from __future__ import annotations

import codecs
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Callable

from . import __version__, state, tools
from .child import CAPTURE_DOMAIN, EXIT_CELL_ERROR
from .errors import NsightMagicError, OptionError, ReportError, ToolNotFound
from .options import (NSYS_OWNED_FLAGS, NsysOptions, RunOptions, is_secret_name, nsys_default_args,
                      trace_for_machine, validate_passthrough)
from .store import ProfileFolder, create_profile_folder, notebook_dir, profiles_root

OutputCallback = Callable[[str, str], None]      # (stream name "stdout"|"stderr", text)
StatusCallback = Callable[[str, float], None]    # (phase, seconds since start)

RUN_ID_ENV = "NSIGHT_MAGIC_RUN_ID"
SECRET_PATTERNS_ENV = "NSIGHT_MAGIC_SECRET_PATTERNS"   # extra comma-separated name fragments to drop
KEEP_ENV_ENV = "NSIGHT_MAGIC_KEEP_ENV"                 # comma-separated names to keep even if they look secret
POLL_S = 0.05


class RunFailed(NsightMagicError):
    """The run could not start; the message says why and where the kept files are."""


@dataclass
class RunResult:
    """What one profiled run left behind."""

    folder: ProfileFolder
    status: str                      # ok | cell-error | setup-error | state-error | failed | timeout | interrupted
    returncode: int | None
    wall_s: float
    report_file: Path | None = None  # .nsys-rep / .ncu-rep
    sqlite: Path | None = None
    messages: list[str] = field(default_factory=list)
    returned: dict = field(default_factory=dict)
    manifest: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)   # seconds: run (tool + child), report (import/export), ...
    notes: list[str] = field(default_factory=list)  # informational lines (messages are problems)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def open(self):
        """The report as DataFrames (NsysReport / NcuReport), or None when no report was written."""
        from .readers import open_report

        target = self.sqlite or self.report_file
        return open_report(target) if target else None


@dataclass
class _Prepared:
    folder: ProfileFolder
    manifest: list
    cwd: Path


def child_environment(base: dict | None = None) -> dict:
    """The kernel's environment minus secret-looking names.

    nsys stores the target's whole environment inside the report, and reports get shared.
    """
    base = dict(os.environ if base is None else base)
    extra = tuple(p.strip().upper() for p in os.environ.get(SECRET_PATTERNS_ENV, "").split(",") if p.strip())
    keep = {n.strip() for n in os.environ.get(KEEP_ENV_ENV, "").split(",") if n.strip()}
    from .options import SECRET_NAME_PATTERNS

    patterns = SECRET_NAME_PATTERNS + extra
    env = {k: v for k, v in base.items() if k in keep or not is_secret_name(k, patterns)}
    # ipykernel's inline backend means nothing outside the kernel.
    if env.get("MPLBACKEND", "").startswith("module://"):
        env["MPLBACKEND"] = "Agg"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _check_syntax(cell: str, folder: ProfileFolder) -> None:
    try:
        compile(cell, str(folder.cell), "exec")
    except SyntaxError as e:
        hint = ""
        bad = (e.text or "").lstrip()
        if bad.startswith(("%", "!")):
            hint = " (IPython magics and shell escapes do not run in the profiled process; use plain Python)"
        raise OptionError(f"syntax error in the cell, line {e.lineno}: {e.msg}{hint}; nothing was run, "
                          f"the cell is kept in {folder.path}/") from None


def prepare(cell: str, *, name: str, directory, setup_sources=(), namespace=None, send_vars=None,
            no_vars=False, capture="cell", returns=(), script: str | None = None, script_args=(),
            cwd: Path | None = None, annotations: dict | None = None) -> _Prepared:
    """Create the profile folder and write everything the child needs (cell, setup, variables, run.json)."""
    root = profiles_root(directory)
    try:
        folder = ProfileFolder(create_profile_folder(root, name))
    except OSError as e:
        raise OptionError(f"cannot create a profile folder under {root} ({e.strerror or e}); "
                          f"choose another place with --dir") from None
    folder.cell.write_text(cell)
    setup_text = "\n\n".join(s.rstrip() for s in setup_sources)
    folder.setup.write_text(setup_text + ("\n" if setup_text else ""))
    _check_syntax(cell, folder)
    manifest = []
    namespace = namespace or {}
    if not no_vars and not script:
        names = list(send_vars) if send_vars is not None else state.free_names(cell, list(setup_sources), namespace)
        try:
            blob, manifest = state.pack_variables(names, namespace,
                                                  optional=state.bound_names(cell) if send_vars is None else ())
        except OptionError as e:
            raise type(e)(f"{e}; nothing was run (kept: {folder.path}/)") from None
        if manifest:
            folder.vars_blob.write_bytes(blob)
    folder.write_json(folder.vars_manifest, [v.__dict__ for v in manifest])
    cwd = Path(cwd or Path.cwd())
    folder.write_json(folder.run_config, {
        "capture": capture,
        "range_name": folder.path.name,
        "returns": list(returns),
        "cwd": str(cwd),
        "script": script,
        "script_args": list(script_args),
        "umask": _current_umask(),
        # automatic NVTX ranges made in the profiled process: modules (depth, 0 = all), functions, lines
        "annotations": annotations or {},
    })
    return _Prepared(folder, manifest, cwd)


def _current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class _Tail:
    """Follow a file the child appends to; decode UTF-8 across read boundaries."""

    def __init__(self, path: Path):
        self.path, self.pos = path, 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def read(self) -> str:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except FileNotFoundError:
            return ""
        self.pos += len(data)
        return self.decoder.decode(data)


def _kill_strays(run_id: str) -> None:
    """Kill processes carrying this run's id in their environment (nsys's agent escapes the process group)."""
    needle = f"{RUN_ID_ENV}={run_id}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if needle in (d / "environ").read_bytes().split(b"\0"):
                os.kill(int(d.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop(proc: subprocess.Popen, run_id: str, grace_s: float) -> None:
    """SIGINT (profiler writes its report) -> SIGTERM -> SIGKILL, then strays."""
    for sig, wait_s in ((signal.SIGINT, grace_s), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        _signal_group(proc, sig)
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
        except KeyboardInterrupt:  # a second Ctrl-C: skip the grace period
            continue
    _kill_strays(run_id)


@dataclass
class _ChildOutcome:
    returncode: int | None
    status: str
    wall_s: float
    phases: list[str]


def run_child(argv: list[str], prep: _Prepared, env: dict, timeout: float | None,
              on_output: OutputCallback | None, on_status: StatusCallback | None,
              stop_grace_s: float = 30.0) -> _ChildOutcome:
    """Start the profiler (argv), stream the child's output and progress until it ends, a timeout, or Ctrl-C."""
    folder = prep.folder
    run_id = uuid.uuid4().hex
    env = {**env, RUN_ID_ENV: run_id}
    t0 = time.monotonic()
    status_cb = on_status or (lambda phase, t: None)
    output_cb = on_output or (lambda stream, text: None)
    status_cb("starting", 0.0)
    tool_log = open(folder.tool_log, "wb")
    try:
        proc = subprocess.Popen(argv, cwd=prep.cwd, env=env, stdin=subprocess.DEVNULL, stdout=tool_log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as e:
        tool_log.close()
        raise RunFailed(f"could not start {argv[0]}: {e}; kept: {folder.path}/") from None
    tails = {"stdout": _Tail(folder.stdout), "stderr": _Tail(folder.stderr)}
    progress = _Tail(folder.progress)
    phases: list[str] = []
    outcome = None

    def pump() -> None:
        for stream, tail in tails.items():
            text = tail.read()
            if text:
                output_cb(stream, text)
        for line in progress.read().splitlines():
            try:
                phase = json.loads(line)["phase"]
            except (ValueError, KeyError):
                continue
            phases.append(phase)
            status_cb(phase, time.monotonic() - t0)

    last_tick = 0.0
    try:
        while True:
            try:
                proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            pump()
            now = time.monotonic() - t0
            if now - last_tick >= 1.0:  # lets a status line show the elapsed time
                last_tick = now
                status_cb(phases[-1] if phases else "starting", now)
            if timeout is not None and time.monotonic() - t0 > timeout:
                status_cb("stopping (timeout)", time.monotonic() - t0)
                _stop(proc, run_id, stop_grace_s)
                outcome = "timeout"
                break
    except KeyboardInterrupt:
        status_cb("stopping (interrupted)", time.monotonic() - t0)
        _stop(proc, run_id, stop_grace_s)
        outcome = "interrupted"
    finally:
        tool_log.close()
    # The profiler has exited; helpers it started must not outlive the run.
    _kill_strays(run_id)
    pump()
    rc = proc.returncode
    if outcome is None:
        outcome = _status_from(rc, phases)
    return _ChildOutcome(rc, outcome, time.monotonic() - t0, phases)


def _status_from(rc: int | None, phases: list[str]) -> str:
    if "setup-error" in phases:
        return "setup-error"
    if "state-error" in phases:
        return "state-error"
    if "exited" in phases:
        return "ok" if rc == 0 else "exited"
    if "finished" in phases:
        return "ok" if rc == 0 else ("cell-error" if rc == EXIT_CELL_ERROR else "failed")
    return "failed"


def describe_outcome(outcome: _ChildOutcome, tool: str, timeout: float | None, folder: ProfileFolder) -> str | None:
    """One line for anything but success; always says where the files are."""
    where = f"everything is kept in {folder.path}/"
    rc = outcome.returncode
    if outcome.status == "ok":
        return None
    if outcome.status == "timeout":
        return f"stopped after the --timeout of {timeout:g} s; {where}"
    if outcome.status == "interrupted":
        return f"interrupted; {where}"
    if outcome.status == "cell-error":
        return f"the cell raised an exception (traceback above); the report covers the run up to it; {where}"
    if outcome.status == "setup-error":
        return f"the %%nsight_setup code raised an exception in the profiled process (traceback above); {where}"
    if outcome.status == "state-error":
        return f"the sent variables could not be loaded in the profiled process (see above); {where}"
    if outcome.status == "exited":
        return f"the cell called sys.exit() with exit status {rc}; the report covers the run up to it; {where}"
    if rc is not None and rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"the profiled process was killed by {name}; {where}"
    if "finished" not in outcome.phases and "running" in outcome.phases:
        return f"the profiled process died while running the cell (exit status {rc}); {where}"
    if "importing" not in outcome.phases:
        return f"{tool} exited with status {rc} before the cell started (see {folder.tool_log.name}); {where}"
    return f"{tool} exited with status {rc} (see {folder.tool_log.name}); {where}"


def _versions(nsys_path: Path | None, tool: str, tool_version: str | None) -> dict:
    def dist(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {
        tool: tool_version,
        f"{tool}_path": str(nsys_path) if nsys_path else None,
        "nsight_magic": __version__,
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "torch": dist("torch"),
        "nvtx": dist("nvtx"),
        "gpus": tools.gpu_names(),
    }


def _prepare_with_tool(cell: str, opts: RunOptions, find, version_of, *, capture: str, setup_sources, namespace,
                       on_prepared, script: str | None = None, script_args=(), annotations: dict | None = None):
    """The profile folder with everything the child needs, then the profiler and its version.

    The folder comes first so that even "nsys not found" says where the cell is kept."""
    prep = prepare(cell, name=opts.name, directory=opts.directory, setup_sources=setup_sources,
                   namespace=namespace, send_vars=opts.send_vars, no_vars=opts.no_vars, capture=capture,
                   returns=opts.return_vars, script=script, script_args=script_args, cwd=notebook_dir(),
                   annotations=annotations if annotations is not None else _annotations(opts))
    if on_prepared:
        on_prepared(prep.manifest)
    try:
        exe = find()
        return prep, exe, version_of(exe)
    except ToolNotFound as e:
        raise RunFailed(f"{e}; nothing was run, the cell is kept in {prep.folder.path}/") from None


def _annotations(opts: RunOptions, modules: int | None = None) -> dict:
    """What the profiled process annotates before the cell (run.json "annotations", read by child.py)."""
    return {"modules": opts.modules if opts.modules is not None else modules, "functions": list(opts.functions),
            "lines": bool(getattr(opts, "lines", False))}


def nsys_argv(nsys: Path, opts: NsysOptions, trace: str, folder: ProfileFolder, child: list[str]) -> list[str]:
    """The full `nsys profile ...` argv for one run (pure)."""
    argv = [str(nsys), "profile", f"--trace={trace}", *nsys_default_args(opts.nsys_args),
            f"--output={folder.report_base}"]
    if opts.capture == "cell":
        argv += ["--capture-range=nvtx", f"--nvtx-capture={folder.path.name}@{CAPTURE_DOMAIN}",
                 "--capture-range-end=stop"]
    return argv + list(opts.nsys_args) + child


def child_argv(folder: ProfileFolder) -> list[str]:
    return [sys.executable, "-m", "nsight_magic.child", str(folder.path)]


def finish_nsys(folder: ProfileFolder, nsys: Path, messages: list[str]) -> tuple[Path | None, Path | None]:
    """Import a left-over .qdstrm, export SQLite; problems become messages, files are kept."""
    rep = folder.nsys_rep if folder.nsys_rep.exists() else None
    if rep is None and folder.qdstrm.exists():
        try:
            rep = tools.import_qdstrm(folder.qdstrm, nsys)
            folder.qdstrm.unlink()  # imported; the raw stream can be GBs
        except (ReportError, ToolNotFound) as e:
            messages.append(f"{e}; the raw {folder.qdstrm.name} is kept in {folder.path}/")
            return None, None
    if rep is None:
        return None, None
    try:
        sqlite = tools.export_sqlite(rep, nsys, folder.sqlite)
    except (ReportError, ToolNotFound) as e:
        messages.append(f"{e}; {rep.name} is kept in {folder.path}/ (open it in Nsight Systems)")
        return rep, None
    write_report_cache(sqlite)
    return rep, sqlite


def write_report_cache(sqlite: Path) -> None:
    """The columnar cache and summary.json beside a fresh export, so that re-opening and listing profiles are fast.
    A report the reader refuses (an empty capture) gets neither: opening it says why."""
    from .readers.nsys import open_nsys_report
    from .store import write_summary

    try:
        with open_nsys_report(sqlite) as report:
            report.write_cache()
            write_summary(sqlite.parent, report)
    except NsightMagicError:
        pass


def run_nsys(cell: str, opts: NsysOptions = NsysOptions(), *, setup_sources=(), namespace: dict | None = None,
             on_output: OutputCallback | None = None, on_status: StatusCallback | None = None,
             script: str | None = None, script_args=(), stop_grace_s: float = 30.0,
             on_prepared: Callable[[list], None] | None = None) -> RunResult:
    """Profile `cell` (or `script`) under Nsight Systems in a fresh process; see the module docstring.

    `on_prepared(manifest)` is called once the variables are packed, before nsys starts.
    """
    t0 = time.monotonic()
    validate_passthrough(shlex.join(opts.nsys_args), NSYS_OWNED_FLAGS, "nsys")
    prep, nsys, version = _prepare_with_tool(
        cell, opts, tools.find_nsys, tools.nsys_version, capture=opts.capture, setup_sources=setup_sources,
        namespace=namespace, on_prepared=on_prepared, script=script, script_args=script_args)
    folder = prep.folder
    messages: list[str] = []
    notes: list[str] = []
    trace, note = trace_for_machine(opts.trace, tools.gpu_visible())
    if note:
        notes.append(note)
    prefix, isolation_note = tools.isolation_prefix()
    if isolation_note:
        messages.append(isolation_note)
    argv = [*prefix, *nsys_argv(nsys, opts, trace, folder, child_argv(folder))]
    folder.command.write_text(shlex.join(argv) + "\n")
    folder.write_json(folder.versions, _versions(nsys, "nsys", version))
    env = child_environment()
    # Our capture range is not a registered NVTX string; without this nsys would never start collecting.
    env["NSYS_NVTX_PROFILER_REGISTER_ONLY"] = "0"

    outcome = run_child(argv, prep, env, opts.timeout, on_output, on_status, stop_grace_s)
    if on_status:
        on_status("exporting", outcome.wall_s)
    message = describe_outcome(outcome, "nsys", opts.timeout, folder)
    if message:
        messages.append(message)
    t_report = time.monotonic()
    rep, sqlite = finish_nsys(folder, nsys, messages)
    timings = {"run_s": outcome.wall_s, "report_s": time.monotonic() - t_report}
    if rep is None and not folder.qdstrm.exists():  # a kept raw .qdstrm was already explained
        hint = ""
        if opts.capture == "cell" and "running" in outcome.phases:
            pitfall = tools.nvtx_pitfall(version)
            hint = f" the cell's capture range was never recorded; {pitfall or 'try --capture all'};"
        messages.append(f"nsys wrote no report:{hint} nsys's own output is in {folder.tool_log}")
    returned = _load_returns(folder, messages)
    return RunResult(folder, outcome.status, outcome.returncode, time.monotonic() - t0, rep, sqlite, messages,
                     returned, prep.manifest, timings, notes)


def _load_returns(folder: ProfileFolder, messages: list[str]) -> dict:
    if not folder.returns_blob.exists():
        return {}
    try:
        return state.unpack_variables(folder.returns_blob.read_bytes())
    except Exception as e:
        messages.append(f"--return values could not be loaded here ({type(e).__name__}: {e}); "
                        f"they are kept in {folder.returns_blob}")
        return {}


def run_ncu(cell: str, opts: RunOptions, ncu_opts, *, setup_sources=(), namespace: dict | None = None,
            on_output: OutputCallback | None = None, on_status: StatusCallback | None = None,
            on_prepared: Callable[[list], None] | None = None, stop_grace_s: float = 30.0) -> RunResult:
    """Profile the kernels of `cell` with Nsight Compute; same folder, state transfer and failure handling as nsys.

    Without --nvtx-include/--module only the cell's own kernels are profiled (the NVTX range the child pushes
    around the cell), so setup code does not use up --count.
    """
    from . import ncu_tool

    t0 = time.monotonic()
    # --module NAME selects a module's NVTX range: give the models their ranges unless the user chose otherwise
    prep, ncu, version = _prepare_with_tool(
        cell, opts, ncu_tool.find_ncu, ncu_tool.ncu_version, capture="cell", setup_sources=setup_sources,
        namespace=namespace, on_prepared=on_prepared,
        annotations=_annotations(opts, modules=0 if ncu_opts.module else None))
    folder = prep.folder
    messages: list[str] = []
    notes: list[str] = []
    user_opts = ncu_opts  # the filters the user chose, for messages
    if not ncu_opts.nvtx_include and not ncu_opts.module:
        ncu_opts = replace(ncu_opts, nvtx_include=(f"{CAPTURE_DOMAIN}@{folder.path.name}/",))
    prefix, isolation_note = tools.isolation_prefix()
    if isolation_note:
        messages.append(isolation_note)
    argv = [*prefix, *ncu_tool.build_ncu_argv(ncu, ncu_opts, folder.report_base, child_argv(folder))]
    folder.command.write_text(shlex.join(argv) + "\n")
    folder.write_json(folder.versions, _versions(ncu, "ncu", version))

    outcome = run_child(argv, prep, child_environment(), opts.timeout, on_output, on_status, stop_grace_s)
    if on_status:
        on_status("importing report", outcome.wall_s)
    tool_text = folder.tool_log.read_text(errors="replace") if folder.tool_log.exists() else ""
    message = describe_outcome(outcome, "ncu", opts.timeout, folder)
    # What happened to the cell comes first; ncu's own known failures explain the rest.
    explained = None
    if outcome.status in ("ok", "failed"):
        explained = ncu_tool.explain_ncu_failure(tool_text, outcome.returncode or 0, user_opts)
    if message and outcome.status != "ok" and not (explained and outcome.status == "failed"):
        messages.append(message)
    if explained:
        messages.append(f"{explained}; everything is kept in {folder.path}/")
    report = folder.path / "report.ncu-rep"
    if not report.exists():
        if not explained and outcome.status in ("ok", "failed"):
            messages.append(f"ncu wrote no report; its output is in {folder.tool_log}")
        report = None
    else:
        try:
            raw, _details = ncu_tool.import_csvs(ncu, report)
            from .readers.ncu import open_ncu_report
            from .store import write_summary

            ncu_report = open_ncu_report(raw)
            note = ncu_tool.count_limit_note(ncu_opts, len(ncu_report.kernels))
            if note:
                notes.append(note)
            write_summary(folder.path, ncu_report)
        except (RuntimeError, NsightMagicError) as e:
            messages.append(f"{e}; report.ncu-rep is kept in {folder.path}/")
    returned = _load_returns(folder, messages)
    return RunResult(folder, outcome.status, outcome.returncode, time.monotonic() - t0, report, None, messages,
                     returned, prep.manifest, {"run_s": outcome.wall_s}, notes)
