"""Nsight Systems: prepare -> capture (a fresh process under `nsys profile`, or the notebook's warm session) ->
collect -> import and export.

`run_nsys(cell, opts)` works without IPython: the magic, the command line and the tests all call it.  Only the
capture step differs between cold and warm (profilers/session.py); folder, messages and views are shared.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sqlite3
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from .. import tools
from ..inside.tool_files import remove_tool_files, tool_files_named_in
from ..inside.child import RANKS_DIR
from ..inside.marks import CAPTURE_DOMAIN, USER_TMPDIR_ENV
from ..errors import Interrupted, NsightMagicError, OptionError, ReportError, ToolNotFound
from ..options import (NSYS_OWNED_FLAGS, NsysOptions, nsys_default_args, trace_for_machine,
                       validate_passthrough, wants_kernel_symbols)
from ..store import ProfileFolder
from ..tools.argv import flag_name
from .agent_watch import SPIN_S, AgentSpin, may_spin
from .extras import Extras, choose, split_for_session
from .prepare import current_umask, load_returns, prepare_with_tool, tool_versions
from .process import (ChildRun, OutputCallback, Recording, RunResult, StatusCallback, ChildOutcome,
                      child_environment, describe_outcome, outcome_notes, rank_finished,
                      rank_outcome)


def nsys_argv(nsys: Path, opts: NsysOptions, trace: str, folder: ProfileFolder, child: list[str],
              output: str | None = None, extra=()) -> list[str]:
    """The full `nsys profile ...` argv for one run (pure); `extra`: what profilers/extras.py chose to record."""
    argv = [str(nsys), "profile", f"--trace={trace}", *nsys_default_args((*extra, *opts.nsys_args)), *extra,
            f"--output={output or folder.report_base}"]
    if opts.capture == "cell":
        argv += ["--capture-range=nvtx", f"--nvtx-capture={folder.path.name}@{CAPTURE_DOMAIN}",
                 "--capture-range-end=none"]
    return argv + list(opts.nsys_args) + child


def child_argv(folder: ProfileFolder, nproc: int | None = None) -> list[str]:
    """The profiled process: child.py, or with --nproc N, torchrun starting N of them (ranks) on this machine."""
    child = ["-m", "nsight_magic.inside.child", str(folder.path)]
    if nproc:
        return [*_torchrun(nproc), *child]
    return [sys.executable, *child]


def _torchrun(nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]


def profile_argv(nsys: Path, opts: NsysOptions, trace: str, folder: ProfileFolder, extra=()) -> list[str]:
    """What runs in the PID namespace: nsys over the child (or over torchrun and its ranks), or with
    --per-rank-reports torchrun starting one nsys per rank, each writing report.rankR (nsys expands %q{RANK})."""
    if opts.nproc and opts.per_rank_reports:
        one = nsys_argv(nsys, opts, trace, folder, child_argv(folder), output=f"{folder.report_base}.rank%q{{RANK}}",
                        extra=extra)
        return [*_torchrun(opts.nproc), "--no-python", *one]
    return nsys_argv(nsys, opts, trace, folder, child_argv(folder, opts.nproc), extra=extra)


def recording_extras(opts: NsysOptions, trace: str, nsys: Path, version: str | None, folder: ProfileFolder):
    """What this run records beyond the trace (profilers/extras.py), written into run.json for the profiled
    process (the allocator's history) and the views."""
    extras = choose(opts.samples, opts.memory, trace, tools.nsys_switches(nsys, "profile"), opts.nsys_args, version,
                    gpu_metrics=opts.gpu_metrics,
                    help_text=tools.nsys_help("profile", nsys) if opts.gpu_metrics else "")
    try:
        cfg = json.loads(folder.run_config.read_text())
        cfg["extras"] = extras.config()
        folder.write_json(folder.run_config, cfg)
    except (OSError, ValueError):
        pass
    return extras


def check_trace(trace: str) -> None:
    """--trace names only APIs this nsys traces (its --help lists them); an empty list is refused too."""
    trace_for_machine(trace, True)  # empty: OptionError
    try:
        known = tools.nsys_trace_values()
    except ToolNotFound:  # no nsys here: the run says so in its own words
        return
    bad = [t.strip() for t in trace.split(",") if t.strip() and known and t.strip() not in known]
    if bad:
        raise OptionError(f"--trace: {', '.join(repr(b) for b in bad)} is not an API this nsys traces; it takes "
                          f"{', '.join(sorted(known))} (comma-separated, e.g. --trace cuda,nvtx,osrt)")


def check_nsys_switches(args) -> None:
    """--nsys-args names only switches this nsys takes (`nsys profile --help`): an unknown one would make every
    attempt fail and bury the reason under retries."""
    try:
        known = tools.nsys_switches(verb="profile")
    except ToolNotFound:  # no nsys here: the run says so in its own words
        return
    if not known:
        return
    for a in args:
        if a.startswith("--"):
            name = flag_name(a)
            # nsys takes unambiguous starts of a switch, and still takes those its help lists as deprecated
            if name not in known and not any(k.startswith(name) for k in known) and \
                    f"{name}=" not in tools.nsys_help("profile"):
                raise OptionError(f"--nsys-args: {name} is not a switch of this nsys (nsys profile --help lists "
                                  "them); nothing was run")


def _check_nproc(opts: NsysOptions, script: str | None) -> None:
    if not opts.nproc:
        return
    if script:
        raise OptionError("--nproc runs the cell in several ranks; for a script, run torchrun under nsys yourself "
                          "(nsight-magic profile -- torchrun ... is not supported yet)")
    if importlib.util.find_spec("torch") is None:
        raise OptionError("--nproc starts the ranks with torchrun, which comes with PyTorch: install torch")


def finish_nsys(folder: ProfileFolder, nsys: Path, messages: list[str],
                ranks: int | None = None, cancel=None) -> tuple[Path | None, Path | None]:
    """Import a left-over .qdstrm, export SQLite; problems become messages, files are kept.
    With `ranks` (--per-rank-reports): each rank's report.rankR, then report.sqlite merging them on one clock.
    `cancel` (Ctrl-C) stops an import or export: what nsys wrote stays, `%nsys_load` exports it later."""
    if ranks:
        return _finish_ranks(folder, nsys, messages, ranks, cancel)
    rep, sqlite = _import_export(folder.report_base, nsys, messages, cancel)
    if sqlite is not None:
        write_report_cache(sqlite)
    return rep, sqlite


def _import_export(base: Path, nsys: Path, messages: list[str], cancel=None) -> tuple[Path | None, Path | None]:
    """BASE.nsys-rep (imported from BASE.qdstrm when nsys left only that) -> BASE.sqlite."""
    rep, qdstrm = base.with_name(base.name + ".nsys-rep"), base.with_name(base.name + ".qdstrm")
    imported = False
    if not rep.exists() and qdstrm.exists():
        try:
            rep = tools.import_qdstrm(qdstrm, nsys, cancel=cancel)
            imported = True
        except Interrupted:
            messages.append(f"interrupted while importing: the raw {qdstrm.name} is kept in {base.parent}/ "
                            f"(%nsys_load {base.parent} imports it)")
            return None, None
        except (ReportError, ToolNotFound) as e:
            messages.append(_raw_kept(e, qdstrm))
            return None, None
    if not rep.exists():
        return None, None
    try:
        sqlite = tools.export_sqlite(rep, nsys, base.with_name(base.name + ".sqlite"), cancel=cancel)
    except Interrupted:
        messages.append(f"interrupted while exporting: {rep.name} is kept in {base.parent}/ (%nsys_load "
                        f"{base.parent} exports and shows it)")
        return rep, None
    except (ReportError, ToolNotFound) as e:
        if imported:  # the report made from the raw recording does not open: it goes, the raw recording stays
            rep.unlink(missing_ok=True)
            messages.append(_raw_kept(e, qdstrm))
            return None, None
        messages.append(f"{e}; {rep.name} is kept in {base.parent}/ (open it in Nsight Systems)")
        return rep, None
    if imported:
        qdstrm.unlink(missing_ok=True)  # the report made from it opens; the raw stream can be GBs
    return rep, sqlite


def _raw_kept(e: Exception, qdstrm: Path) -> str:
    """The line for a raw recording that could not be made a report: the full disk first, where it is one."""
    folder = qdstrm.parent
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        free = None
    if "No space left" in str(e) or (free is not None and free < 4 * 2**20):
        said = f"{free / 2**10:,.0f} kB free, " if free is not None else ""
        return (f"the disk holding {folder} is full ({said}the report could not be written); the raw recording "
                f"{qdstrm.name} is kept there: free space, then %nsys_load {folder} makes its report")
    return f"{e}; the raw {qdstrm.name} is kept in {folder}/ (%nsys_load {folder} tries again)"


def _finish_ranks(folder: ProfileFolder, nsys: Path, messages: list[str], ranks: int, cancel=None):
    from ..readers.nsys_merge import merge_exports

    reps, exports = [], []
    for r in range(ranks):
        if rank_finished(folder, r):
            _await_rank_report(folder.path / f"report.rank{r}", cancel)
        rep, sqlite = _import_export(folder.path / f"report.rank{r}", nsys, messages, cancel)
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


RANK_REPORT_WAIT_S = 5.0


def _await_rank_report(base: Path, cancel=None, wait_s: float = RANK_REPORT_WAIT_S) -> None:
    """Wait a little for the report (or raw stream) of a rank that finished but is not in the folder yet: once, in
    a loaded full test run, rank 1's .qdstrm was in the folder afterwards, not imported, while rank 0's had been."""
    names = [base.with_name(base.name + s) for s in (".nsys-rep", ".qdstrm")]
    deadline = time.monotonic() + wait_s
    while not any(p.exists() for p in names) and time.monotonic() < deadline:
        if cancel is not None and cancel.is_set():
            return
        time.sleep(0.1)


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


def record_nsys(cell: str, opts: NsysOptions = NsysOptions(), *, setup_sources=(), namespace: dict | None = None,
                on_output: OutputCallback | None = None, on_status: StatusCallback | None = None,
                script: str | None = None, script_args=(), stop_grace_s: float = 30.0,
                on_prepared: Callable[[list], None] | None = None, sessions=None, cell_first_line: int = 1
                ) -> Recording:
    """The record stage of a %%nsys run: the profile folder, then the cell under nsys until its code has finished
    and its --return values are back; `Recording.finish()` waits for the report and exports it.

    With `sessions` (a profilers.session.SessionManager) the cell runs in its warm session when it can (started
    or replaced as needed, or prepared ahead by sessions.prewarm); without, or with --fresh, in a fresh process.
    `on_prepared(manifest)` is called once the variables are packed, before nsys starts.  `cell_first_line`: the
    number an editor gives the cell's first line (2 under a %%nsys line: the Lines tab uses the editor's numbers).
    """
    t0 = time.monotonic()
    validate_passthrough(shlex.join(opts.nsys_args), NSYS_OWNED_FLAGS, "nsys")
    _check_nproc(opts, script)
    check_trace(opts.trace)  # before any folder or process: a bad list is the user's to fix, said in one line
    check_nsys_switches(opts.nsys_args)
    prep, nsys, version = prepare_with_tool(
        cell, opts, "nsys", tools.find_nsys, tools.nsys_version, capture=opts.capture, setup_sources=setup_sources,
        namespace=namespace, on_prepared=on_prepared, script=script, script_args=script_args,
        cell_first_line=cell_first_line)
    folder = prep.folder
    prepare_s = time.monotonic() - t0
    messages: list[str] = []
    notes: list[str] = []
    trace, note = trace_for_machine(opts.trace, tools.gpu_visible())
    if note:
        notes.append(note)
    folder.write_json(folder.versions, tool_versions(nsys, "nsys", version))
    extras = recording_extras(opts, trace, nsys, version, folder)
    notes += extras.notes
    env = child_environment(passed=opts.pass_env)
    # Our capture range is not a registered NVTX string; without this nsys would never start collecting.
    env["NSYS_NVTX_PROFILER_REGISTER_ONLY"] = "0"

    capture = None
    refusal = _cold_reason(opts, script) if sessions is not None else ""
    if refusal is None:
        capture, how = _record_warm(sessions, prep, nsys, trace, env, setup_sources, opts, on_output, on_status,
                                    extras)
        notes.append(how)
    if capture is None:
        if refusal:
            notes.append(f"fresh process ({refusal})")
        spin = may_spin(version, opts.nsys_args)
        if spin:
            notes.append(f"nsys {version} can hang after the cell with CPU sampling or context switches on a busy "
                         f"machine (--nsys-args): if its agent spins {SPIN_S:.0f} s writing nothing, the run is "
                         "stopped and that is said")
        capture = _record_cold(prep, nsys, opts, trace, env, messages, on_output, on_status, stop_grace_s, extras,
                               spin)
    returned = load_returns(folder, messages, opts.nproc, opts.return_all)
    so_far = _judged(capture.provisional(), opts, folder)
    said = _outcome_message(so_far, opts, folder)
    if said:
        messages.append(said)
    record_s = time.monotonic() - t0

    def finish(status_cb, cancel) -> RunResult:
        result = _finish_run(capture, folder, nsys, version, opts, list(messages), list(notes), returned,
                             prep.manifest, t0, record_s, status_cb or on_status, cancel, said)
        result.timings["prepare_s"] = round(prepare_s, 3)
        return result

    return Recording(folder, "nsys", so_far.status, record_s, returned, prep.manifest, messages, notes, finish)


def run_nsys(cell: str, opts: NsysOptions = NsysOptions(), **kw) -> RunResult:
    """Profile `cell` (or `script`) under Nsight Systems and wait for its report: record_nsys(...).finish().
    Works without IPython: the command line and the tests call it; the magic runs the finish in the background."""
    return record_nsys(cell, opts, **kw).finish()


def _judged(outcome: ChildOutcome, opts: NsysOptions, folder: ProfileFolder) -> ChildOutcome:
    """With --nproc a failed rank decides the outcome (process.rank_outcome)."""
    return rank_outcome(outcome, folder, opts.nproc) if opts.nproc else outcome


def _outcome_message(outcome: ChildOutcome, opts: NsysOptions, folder: ProfileFolder) -> str | None:
    if not outcome.phases and not folder.path.is_dir():  # its records went with it: _finish_run says it was deleted
        return None
    return describe_outcome(outcome, "nsys", opts.timeout, folder, ranks=opts.nproc or 1)


def _finish_run(capture, folder: ProfileFolder, nsys: Path, version: str, opts: NsysOptions, messages: list[str],
                notes: list[str], returned: dict, manifest: list, t0: float, record_s: float, on_status,
                cancel, provisional: str | None = None) -> RunResult:
    """The finish stage: the profiler's report written (cold: nsys exits; warm: `nsys stop`), imported and
    exported; every message about the run (the final word on the outcome replaces the record stage's)."""
    outcome = _judged(capture.finish(on_status, cancel), opts, folder)
    message = _outcome_message(outcome, opts, folder)
    if message and message not in messages:
        if provisional in messages:
            messages.remove(provisional)
        messages.append(message)
    notes += outcome_notes(outcome)
    t_report = time.monotonic()
    stuck = outcome.details.get("profiler_stuck")
    if cancel is not None and cancel.is_set():
        rep, sqlite = _kept_after_interrupt(folder, messages)
    elif stuck:  # its raw stream, cut short, cannot be imported: said once, not as an import failure
        raw = next((p.name for p in folder.path.glob("report*.qdstrm")), None)
        messages.append(f"{stuck}; nsys was stopped" + (f" ({raw}, cut short, is kept in {folder.path}/)" if raw
                                                          else "") + ". Profile the cell again without "
                        "--sample/--cpuctxsw in --nsys-args (the Python tab samples the cell's own lines), on a "
                        "quieter machine, or with nsys 2023 or newer")
        rep, sqlite = None, None
    else:
        if on_status:
            on_status("exporting", time.monotonic() - t0)
        rep, sqlite = finish_nsys(folder, nsys, messages, opts.nproc if opts.per_rank_reports else None, cancel)
    timings = {"run_s": outcome.wall_s, "record_s": round(record_s, 3), **outcome.timings,
               "report_s": time.monotonic() - t_report}
    if rep is None and not folder.path.exists():
        messages.append(f"the profile folder {folder.path}/ was deleted before nsys wrote its report there (by the "
                        "cell or another program): nothing is left to show; profile the cell again")
    elif rep is None and not stuck and not any(folder.path.glob("report*.qdstrm")) and \
            not (cancel and cancel.is_set()):
        hint = ""
        if opts.capture == "cell" and "running" in outcome.phases:
            pitfall = tools.nvtx_pitfall(version)
            hint = f" the cell's capture range was never recorded; {pitfall or 'try --capture all'};"
        own = f" nsys's own output is in {folder.tool_log}" if folder.tool_log.exists() and \
            folder.tool_log.stat().st_size else " nsys printed nothing"
        full = disk_full(folder)
        stopped = outcome.details.get("stop_failed")
        kept = outcome.details.get("raw_kept_at")
        if kept:  # nothing lost: the raw recording the folder could not take, where it is
            why = full or (f"the profile folder {folder.path}/ could not take nsys's raw recording "
                           f"({outcome.details.get('raw_kept_why')}): make it writable")
            messages.append(f"{why}; nsys's raw recording is kept at {kept}: %nsys_load {kept} makes its "
                            f"report;{own}")
        elif stopped:  # the agent may still write the raw recording: say where it will be and what to do then
            messages.append(f"nsys stop {stopped} before it wrote the report; nsys may still write the raw "
                            f"recording as report.qdstrm in {folder.path}/ within a minute: then %nsys_load "
                            f"{folder.path} makes the report from it;{own}")
        else:
            messages.append(f"nsys wrote no report: {full};{own}" if full else f"nsys wrote no report:{hint}{own}")
    return RunResult(folder, outcome.status, outcome.returncode, time.monotonic() - t0, rep, sqlite, messages,
                     returned, manifest, timings, notes)


def disk_full(folder: ProfileFolder) -> str | None:
    """'the disk is full ...' when nsys said so (its report could not be written), else None."""
    try:
        said = "No space left on device" in folder.tool_log.read_text(errors="replace")
    except OSError:
        said = False
    if not said:
        return None
    try:
        free = f", {shutil.disk_usage(folder.path).free / 2**20:.0f} MB free"
    except OSError:
        free = ""
    return (f"the disk holding {folder.path} is full (nsys: No space left on device{free}); free space or give "
            "--dir a folder on another disk")


def _kept_after_interrupt(folder: ProfileFolder, messages: list[str]) -> tuple[Path | None, None]:
    """Ctrl-C in the finish stage: no import or export; what nsys wrote is named."""
    kept = sorted(p.name for p in folder.path.glob("report*") if p.suffix in (".nsys-rep", ".qdstrm"))
    what = f"{', '.join(kept)} {'is' if len(kept) == 1 else 'are'} kept" if kept else "nsys wrote no report file"
    messages.append(f"interrupted before the profile was loaded: {what} in {folder.path}/"
                    + (f" (%nsys_load {folder.path} shows it)" if kept else ""))
    rep = folder.nsys_rep if folder.nsys_rep.exists() else None
    return rep, None


class _Over:
    """A capture that ended in its record stage (a warm setup that failed or was interrupted)."""

    def __init__(self, outcome: ChildOutcome):
        self.outcome = outcome

    def provisional(self) -> ChildOutcome:
        return self.outcome

    def finish(self, on_status=None, cancel=None) -> ChildOutcome:
        return self.outcome


class _Cold:
    """A fresh process under `nsys profile` (process.ChildRun)."""

    def __init__(self, run, tmp: Path, folder: ProfileFolder, watch_agent: bool = False):
        self.run, self.tmp, self.folder = run, tmp, folder
        self.stuck = AgentSpin(run.run_id, tmp) if watch_agent else None  # (tmp: where nsys writes its raw stream)

    def provisional(self) -> ChildOutcome:
        r = self.run
        return ChildOutcome(r.proc.returncode, r.status_so_far, r.record_s or 0.0, list(r.phases),
                             details=dict(r.extras))

    def finish(self, on_status=None, cancel=None) -> ChildOutcome:
        try:
            out = self.run.finish(on_status, cancel, stuck=self.stuck)
        finally:
            kept = _tidy_tmp(self.tmp, self.folder)
        if kept is not None:
            out.details["raw_kept_at"], out.details["raw_kept_why"] = kept
        return out


TMP_PREFIX = "nsight-magic-nsys-"
# nsys profile, when it fails before the cell starts: four, since under load nsys 2022.4 failed so in up to three
# attempts in a row (two failures planted by a test, then a real "Connection to the Agent lost.")
START_ATTEMPTS = 4
RETRY_PAUSE_S = 1.0  # before the second attempt; twice that before the third, ...


def remove_stale_tmp_dirs() -> None:
    """nsys's private TMPDIRs whose kernel died during the run (SIGKILL: nothing tidied): the raw stream nsys was
    writing goes to its profile folder as report.qdstrm when that has no report, the rest is removed."""
    for d in Path(tempfile.gettempdir()).glob(f"{TMP_PREFIX}*"):
        try:
            owner = json.loads((d / "owner.json").read_text())
        except (OSError, ValueError):
            continue  # being made now, or not ours
        if tools.identity_alive(owner) or owner.get("kept"):  # a raw recording its folder could not take stays
            continue
        folder = Path(owner.get("folder", ""))
        if folder.is_dir():
            remove_tool_files(tool_files_named_in(folder))  # nsys, killed with the kernel, left them in /tmp
            _tidy_tmp(d, ProfileFolder(folder))
        else:
            shutil.rmtree(d, ignore_errors=True)


def _tidy_tmp(tmp: Path, folder: ProfileFolder) -> tuple[str, str] | None:
    """nsys's private TMPDIR after the run: a raw stream it left there, when no report was written, becomes the
    profile's report.qdstrm (nothing lost); the folder is removed.  Where the profile folder cannot take it (a
    full disk, a folder made read-only) it stays where it is, marked kept: (its path, why), else None."""
    dst = folder.path / "report.qdstrm"
    left = []
    try:
        left = sorted(tmp.glob("*.qdstrm"), key=lambda p: p.stat().st_size)
        if left and not folder.nsys_rep.exists() and not any(folder.path.glob("report*.qdstrm")):
            shutil.move(str(left[-1]), dst)
            left = []
    except OSError as e:  # no cut copy is left to mislead; the raw recording itself stays
        try:
            dst.unlink(missing_ok=True)
        except OSError:
            pass
        raw = left[-1]
        for p in tmp.iterdir():
            if p != raw and p.name != "owner.json":
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        try:
            owner = json.loads((tmp / "owner.json").read_text())
            (tmp / "owner.json").write_text(json.dumps({**owner, "kept": True}))
        except (OSError, ValueError):
            pass
        return str(raw), e.strerror or str(e)
    shutil.rmtree(tmp, ignore_errors=True)
    return None


class _Warm:
    """A cell recorded in a warm session: its `nsys stop` answered in the finish stage."""

    def __init__(self, session, cell, setup_s: float | None):
        self.session, self.cell, self.setup_s = session, cell, setup_s

    def provisional(self) -> ChildOutcome:
        recs = self.cell.records
        exited = [r for r in recs.items if r.get("phase") == "exited"]
        details = {"exit_status": exited[-1].get("status")} if exited else {}
        return ChildOutcome(None, self.cell.status_so_far, time.monotonic() - self.cell.t0, recs.phases,
                             details=details)

    def finish(self, on_status=None, cancel=None) -> ChildOutcome:
        out = self.session.finish_cell(self.cell, on_status)
        if self.setup_s is not None:
            out.timings["session_start_s"] = round(self.setup_s, 3)
        return out


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


def _record_cold(prep, nsys: Path, opts: NsysOptions, trace: str, env: dict, messages: list[str], on_output,
                 on_status, stop_grace_s: float, extras: Extras = Extras(), watch_agent: bool = False) -> _Cold:
    """A fresh process under `nsys profile`, in its own PID namespace, until the cell's part is over."""
    folder = prep.folder
    argv, isolation_note = tools.isolated_argv(profile_argv(nsys, opts, trace, folder, extras.args),
                                               kernel_symbols=wants_kernel_symbols(opts.nsys_args))
    if isolation_note:
        messages.append(isolation_note)
    folder.command.write_text(shlex.join(argv) + "\n")
    # nsys writes its raw stream under TMPDIR and leaves it there when the run fails (a full disk): a private
    # folder, tidied after the run, keeps /tmp clean; the cell gets the user's TMPDIR back (inside.child)
    remove_stale_tmp_dirs()
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX))
    (tmp / "owner.json").write_text(json.dumps({**tools.process_identity(), "folder": str(folder.path)}))
    env = {**env, "TMPDIR": str(tmp), USER_TMPDIR_ENV: os.environ.get("TMPDIR", "")}
    for attempt in range(1, START_ATTEMPTS + 1):
        run = ChildRun(argv, prep, env, on_output, on_status, ranks=opts.nproc or 1)
        try:
            run.record(opts.timeout, stop_grace_s)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        if attempt == START_ATTEMPTS or not _failed_before_any_rank_started(run):
            break
        # nsys 2022.4 sometimes fails at start-up ("Local Endpoint is not available"; on a loaded machine also
        # "sem_open" in its ProcessWaiter, twice in a row at times, or "Connection to the Agent lost." with exit
        # status 0); nothing of the cell has run then, so it is started again after a pause, and what it printed is
        # kept beside the next attempt's
        run.finish(stop_grace_s=stop_grace_s)  # ends the helpers it left
        kept = folder.path / f"tool-output-attempt{attempt}.txt"
        os.replace(folder.tool_log, kept)
        for tail in [*run.progress, *(t for _, t, _ in run.tails)]:  # what a rank wrote meanwhile: kept too
            if tail.path.exists() and tail.path.stat().st_size:
                os.replace(tail.path, tail.path.with_name(f"{tail.path.stem}-attempt{attempt}{tail.path.suffix}"))
            else:  # nothing written: no empty file left beside the next attempt's
                tail.path.unlink(missing_ok=True)
        shutil.rmtree(folder.path / RANKS_DIR, ignore_errors=True)  # a rank's arrival at a barrier is not the next's
        messages.append(f"nsys exited with status {run.proc.returncode} before the cell started (its output: "
                        f"{kept.name}); it was started again")
        try:
            time.sleep(RETRY_PAUSE_S * attempt)
        except BaseException:  # Ctrl-C while it waits: nothing ran, nothing left in /tmp
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return _Cold(run, tmp, folder, watch_agent)


def _failed_before_any_rank_started(run: ChildRun) -> bool:
    """The profiler exited by itself (with status 0 too: nsys 2022.4 once lost its agent so) and no rank wrote a
    progress record: nothing of the user's ran.  With several ranks (--nproc), also when it failed and no rank
    got past its start (its imports, its set-up): one rank's nsys failed at start-up ("sem_open") while another
    was setting up, and torchrun ended them all; the set-up runs again, as at any cold start, the cell never ran.
    Not when the profile folder is gone: the cell can delete it (its records with it) before they were read."""
    rc = run.proc.returncode
    if run.outcome is not None or rc is None or rc < 0 or not run.folder.path.is_dir():
        return False
    if run.ranks > 1 and rc != 0 and all(phases <= {"importing"} for phases in run.rank_phases):
        return True
    if run.phases:
        return False
    return all(tail.path.stat().st_size == 0 if tail.path.exists() else True for tail in run.progress)


def default_launch_args(nsys: Path, trace: str) -> list[str]:
    """What a warm session started ahead (or by %nsys_session --restart) records beyond the trace, as a cell with
    default options would ask: so that the cell finds it matching."""
    extras = choose(None, None, trace, tools.nsys_switches(nsys, "profile"))
    return session_args(nsys, extras)[0]


def session_args(nsys: Path, extras: Extras) -> tuple[list[str], list[str]]:
    """(what the warm session's `nsys launch` records beyond the trace, what each cell's `nsys start` adds)."""
    return split_for_session(extras.args, tools.nsys_switches(nsys, "launch"))


def _record_warm(sessions, prep, nsys: Path, trace: str, env: dict, setup_sources, opts: NsysOptions,
                 on_output, on_status, extras: Extras = Extras()):
    """The cell in the notebook's warm session (prepared ahead, started or replaced as needed): (capture, note), or
    (None, note) when nsys could not give a session and the cell must run cold."""
    from .session import SessionUnavailable

    folder = prep.folder
    t0 = time.monotonic()
    had = sessions.session is not None
    launch_args, start_args = session_args(nsys, extras)
    session = sessions.current(nsys=nsys, trace=trace, env=env, setup_sources=setup_sources, cwd=prep.cwd,
                               launch_args=launch_args)
    records = None
    setup_s = None
    try:
        if session is None:
            replaced = had or sessions.session is not None
            session = sessions.new(nsys=nsys, trace=trace, env=env, setup_sources=setup_sources, cwd=prep.cwd,
                                   umask=current_umask(), launch_args=launch_args)
            folder.command.write_text(f"warm session {session.name}: {shlex.join(_launch_words(session))}\n")
            session.launch(folder)
            how = ("restarted ({}): the setup, trace or environment changed" if replaced else
                   "started ({}): later %%nsys cells with the same setup reuse it, --fresh for a fresh process")
        else:
            folder.command.write_text(f"warm session {session.name}\n")
            how = None
        if session.state() == "starting":  # its setup runs (started here, or prepared in the background)
            waiting = (lambda phase, t: on_status(f"{phase} (warm worker's setup)", t)) if on_status and \
                how is None else on_status
            try:
                setup = session.wait_ready(folder, opts.timeout, on_output, waiting, t0)
            except KeyboardInterrupt:
                _keep_session_log(folder, session)
                sessions.stop()
                return (_Over(ChildOutcome(None, "interrupted", time.monotonic() - t0, [])),
                        "warm session interrupted while starting")
            setup_s = time.monotonic() - t0
            if "ready" not in setup.phases:  # the setup raised or hung (its output is in the cell's)
                _keep_session_log(folder, session)
                sessions.stop()
                wall = time.monotonic() - t0
                status = ("setup-error" if "setup-error" in setup.phases else
                          "timeout" if opts.timeout is not None and wall >= opts.timeout else "failed")
                return (_Over(ChildOutcome(None, status, wall, setup.phases)),
                        "warm session not kept: its setup code did not finish")
            if session.setup_folder == folder.path:
                records = setup  # the setup's progress is the cell's own: one record of phases
            elif how is None:
                how = f"prepared in the background ({{}}; the cell waited {setup_s:.1f} s for the end of its setup)"
        elif session.cells == 0:
            session._copy_setup_output(folder.path)
        cell = session.record_cell(folder, opts.timeout, on_output, on_status, t0=t0, records=records,
                                   start_args=start_args)
    except SessionUnavailable as e:
        sessions.stop()
        return None, f"fresh process (warm session unavailable: {e})"
    where = f"cell {session.cells} in this process"
    if how:
        how = f"warm session {how.format(where)}"
    else:
        how = f"warm session ({where}, started {_age(time.time() - (session.worker_started or time.time()))} ago)"
    return _Warm(session, cell, setup_s), how


def _keep_session_log(folder: ProfileFolder, session) -> None:
    """What nsys launch printed, into the cell's tool-output.txt before the session's folder goes away."""
    with open(folder.tool_log, "a") as f:
        f.write(session.log_tail(4000) + "\n")


def _launch_words(session) -> list[str]:
    return [str(session.nsys), "launch", f"--session-new={session.name}", f"--trace={session.trace}",
            *session.launch_args, sys.executable, "-m", "nsight_magic.inside.worker", str(session.dir)]


def _age(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"

