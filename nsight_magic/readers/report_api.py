"""What a report object offers beyond its data: `report.findings()`, `.bottleneck()`, `.ops_summary()`, `.show()`.

The readers know nothing of analysis or views (they read files into DataFrames).  These conveniences of the public
API hand the report to them, lazily, through the two imports below: the only ones in the package that go from a
lower layer up to a higher one (tests/test_layout.py counts them).
"""
from __future__ import annotations


def _analysis():
    from .. import analysis  # upward: report.findings() etc. are public API sugar over analysis's functions

    return analysis


def _views():
    from .. import views  # upward: report.show() is public API sugar over the views

    return views


class NsysActions:
    """Mixed into readers.nsys.NsysReport."""

    def findings(self, thresholds: dict | None = None, rules=None) -> list:
        """What this profile says to change: `analysis.findings.Finding`s sorted by the time the fix can save
        (thresholds: thresholds.py; rules: names of analysis.findings.NSYS_RULES, default all)."""
        return _analysis().nsys_findings(self, thresholds, rules)

    def findings_frame(self, thresholds: dict | None = None):
        """findings() as a DataFrame, one row per finding."""
        return _analysis().findings_frame(self.findings(thresholds))

    def bottleneck(self):
        """What bounds the cell: an `analysis.bottleneck.Bottleneck` with the verdict `kind` (gpu, cpu, input, copy,
        sync, communication), a one-line `summary`, the steady-state `breakdown` (category, time_ns, pct: interval
        unions that add up to the `window`) and, with several processes, `per_rank`."""
        return _analysis().bottleneck(self)

    def kernel_classes(self, window: tuple[int, int] | None = None):
        """What the GPU spends its kernel time on, classified from the kernels' names: cls (gemm, conv, attention,
        elementwise, reduction, ...), precision of the matrix kernels, kernels, time_ns, tc_ns (on tensor cores),
        pct of kernel time.  See analysis.kernel_classes."""
        return _analysis().kernel_classes(self, window)

    def ops_summary(self, by: str | None = None):
        """Per PyTorch operator (profiles made with %%nsys --ops): op, calls, cpu_ns, gpu_ns (the GPU work it
        launched, by correlation id), kernels, top_kernel, backward_of; by='shape' (--ops shapes) or 'module' (the
        NVTX range around each call) split the rows.  See analysis.ops."""
        return _analysis().ops_summary(self, by)

    def memory_summary(self):
        """GPU memory during the cell (analysis.gpu_memory.MemorySummary): `devices` (peak per device and when,
        allocated and reserved peaks, what was held before the cell, growth per step and the steps left until the
        device is full, an out-of-memory failure), `live` (what was live at the peak or the failure, by the site and
        cell line that allocated it, with its NVTX range) and `growth` (allocated after each step)."""
        return _analysis().memory_summary(self)

    def show(self, **kw):
        """The view (views.profile_view.ProfileView): displayed in a notebook, the static view with its live
        timeline; saved, the static view, which shows wherever the notebook is opened."""
        return _views().show_nsys(self, **kw)


class NcuActions:
    """Mixed into readers.ncu.NcuReport."""

    def findings(self) -> list:
        """The guided-analysis rules as `analysis.findings.Finding`s, ranked by the time their fix can save."""
        return _analysis().ncu_findings(self)

    def findings_frame(self):
        return _analysis().findings_frame(self.findings())

    def show(self, folder=None):
        """The view (views.profile_view.ProfileView): the static view, with the live one while its kernel lives."""
        return _views().show_ncu(self, folder=folder)
