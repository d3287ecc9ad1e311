"""GPU metrics sampled by nsys (`--gpu-metrics-devices`, issue 66): the GPU's own counters, every sample.

The export holds GPU_METRICS (timestamp, typeId, metricId, value) and TARGET_INFO_GPU_METRICS (typeId, metricId,
metricName): the device is `typeId & 0xFF`, names such as "SMs Active [Throughput %]", "SM Issue [Throughput %]",
"Tensor Active [Throughput %]", "DRAM Read Bandwidth [Throughput %]".  Names differ between GPUs and nsys
versions ("SM Active", "Tensor Core Active"), so each known metric is found by a pattern on its name (KEYS), the
unit in brackets read as it is written.  Frames only: what the numbers mean is analysis/gpu_metrics.py's.

    metrics   DataFrame: start_ns, device_id, metric (category: the name as nsys wrote it), value (float)
    names     DataFrame: device_id, metric, key (sm_active, sm_issue, tensor_active, dram_read, dram_write,
              pcie_rx, pcie_tx, nvlink_rx, nvlink_tx, or None), unit ("Throughput %", "MHz", ...)
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .nsys_sql import columns_of, read_ints

# a metric nsight-magic reads, by a pattern on the part of its name before the unit (case-insensitive)
KEYS = {
    "sm_active": r"^sms? active$",
    "sm_issue": r"^sm issue$",
    "tensor_active": r"^tensor (?:core )?active$|^tensor (?:pipe )?active",
    "dram_read": r"^dram read bandwidth$",
    "dram_write": r"^dram write bandwidth$",
    "pcie_rx": r"^pcie (?:rx|read)",
    "pcie_tx": r"^pcie (?:tx|write)",
    "nvlink_rx": r"^nvlink (?:rx|received)",
    "nvlink_tx": r"^nvlink (?:tx|transmitted)",
}
_NAME = re.compile(r"^(?P<base>.*?)\s*(?:\[(?P<unit>[^\]]*)\])?\s*$")


@dataclass
class GpuMetrics:
    metrics: pd.DataFrame
    names: pd.DataFrame = field(repr=False)
    problem: str | None = None    # none were recorded and nsys said why (no access to the counters, in use)
    _series: dict = field(default_factory=dict, repr=False, compare=False)  # (device, key) -> series, read once

    @property
    def empty(self) -> bool:
        return self.metrics.empty

    def series(self, device_id: int, key: str) -> pd.DataFrame:
        """start_ns, value of one known metric (KEYS) of a device, in time order; empty when not recorded."""
        if (device_id, key) not in self._series:
            self._series[(device_id, key)] = self._select(device_id, key)
        return self._series[(device_id, key)]

    def _select(self, device_id: int, key: str) -> pd.DataFrame:
        n = self.names
        names = n[(n["device_id"] == device_id) & (n["key"] == key)]["metric"]
        if names.empty:
            return pd.DataFrame({"start_ns": pd.Series([], dtype=np.int64), "value": pd.Series([], dtype=float)})
        m = self.metrics
        sel = m[(m["device_id"] == device_id) & m["metric"].isin(names.iloc[:1])]
        return sel[["start_ns", "value"]].reset_index(drop=True)


def empty_metrics() -> GpuMetrics:
    return GpuMetrics(pd.DataFrame({"start_ns": pd.Series([], dtype=np.int64),
                                    "device_id": pd.Series([], dtype=np.int64),
                                    "metric": pd.Categorical([]), "value": pd.Series([], dtype=float)}),
                      pd.DataFrame({"device_id": [], "metric": [], "key": [], "unit": []}))


def metric_key(name: str) -> tuple[str | None, str]:
    """('sm_issue', 'Throughput %') for 'SM Issue [Throughput %]'; (None, unit) for a metric not in KEYS."""
    m = _NAME.match(name or "")
    base, unit = (m.group("base"), m.group("unit") or "") if m else (name or "", "")
    for key, rx in KEYS.items():
        if re.search(rx, base.strip(), re.IGNORECASE):
            return key, unit
    return None, unit


PERMISSION = ("GPU metrics were not sampled: nsys had no access to the GPU's performance counters; allow it (as "
              "root, or the driver option NVreg_RestrictProfilingToAdminUsers=0: "
              "https://developer.nvidia.com/ERR_NVGPUCTRPERM) or profile without --gpu-metrics")
IN_USE = ("GPU metrics were not sampled: another collector holds the GPU's counters (DCGM's profiling module, "
          "another nsys or ncu); pause it (`dcgmi profile --pause`) or profile without --gpu-metrics")


def metrics_problem(con, tables) -> str | None:
    """Why a report that has no GPU metrics has none, as nsys's diagnostics say (in one line), or None."""
    if "DIAGNOSTIC_EVENT" not in tables or "text" not in set(columns_of(con, "DIAGNOSTIC_EVENT")):
        return None
    rows = [str(t) for (t,) in con.execute(
        "SELECT text FROM DIAGNOSTIC_EVENT WHERE text LIKE '%GPU Metric%' OR text LIKE '%GPU metric%' "
        "OR text LIKE '%NVGPUCTRPERM%' OR text LIKE '%performance counter%' LIMIT 200").fetchall()]
    said = " ".join(rows).lower()
    if re.search(r"nvgpuctrperm|permission|privilege|not allowed|admin", said):
        return PERMISSION
    if re.search(r"in use|another|already|busy|dcgm", said):
        return IN_USE
    errors = [t for t in rows if not t.lower().startswith("gpu metrics [") or "error" in t.lower()
              or "fail" in t.lower()]
    return f"GPU metrics were not sampled: nsys said \"{errors[0][:200]}\"" if errors else None


def read_gpu_metrics(con, tables, path=None) -> GpuMetrics:
    """GPU_METRICS with their names, or empty_metrics() (with nsys's reason, where it gave one) when the report has
    none."""
    if "GPU_METRICS" not in tables or "TARGET_INFO_GPU_METRICS" not in tables:
        return dataclasses.replace(empty_metrics(), problem=metrics_problem(con, tables))
    need = {"timestamp", "typeId", "metricId", "value"}
    if not need <= set(columns_of(con, "GPU_METRICS")):
        return empty_metrics()
    info = con.execute("SELECT DISTINCT typeId, metricId, metricName FROM TARGET_INFO_GPU_METRICS").fetchall()
    ts, type_id, metric_id, value = read_ints(con, "GPU_METRICS", ["timestamp", "typeId", "metricId", "value"],
                                              None, path)
    if not len(ts):
        return dataclasses.replace(empty_metrics(), problem=metrics_problem(con, tables))
    # each row's (typeId, metricId) looked up among those TARGET_INFO_GPU_METRICS names (-1: not listed)
    pairs = {(int(t), int(m)): str(nm) for t, m, nm in info}
    uniq = sorted(set(pairs.values()))
    listed = pd.MultiIndex.from_tuples(list(pairs), names=["t", "m"]) if pairs else None
    at = listed.get_indexer(pd.MultiIndex.from_arrays([type_id, metric_id])) if listed is not None \
        else np.full(len(ts), -1)
    keep = at >= 0
    code_of_pair = np.array([uniq.index(n) for n in pairs.values()], np.int32)
    codes = code_of_pair[at[keep]] if keep.any() else np.empty(0, np.int32)
    frame = pd.DataFrame({
        "start_ns": ts[keep],
        "device_id": (type_id[keep] & 0xFF).astype(np.int64),
        "metric": pd.Categorical.from_codes(codes, categories=uniq) if uniq else pd.Categorical([]),
        "value": value[keep].astype(float),
    }).sort_values("start_ns", kind="stable").reset_index(drop=True)
    rows = []
    for (t, _m), nm in pairs.items():
        key, unit = metric_key(nm)
        rows.append({"device_id": int(t) & 0xFF, "metric": nm, "key": key, "unit": unit})
    return GpuMetrics(frame, pd.DataFrame(rows).drop_duplicates(["device_id", "metric"]).reset_index(drop=True))
