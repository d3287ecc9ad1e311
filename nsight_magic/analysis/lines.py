"""Per-line and per-module figures from the automatic NVTX ranges (`%%nsys --lines`, `--modules`).

`lines_table(report, source)`: one row per line of the cell, like a line profiler: hits, CPU time (the line's
ranges, summed over loop iterations), GPU time (the projection of the GPU work its ranges launched, the same
projection as the NVTX summary's), GPU operations and its top kernels.
`module_table(report, names, types, models)`: one row per annotated module path (as PyTorch names it,
`encoder.layers.0.linear1`), its class, calls, forward and backward CPU and GPU time, depth and parent, for a tree of
the model; the model itself is the root, by its variable's name, with the sums of its top modules.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from ..inside.annotate import BACKWARD_SUFFIX
from ..inside.line_ranges import LINE_DOMAIN
from . import text as tx
from ..readers.contract import NsysFrames, NsysTables

LINE_COLUMNS = ["line", "source", "hits", "cpu_ns", "gpu_ns", "gpu_ops", "top_kernels"]
MODULE_COLUMNS = ["module", "type", "depth", "parent", "calls", "forward_ns", "forward_gpu_ns", "backward_ns",
                  "backward_gpu_ns"]
_LINE_RX = re.compile(r"^L(\d+): ")


def _ranges_with_gpu(report: NsysTables, mask: np.ndarray) -> pd.DataFrame:
    """NVTX rows selected by `mask` with their duration and GPU projection (0 when they launched nothing)."""
    nv = report.nvtx
    sel = nv[mask].copy()
    proj = report.nvtx_gpu_projection()
    key = ["pid", "tid", "start_ns"]
    p = proj[key + ["proj_duration_ns", "gpu_ops"]].drop_duplicates(key)
    sel = sel.merge(p, on=key, how="left")
    sel["proj_duration_ns"] = sel["proj_duration_ns"].fillna(0).astype(np.int64)
    sel["gpu_ops"] = sel["gpu_ops"].fillna(0).astype(np.int64)
    return sel


def _kernels_in(report: NsysFrames, ranges: pd.DataFrame, group: np.ndarray) -> dict[Any, str]:
    """{group: 'name (time), ...'} of the kernels launched inside the ranges (their launching API call starts
    inside the range, on the range's thread): the three longest in total."""
    k = report.kernels
    if k.empty or ranges.empty:
        return {}
    from .rules.common import api_of

    a = api_of(k, report.cuda_api, ("api_tid", "api_start_ns"))
    t = pd.DataFrame({"pid": k["pid"].to_numpy(), "tid": pd.to_numeric(a["api_tid"], errors="coerce").to_numpy(),
                      "at": pd.to_numeric(a["api_start_ns"], errors="coerce").to_numpy(),
                      "name": k["short_name"].astype(str).to_numpy() if "short_name" in k else
                      k["name"].astype(str).to_numpy(), "dur": k["duration_ns"].to_numpy()}).dropna(subset=["at"])
    rows = []
    for (pid, tid), r in ranges.assign(g=group).groupby(["pid", "tid"]):  # per thread: a sorted sweep
        kt = t[(t["pid"] == pid) & (t["tid"] == tid)].sort_values("at")
        if kt.empty:
            continue
        at = kt["at"].to_numpy()
        lo = np.searchsorted(at, r["start_ns"].to_numpy(), "left")
        hi = np.searchsorted(at, pd.to_numeric(r["end_ns"]).to_numpy(), "right")
        for g, a0, a1 in zip(r["g"].to_numpy(), lo, hi):
            if a1 > a0:
                rows.append(kt.iloc[a0:a1][["name", "dur"]].assign(g=g))
    if not rows:
        return {}
    per = pd.concat(rows).groupby(["g", "name"])["dur"].sum().reset_index()
    out = {}
    for g, d in per.groupby("g"):
        top = d.sort_values("dur", ascending=False).head(3)
        out[g] = ", ".join(f"{n[:50]} ({v / 1e6:,.3f} ms)" for n, v in zip(top["name"], top["dur"]))
    return out


def lines_table(report: NsysTables, source: str | None = None, first_line: int = 1) -> pd.DataFrame:
    """See the module docstring; `source`: the cell's text, to list every line (empty ones get no figures);
    `first_line`: the number the editor gives the cell's first line (2 under a %%nsys line)."""
    nv = report.nvtx
    if nv.empty:
        return pd.DataFrame(columns=LINE_COLUMNS)
    mask = (tx.eq(nv["domain"], LINE_DOMAIN)) & (~tx.eq(nv["kind"], "mark"))
    if not mask.any():
        return pd.DataFrame(columns=LINE_COLUMNS)
    r = _ranges_with_gpu(report, mask)
    r = r[r["end_ns"].notna()]
    # the ranges carry the editor's numbers; the cell's own (1 = its first line) index its source
    r["line"] = r["name"].astype(str).str.extract(_LINE_RX, expand=False).astype(int) - (int(first_line) - 1)
    agg = r.groupby("line").agg(hits=("line", "size"), cpu_ns=("duration_ns", "sum"),
                                gpu_ns=("proj_duration_ns", "sum"), gpu_ops=("gpu_ops", "sum"),
                                text=("name", "first"))
    kernels = _kernels_in(report, r, r["line"].to_numpy())
    agg["top_kernels"] = [kernels.get(i, "") for i in agg.index]
    if source is not None:
        src = source.splitlines()
        out = pd.DataFrame({"line": np.arange(1, len(src) + 1), "source": src})
    else:
        out = pd.DataFrame({"line": agg.index.to_numpy(),
                            "source": agg["text"].str.replace(_LINE_RX, "", regex=True).to_numpy()})
    out = out.merge(agg.drop(columns="text"), left_on="line", right_index=True, how="left")
    for c in ("hits", "cpu_ns", "gpu_ns", "gpu_ops"):
        out[c] = out[c].astype("Int64")
    out["top_kernels"] = out["top_kernels"].fillna("")
    out["line"] = out["line"] + (int(first_line) - 1)
    return out[LINE_COLUMNS].reset_index(drop=True)


def module_table(report: NsysTables, names: Iterable[str] | None = None, types: dict[str, str] | None = None,
                 models: list[str] | None = None, prefixed: bool = False) -> pd.DataFrame:
    """See the module docstring; `names`: the module paths, `types`: path -> class, `models`: the models' variable
    names, `prefixed`: the paths start with them (several models) (annotations.json of a profile); without names,
    every NVTX range with a '<name> [backward]' twin, and those twins' forward names."""
    nv = report.nvtx
    if nv.empty:
        return pd.DataFrame(columns=MODULE_COLUMNS)
    # per distinct label (a million ranges of a few hundred names): its module, and whether it is a backward twin
    label = pd.Categorical(nv["label"])
    text = [str(c) for c in label.categories]
    bw = np.array([t.endswith(BACKWARD_SUFFIX) for t in text], dtype=bool)
    base = np.array([t[:-len(BACKWARD_SUFFIX)] if b else t for t, b in zip(text, bw)], dtype=object)
    codes = np.asarray(label.codes)
    if names is None:
        seen = np.unique(codes[codes >= 0])
        names = set(base[seen[bw[seen]]])
    names = set(names)
    if not names or not len(base):
        return pd.DataFrame(columns=MODULE_COLUMNS)
    wanted = np.array([b in names for b in base], dtype=bool)
    mask = (codes >= 0) & wanted[np.maximum(codes, 0)] & (~tx.eq(nv["kind"], "mark"))
    r = _ranges_with_gpu(report, mask)
    lab = r["label"].astype(str)
    r["backward"] = lab.str.endswith(BACKWARD_SUFFIX)
    r["module"] = lab.where(~r["backward"], lab.str.slice(0, -len(BACKWARD_SUFFIX)))
    f, b = r[~r["backward"]], r[r["backward"]]
    out = pd.DataFrame({"module": sorted(names, key=_path_key)})
    fa = f.groupby("module").agg(calls=("module", "size"), forward_ns=("duration_ns", "sum"),
                                 forward_gpu_ns=("proj_duration_ns", "sum"))
    ba = b.groupby("module").agg(backward_ns=("duration_ns", "sum"), backward_gpu_ns=("proj_duration_ns", "sum"))
    out = out.merge(fa, left_on="module", right_index=True, how="left").merge(
        ba, left_on="module", right_index=True, how="left")
    out = out[out["calls"].notna() | out["backward_ns"].notna()]
    for c in ("calls", "forward_ns", "forward_gpu_ns", "backward_ns", "backward_gpu_ns"):
        out[c] = out[c].fillna(0).astype(np.int64)
    known = set(out["module"])
    out["parent"] = [_parent(m, known) for m in out["module"]]
    out = _with_roots(out, models or [], prefixed)
    types = types or {}
    out["type"] = [str(types.get(m, "")) for m in out["module"]]
    depth = dict(zip(out["module"], [0] * len(out)))
    parent = dict(zip(out["module"], out["parent"]))
    for m in out["module"]:  # depth in the tree (a root model's children are one below it)
        p, d = parent[m], 0
        while p:
            d, p = d + 1, parent.get(p, "")
        depth[m] = d
    out["depth"] = [depth[m] for m in out["module"]]
    return out[MODULE_COLUMNS].reset_index(drop=True)


def _with_roots(out: pd.DataFrame, models: list[str], prefixed: bool) -> pd.DataFrame:
    """The models as roots of their module trees, named by their variables, with the sums of their top modules
    (calls: their most called top module's)."""
    roots = []
    for var in models:
        if prefixed:
            top = out[(out["parent"] == "") & out["module"].str.startswith(var + ".")]
        elif len(models) == 1:
            top = out[out["parent"] == ""]
        else:
            continue
        if top.empty or var in set(out["module"]):
            continue
        out.loc[top.index, "parent"] = var
        roots.append({"module": var, "parent": "", "calls": int(top["calls"].max()),
                      **{c: int(top[c].sum()) for c in ("forward_ns", "forward_gpu_ns", "backward_ns",
                                                        "backward_gpu_ns")}})
    if not roots:
        return out
    rows = pd.concat([pd.DataFrame(roots), out], ignore_index=True)
    # each root before its tree: the order of a depth-first walk
    children: dict[str, list[str]] = {}
    for m, p in zip(rows["module"], rows["parent"]):
        children.setdefault(p, []).append(m)
    order: list[str] = []

    def walk(p: str) -> None:
        for m in children.get(p, []):
            order.append(m)
            walk(m)

    walk("")
    return rows.set_index("module").loc[order].reset_index()


def _path_key(path: str) -> list[tuple[int, int, str]]:
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in path.split(".")]


def _parent(path: str, known: set[str]) -> str:
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        cand = ".".join(parts[:i])
        if cand in known:
            return cand
    return ""
