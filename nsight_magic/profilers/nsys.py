"""Nsight Systems: prepare -> capture (a fresh process under `nsys profile`, or the notebook's warm session) ->
collect -> import and export.

`run_nsys(cell, opts)` works without IPython: the magic, the command line and the tests all call it.  Only the
capture step differs between cold and warm (profilers/session.py); folder, messages and views are shared.
"""
from __future__ import annotations

import importlib.util
import shlex
import sqlite3
import sys
import time
from pathlib import Path
from typing import Callable

from .. import tools
from ..inside.child import CAPTURE_DOMAIN
from ..errors import NsightMagicError, OptionError, ReportError, ToolNotFound
from ..options import (NSYS_OWNED_FLAGS, NsysOptions, nsys_default_args, trace_for_machine,
                       validate_passthrough)
from ..store import ProfileFolder
from .prepare import _current_umask, _load_returns, _prepare_with_tool, _versions
from .process import (OutputCallback, RunResult, StatusCallback, _ChildOutcome, child_environment,
                      describe_outcome, outcome_notes, rank_outcome, run_child)


def nsys_argv(nsys: Path, opts: NsysOptions, trace: str, folder: ProfileFolder, child: list[str],
              output: str | None = None) -> list[str]:
    """The full `nsys profile ...` argv for one run (pure)."""
    argv = [str(nsys), "profile", f"--trace={trace}", *nsys_default_args(opts.nsys_args),
            f"--output={output or folder.report_base}"]
    if opts.capture == "cell":
        argv += ["--capture-range=nvtx", f"--nvtx-capture={folder.path.name}@{CAPTURE_DOMAIN}",
                 "--capture-range-end=stop"]
    return argv + list(opts.nsys_args) + child


def child_argv(folder: ProfileFolder, nproc: int | None = None) -> list[str]:
    """The profiled process: child.py, or with --nproc N, torchrun starting N of them (ranks) on this machine."""
    child = ["-m", "nsight_magic.inside.child", str(folder.path)]
    if nproc:
        return [*_torchrun(nproc), *child]
    return [sys.executable, *child]


def _torchrun(nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]


def profile_argv(nsys: Path, opts: NsysOptions, trace: str, folder: ProfileFolder) -> list[str]:
    """What runs in the PID namespace: nsys over the child (or over torchrun and its ranks), or with
    --per-rank-reports torchrun starting one nsys per rank, each writing report.rankR (nsys expands %q{RANK})."""
    if opts.nproc and opts.per_rank_reports:
        one = nsys_argv(nsys, opts, trace, folder, child_argv(folder), output=f"{folder.report_base}.rank%q{{RANK}}")
        return [*_torchrun(opts.nproc), "--no-python", *one]
    return nsys_argv(nsys, opts, trace, folder, child_argv(folder, opts.nproc))


def _check_nproc(opts: NsysOptions, script: str | None) -> None:
    if not opts.nproc:
        return
    if script:
        raise OptionError("--nproc runs the cell in several ranks; for a script, run torchrun under nsys yourself "
                          "(nsight-magic profile -- torchrun ... is not supported yet)")
    if importlib.util.find_spec("torch") is None:
        raise OptionError("--nproc starts the ranks with torchrun, which comes with PyTorch: install torch")


def finish_nsys(folder: ProfileFolder, nsys: Path, messages: list[str],
                ranks: int | None = None) -> tuple[Path | None, Path | None]:
    """Import a left-over .qdstrm, export SQLite; problems become messages, files are kept.
    With `ranks` (--per-rank-reports): each rank's report.rankR, then report.sqlite merging them on one clock."""
    if ranks:
        return _finish_ranks(folder, nsys, messages, ranks)
    rep, sqlite = _import_export(folder.report_base, nsys, messages)
    if sqlite is not None:
        write_report_cache(sqlite)
    return rep, sqlite


def _import_export(base: Path, nsys: Path, messages: list[str]) -> tuple[Path | None, Path | None]:
    """BASE.nsys-rep (imported from BASE.qdstrm when nsys left only that) -> BASE.sqlite."""
    rep, qdstrm = base.with_name(base.name + ".nsys-rep"), base.with_name(base.name + ".qdstrm")
    if not rep.exists() and qdstrm.exists():
        try:
            rep = tools.import_qdstrm(qdstrm, nsys)
            qdstrm.unlink()  # imported; the raw stream can be GBs
        except (ReportError, ToolNotFound) as e:
            messages.append(f"{e}; the raw {qdstrm.name} is kept in {base.parent}/")
            return None, None
    if not rep.exists():
        return None, None
    try:
        return rep, tools.export_sqlite(rep, nsys, base.with_name(base.name + ".sqlite"))
    except (ReportError, ToolNotFound) as e:
        messages.append(f"{e}; {rep.name} is kept in {base.parent}/ (open it in Nsight Systems)")
        return rep, None


def _finish_ranks(folder: ProfileFolder, nsys: Path, messages: list[str], ranks: int):
    from ..readers.nsys_merge import merge_exports

    reps, exports = [], []
    for r in range(ranks):
        rep, sqlite = _import_export(folder.path / f"report.rank{r}", nsys, messages)
        if rep is None and sqlite is None:
            messages.append(f"rank {r} left no report (report.rank{r}.*); the view shows the other ranks")
        reps += [rep] if rep else []
        exports += [sqlite] if sqlite else []
    if not exports:
        return (reps[0] if reps else None), None
    try:
        merged = merge_exports(exports, folder.sqlite)
    except (ReportError, sqlite3.DatabaseError) as e:
        messages.append(f"could not merge the per-rank reports ({e}); each rank's report.rankR.sqlite is kept")
        return reps[0] if reps else None, None
    write_report_cache(merged)
    return (reps[0] if reps else None), merged


def write_report_cache(sqlite: Path) -> None:
    """The columnar cache and summary.json beside a fresh export, so that re-opening and listing profiles are fast.
    A report the reader refuses (an empty capture) gets neither: opening it says why."""
    from ..readers.nsys import open_nsys_report
    from ..readers.summary import write_summary

    try:
        with open_nsys_report(sqlite) as report:
            report.write_cache()
            write_summary(sqlite.parent, report)
    except NsightMagicError:
        pass


def run_nsys(cell: str, opts: NsysOptions = NsysOptions(), *, setup_sources=(), namespace: dict | None = None,
             on_output: OutputCallback | None = None, on_status: StatusCallback | None = None,
             script: str | None = None, script_args=(), stop_grace_s: float = 30.0,
             on_prepared: Callable[[list], None] | None = None, sessions=None, cell_first_line: int = 1) -> RunResult:
    """Profile `cell` (or `script`) under Nsight Systems; see the module docstring.

    With `sessions` (a profilers.session.SessionManager) the cell runs in its warm session when it can (started
    or replaced as needed); without, or with --fresh, in a fresh process.
    `on_prepared(manifest)` is called once the variables are packed, before nsys starts.  `cell_first_line`: the
    number an editor gives the cell's first line (2 under a %%nsys line: the Lines tab uses the editor's numbers).
    """
    t0 = time.monotonic()
    validate_passthrough(shlex.join(opts.nsys_args), NSYS_OWNED_FLAGS, "nsys")
    _check_nproc(opts, script)
    prep, nsys, version = _prepare_with_tool(
        cell, opts, "nsys", tools.find_nsys, tools.nsys_version, capture=opts.capture, setup_sources=setup_sources,
        namespace=namespace, on_prepared=on_prepared, script=script, script_args=script_args,
        cell_first_line=cell_first_line)
    folder = prep.folder
    messages: list[str] = []
    notes: list[str] = []
    trace, note = trace_for_machine(opts.trace, tools.gpu_visible())
    if note:
        notes.append(note)
    folder.write_json(folder.versions, _versions(nsys, "nsys", version))
    env = child_environment()
    # Our capture range is not a registered NVTX string; without this nsys would never start collecting.
    env["NSYS_NVTX_PROFILER_REGISTER_ONLY"] = "0"

    outcome = None
    refusal = _cold_reason(opts, script) if sessions is not None else ""
    if refusal is None:
        outcome, how = _capture_warm(sessions, prep, nsys, trace, env, setup_sources, opts, on_output, on_status)
        notes.append(how)
    if outcome is None:
        if refusal:
            notes.append(f"fresh process ({refusal})")
        outcome = _capture_cold(prep, nsys, opts, trace, env, messages, on_output, on_status, stop_grace_s)
    if on_status:
        on_status("exporting", outcome.wall_s)
    if opts.nproc:
        outcome = rank_outcome(outcome, folder, opts.nproc)
    message = describe_outcome(outcome, "nsys", opts.timeout, folder, ranks=opts.nproc or 1)
    if message:
        messages.append(message)
    notes += outcome_notes(outcome)
    t_report = time.monotonic()
    rep, sqlite = finish_nsys(folder, nsys, messages, opts.nproc if opts.per_rank_reports else None)
    timings = {"run_s": outcome.wall_s, **outcome.timings, "report_s": time.monotonic() - t_report}
    if rep is None and not any(folder.path.glob("report*.qdstrm")):  # a kept raw .qdstrm was already explained
        hint = ""
        if opts.capture == "cell" and "running" in outcome.phases:
            pitfall = tools.nvtx_pitfall(version)
            hint = f" the cell's capture range was never recorded; {pitfall or 'try --capture all'};"
        own = f" nsys's own output is in {folder.tool_log}" if folder.tool_log.exists() and \
            folder.tool_log.stat().st_size else " nsys printed nothing"
        messages.append(f"nsys wrote no report:{hint}{own}")
    returned = _load_returns(folder, messages, opts.nproc, opts.return_all)
    return RunResult(folder, outcome.status, outcome.returncode, time.monotonic() - t0, rep, sqlite, messages,
                     returned, prep.manifest, timings, notes)


def _cold_reason(opts: NsysOptions, script: str | None) -> str | None:
    """Why this run needs a fresh process (None: a warm session can take it)."""
    if opts.fresh:
        return "--fresh"
    if script:
        return "a script runs as its own program"
    if opts.capture != "cell":
        return "--capture all records the whole process"
    if opts.nsys_args:
        return "--nsys-args are flags of nsys profile"
    if opts.nproc:
        return "--nproc starts its ranks with torchrun"
    return None


def _capture_cold(prep, nsys: Path, opts: NsysOptions, trace: str, env: dict, messages: list[str], on_output,
                  on_status, stop_grace_s: float):
    """A fresh process under `nsys profile`, in its own PID namespace."""
    folder = prep.folder
    prefix, isolation_note = tools.isolation_prefix()
    if isolation_note:
        messages.append(isolation_note)
    argv = [*prefix, *profile_argv(nsys, opts, trace, folder)]
    folder.command.write_text(shlex.join(argv) + "\n")
    return run_child(argv, prep, env, opts.timeout, on_output, on_status, stop_grace_s, ranks=opts.nproc or 1)


def _capture_warm(sessions, prep, nsys: Path, trace: str, env: dict, setup_sources, opts: NsysOptions,
                  on_output, on_status):
    """The cell in the notebook's warm session (started or replaced as needed): (outcome, note), or (None, note)
    when nsys could not give a session and the cell must run cold."""
    from .session import SessionUnavailable

    folder = prep.folder
    t0 = time.monotonic()
    session = sessions.current(nsys=nsys, trace=trace, env=env, setup_sources=setup_sources, cwd=prep.cwd)
    records = None
    try:
        if session is None:
            replaced = sessions.session is not None
            session = sessions.new(nsys=nsys, trace=trace, env=env, setup_sources=setup_sources, cwd=prep.cwd,
                                   umask=_current_umask())
            folder.command.write_text(f"warm session {session.name}: {shlex.join(_launch_words(session))}\n")
            try:
                records = session.start(folder, opts.timeout, on_output, on_status, t0)
                setup_s = time.monotonic() - t0
            except KeyboardInterrupt:
                _keep_session_log(folder, session)
                sessions.stop()
                return _ChildOutcome(None, "interrupted", time.monotonic() - t0, []), "warm session interrupted " \
                    "while starting"
            if "ready" not in records.phases:  # the setup raised or hung (its output is in the cell's)
                _keep_session_log(folder, session)
                sessions.stop()
                wall = time.monotonic() - t0
                status = ("setup-error" if "setup-error" in records.phases else
                          "timeout" if opts.timeout is not None and wall >= opts.timeout else "failed")
                return (_ChildOutcome(None, status, wall, records.phases),
                        "warm session not kept: its setup code did not finish")
            how = ("restarted ({}): the setup, trace or environment changed" if replaced else
                   "started ({}): later %%nsys cells with the same setup reuse it, --fresh for a fresh process")
        else:
            folder.command.write_text(f"warm session {session.name}\n")
            how, setup_s = None, None
        outcome = session.run_cell(folder, opts.timeout, on_output, on_status, t0=t0, records=records)
        if setup_s is not None:
            outcome.timings["session_start_s"] = round(setup_s, 3)
    except SessionUnavailable as e:
        sessions.stop()
        return None, f"fresh process (warm session unavailable: {e})"
    cell = f"cell {session.cells} in this process"
    if how:
        how = f"warm session {how.format(cell)}"
    else:
        how = f"warm session ({cell}, started {_age(time.time() - (session.worker_started or time.time()))} ago)"
    return outcome, how


def _keep_session_log(folder: ProfileFolder, session) -> None:
    """What nsys launch printed, into the cell's tool-output.txt before the session's folder goes away."""
    with open(folder.tool_log, "a") as f:
        f.write(session.log_tail(4000) + "\n")


def _launch_words(session) -> list[str]:
    return [str(session.nsys), "launch", f"--session-new={session.name}", f"--trace={session.trace}",
            sys.executable, "-m", "nsight_magic.inside.worker", str(session.dir)]


def _age(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"

