"""What the GPU's own counters say while its kernels ran (nsys `--gpu-metrics-devices`; readers/gpu_metrics.py).

The samples that fall inside the union of a device's kernels (and copies) are averaged per metric: the SMs'
occupancy (SMs Active), how often they issue (SM Issue), the tensor cores (Tensor Active) and DRAM read + write
bandwidth, each a share of its peak.  Read together they say what bounds kernels that keep the GPU busy:

    DRAM read + write >= DRAM_BOUND_PCT         memory-bound kernels (fewer bytes: fusion, lower precision)
    SMs active >= 50% and SM issue < ISSUE_LOW   latency-bound kernels (the SMs wait: dependent loads, syncs)
    SMs active < SM_FEW_PCT                      kernels that fill few SMs (small grids, tiny kernels)
    tensor active >= TENSOR_BUSY_PCT             tensor-core-bound (matrix math at its peak)
    else                                         compute-bound on the SMs' other pipes

Recorded on the H100 (tests/data/gpu_features/gm.sqlite.xz): 40 bf16 GEMMs of 8192^2 read SMs active 96%,
tensor active 90%; 40 device copies of 512 MB read DRAM 90% (read 45% + write 45%).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from . import intervals as I
from ..readers.contract import NsysFrames

DRAM_BOUND_PCT = 60.0
ISSUE_LOW_PCT = 20.0
SM_FEW_PCT = 40.0
TENSOR_BUSY_PCT = 40.0
KEYS = ("sm_active", "sm_issue", "tensor_active", "dram_read", "dram_write", "pcie_rx", "pcie_tx")
LABELS = {"sm_active": "SMs active", "sm_issue": "SM issue", "tensor_active": "tensor cores",
          "dram": "DRAM", "pcie_rx": "PCIe in", "pcie_tx": "PCIe out"}


@dataclass(frozen=True)
class MetricsRead:
    device_id: int
    busy_ns: int          # the kernels' (and copies') union the averages cover
    means: dict[str, float]  # key -> mean percent over the busy time (dram = read + write)
    kind: str             # memory, latency, few_sms, tensor, compute
    words: str            # "DRAM 90% (read 45%, write 45%) while kernels ran: memory-bound kernels"


def busy_intervals(report: NsysFrames, device_id: int, window: tuple[int, int] | None = None) -> I.Intervals:
    """The union of the device's kernels and copies (clipped to `window`): an interval set (analysis.intervals)."""
    parts = []
    for frame in ("kernels", "memcpy", "memset"):
        df = getattr(report, frame)
        if len(df) and "device_id" in df:
            d = df[df["device_id"] == device_id]
            parts.append((d["start_ns"].to_numpy(np.int64), pd.to_numeric(d["end_ns"]).to_numpy(np.int64)))
    if not parts:
        return I.EMPTY
    u = I.union(np.concatenate([a for a, _ in parts]), np.concatenate([b for _, b in parts]))
    return I.clip(u, *window) if window is not None else u


def mean_in(series: pd.DataFrame, spans: I.Intervals) -> float:
    """The mean of the samples whose time falls inside the interval set `spans`; NaN when none does."""
    starts, ends = spans
    if series.empty or not len(starts):
        return float("nan")
    t = series["start_ns"].to_numpy(np.int64)
    i = np.searchsorted(starts, t, side="right") - 1
    inside = (i >= 0) & (t < ends[np.clip(i, 0, None)])
    v = series["value"].to_numpy(float)[inside]
    return float(v.mean()) if len(v) else float("nan")


def read_metrics(report: NsysFrames, window: tuple[int, int] | None = None,
                 busy: dict[int, I.Intervals] | None = None) -> list[MetricsRead]:
    """Per device with GPU metrics and kernel time: the averages while its work ran, and what they say.  `busy`:
    a dict that keeps each device's busy intervals between calls (a caller reading several windows)."""
    gm = report.gpu_metrics
    if gm.empty:
        return []
    out = []
    busy = {} if busy is None else busy
    for device in sorted(set(gm.names["device_id"].astype(int))):
        if device not in busy:
            busy[device] = busy_intervals(report, device)
        spans = busy[device] if window is None else I.clip(busy[device], *window)
        if not len(spans[0]):
            continue
        means = {k: mean_in(gm.series(device, k), spans) for k in KEYS}
        if all(np.isnan(v) for v in means.values()):
            continue
        means["dram"] = np.nansum([means["dram_read"], means["dram_write"]]) \
            if not (np.isnan(means["dram_read"]) and np.isnan(means["dram_write"])) else float("nan")
        kind, words = _classify(means)
        out.append(MetricsRead(device, int(I.total(spans)), means, kind, words))
    return out


def _pct(v: float) -> str:
    return f"{v:.0f}%"


def _classify(m: dict[str, float]) -> tuple[str, str]:
    sm, issue, tensor, dram = m["sm_active"], m["sm_issue"], m["tensor_active"], m["dram"]
    said = ", ".join(f"{LABELS[k]} {_pct(m[k])}" for k in ("sm_active", "sm_issue", "tensor_active", "dram")
                     if not np.isnan(m[k]))
    if dram >= DRAM_BOUND_PCT:
        return "memory", (f"{said} while kernels ran: memory-bound kernels (DRAM read {_pct(m['dram_read'])} + "
                          f"write {_pct(m['dram_write'])} of its peak): fewer bytes moved (fusion, lower precision) "
                          "helps more than faster math")
    if sm < SM_FEW_PCT:
        return "few_sms", (f"{said} while kernels ran: the kernels occupy few of the SMs (small grids or tiny "
                           "kernels): larger batches, fused or fewer kernels")
    if issue < ISSUE_LOW_PCT and tensor < TENSOR_BUSY_PCT:
        return "latency", (f"{said} while kernels ran: the SMs are occupied but issue an instruction in "
                           f"{_pct(issue)} of cycles: latency-bound kernels (waiting on memory or dependencies; "
                           "more parallel work per SM, fewer dependent steps)")
    if tensor >= TENSOR_BUSY_PCT:
        return "tensor", f"{said} while kernels ran: tensor-core-bound (the matrix math runs near its peak)"
    return "compute", f"{said} while kernels ran: compute-bound on the SMs"
