"""Nsight Compute reports (.ncu-rep through ncu_report, or ncu's raw/details CSV pages) -> `NcuData`.

    rep = open_ncu_report("report.ncu-rep")
    rep.kernels   # one row per profiled kernel, base units (ns, bytes, %)
    rep.metrics   # long: kernel_id, section, metric, unit, value (+ text for string-valued metrics)
    rep.rules     # guided-analysis results: kernel_id, section, rule, type, message, speedup_pct (+ speedup_type)

kernels columns: id, name (demangled), short_name, nvtx (push/pop range path 'step 3/encoder/encoder.attn'),
grid_size and block_size (blocks, threads), registers_per_thread, shared_mem_bytes (static + dynamic per block),
duration_ns, sm_throughput_pct, memory_throughput_pct, dram_throughput_pct, achieved_occupancy_pct,
theoretical_occupancy_pct, waves_per_sm, dram_bytes_read, dram_bytes_write, l1_hit_pct, l2_hit_pct and
l2_dram_bytes (L2 <-> device memory traffic; from the details page: DRAM byte rate x duration).
A metric the report lacks is NaN; which ncu metric fills which column is `readers.ncu_spec.KERNEL_COLUMNS`.
"""
from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import ReportError
from ..tools.injection import tool_environment
from .ncu_spec import INT_COLUMNS, KERNEL_COLUMNS, KERNEL_FRAME_COLUMNS, METRIC_FRAME_COLUMNS

__all__ = ["NcuData", "open_ncu_report", "build_kernels"]


class NcuData:
    """Kernels, metrics and rules of one Nsight Compute report.  `metrics` of an .ncu-rep is read on first use."""

    tool = "ncu"    # which tool's report (readers.nsys.NsysData: "nsys")

    def __init__(self, path: Path, source: str, info: pd.DataFrame, spec_metrics: pd.DataFrame,
                 rules: pd.DataFrame, all_metrics=None, reader_version: str = ""):
        self.path = Path(path)
        self.source = source  # 'ncu-rep', 'csv-raw' or 'csv-details'
        self.reader_version = reader_version
        self.kernels = build_kernels(info, spec_metrics, details=(source == "csv-details"))
        self.rules = rules.sort_values(["kernel_id", "speedup_pct"], ascending=[True, False],
                                       kind="stable").reset_index(drop=True)
        self._metrics = all_metrics if isinstance(all_metrics, pd.DataFrame) else None
        self._load_metrics = all_metrics if callable(all_metrics) else None

    @property
    def metrics(self) -> pd.DataFrame:
        if self._metrics is None:
            self._metrics = self._load_metrics() if self._load_metrics else pd.DataFrame(
                columns=list(METRIC_FRAME_COLUMNS))
        return self._metrics

    def detach(self) -> "NcuData":
        """Read everything now and drop the link to ncu_report, so the report can be pickled."""
        self.metrics  # noqa: B018 - loads the lazy metrics
        self._load_metrics = None
        return self

    def __repr__(self):
        return (f"{type(self).__name__}({str(self.path)!r}, source={self.source}, kernels={len(self.kernels)}, "
                f"rules={len(self.rules)})")


ERROR_PREFIX = "nsight-magic-error: "


def read_in_worker(path: Path, timeout: float = 600):
    """The NcuData of `path`, read by a worker process (readers/ncu_worker.py)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="nsight-magic-ncu-") as tmp:
        out = Path(tmp) / "report.pkl"
        try:
            proc = subprocess.run([sys.executable, "-m", "nsight_magic.readers.ncu_worker", str(path), str(out)],
                                  capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                                  env=tool_environment())
        except subprocess.TimeoutExpired:
            raise ReportError(f"{path.name}: reading took more than {timeout:.0f} s") from None
        if proc.returncode == 0 and out.exists():
            with open(out, "rb") as f:
                return pickle.load(f)
        errors = [ln[len(ERROR_PREFIX):] for ln in proc.stderr.splitlines() if ln.startswith(ERROR_PREFIX)]
        if errors:
            raise ReportError(errors[-1])
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
        last = (proc.stderr.strip().splitlines() or [""])[-1][:200]
        raise ReportError(f"ncu_report failed reading {path.name} ({how}{': ' + last if last else ''}); "
                          f"open its CSV pages instead (ncu --import {path.name} --csv --page raw)")


def open_ncu_report(path, ncu_report_module=None, in_process: bool = False) -> NcuData:
    """Open an .ncu-rep (needs ncu_report) or an ncu CSV (`--page raw` or `--page details`, detected from the header).

    ncu_report_module: (module, version) to read .ncu-rep with, instead of the one chosen in `readers.ncu_rep`.
    An .ncu-rep is read in a worker process (readers/ncu_worker.py: ncu_report's native code must not be able to
    crash the notebook's kernel) unless in_process is true or a module is given."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ReportError(f"{p}: no such file; pass an .ncu-rep or a CSV from `ncu --import R --csv --page raw`")
    suffix = p.suffix.lower()
    if suffix == ".ncu-rep" and not in_process and ncu_report_module is None:
        return read_in_worker(p)
    if suffix == ".ncu-rep":
        from .ncu_rep import RepSource

        src = RepSource(p, ncu_report_module)
        return NcuData(p, "ncu-rep", src.kernel_info(), src.spec_metrics(), src.rules(),
                         all_metrics=src.all_metrics, reader_version=src.version)
    if suffix == ".csv":
        from .ncu_csv import parse_ncu_csv

        try:
            text = p.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise ReportError(f"{p}: cannot read ({exc.strerror})") from None
        page, info, metrics, rules = parse_ncu_csv(text, source=str(p))
        return NcuData(p, f"csv-{page}", info, metrics, rules, all_metrics=metrics)
    raise ReportError(f"{p}: not an Nsight Compute report; expected .ncu-rep or .csv")


def _candidate(wide: pd.DataFrame, cand) -> pd.Series:
    """Evaluate one raw candidate: 'name', 'name*factor', or a tuple of those summed (all present)."""
    parts = cand if isinstance(cand, tuple) else (cand,)
    total = None
    for part in parts:
        name, _, factor = part.partition("*")
        col = wide[name] if name in wide.columns else pd.Series(np.nan, index=wide.index)
        col = col * float(factor) if factor else col
        total = col if total is None else total + col  # NaN if any part is missing
    return total


def _details_candidate(long: pd.DataFrame, ids: pd.Index, cand, unit) -> pd.Series:
    pairs = cand if isinstance(cand[0], tuple) else (cand,)
    total = None
    for prefix, label in pairs:
        rows = long[(long["metric"] == label) & long["section"].str.startswith(prefix)]
        if unit is not None:
            rows = rows[rows["unit"] == unit]
        col = rows.groupby("kernel_id")["value"].first().reindex(ids)
        total = col if total is None else total + col
    return total


def _dims_product(dims: pd.Series) -> pd.Series:
    """'(63, 63, 1)' -> 3969 (the CSV's Grid Size/Block Size columns), NaN when absent."""
    nums = dims.astype(str).str.extractall(r"(\d+)")[0].astype("float64")
    return nums.groupby(level=0).prod().reindex(dims.index)


def build_kernels(info: pd.DataFrame, metrics: pd.DataFrame, details: bool = False) -> pd.DataFrame:
    """Kernel info + long metrics -> the kernels frame, columns filled from the spec's candidates in order."""
    ids = pd.Index(info["kernel_id"], name="kernel_id")
    out = pd.DataFrame(index=ids)
    if details:
        labels = {lab for c in KERNEL_COLUMNS for cand in c.details
                  for _, lab in (cand if isinstance(cand[0], tuple) else (cand,))}
        sub = metrics[metrics["metric"].isin(labels)]
        for col in KERNEL_COLUMNS:
            val = pd.Series(np.nan, index=ids)
            for cand in col.details:
                val = val.combine_first(_details_candidate(sub, ids, cand, col.unit))
            out[col.name] = val
    else:
        needed = {p.split("*")[0] for c in KERNEL_COLUMNS for cand in c.raw
                  for p in (cand if isinstance(cand, tuple) else (cand,))}
        sub = metrics[metrics["metric"].isin(needed)].drop_duplicates(["kernel_id", "metric"])
        wide = sub.pivot(index="kernel_id", columns="metric", values="value").reindex(ids)
        for col in KERNEL_COLUMNS:
            val = pd.Series(np.nan, index=ids)
            for cand in col.raw:
                val = val.combine_first(_candidate(wide, cand))
            out[col.name] = val
    # Where only the DRAM byte rate exists (details page), bytes = rate x duration.
    out["l2_dram_bytes"] = out["l2_dram_bytes"].combine_first(out.pop("_dram_bytes_per_s") * out["duration_ns"] / 1e9)
    out = out.reset_index(drop=True)
    base = info.reset_index(drop=True)
    for col, dims in (("grid_size", "grid_dims"), ("block_size", "block_dims")):
        out[col] = out[col].combine_first(_dims_product(base[dims]))
    out.insert(0, "id", base["kernel_id"].astype("int64"))
    for col in ("name", "short_name", "nvtx"):
        out[col] = base[col].astype(str)
    for col in INT_COLUMNS:
        out[col] = out[col].round().astype("Int64")
    return out[list(KERNEL_FRAME_COLUMNS)]


def open_ncu_pages(raw_csv, details_csv) -> NcuData:
    """The report from the two CSV pages nsight-magic writes beside every report.ncu-rep: kernels and metrics from
    the raw page, guided-analysis rules from the details page (no ncu_report needed)."""
    report = open_ncu_report(raw_csv)
    report.rules = open_ncu_report(details_csv).rules
    return report
