"""Operators (`%%nsys --ops`): which PyTorch operator launched each kernel, and the time per operator.

The operator ranges (nsight_magic.inside.ops, NVTX domain "nsight-magic ops") do not nest on a thread: each is one ATen
operator as it reached a kernel.  A GPU operation (kernel, copy, memset) belongs to the operator range that was
open on the thread of the CUDA call that launched it (correlation ids), when that call was made: backward kernels
belong to the backward operators on autograd's thread, whatever the GPU was doing meanwhile.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..inside.ops import BACKWARD_OF, OPS_DOMAIN

_NAME = re.compile(r"^(?P<op>[^\s\[(]+)(?:" + re.escape(BACKWARD_OF) + r"(?P<fwd>[^\]]+)\])?(?: \((?P<shapes>.*)\))?$")
OPS_COLUMNS = ["op", "calls", "cpu_ns", "gpu_ns", "kernels", "top_kernel", "backward_of"]


def op_ranges(report) -> pd.DataFrame:
    """The operator ranges: start_ns, end_ns, duration_ns, pid, tid, op ('aten::mm'), phase (forward/backward),
    forward_op (for backward ones: the forward operator they belong to), shapes ('' without --ops shapes)."""
    nv = report.nvtx
    cols = ["start_ns", "end_ns", "duration_ns", "pid", "tid", "op", "phase", "forward_op", "shapes"]
    if nv.empty:
        return pd.DataFrame(columns=cols)
    r = nv[(nv["domain"].astype("string") == OPS_DOMAIN).fillna(False).to_numpy()
           & (nv["kind"].astype(str) != "mark").to_numpy() & nv["end_ns"].notna().to_numpy()]
    if r.empty:
        return pd.DataFrame(columns=cols)
    names = r["name"].astype(str)
    uniq, codes = np.unique(names.to_numpy(object), return_inverse=True)
    parsed = [(_NAME.match(n) or _NAME.match("?")) for n in uniq]  # once per distinct name
    op = np.array([m.group("op") if m else n for m, n in zip(parsed, uniq)], dtype=object)
    fwd = np.array([(m.group("fwd") or "") if m else "" for m in parsed], dtype=object)
    shp = np.array([(m.group("shapes") or "") if m else "" for m in parsed], dtype=object)
    out = pd.DataFrame({"start_ns": r["start_ns"].to_numpy(np.int64), "end_ns": r["end_ns"].astype(np.int64).to_numpy(),
                        "pid": r["pid"].to_numpy(np.int64), "tid": r["tid"].to_numpy(np.int64),
                        "op": op[codes], "forward_op": fwd[codes], "shapes": shp[codes]})
    out.insert(2, "duration_ns", out["end_ns"] - out["start_ns"])
    out.insert(6, "phase", np.where(out["forward_op"] != "", "backward", "forward"))
    return out.sort_values("start_ns", kind="stable").reset_index(drop=True)


def attribute(report, ranges: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every GPU operation with the operator range that launched it: start_ns, end_ns, duration_ns, pid,
    device_id, name (kernel name or copy/memset), kind (kernel/memcpy/memset), range (row of op_ranges, -1: none)."""
    ranges = op_ranges(report) if ranges is None else ranges
    parts = []
    for kind, f in (("kernel", report.kernels), ("memcpy", report.memcpy), ("memset", report.memset)):
        if len(f):
            name = f["name"].astype(str) if kind == "kernel" else (
                "memcpy " + f["kind"].astype(str) if kind == "memcpy" else pd.Series("memset", index=f.index))
            parts.append(pd.DataFrame({"start_ns": f["start_ns"].to_numpy(np.int64),
                                       "end_ns": f["end_ns"].to_numpy(np.int64), "pid": f["pid"].to_numpy(np.int64),
                                       "device_id": f["device_id"].to_numpy(np.int64),
                                       "correlation_id": pd.array(f["correlation_id"], dtype="Int64"),
                                       "name": name.to_numpy(object), "kind": kind}))
    if not parts:
        return pd.DataFrame(columns=["start_ns", "end_ns", "duration_ns", "pid", "device_id", "name", "kind", "range"])
    g = pd.concat(parts, ignore_index=True)
    g["duration_ns"] = g["end_ns"] - g["start_ns"]
    g["range"] = -1
    api = report.cuda_api
    if api.empty or ranges.empty:
        return g.drop(columns="correlation_id")
    a = api.dropna(subset=["correlation_id"]).drop_duplicates(["pid", "correlation_id"])
    key = pd.MultiIndex.from_arrays([a["pid"].to_numpy(np.int64), a["correlation_id"].to_numpy(np.int64)])
    gkey = pd.MultiIndex.from_arrays([g["pid"].to_numpy(np.int64),
                                      g["correlation_id"].to_numpy(dtype=np.int64, na_value=-1)])
    i = key.get_indexer(gkey)
    ok = i >= 0
    tid = np.where(ok, a["tid"].to_numpy(np.int64)[np.maximum(i, 0)], -1)
    at = np.where(ok, a["start_ns"].to_numpy(np.int64)[np.maximum(i, 0)], 0)
    out = np.full(len(g), -1, np.int64)
    for (pid, th), r in ranges.groupby(["pid", "tid"], sort=False):  # threads that ran operators: a few
        m = np.flatnonzero((g["pid"].to_numpy() == pid) & (tid == th))
        if not len(m):
            continue
        s, e = r["start_ns"].to_numpy(np.int64), r["end_ns"].to_numpy(np.int64)
        j = np.searchsorted(s, at[m], "right") - 1  # the last operator that began before the launch ...
        inside = (j >= 0) & (e[np.maximum(j, 0)] > at[m])  # ... still open then
        out[m[inside]] = r.index.to_numpy()[np.maximum(j, 0)][inside]
    g["range"] = out
    return g.drop(columns="correlation_id")


def ops_summary(report, by: str | None = None) -> pd.DataFrame:
    """One row per operator (by=None), per operator and input shapes (by='shape', needs `--ops shapes`) or per
    enclosing NVTX range and operator (by='module': the --modules range, or your own range, around each call):
    op, calls, cpu_ns (the operator ranges' time on the CPU), gpu_ns (the kernels, copies and memsets it launched),
    kernels (how many), top_kernel (the one with most GPU time), backward_of (the forward operators whose backward
    ran it); sorted by gpu_ns, then cpu_ns."""
    from ..errors import OptionError

    if by not in (None, "shape", "module"):
        raise OptionError(f"by must be None, 'shape' or 'module', not {by!r}")
    ranges = op_ranges(report)
    keys = {None: ["op"], "shape": ["op", "shapes"], "module": ["module", "op"]}[by]
    if ranges.empty:
        return pd.DataFrame(columns=keys + OPS_COLUMNS[1:])
    if by == "shape" and (ranges["shapes"] == "").all():
        raise OptionError("this profile has no input shapes: profile with --ops shapes to split operators by shape")
    if by == "module":
        ranges = ranges.assign(module=_enclosing(report, ranges))
    g = attribute(report, ranges)
    gpu = g[g["range"] >= 0]
    rk = ranges.loc[gpu["range"].to_numpy(), keys].reset_index(drop=True)
    gpu = pd.concat([gpu.reset_index(drop=True), rk], axis=1)
    out = ranges.groupby(keys, sort=False, dropna=False).agg(calls=("duration_ns", "size"),
                                                            cpu_ns=("duration_ns", "sum")).reset_index()
    back = ranges[ranges["phase"] == "backward"].groupby(keys, sort=False, dropna=False)["forward_op"].agg(
        lambda v: ", ".join(sorted(set(v))[:4])).rename("backward_of").reset_index()
    k = gpu.groupby(keys, sort=False, dropna=False).agg(gpu_ns=("duration_ns", "sum"),
                                                        kernels=("kind", lambda v: int((v == "kernel").sum())))
    per_kernel = gpu[gpu["kind"] == "kernel"].groupby(keys + ["name"], sort=False, dropna=False)["duration_ns"].sum()
    top = (per_kernel.reset_index().sort_values("duration_ns", ascending=False, kind="stable")
           .drop_duplicates(keys)[keys + ["name"]].rename(columns={"name": "top_kernel"}))
    for part in (k.reset_index(), top, back):
        if len(part):
            out = out.merge(part, on=keys, how="left")
    for c, fill in (("gpu_ns", 0), ("kernels", 0), ("top_kernel", ""), ("backward_of", "")):
        out[c] = out[c].fillna(fill) if c in out else fill
    out["gpu_ns"] = out["gpu_ns"].astype(np.int64)
    out["kernels"] = out["kernels"].astype(np.int64)
    out = out.sort_values(["gpu_ns", "cpu_ns"], ascending=False, kind="stable").reset_index(drop=True)
    return out[keys + OPS_COLUMNS[1:]]


def _enclosing(report, ranges: pd.DataFrame) -> np.ndarray:
    """The innermost user NVTX range (a --modules range, or the user's own) open around each operator range on its
    thread; '' where there is none."""
    from .rules.common import Enclosing

    names = Enclosing.of(report)(ranges["pid"], ranges["tid"], ranges["start_ns"])
    return np.array(["" if n is None else n for n in names], dtype=object)
