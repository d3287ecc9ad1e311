"""Nsight Compute: the cell's kernels in a fresh process under `ncu` (no attach exists: always cold)."""
from __future__ import annotations

import shlex
import time
from dataclasses import replace
from typing import Callable

from .. import tools
from ..inside.child import CAPTURE_DOMAIN
from ..errors import NsightMagicError
from ..options import RunOptions
from .nsys import child_argv
from .prepare import _annotations, _load_returns, _prepare_with_tool, _versions
from .process import OutputCallback, RunResult, StatusCallback, child_environment, describe_outcome, run_child


def run_ncu(cell: str, opts: RunOptions, ncu_opts, *, setup_sources=(), namespace: dict | None = None,
            on_output: OutputCallback | None = None, on_status: StatusCallback | None = None,
            on_prepared: Callable[[list], None] | None = None, stop_grace_s: float = 30.0) -> RunResult:
    """Profile the kernels of `cell` with Nsight Compute; same folder, state transfer and failure handling as nsys.

    Without --nvtx-include/--module only the cell's own kernels are profiled (the NVTX range the child pushes
    around the cell), so setup code does not use up --count.
    """
    from ..tools import ncu as ncu_tool

    t0 = time.monotonic()
    # --module NAME selects a module's NVTX range: give the models their ranges unless the user chose otherwise
    prep, ncu, version = _prepare_with_tool(
        cell, opts, "ncu", ncu_tool.find_ncu, ncu_tool.ncu_version, capture="cell", setup_sources=setup_sources,
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
        if explained and explained.startswith("no kernels were profiled") and not tools.gpu_visible():
            # the first thing to know: without a GPU no filter could have matched anything
            explained = ("no GPU is visible on this machine, so the cell launched no CUDA kernel for ncu to "
                         "profile: run %%ncu where an NVIDIA GPU and its driver are")
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
            from ..readers.ncu import open_ncu_report
            from ..readers.summary import write_summary

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
