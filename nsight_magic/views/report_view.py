"""The report view: Timeline | Kernels | Memory | CUDA API | NVTX | Advice | Files.

One static view (`static_fragment`): Bokeh's coarse level of the timeline (with the exact events of its quieter
rows for zooming, and a picture of it for pages without scripts) plus HTML tables and the findings; BokehJS inline,
so saved notebooks, nbconvert HTML and view.html work offline.  Its live part (`live_widget`): the same timeline as a
jupyter_bokeh widget whose zoom fetches the window's exact events from Python; our JupyterLab extension puts it in
the static timeline's place while its kernel lives (views/output.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..analysis import text as tx
from ..analysis.bottleneck import Bottleneck
from ..analysis.findings import Finding
from ..analysis.frame_memo import made_for, note_made, report_memo
from ..errors import ReportError
from .advice import advice_html, advice_text, verdict_text
from .assets import SETUP, head, noscript
from .bokehjs import bokehjs_html, embed_with_ids, unique_ids
from .kept_page import FILES_SLOT, Page, new_id
from .lines import lines_html, modules_html
from .picture import picture_html
from ..store import cell_facts, folder_files
from .tables import MAX_ROWS, Spans, static_tabs_html, table_html, table_text
from .timeline import build_timeline, legend_html
from .timeline_prepare import TimelineData, prepare_timeline
from ..readers.contract import NsysTables
from ..readers.python_samples import PythonSamples

if TYPE_CHECKING:
    import ipywidgets

    from .profile_view import ProfileView

def _lines_and_modules(report: NsysTables, folder: Path | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The Lines table (--lines) and the module tree (--modules); empty frames for reports without them."""
    from ..analysis.lines import lines_table, module_table

    facts = cell_facts(folder)
    made = facts.annotations or {}
    names, types = made.get("modules"), made.get("module_types")
    models, prefixed = made.get("models"), bool(made.get("model_prefixed"))
    source, first = facts.source, facts.first_line
    types = types if isinstance(types, dict) else None  # annotations.json is a file: checked, never trusted
    models = models if isinstance(models, list) else None
    try:
        return lines_table(report, source, first), module_table(report, names, types, models, prefixed)
    except Exception:  # noqa: BLE001 - an odd report: the other tabs still show
        return pd.DataFrame(), pd.DataFrame()


def _ranks(report: NsysTables) -> dict[str, Any]:
    """The Ranks tab's tables when the report holds several ranks (or processes with GPU work): per rank, NCCL per
    collective, the straggler per step; {} otherwise (and for a report a rule cannot read)."""
    from ..analysis.ranks import nccl_summary, rank_owners, ranks_table, stragglers_by_step

    try:
        if len(rank_owners(report)) < 2:  # one process: no tab, and none of the collectives' and steps' work
            return {}
        per_rank = ranks_table(report)
        if len(per_rank) < 2:
            return {}
        by = "rank" if per_rank["rank"].notna().all() else "process"
        shown = per_rank.assign(devices=per_rank["devices"].map(lambda d: ", ".join(map(str, d)) or "-"))
        return {"ranks": shown.drop(columns=["step_name"]), "step_name": per_rank["step_name"].iloc[0],
                "nccl": nccl_summary(report, by=by), "stragglers": stragglers_by_step(report).head(200)}
    except Exception:  # noqa: BLE001 - an odd report: the other tabs still show
        return {}


def _ranks_intro(r: dict[str, Any]) -> str:
    step = r.get("step_name")
    return ("<p>One row per rank: GPU busy share of the capture, kernel time outside NCCL (compute), NCCL kernel "
            "time, time its collectives waited for a later rank (wait), time the other ranks waited for it "
            "(others_wait: the straggler has the most), and the steps in which the others waited for it most" + (f"; steps are the NVTX ranges <code>{escape(step)}</code>" if step else
                                  "; no repeated NVTX step range was found") + ".</p>")


OPS_INTRO = ("<p>One row per PyTorch operator (<code>--ops</code>): calls, time in the operator on the CPU, time of "
             "the GPU work it launched (kernels, copies, memsets, by correlation id), its kernels and the one with "
             "most GPU time; backward operators name the forward operator they belong to. Click a name to see its "
             "calls on the timeline.</p>")


OPS_SOURCE = {"emit_nvtx": "Recorded with PyTorch's own operator ranges (torch.autograd.profiler.emit_nvtx: C++, "
                            "the cheaper way, on CUDA builds).",
              "dispatch": "Recorded with nsight-magic's dispatch mode (a TorchDispatchMode: CPU-only builds, or "
                          "NSIGHT_MAGIC_OPS_MODE=dispatch)."}


def _ops(report: NsysTables, origin_ns: int) -> tuple[pd.DataFrame, Spans, str]:
    """--ops: the operators' summary, where each operator's calls are on the timeline ({} when none), and the
    sentence that says how the operator ranges were recorded."""
    from ..analysis.ops import op_ranges, ops_source, ops_summary

    try:
        ranges = op_ranges(report)
        if ranges.empty:
            return pd.DataFrame(), {}, ""
        source = f"<p>{escape(OPS_SOURCE.get(ops_source(report) or '', ''))}</p>"
        ops = ops_summary(report)
        return ops, _instance_spans(ranges[ranges["visible"]], origin_ns, key="op", shown=ops.get("op")), source
    except Exception:  # noqa: BLE001 - an odd report: the other tabs still show
        return pd.DataFrame(), {}, ""


PYTHON_INTRO = ("<p>What the profiled process's threads were running in Python, sampled every {interval} during "
                "the cell ({samples:,} samples of {threads} thread{s}): per function the time it was on top of the "
                "stack (own) and anywhere on it (total), then per line of the cell what it spent its time in; "
                "shares are of the time the cell's own thread was sampled. Each time is a count of samples "
                "(the samples column): n samples measure it to about 1/√n of itself, so a line seen 4 times is "
                "known to ±50%; an NVTX range or %%nsys --lines measures the same code exactly. "
                "The timeline's Python rows show the same samples in time.{kernel}</p>")
KERNEL_THREADS = (" The {n} thread{s} of the machinery that runs the cell (the kernel's IOPub, heartbeat, control "
                  "and history threads, nsight-magic's own) {are} left out here; the timeline folds them into one "
                  "row, \"kernel threads\".")
PYTHON_ROWS = 60


def _sampled(df: pd.DataFrame) -> dict[str, str]:
    """The formats of a table of what samples measured: its times and shares as rounded (sampled_precision)."""
    return {c: "sampled_time" if c.endswith("_ns") else "sampled_pct" for c in df.columns
            if c.endswith(("_ns", "_pct")) or c == "pct"}


def _measured(lines: pd.DataFrame, ps: PythonSamples, report: NsysTables) -> tuple[pd.DataFrame, np.ndarray]:
    """The cell's lines with the time of those NVTX ranges measured exactly (measured_lines) in place of their
    sampled time, and a column saying which measured each ("samples", or the range); (lines, which are exact)."""
    from ..analysis.python_code import cell_thread_ns, measured_lines

    measured = measured_lines(ps, report.nvtx) if not lines.empty else pd.DataFrame()
    if measured.empty:
        return lines, np.zeros(len(lines), bool)
    out = lines.merge(measured.rename(columns={"measured_by": "range"}), on="line", how="left")
    exact = out["measured_ns"].notna().to_numpy()
    out.loc[exact, "total_ns"] = out.loc[exact, "measured_ns"].round().astype(np.int64)
    # shares of one whole: the sampled time of the cell's thread, or the lines' sum where measured lines exceed it
    out["pct"] = 100 * out["total_ns"] / max(cell_thread_ns(ps), float(out["total_ns"].sum()))
    out.insert(out.columns.get_loc("samples") + 1, "measured_by",
               np.where(exact, "NVTX '" + out["range"].fillna("").astype(str) + "'", "samples"))
    out = out.drop(columns=["measured_ns", "range"])
    order = out["total_ns"].astype(float).sort_values(ascending=False, kind="stable").index
    return out.loc[order].reset_index(drop=True), exact[order.to_numpy()]


def _python(report: NsysTables) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The Python tab: hottest functions, the cell's lines and the intro ((empty, empty, '') without samples)."""
    from ..analysis.python_code import KERNEL, cell_lines, functions, sampled_precision, thread_roles

    try:
        ps = report.python_samples
        if ps is not None and getattr(ps, "problem", None):
            return pd.DataFrame(), pd.DataFrame(), f"<p>{escape(ps.problem)}.</p>"
        if ps is None or ps.empty:
            return pd.DataFrame(), pd.DataFrame(), ""
        fn = functions(ps).head(PYTHON_ROWS).drop(columns=["kind"])
        lines, exact = _measured(cell_lines(ps), ps, report)
        # shown to the digits their samples support (issue 65: "17.264 ms 77.5 %" from 4 samples); a line an NVTX
        # range measured, as measured
        for df, sure in ((fn, np.zeros(len(fn), bool)), (lines, exact)):
            for c in _sampled(df):
                df[c] = np.where(sure, df[c].to_numpy(float),
                                 sampled_precision(df[c].to_numpy(float), df["samples"].to_numpy(float)))
        roles = thread_roles(ps)
        kernel = sum(1 for r in roles.values() if r == KERNEL)
        threads = len(roles) - kernel
        said = KERNEL_THREADS.format(n=kernel, s="s" if kernel != 1 else "", are="are" if kernel != 1 else "is") \
            if kernel else ""
        per_thread = ps.samples.groupby(["pid", "tid"]).size()
        shown = int(sum(n for k, n in per_thread.items() if roles.get(k) != KERNEL))
        intro = PYTHON_INTRO.format(interval=f"{ps.interval_ns / 1e6:g} ms", samples=shown,
                                    threads=threads, s="s" if threads != 1 else "", kernel=said)
        if not ps.placed:
            intro += ("<p>These samples could not be placed on the timeline: the report has no clock mark of "
                      "theirs.</p>")
        return fn, lines, intro
    except Exception as e:  # noqa: BLE001 - an odd samples file: the other tabs still show, this one says why
        return pd.DataFrame(), pd.DataFrame(), f"<p>The Python samples could not be read: {escape(str(e))}</p>"


GPU_MEMORY_INTRO = ("<p>GPU memory during the cell ({sources}): the peak per device and when, then what was live "
                    "at the peak (or when the cell ran out) by where it was allocated, and the memory held after "
                    "each step. The timeline's memory track shows it in time.</p>")


def _gpu_memory(report: NsysTables, origin_ns: int) -> tuple[str, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The GPU memory tab: (intro, devices, live at the peak, per step), times in ms from the timeline's x = 0
    (`origin_ns`); ('', ...) without a memory record."""
    from ..analysis.gpu_memory import memory_summary

    empty = pd.DataFrame()
    try:
        problem = getattr(report.gpu_memory, "problem", None)
        said = f"<p>{escape(problem)}.</p>" if problem else ""
        s = memory_summary(report)
        if s.empty:
            return said, empty, empty, empty
        names = {"torch": "torch's allocator history", "nsys": "nsys's device-memory record"}
        intro = said + GPU_MEMORY_INTRO.format(sources=" and ".join(names.get(x, x) for x in s.sources))
        off = getattr(report.gpu_memory, "stacks_off_ns", None)
        if off is not None:
            at = f" from {(off - origin_ns) / 1e6:,.0f} ms on" if np.isfinite(off) and off > origin_ns else ""
            intro += (f"<p>Allocations{at} are shown without the code that made them: the program ran a Python "
                      "thread of its own, and taking each allocation's stack would have made the cell wait for the "
                      "GIL at every allocation (several times slower).</p>")
        d = s.devices
        dev = pd.DataFrame({"device": d["device_id"], "peak GB": d["peak_bytes"] / 1e9,
                            "at ms": (d["peak_ns"] - origin_ns) / 1e6,
                            "allocated peak GB": d["peak_allocated"] / 1e9, "reserved peak GB": d["peak_reserved"] / 1e9,
                            "held before GB": d["held_before"] / 1e9, "capacity GB": d["capacity"] / 1e9,
                            "growth per step MB": d["growth_per_step"] / 1e6, "steps": d["steps"],
                            "out of memory at ms": (d["oom_ns"] - origin_ns) / 1e6})
        dev = dev.dropna(axis=1, how="all")
        live = s.live.assign(GB=s.live["bytes"] / 1e9).drop(columns=["bytes"])
        live = live.rename(columns={"site": "allocated at", "line": "cell line", "nvtx": "NVTX range"})
        growth = s.growth.assign(GB=s.growth["allocated"] / 1e9,
                                 end_ms=(s.growth["end_ns"] - origin_ns) / 1e6)[["device_id", "step", "end_ms",
                                                                                        "GB"]]
        return intro, dev, live, growth
    except Exception as e:  # noqa: BLE001 - an odd memory record: the other tabs still show, this one says why
        return f"<p>The GPU memory record could not be read: {escape(str(e))}</p>", empty, empty, empty


def _verdict(report: NsysTables) -> Bottleneck | None:
    """analysis.bottleneck(report), or None where it cannot be computed (the view shows the rest)."""
    from ..analysis import bottleneck

    try:
        return bottleneck(report)
    except Exception:  # noqa: BLE001 - an odd report: no verdict, the findings and tables still show
        return None


def _findings(report: NsysTables, thresholds: dict[str, Any] | None = None) -> list[Finding]:
    """The report's findings; a rule that breaks on an odd report must not take the view down with it."""
    from ..analysis import nsys_findings

    try:
        return list(nsys_findings(report, thresholds))
    except Exception as e:  # noqa: BLE001 - shown in the Advice tab instead
        from ..analysis.findings import Finding

        return [Finding("error", "info", "The findings could not be computed for this report",
                        f"{type(e).__name__}: {e}", "Report this with the profile folder.", 0, "", pd.DataFrame(), ())]


STATIC_BUDGET = 10000   # glyphs in saved output: keeps a cell under 2 MB with BokehJS inline
STATIC_EXACT = 10000    # events besides those kept in the saved output for exact zoom without a kernel (benchmarks/view.py)
LIVE_BUDGET = 30000     # glyphs per refresh through the widget comm
TABS = ("Timeline", "Kernels", "Memory", "CUDA API", "NVTX", "Advice", "Files")
_GPU_TABS = {"kernels": "kernels", "memory": "copies between host and device", "cudaapi": "CUDA calls"}


def empty_reason(report: NsysTables, key: str) -> str:
    """Why a tab has no rows, and what would fill it: no GPU visible, CUDA not traced, or no GPU work in the
    cell."""
    what = _GPU_TABS.get(key)
    if what is None:
        return "No rows in this report."
    tables = set(getattr(report.meta, "tables", ()) or ())
    traced = any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in tables)
    try:
        gpus = len(report.gpus.dropna(subset=["name"])) if "name" in report.gpus else len(report.gpus)
    except Exception:  # noqa: BLE001 - a report without its GPUs' table: say what is known
        gpus = 0
    if not traced and not gpus:
        return (f"No {what}: no GPU was visible to the profiled process, so CUDA was not traced (CPU activity and "
                "NVTX ranges only). On a machine with an NVIDIA GPU, %%nsys traces CUDA (-t cuda,nvtx) and "
                "this tab lists them.")
    if not traced:
        return (f"No {what}: CUDA was not traced in this profile (its -t/--trace list had no cuda); "
                "%%nsys -t cuda,nvtx records them.")
    if report.cuda_api.empty:
        return (f"No {what}: CUDA was traced, but the cell made no CUDA call during the capture (its tensors "
                "stayed on the CPU, or torch never started CUDA: `.cuda()` / `device='cuda'`).")
    return f"No {what} in the capture: the cell's CUDA calls queued none."


@dataclass
class ReportTables:
    kernels: pd.DataFrame
    memory: pd.DataFrame
    cuda_api: pd.DataFrame
    nvtx: pd.DataFrame
    kernel_zoom: Spans
    nvtx_zoom: Spans
    origin_ns: int = 0  # what the zoom spans are measured from (the timeline's x = 0)


KEPT_TABLES, MADE_TABLES = "tables", "tables_made"  # report_memo's keys


def files_html(folder: Path | None, files: pd.DataFrame, uid: str) -> str:
    """The Files tab of a view (`uid`) of a report in `folder` (store.folder_files)."""
    if folder is None:
        return "<p>This report is not in a profile folder.</p>"
    if "view.html" not in set(files["file"]):  # the page this view is saved as, written with it
        files = pd.concat([files, pd.DataFrame({"file": ["view.html"], "bytes": [None]})], ignore_index=True)
    return f"<p>{escape(str(folder))}</p>" + table_html(files, table_id=f"nm-{uid}-files")


def kept_static(report: NsysTables, page: Page, folder: Path | None = None,
                width: int = 1100) -> tuple[str, str] | None:
    """(text, static fragment) of a view of `report` from its kept page (saved_analysis.kept_page): its ids made
    anew, its Files listing made now; None where the page was made for another folder or width."""
    folder = _report_folder(report, folder)
    if not page.made_for(width, _folder_text(folder)):
        return None
    uid, html = page.renewed()
    return page.text, html.replace(FILES_SLOT, files_html(folder, folder_files(folder), uid), 1)


MADE_PAGE = "page_made"  # report_memo's key: the static page a view of the report made last


def keep_page(report: NsysTables, page: Page) -> None:
    """Hold the page a view made for this report until its results are kept with it (saved_analysis.save): held,
    not weakly referenced, as the view is gone by then (0.7 MB at 1M kernels)."""
    report_memo(report)[MADE_PAGE] = page


def made_page(report: NsysTables) -> Page | None:
    """The static page the report's last view made (keep_page), if any."""
    page = report_memo(report).get(MADE_PAGE)
    return page if isinstance(page, Page) else None


def _folder_text(folder: Path | None) -> str | None:
    return str(folder) if folder is not None else None


def _bokeh_version() -> str:
    import bokeh

    return str(bokeh.__version__)


def made_tables(report: NsysTables) -> ReportTables | None:
    """The tables prepare_tables made for this report, while something (a view) still holds them."""
    return made_for(report, MADE_TABLES, ReportTables)


def keep_tables(report: NsysTables, tables: ReportTables) -> None:
    """Let the report's next prepare_tables from the same origin take `tables` (made before, for this report)."""
    report_memo(report)[KEPT_TABLES] = tables


def _summary(report: NsysTables, method: str) -> pd.DataFrame:
    df = getattr(report, method)()  # one of the contract's summaries (readers.contract.NsysTables)
    if not isinstance(df, pd.DataFrame):
        raise ReportError(f"report.{method}() returned {type(df).__name__}, expected a DataFrame")
    return df


MAX_INSTANCES = 100  # instances a name click steps through (next / previous), the first ones


def _instance_spans(df: pd.DataFrame, start_ns: int, key: str = "name", shown: pd.Series | None = None) -> Spans:
    """df[key] -> [(start, end), ...] in ms from capture start, the first MAX_INSTANCES instances in time order:
    a table click zooms to the first, next / previous step through the others.  shown: the table's column of
    keys, whose first MAX_ROWS the table shows: only theirs (not a span list for each of millions of names)."""
    if df is None or df.empty or not {key, "start_ns", "end_ns"} <= set(df.columns):
        return {}
    d = df[[key, "start_ns", "end_ns"]].dropna(subset=[key])
    if shown is not None and len(shown) > MAX_ROWS:
        d = d[tx.isin(d[key], shown.head(MAX_ROWS).astype(str))]
    d = d.sort_values("start_ns", kind="stable")
    d = d[d.groupby(key, sort=False, observed=True).cumcount() < MAX_INSTANCES]
    t0 = (d["start_ns"].to_numpy(np.float64) - start_ns) / 1e6
    t1 = (pd.to_numeric(d["end_ns"], errors="coerce").fillna(d["start_ns"]).to_numpy(np.float64) - start_ns) / 1e6
    out: Spans = {}
    for k, a, b in zip(d[key].astype(str).to_numpy(object), t0, t1):  # at most MAX_INSTANCES per name
        out.setdefault(k, []).append((a, b))
    return out


def prepare_tables(report: NsysTables, origin_ns: int = 0) -> ReportTables:
    """The reader's summaries as they are (same numbers), plus a derived GB/s column for copies.

    origin_ns: the timeline's x = 0 (TimelineData.origin_ns), so that name clicks zoom to the right place.  Tables
    made before from the same origin and kept (saved_analysis.py puts them in the report's memo) are taken once
    instead: a profile seen before reads none of its summaries."""
    start = int(origin_ns)
    memo = report_memo(report)
    kept = memo.get(KEPT_TABLES)
    if isinstance(kept, ReportTables) and kept.origin_ns == start:
        del memo[KEPT_TABLES]
        return kept
    mem = _summary(report, "memcpy_summary")
    if {"total_bytes", "total_ns"} <= set(mem.columns):
        mem = mem.assign(avg_gbps=mem["total_bytes"] / mem["total_ns"].where(mem["total_ns"] > 0))
    kernels, nvtx = _summary(report, "kernel_summary"), _one_label(_summary(report, "nvtx_summary"))
    made = ReportTables(
        kernels=kernels, memory=mem, cuda_api=_summary(report, "cuda_api_summary"), nvtx=nvtx,
        # three columns, not the kernels' frame (a million kernels: 0.03 s against 1.5 s where it was not read yet)
        kernel_zoom=_instance_spans(report.columns("kernels", ["name", "start_ns", "end_ns"]), start,
                                    shown=kernels.get("name")),
        nvtx_zoom=_nvtx_spans(report.nvtx, start, shown=nvtx.get("name")), origin_ns=start)
    note_made(report, MADE_TABLES, made)
    return made


def _one_label(nvtx: pd.DataFrame) -> pd.DataFrame:
    """The NVTX table shows one name per range: our stable `name` (nsys's own label, `range`, stays in
    report.nvtx_summary())."""
    return nvtx.drop(columns=["range"]) if "range" in nvtx.columns and "name" in nvtx.columns else nvtx


def _nvtx_spans(nv: pd.DataFrame, start_ns: int, shown: pd.Series | None = None) -> Spans:
    """Zoom spans of NVTX ranges, keyed like nvtx_summary() rows: the reader's `label` ('domain:name' for ranges
    in a named domain), or `name` where a reader has no label.  Marks are not in the summary: left out."""
    if nv is None or nv.empty:
        return {}
    if "kind" in nv.columns:
        nv = nv[~tx.eq(nv["kind"], "mark")]
    return _instance_spans(nv, start_ns, key="label" if "label" in nv.columns else "name", shown=shown)


def _report_folder(report: NsysTables, folder: Path | None) -> Path | None:
    if folder is not None:
        return folder
    known = getattr(report, "folder", None)  # a run's report knows its profile folder (RunResult.open)
    return Path(known) if known is not None else None


class NsysView:
    """Prepared data for one report; renders the static page parts and the live widget."""

    def __init__(self, report: NsysTables, folder: Path | None = None, *, width: int = 1100,
                 thresholds: dict[str, Any] | None = None, page: Page | None = None) -> None:
        """page: this view's static page as kept before (saved_analysis.kept_page), shown with its ids made anew
        instead of being drawn again."""
        if isinstance(report, (str, Path)):  # the views read no file: nsight_magic.open_report(path).show()
            raise TypeError("NsysView shows an opened report: open_report(path) reads it")
        self.report = report
        self.folder = _report_folder(report, folder)
        self.data: TimelineData = prepare_timeline(report)
        self.tables = prepare_tables(report, self.data.origin_ns)
        self.findings = _findings(report, thresholds)
        self.verdict = _verdict(report)
        self.lines, self.modules = _lines_and_modules(report, self.folder)
        self.ops, self.ops_zoom, self.ops_source = _ops(report, self.data.origin_ns)
        self.python, self.python_lines, self.python_intro = _python(report)
        self.memory_intro, self.memory_devices, self.memory_live, self.memory_growth = _gpu_memory(
            report, self.data.origin_ns)
        self.ranks = _ranks(report)
        self.files = folder_files(self.folder)
        self.width = width
        self.uid = new_id()  # a UUID: a page kept makes it anew wherever it occurs (views/kept_page.py)
        self._static: dict[bool, str] = {}  # FILES_SLOT where the Files listing goes
        if page is not None and page.made_for(width, _folder_text(self.folder)):
            self.uid, self._static[True] = page.renewed()
            keep_page(report, page)  # kept again with whatever else this view adds (saved_analysis.save)
        # the static timeline and the live one share it: the tables' and findings' clicks reach whichever shows
        self.plot_name = f"nsight-timeline-{self.uid}"
        self._other_panes: list[str] | None = None
        self._text: str | None = None
        self._files_pane: str | None = None

    # ---- static -------------------------------------------------------------------------------------
    def static_fragment(self, *, include_bokehjs: bool, timeline: bool = True) -> str:
        """An HTML fragment (tabs, coarse timeline, tables).  With include_bokehjs, BokehJS comes inline.  Without
        timeline, no saved timeline: the page the live view is drawn in first (views/output.py), a second sooner."""
        if timeline not in self._static:  # built once: the cell output and view.html share it
            self._static[timeline] = self._build_static(timeline)
        if self._files_pane is None:
            self._files_pane = self._files_html()
        return (bokehjs_html() if include_bokehjs else "") + self._static[timeline].replace(FILES_SLOT,
                                                                                             self._files_pane, 1)

    def _build_static(self, with_timeline: bool = True) -> str:
        legend = legend_html(self.data.categories, self.data.colors)
        # the live view (views/output.py) takes the place of what this slot holds
        if with_timeline:
            with unique_ids():
                tv = build_timeline(self.data, width=self.width, budget=STATIC_BUDGET, embed=STATIC_EXACT,
                                    name=self.plot_name)
            divs, script, ids = embed_with_ids({"timeline": tv.layout})
            timeline = f'{legend}<div class="nm-live-slot">{picture_html(tv, self.width)}{divs["timeline"]}</div>'
        else:
            script = ""
            # what a notebook saved before the whole view came (its kernel stopped meanwhile) says
            load = f" (if its kernel stopped first: %nsys_load {self.folder})" if self.folder is not None else ""
            timeline = (f'{legend}<div class="nm-live-slot"><p class="nm-drawing">'
                        f'{escape("Drawing the timeline..." + load)}</p></div>')
        html = (f"{head()}"
                f'<div class="nm-report" id="nm-{self.uid}">{noscript()}'
                f"{static_tabs_html(self.tabs, [timeline, *self._panes()])}</div>{SETUP}{script}")
        if with_timeline:  # kept with the report's results: a reopen shows it at once (saved_analysis.py)
            keep_page(self.report, Page(html, self.text(), self.uid, tuple(sorted({self.uid, *ids})), self.width,
                                        _folder_text(self.folder),
                                        str(self.report.path), _bokeh_version()))
        return html

    def _panes(self) -> list[str]:
        """The tabs after the timeline (tables, advice, files): the same in the first page and the whole one."""
        if self._other_panes is not None:
            return self._other_panes
        t = self.tables
        plot_name = self.plot_name
        panes = [
            "",  # the timeline's place, so that the tabs below are inserted where the tab bar names them
            self._table("kernels", t.kernels, t.kernel_zoom, plot_name),
            self._table("memory", t.memory, None, plot_name),
            self._table("cudaapi", t.cuda_api, None, plot_name),
            modules_html(self.modules) + self._table("nvtx", t.nvtx, t.nvtx_zoom, plot_name),
            advice_html(self.findings, origin_ns=self.data.origin_ns, plot_name=plot_name, uid=self.uid,
                        verdict=self.verdict),
            FILES_SLOT,  # made when shown: the folder's files change (views/kept_page.py)
        ]
        if self.ranks:  # several ranks: before Advice
            r = self.ranks
            panes.insert(5, _ranks_intro(r) + self._table("ranks", r["ranks"], None, plot_name)
                         + "<h4>NCCL collectives</h4>" + self._table("nccl", r["nccl"], None, plot_name)
                         + "<h4>Straggler per step</h4>" + self._table("strag", r["stragglers"], None, plot_name))
        if self.memory_intro:  # GPU memory: after NVTX (and Lines, Ops, Python, Ranks)
            panes.insert(5, self.memory_intro
                         + self._table("gpumem", self.memory_devices, None, plot_name)
                         + "<h4>Live at the peak, by where it was allocated</h4>"
                         + self._table("gpulive", self.memory_live, None, plot_name)
                         + "<h4>Allocated after each step</h4>"
                         + self._table("gpusteps", self.memory_growth, None, plot_name))
        if self.python_intro:  # Python samples: after NVTX (and Lines, Ops, Ranks)
            panes.insert(5, self.python_intro
                         + self._table("python", self.python, None, plot_name, formats=_sampled(self.python))
                         + "<h4>Lines of the cell</h4>"
                         + self._table("pylines", self.python_lines, None, plot_name,
                                       formats=_sampled(self.python_lines)))
        if not self.ops.empty:  # --ops: operators, after NVTX
            panes.insert(5, OPS_INTRO + self.ops_source + self._table("ops", self.ops, self.ops_zoom, plot_name,
                                                                      zoom_col="op"))
        if not self.lines.empty:  # --lines: the line-profiler view, after NVTX
            panes.insert(5, lines_html(self.lines))
        self._other_panes = panes[1:]
        return self._other_panes

    def _table(self, key: str, df: pd.DataFrame, zoom: Spans | None, plot_name: str, zoom_col: str = "name",
               formats: dict[str, str] | None = None) -> str:
        if df is None or df.empty:
            return f"<p>{escape(empty_reason(self.report, key))}</p>"
        return table_html(df, table_id=f"nm-{self.uid}-{key}", zoom=zoom, plot_name=plot_name, zoom_col=zoom_col,
                          formats=formats)

    def _files_html(self) -> str:
        return files_html(self.folder, self.files, self.uid)

    @property
    def tabs(self) -> tuple[str, ...]:
        extra = (("Lines",) if not self.lines.empty else ()) + (("Ops",) if not self.ops.empty else ()) \
            + (("Python",) if self.python_intro else ()) + (("GPU memory",) if self.memory_intro else ()) \
            + (("Ranks",) if self.ranks else ())
        return TABS[:5] + extra + TABS[5:]

    def html_page(self) -> str:
        title = escape(f"Nsight Systems report {self.report.path}")
        return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title></head>'
                f"<body>{self.static_fragment(include_bokehjs=True)}</body></html>")

    # ---- live ---------------------------------------------------------------------------------------
    def live_widget(self) -> ipywidgets.Widget | None:
        """The live part: the timeline as a jupyter_bokeh widget whose zoom fetches the window's exact events from
        Python; it takes the place of the static timeline (same plot name: the tables' and findings' clicks reach
        it).  None without jupyter_bokeh."""
        try:
            from jupyter_bokeh import BokehModel
        except ImportError:
            return None
        with unique_ids():
            tv = build_timeline(self.data, width=self.width, budget=LIVE_BUDGET, name=self.plot_name)
        tv.attach_live_refresh()
        widget = BokehModel(tv.layout)
        widget._nsight_timeline = tv  # keep the view reachable (tests, refresh)
        return widget

    def text(self) -> str:
        if self._text is None:
            self._text = _with_verdict(self.verdict, _text(self.report, self.tables) + _ranks_text(self.ranks)
                                       + "\n\n" + advice_text(self.findings))
        return self._text


def _text(report: NsysTables, t: ReportTables) -> str:
    """Plain text from the reader's frames and summaries (no timeline preparation needed)."""
    meta = report.meta
    # the rows counted from one column, not the frames built (a million kernels: 1.2 s where none was read yet)
    counts = {a: len(report.columns(a, ["start_ns"])) for a in ("kernels", "memcpy", "memset", "cuda_api")}
    counts["nvtx"] = len(report.nvtx)
    lines = [f"Nsight Systems report {report.path}",
             f"nsys {meta.nsys_version or '?'}, capture {meta.duration_ns / 1e6:,.3f} ms; "
             + ", ".join(f"{n:,} {a}" for a, n in counts.items())]
    for title, df, cols in (("Kernels", t.kernels, ["name", "count", "total_ns", "avg_ns", "pct"]),
                            ("Memory", t.memory, ["kind", "count", "total_ns", "total_bytes", "pct"]),
                            ("CUDA API", t.cuda_api, ["name", "count", "total_ns", "avg_ns", "pct"]),
                            ("NVTX", t.nvtx, ["name", "count", "total_ns", "gpu_ns", "pct"])):
        if df is None or df.empty:
            continue
        keep = [c for c in cols if c in df.columns]
        shown = df[keep].copy()
        if "name" in shown:
            shown["name"] = shown["name"].astype(str).str.slice(0, 60)
        lines += ["", f"{title} (top {min(len(df), 8)} of {len(df)})", table_text(shown, max_rows=8)]
    return "\n".join(lines)


# ---- public API -----------------------------------------------------------------------------------------

def show_nsys(report: NsysTables, folder: Path | None = None,
              thresholds: dict[str, Any] | None = None) -> ProfileView:
    """The report's view (views.output.ProfileView): displayed, the static view with the live timeline."""
    from .profile_view import ProfileView

    return ProfileView(NsysView(report, folder, thresholds=thresholds))


def _ranks_text(ranks: dict[str, Any]) -> str:
    if not ranks:
        return ""
    cols = ["label", "devices", "gpu_busy_pct", "compute_ns", "nccl_ns", "wait_ns", "others_wait_ns",
            "straggler_steps", "steps", "step_med_ns"]
    return "\n\nRanks\n" + table_text(ranks["ranks"][cols], max_rows=16)


def nsys_text(report: NsysTables, thresholds: dict[str, Any] | None = None) -> str:
    """text/plain fallback: the verdict, capture, counts, the top rows of each summary, the ranks and the top
    findings."""
    return _with_verdict(_verdict(report), _text(report, prepare_tables(report)) + _ranks_text(_ranks(report))
                         + "\n\n" + advice_text(_findings(report, thresholds)))


def _with_verdict(verdict: Bottleneck | None, text: str) -> str:
    return (verdict_text(verdict) + "\n" + text) if verdict is not None else text


def nsys_html(report: NsysTables, folder: Path | None = None, thresholds: dict[str, Any] | None = None) -> str:
    """A standalone HTML page (BokehJS inline, works offline)."""
    return NsysView(report, folder, thresholds=thresholds).html_page()


def write_view_html(report: NsysTables, path: str | Path, folder: Path | None = None,
                    thresholds: dict[str, Any] | None = None) -> Path:
    """Write nsys_html to path; returns the path."""
    from ..store import write_page

    return write_page(Path(path), nsys_html(report, folder, thresholds))


def nsys_bundle(report: NsysTables, folder: Path | None = None, *, include_bokehjs: bool = True,
                widget: bool = True) -> dict[str, Any]:
    """The display bundle (views.output): static text/html (BokehJS inline with include_bokehjs), text/plain and,
    with widget, the live part."""
    from .profile_view import ProfileView

    pv = ProfileView(NsysView(report, folder))
    bundle = pv.bundle(live=widget)
    if include_bokehjs:
        bundle["text/html"] = bokehjs_html() + bundle["text/html"]
    return bundle


def display_nsys(report: NsysTables, folder: Path | None = None, save_html: str | Path | None = None,
                 thresholds: dict[str, Any] | None = None) -> None:
    """Publish the report in IPython: one bundle (static text/html, text/plain, the live part), with BokehJS
    inline the first time in a notebook.  save_html: also write the standalone page there.
    thresholds: of the Advice rules (thresholds.py)."""
    from IPython.display import publish_display_data

    from .bokehjs import needs_bokehjs
    from .profile_view import ProfileView

    view = NsysView(report, folder, thresholds=thresholds)
    publish_display_data(ProfileView(view).bundle(loader=needs_bokehjs()))
    if save_html is not None:
        from .pages import write_page

        write_page(Path(save_html), view.html_page())
