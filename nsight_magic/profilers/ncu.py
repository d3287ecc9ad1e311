"""Nsight Compute: the cell's kernels in a fresh process under `ncu` (no attach exists: always cold)."""
from __future__ import annotations

import shlex
import time
from dataclasses import replace
from typing import Callable

from .. import tools
from ..inside.marks import CAPTURE_DOMAIN
from ..errors import NsightMagicError
from ..options import RunOptions
from .nsys import child_argv
from .prepare import annotation_setup, load_returns, prepare_with_tool, tool_versions
from .process import (ChildRun, OutputCallback, Recording, RunResult, StatusCallback, ChildOutcome,
                      child_environment, describe_outcome)


def record_ncu(cell: str, opts: RunOptions, ncu_opts, *, setup_sources=(), namespace: dict | None = None,
               on_output: OutputCallback | None = None, on_status: StatusCallback | None = None,
               on_prepared: Callable[[list], None] | None = None, stop_grace_s: float = 30.0) -> Recording:
    """The record stage of a %%ncu run: the cell under ncu (kernels replayed as they run) until its code has
    finished and its --return values are back; `Recording.finish()` waits for ncu and imports its CSV pages.
    Same folder, state transfer and failure handling as nsys.

    Without --nvtx-include/--module only the cell's own kernels are profiled (the NVTX range the child pushes
    around the cell), so setup code does not use up --count.
    """
    from ..tools import ncu as ncu_tool

    t0 = time.monotonic()
    # --module NAME selects a module's NVTX range: give the models their ranges unless the user chose otherwise
    prep, ncu, version = prepare_with_tool(
        cell, opts, "ncu", ncu_tool.find_ncu, ncu_tool.ncu_version, capture="cell", setup_sources=setup_sources,
        namespace=namespace, on_prepared=on_prepared,
        annotations=annotation_setup(opts, modules=0 if ncu_opts.module else None))
    folder = prep.folder
    messages: list[str] = []
    user_opts = ncu_opts  # the filters the user chose, for messages
    if not ncu_opts.nvtx_include and not ncu_opts.module:
        ncu_opts = replace(ncu_opts, nvtx_include=(f"{CAPTURE_DOMAIN}@{folder.path.name}/",))
    prefix, isolation_note = tools.isolation_prefix()
    if isolation_note:
        messages.append(isolation_note)
    argv = [*prefix, *ncu_tool.build_ncu_argv(ncu, ncu_opts, folder.report_base, child_argv(folder))]
    folder.command.write_text(shlex.join(argv) + "\n")
    folder.write_json(folder.versions, tool_versions(ncu, "ncu", version))

    run = ChildRun(argv, prep, child_environment(passed=opts.pass_env), on_output, on_status)
    run.record(opts.timeout, stop_grace_s)
    returned = load_returns(folder, messages)
    status = run.status_so_far
    if status not in ("ok", "failed"):  # the cell's own failure is known now; ncu's are explained at the end
        said = describe_outcome(ChildOutcome(None, status, 0.0, list(run.phases), details=dict(run.extras)), "ncu",
                                opts.timeout, folder)
        if said:
            messages.append(said)
    record_s = time.monotonic() - t0

    def finish(status_cb, cancel) -> RunResult:
        return _finish_ncu(run, ncu, ncu_opts, user_opts, opts, folder, list(messages), returned, prep.manifest,
                           t0, record_s, status_cb or on_status, cancel, stop_grace_s)

    return Recording(folder, "ncu", status, record_s, returned, prep.manifest, messages, [], finish)


def run_ncu(cell: str, opts: RunOptions, ncu_opts, **kw) -> RunResult:
    """Profile the kernels of `cell` with Nsight Compute and wait for the report: record_ncu(...).finish()."""
    return record_ncu(cell, opts, ncu_opts, **kw).finish()


def _finish_ncu(run, ncu, ncu_opts, user_opts, opts: RunOptions, folder, messages: list[str], returned: dict,
                manifest: list, t0: float, record_s: float, on_status, cancel, stop_grace_s: float) -> RunResult:
    from ..tools import ncu as ncu_tool

    notes: list[str] = []
    outcome = run.finish(on_status, cancel, stop_grace_s)
    if on_status:
        on_status("importing report", outcome.wall_s)
    tool_text = folder.tool_log.read_text(errors="replace") if folder.tool_log.exists() else ""
    message = describe_outcome(outcome, "ncu", opts.timeout, folder)
    # What happened to the cell comes first; ncu's own known failures explain the rest.
    explained = None
    if outcome.status in ("ok", "failed"):
        explained = ncu_tool.explain_ncu_failure(tool_text, outcome.returncode or 0, user_opts)
        if explained and explained.startswith("no kernels were profiled") and not tools.gpu_visible():
            # the first thing to know: without a GPU no filter could have matched anything
            explained = ("no GPU is visible on this machine, so the cell launched no CUDA kernel for ncu to "
                         "profile: run %%ncu where an NVIDIA GPU and its driver are")
    if message and outcome.status != "ok" and not (explained and outcome.status == "failed") \
            and message not in messages:
        messages.append(message)
    if explained:
        messages.append(f"{explained}; everything is kept in {folder.path}/")
    report = folder.path / "report.ncu-rep"
    if not report.exists():
        if not explained and outcome.status in ("ok", "failed"):
            messages.append(f"ncu wrote no report; its output is in {folder.tool_log}")
        report = None
    elif cancel is not None and cancel.is_set():
        messages.append(f"interrupted before the profile was loaded: report.ncu-rep is kept in {folder.path}/ "
                        f"(%nsys_load {folder.path / 'report.ncu-rep'} shows it)")
    else:
        try:
            raw, _details = ncu_tool.import_csvs(ncu, report)
            from ..readers.ncu import open_ncu_report
            from ..readers.summary import write_summary

            ncu_report = open_ncu_report(raw)
            note = ncu_tool.count_limit_note(ncu_opts, len(ncu_report.kernels))
            if note:
                notes.append(note)
            write_summary(folder.path, ncu_report)
        except (RuntimeError, NsightMagicError) as e:
            messages.append(f"{e}; report.ncu-rep is kept in {folder.path}/")
    return RunResult(folder, outcome.status, outcome.returncode, time.monotonic() - t0, report, None, messages,
                     returned, manifest, {"run_s": outcome.wall_s, "record_s": round(record_s, 3)}, notes)
