"""Profile Jupyter cells with NVIDIA Nsight Systems / Nsight Compute and see the results inline.

Pipeline: cell -> run (subprocess under the tool) -> report files -> readers (DataFrames)
-> analysis -> views -> store.  Every stage works without IPython.
"""
from __future__ import annotations

from .version import __version__

__all__ = ["open_report", "open_job", "last", "readable", "diff", "gate", "save_baseline", "export_trace",
           "annotate_modules", "annotate_functions",
           "load_ipython_extension", "__version__"]


def open_report(path, wait: bool = True):
    """Open an Nsight Systems or Nsight Compute report (file or saved profile folder).  A profile still loading in
    the background (in this kernel or another) is waited for, with a line saying so (Ctrl-C stops the wait)."""
    from .background import wait_for_profile
    from .report import open_report as _open

    if wait:
        wait_for_profile(path, lambda text: print(f"nsight-magic: {text}", flush=True))
    return _open(path)


def last(wait: bool = True):
    """The newest profile's report (NsysReport or NcuReport) made in this kernel, waiting for it while it is still
    loading in the background; without one, the newest finished profile in nsight-profiles beside the notebook."""
    from .background import last as _last

    return _last(wait)


def open_job(source, client=None, **kw):
    """A multi-node job's per-rank reports (a folder of report.%q{RANK} files, or a list of paths) as one Job,
    each report analysed in a Dask task (client=None: a LocalCluster on this machine); see nsight_magic.jobs."""
    from .jobs import open_job as _open

    return _open(source, client, **kw)


def readable(df, formats=None):
    """A summary as people read it (times in ms, sizes in MiB, ...): a pandas Styler for notebooks; the DataFrame
    itself keeps its numbers."""
    from .views.tables import readable as _readable

    return _readable(df, formats)


def diff(before, after, **kw):
    """Compare two profiles (folders, report files or opened reports): a ProfileDiff with kernels, api, memcpy,
    nvtx (and for Nsight Compute, metrics) tables, a headline and the findings that came or went
    (nsight_magic.analysis.diff)."""
    from .analysis.diff import diff as _diff
    from .readers import report_and_label

    (b, bl), (a, al) = report_and_label(before), report_and_label(after)
    return _diff(b, a, labels=(bl, al), **kw)


def gate(before, after, fail_above: float, ranges=(), top_kernels: int = 5, **kw):
    """The CI gate of `nsight-magic diff --fail-above`: did the cell, an NVTX range (`ranges`; default the loop's
    steps) or one of the `top_kernels` kernels get slower than `fail_above` percent beyond the noise?  A GateResult
    (.failed, .checks, .lines(), .to_json()); see nsight_magic.analysis.gate."""
    from .analysis.gate import gate as _gate

    return _gate(diff(before, after, **kw), fail_above, ranges=ranges, top_kernels=top_kernels)


def save_baseline(name: str, profile=None, directory=None):
    """Keep a profile (folder, name or index; None: the newest) as baseline `name` in the profiles folder
    (default: nsight-profiles beside the notebook); compare with it as "baseline:NAME"."""
    from .store import profiles_root
    from .store import save_baseline as _save

    return _save(name, profile, profiles_root(directory))


def export_trace(report, path) -> dict:
    """Write a profile (a folder, a report file or an opened NsysReport) as a Chrome / Perfetto trace (Trace Event
    JSON; `.gz` compresses) for ui.perfetto.dev or Chrome DevTools: threads, NVTX ranges, CUDA API and OS calls,
    kernels and copies per stream, flows from launches to GPU work, the sampled Python code.  Returns counts."""
    import os

    from .report import open_report as _open
    from .views.chrome_trace import write_chrome_trace

    rep = _open(report) if isinstance(report, (str, os.PathLike)) else report
    if rep.tool != "nsys":
        from .errors import OptionError

        raise OptionError("export_trace: only Nsight Systems profiles become traces (an Nsight Compute report has "
                          "no timeline)")
    return write_chrome_trace(rep, path)


def annotate_modules(model, depth=None, include=None, **kw):
    """Give each submodule of a PyTorch model a forward and a backward NVTX range (see nsight_magic.inside.annotate);
    returns a handle whose .remove() takes the hooks away."""
    from .inside.annotate import annotate_modules as _annotate

    return _annotate(model, depth=depth, include=include, **kw)


def annotate_functions(paths):
    """Wrap functions/methods (dotted paths) in NVTX ranges named after them (see nsight_magic.inside.annotate)."""
    from .inside.annotate import annotate_functions as _annotate

    return _annotate(paths)


def load_ipython_extension(ipython):
    """`%load_ext nsight_magic`: register %%nsys, %%ncu, %nsys_load, %%nsight_setup."""
    from .magics import register

    register(ipython)


def _jupyter_labextension_paths():
    """Where JupyterLab finds the prebuilt extension (`jupyter labextension develop .` links it for development)."""
    return [{"src": "labextension", "dest": "nsight-magic"}]
