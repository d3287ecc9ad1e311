"""The report a user holds: a reader's data (readers: files -> DataFrames) with what can be done with it on top —
`report.findings()`, `.bottleneck()`, `.ops_summary()`, `.memory_summary()`, `.show()`.

    rep = open_report("run.nsys-rep")   # an NsysReport: rep.kernels, rep.kernel_summary(), ... as the reader has them
    rep.findings(); rep.show()          # handed to analysis and views

The readers import nothing of analysis or views; this facade sits above both.  It holds the reader's object
(`.data`, one connection) and adds methods only: any other attribute (frames, summaries, meta) is the data's.
Analysis and views are handed the data itself, typed as the readers' contract (readers.contract).
"""
from __future__ import annotations

from typing import Any

from . import analysis, views
from .readers import read_report
from .readers.ncu import NcuData
from .readers.nsys import NsysData

__all__ = ["NsysReport", "NcuReport", "open_report", "as_report"]


class _Facade:
    """A reader's object with what can be done with it: attributes the facade lacks are the data's."""

    tool: str

    def __init__(self, data):
        self.data = data

    def __getattr__(self, name: str) -> Any:
        # only for what the facade itself lacks; never for `data` (not yet set while unpickling) or dunders
        if name == "data" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.data, name)

    def __setattr__(self, name: str, value) -> None:
        # what is set on the report is set on its data: the analysis the facade hands the data to sees it
        if name == "data":
            object.__setattr__(self, name, value)
        else:
            setattr(self.data, name, value)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(dir(self.data)))

    def __repr__(self):
        return repr(self.data).replace(type(self.data).__name__, type(self).__name__, 1)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        close = getattr(self.data, "close", None)
        if close is not None:
            close()


class NsysReport(_Facade):
    """An Nsight Systems report: the reader's frames (`.data`, a readers.nsys.NsysData) and what can be done with
    them."""

    tool = "nsys"
    data: NsysData

    def findings(self, thresholds: dict | None = None, rules=None) -> list:
        """What this profile says to change: `analysis.findings.Finding`s sorted by the time the fix can save
        (thresholds: thresholds.py; rules: names of analysis.findings.NSYS_RULES whose findings to return, as the full
        run finds them; default all)."""
        return analysis.nsys_findings(self.data, thresholds, rules)

    def findings_frame(self, thresholds: dict | None = None):
        """findings() as a DataFrame, one row per finding."""
        return analysis.findings_frame(self.findings(thresholds))

    def bottleneck(self):
        """What bounds the cell: an `analysis.bottleneck.Bottleneck` with the verdict `kind` (gpu, cpu, input, copy,
        sync, communication), a one-line `summary`, the steady-state `breakdown` (category, time_ns, pct: interval
        unions that add up to the `window`) and, with several processes, `per_rank`."""
        return analysis.bottleneck(self.data)

    def kernel_classes(self, window: tuple[int, int] | None = None):
        """What the GPU spends its kernel time on, classified from the kernels' names: cls (gemm, conv, attention,
        elementwise, reduction, ...), precision of the matrix kernels, kernels, time_ns, tc_ns (on tensor cores),
        pct of kernel time.  See analysis.kernel_classes."""
        return analysis.kernel_classes(self.data, window)

    def ops_summary(self, by: str | None = None):
        """Per PyTorch operator (profiles made with %%nsys --ops): op, calls, cpu_ns, gpu_ns (the GPU work it
        launched, by correlation id), kernels, top_kernel, backward_of; by='shape' (--ops shapes) or 'module' (the
        NVTX range around each call) split the rows.  See analysis.ops."""
        return analysis.ops_summary(self.data, by)

    def memory_summary(self):
        """GPU memory during the cell (analysis.gpu_memory.MemorySummary): `devices` (peak per device and when,
        allocated and reserved peaks, what was held before the cell, growth per step and the steps left until the
        device is full, an out-of-memory failure), `live` (what was live at the peak or the failure, by the site and
        cell line that allocated it, with its NVTX range) and `growth` (allocated after each step)."""
        return analysis.memory_summary(self.data)

    def show(self, folder=None, thresholds: dict | None = None):
        """The view (views.profile_view.ProfileView): displayed in a notebook, the static view with its live
        timeline; saved, the static view, which shows wherever the notebook is opened."""
        return views.show_nsys(self.data, folder=folder, thresholds=thresholds)


class NcuReport(_Facade):
    """An Nsight Compute report: the reader's kernels, metrics and rules (`.data`, a readers.ncu.NcuData) and what
    can be done with them."""

    tool = "ncu"
    data: NcuData

    def findings(self) -> list:
        """The guided-analysis rules as `analysis.findings.Finding`s, ranked by the time their fix can save."""
        return analysis.ncu_findings(self.data)

    def findings_frame(self):
        return analysis.findings_frame(self.findings())

    def show(self, folder=None):
        """The view (views.profile_view.ProfileView): the static view, with the live one while its kernel lives."""
        return views.show_ncu(self.data, folder=folder)


def as_report(data):
    """A reader's object (NsysData / NcuData) in its facade (NsysReport / NcuReport); a facade or anything else as
    it is."""
    if isinstance(data, NsysData):
        return NsysReport(data)
    if isinstance(data, NcuData):
        return NcuReport(data)
    return data


def open_report(path) -> NsysReport | NcuReport:
    """Open a report by its kind (nsys: .sqlite/.nsys-rep/.qdrep; ncu: .ncu-rep/.csv) or a profile folder."""
    return as_report(read_report(path))
