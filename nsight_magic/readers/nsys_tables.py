"""The summaries of an Nsight Systems export, equal to `nsys stats`' reports: per kernel, memory operation, CUDA
API function and NVTX range, the NVTX ranges' GPU projection, and each GPU's utilization over time.

They read only the columns they need (the export's core columns: integer ids and times, readers.nsys.NsysData.core)
and decode names on the grouped result: several times faster than building the full frames, and the same
definitions as nsys's scripts.  `NsysData.kernel_summary()` and the others hand on to an `NsysSummaries` of the
export (`NsysData.summaries`).
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from ..errors import OptionError, ReportError
from . import nsys_schema as S
from .nsys_frames import nvtx_styles, nvtx_texts
from .nsys_labels import memcpy_operations, nvtx_range_labels
from .nsys_sql import Strings
from .nsys_summary import busy_fraction, empty_stats, grouped_stats, nvtx_projection, op_keys, with_pct


class CoreColumns(Protocol):
    """What the summaries read of an export (readers.nsys.NsysData)."""

    path: Path
    strings: Strings                              # the export's string table
    nvtx_arrays: dict[str, np.ndarray]            # the NVTX rows as arrays (nsys_frames.build_nvtx)
    nvtx_maxts: int | None                        # where ranges never closed end
    ranks_by_pid: dict[int, tuple[int, int]]
    nvtx: pd.DataFrame
    kernels: pd.DataFrame
    memcpy: pd.DataFrame
    memset: pd.DataFrame

    @property
    def meta(self) -> Any: ...  # readers.nsys.ReportMeta: nsys_version, start_ns, end_ns (made when first asked for)

    def core(self, frame: str) -> dict[str, np.ndarray] | None: ...

    def narrow(self, spec: S.TableSpec, cols: list[str]) -> list[np.ndarray] | None: ...

    def decode(self, enum: str, ids: np.ndarray) -> np.ndarray: ...

    def memcpy_labels(self) -> dict[str, str]: ...


def _by_cols(by: str | None) -> tuple[str, ...]:
    """The key column a summary split `by` starts with."""
    return {None: (), "process": ("pid",), "rank": ("rank",), "device": ("device",)}.get(by, ())


class NsysSummaries:
    """The summaries of one export (see the module docstring); `data`: the export's reader."""

    def __init__(self, data: CoreColumns) -> None:
        self.data = data

    def kernel(self, base: bool = False, by_launch: bool = False, by: str | None = None) -> pd.DataFrame:
        """Per kernel name, as `nsys stats --report cuda_gpu_kern_sum` (nsys 2023+).

        base: group by short name (`:base`).  by_launch: also by grid and block, as nsys 2022.4's gpukernsum
        and cuda_gpu_kern_gb_sum (adds `grid` and `block` columns, 'X Y Z').  by: 'process' | 'rank' | 'device'
        splits every row (a first column pid / rank / device); the split rows add up to the unsplit ones."""
        dims = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"] if by_launch else []
        k = self.data.core("kernels")
        if k is None or len(k["start_ns"]) == 0:
            return empty_stats(_by_cols(by) + ("name",) + (("grid", "block") if by_launch else ()))
        keys = self._keys(by, "kernel", k["pid"], self._device_ids(S.KERNELS, k) if by == "device" else None)
        keys["name_id"] = self._read(S.KERNELS, ["short_name"])[0] if base else k["name"]
        if by_launch:
            keys.update(zip(dims, self._read(S.KERNELS, dims)))
        s = grouped_stats(keys, k["end_ns"] - k["start_ns"])
        nb = len(_by_cols(by))
        s.insert(nb, "name", self.data.strings.lookup(s.pop("name_id")))
        if by_launch:
            s.insert(nb + 1, "grid", _xyz(s, "grid"))
            s.insert(nb + 2, "block", _xyz(s, "block"))
            s = s.drop(columns=dims)
        return with_pct(s)

    def memcpy(self, by: str | None = None) -> pd.DataFrame:
        """Per memory operation, as gpumemtimesum + gpumemsizesum (cuda_gpu_mem_time_sum/_size_sum).

        operation is the label of `nsys stats` of the report's version ('[CUDA memcpy HtoD]' up to 2023.2,
        '[CUDA memcpy Host-to-Device]' since, '[CUDA memset]'; see readers.nsys_labels); kind is our stable short
        one ('HtoD', 'memset'); pct is the share of total_ns.  by: as kernel_summary()."""
        e = np.empty(0, np.int64)
        c, m = self.data.core("memcpy"), self.data.core("memset")
        mc = [c["kind"], c["bytes"], c["end_ns"] - c["start_ns"], c["pid"]] if c else [e, e, e, e]
        ms = [m["bytes"], m["end_ns"] - m["start_ns"], m["pid"]] if m else [e, e, e]
        if len(mc[0]) + len(ms[0]) == 0:
            return empty_stats(_by_cols(by) + ("operation", "kind"), ("pct",) + tuple(
                f"{s}_bytes" for s in ("total", "avg", "med", "min", "max", "std")))
        kind_id = np.concatenate([mc[0], np.full(len(ms[0]), -1, np.int64)])  # -1: memset
        size = np.concatenate([mc[1], ms[0]])
        dur = np.concatenate([mc[2], ms[1]])
        devices = None
        if by == "device":
            devices = np.concatenate([self._device_ids(S.MEMCPY, c) if c else e, self._device_ids(S.MEMSET, m) if m
                                      else e])
        keys = self._keys(by, "memory", np.concatenate([mc[3], ms[2]]), devices)
        keys["kind_id"] = kind_id
        t = grouped_stats(keys, dur)
        b = grouped_stats(keys, size, suffix="bytes").drop(columns="count")
        s = t.merge(b, on=list(keys))
        ids = s.pop("kind_id").to_numpy(np.int64)
        kind = self.data.decode("memcpy_kind", ids)
        kind[ids == -1] = "memset"
        nb = len(_by_cols(by))
        s.insert(nb, "operation", memcpy_operations(kind, self.data.meta.nsys_version, self.data.memcpy_labels()))
        s.insert(nb + 1, "kind", kind)
        return with_pct(s)

    def cuda_api(self, by: str | None = None) -> pd.DataFrame:
        """Per API function, as cudaapisum/cuda_api_sum: the '_vNNNN' version suffix is dropped from names.
        by: 'process' | 'rank' (API calls run on the CPU: no 'device')."""
        a = self.data.core("cuda_api")
        if a is None or len(a["start_ns"]) == 0:
            return empty_stats(_by_cols(by) + ("name",))
        keys = self._keys(by, "CUDA API", a["pid"])
        keys["name_id"] = a["name"]
        s = grouped_stats(keys, a["end_ns"] - a["start_ns"])
        names = pd.Series(self.data.strings.lookup(s.pop("name_id")), dtype=object).astype(str)
        s.insert(len(_by_cols(by)), "name", names.str.replace(r"_v\d{4}$", "", regex=True).to_numpy(object))
        return with_pct(s)

    def nvtx(self, by: str | None = None) -> pd.DataFrame:
        """Per NVTX range name and style, as nvtxsum/nvtx_sum, plus gpu_ns and gpu_ops.

        range is the label of `nsys stats` of the report's version (':step' for the default domain since 2024.2,
        'step' before; 'Domain:step' always; see readers.nsys_labels); name is our stable one ('Domain:step' or
        'step', = the nvtx frame's label); style 'PushPop' or 'StartEnd'.
        nsight-magic's own cell range (domain nsight-magic) is left out (it stays in the nvtx frame).
        Ranges never closed last until the last NVTX timestamp.  gpu_ns sums, over the instances, the GPU
        projection of each range (first to last GPU op launched inside it, as nvtxgpuproj); gpu_ops counts the
        launching API calls.  by: 'process' | 'rank' (ranges are CPU-side: no 'device')."""
        internal = self.data.nvtx_arrays
        rng = internal["is_range"] & ~internal["ours"]  # our own cell range is no user range
        if not rng.any():
            return empty_stats(_by_cols(by) + ("range", "name", "style"), ("pct", "gpu_ns", "gpu_ops"))
        dur = self._nvtx_durations(rng)
        keys = self._keys(by, "NVTX", internal["pid"][rng])
        # the style by its kind's code (two values: no hash of a million shared strings)
        keys.update(name=internal["tag"][rng], style=pd.Categorical.from_codes(
            (internal["kind"][rng] != 0).astype(np.int8), categories=pd.Index(["PushPop", "StartEnd"], dtype=object)))
        s, group = grouped_stats(keys, dur, return_groups=True)
        first = np.zeros(len(s), np.int64)
        first[group[::-1]] = np.flatnonzero(rng)[::-1]  # a row of each group: is its name in a domain?
        version = self.data.meta.nsys_version
        s.insert(len(_by_cols(by)), "range", nvtx_range_labels(s["name"].to_numpy(object),
                                                               internal["has_domain"][first], version))
        p = self._projection
        row_group = np.full(len(rng), -1, np.int64)
        row_group[rng] = group
        g = row_group[p["row"].to_numpy()]
        gpu_ns = np.zeros(len(s), np.int64)
        gpu_ops = np.zeros(len(s), np.int64)
        np.add.at(gpu_ns, g, p["proj_duration_ns"].to_numpy(np.int64))
        np.add.at(gpu_ops, g, p["gpu_ops"].to_numpy(np.int64))
        s["gpu_ns"], s["gpu_ops"] = gpu_ns, gpu_ops
        return with_pct(s)

    def nvtx_gpu_projection(self) -> pd.DataFrame:
        """One row per NVTX range that launched GPU work, as `nsys stats --report nvtxgpuproj`: range (nsys's label
        of the report's version), name (stable), style,
        start_ns, duration_ns (the range), proj_start_ns, proj_duration_ns (its GPU ops), gpu_ops, pid, tid,
        depth."""
        internal = self.data.nvtx_arrays
        p = self._projection
        rows = p["row"].to_numpy()
        dur = self._nvtx_durations(rows)
        tags = nvtx_texts(internal["tag"][rows])
        out = pd.DataFrame({
            "range": nvtx_range_labels(tags, internal["has_domain"][rows], self.data.meta.nsys_version),
            "name": tags, "style": nvtx_styles(internal["kind"][rows]),
            "start_ns": internal["start"][rows], "duration_ns": dur,
            "proj_start_ns": p["proj_start_ns"].to_numpy(), "proj_duration_ns": p["proj_duration_ns"].to_numpy(),
            "gpu_ops": p["gpu_ops"].to_numpy(), "pid": internal["pid"][rows], "tid": internal["tid"][rows],
            "depth": self.data.nvtx["depth"].to_numpy()[rows],
        })
        return out.sort_values(["proj_start_ns", "proj_duration_ns"], ascending=[True, False],
                               kind="stable").reset_index(drop=True)

    @functools.cached_property
    def _projection(self) -> pd.DataFrame:
        internal = self.data.nvtx_arrays
        if not internal["is_range"].any():
            ops = api = {}
        else:
            ops, api = self._gpu_ops(), self._api_calls()
        return nvtx_projection(internal, ops, api, self.data.nvtx_maxts)

    def _nvtx_durations(self, rows) -> np.ndarray:
        """The durations of NVTX rows (a mask or positions), those never closed lasting until the last NVTX
        timestamp; made per call, not held (a row each: 24 MB at 3M ranges)."""
        a = self.data.nvtx_arrays
        maxts = self.data.nvtx_maxts or 0
        end = a["end"][rows]
        return np.where(np.isnan(end), maxts, end).astype(np.int64) - a["start"][rows]

    def _gpu_ops(self) -> dict:
        """start, end and launching call's key (op_keys) of every kernel, memcpy and memset (for the NVTX
        projection): arrays.  The key stands for pid and correlation id: one op-long array less at 10M ops."""
        parts = [c for c in map(self.data.core, ("kernels", "memcpy", "memset"))
                 if c is not None and len(c["start_ns"])]
        if not parts:
            return {}
        return {"start_ns": np.concatenate([c["start_ns"] for c in parts]),
                "end_ns": np.concatenate([c["end_ns"] for c in parts]),
                "key": np.concatenate([op_keys(c["pid"], c["correlation_id"]) for c in parts])}

    def _api_calls(self) -> dict:
        c = self.data.core("cuda_api")
        if c is None:
            return {}
        return {n: c[n] for n in ("start_ns", "end_ns", "pid", "tid", "correlation_id")}

    def gpu_utilization(self, bins: int = 200) -> pd.DataFrame:
        """Per GPU and time bin over the capture span: the fraction (0..1) of the bin in which at least one
        kernel, memcpy or memset runs.  Columns: device_id, bin_start_ns, bin_end_ns, busy_fraction."""
        meta, d = self.data.meta, self.data
        edges = np.round(np.linspace(meta.start_ns, max(meta.end_ns, meta.start_ns + bins), bins + 1)).astype(np.int64)
        frames = [f[["device_id", "start_ns", "end_ns"]] for f in (d.kernels, d.memcpy, d.memset) if len(f)]
        cols = ["device_id", "bin_start_ns", "bin_end_ns", "busy_fraction"]
        if not frames:
            return pd.DataFrame({c: pd.Series([], dtype="float64" if c == "busy_fraction" else "int64") for c in cols})
        ops = pd.concat(frames, ignore_index=True)
        out = []
        for dev, g in ops.groupby("device_id", sort=True):  # per GPU, not per row
            frac = busy_fraction(g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64), edges)
            out.append(pd.DataFrame({"device_id": np.full(bins, dev, np.int64), "bin_start_ns": edges[:-1],
                                     "bin_end_ns": edges[1:], "busy_fraction": frac}))
        return pd.concat(out, ignore_index=True)

    def _keys(self, by: str | None, what: str, pids: np.ndarray, devices=None) -> dict:
        """Group keys of a summary split `by` process, rank or device (summary columns named after the key)."""
        if by is None:
            return {}
        if by == "process":
            return {"pid": np.asarray(pids, np.int64)}
        if by == "rank":
            ranks = self.data.ranks_by_pid
            if not ranks:
                raise OptionError("this report has no ranks (they are known for %%nsys --nproc profiles); "
                                  "use by='process'")
            return {"rank": np.array([ranks.get(int(p), (-1, 0))[0] for p in pids], np.int64)}
        if by == "device":
            if devices is None:
                raise OptionError(f"by='device' splits GPU work; the {what} summary is CPU-side: use by='process' "
                                  f"or by='rank'")
            return {"device": np.asarray(devices, np.int64)}
        raise OptionError(f"by must be 'process', 'rank' or 'device', not {by!r}")

    def _device_ids(self, spec: S.TableSpec, core: dict[str, np.ndarray]) -> np.ndarray:
        """device_id of a core table's rows: its core column (a columnar cache written before it was one may lack
        it: then a narrow read)."""
        return core["device_id"] if "device_id" in core else self._read(spec, ["device_id"])[0]

    def _read(self, spec: S.TableSpec, cols: list[str]) -> list[np.ndarray]:
        """More raw columns of a table whose core columns were read (so the table is there)."""
        got = self.data.narrow(spec, cols)
        if got is None:
            raise ReportError(f"{self.data.path}: {', '.join(cols)} could not be read")
        return got


def _xyz(k: pd.DataFrame, prefix: str) -> np.ndarray:
    a = k[[f"{prefix}_x", f"{prefix}_y", f"{prefix}_z"]].astype(np.int64).astype(str)
    return (a.iloc[:, 0] + " " + a.iloc[:, 1] + " " + a.iloc[:, 2]).to_numpy(object)
