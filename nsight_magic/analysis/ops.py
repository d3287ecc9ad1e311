"""Operators (`%%nsys --ops`): which PyTorch operator launched each kernel, and the time per operator.

Two recordings give the same table.  On CUDA builds the child turns on PyTorch's own NVTX ranges
(torch.autograd.profiler.emit_nvtx: C++ ranges at every dispatcher call, "aten::addmm, seq = 7, op_id = 12,
sizes = [...]", in the default domain, nested: aten::linear around aten::t and aten::addmm; backward ones inside the
autograd node's range "AddmmBackward0, seq = 7").  Elsewhere a TorchDispatchMode (nsight_magic.inside.ops) puts each
operator that reaches a kernel in a range of the domain "nsight-magic ops" ("aten::mm [backward of aten::addmm]").
op_ranges() reads either into one frame; ops_source() says which ran.

A GPU operation (kernel, copy, memset) belongs to the operator range open on the thread of the CUDA call that
launched it (correlation ids), when that call was made: backward kernels belong to the backward operators on
autograd's thread, whatever the GPU was doing meanwhile.  With nested ranges (emit_nvtx) the operator is the one a
dispatch mode would see: the outermost range that is not a composite operator (the report's composite mark lists
them; aten::linear gives its time to aten::addmm, aten::addmm keeps its inner aten::empty); without that mark, the
outermost range.
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from ..readers.contract import NsysFrames
from ..inside.ops import BACKWARD_OF, COMPOSITE_MARK, OPS_DOMAIN, forward_op_of
from . import intervals as I
from .enclosing import Enclosing, emitted
from .frame_memo import report_memo
from . import text as tx

_NAME = re.compile(r"^(?P<op>[^\s\[(]+)(?:" + re.escape(BACKWARD_OF) + r"(?P<fwd>[^\]]+)\])?(?: \((?P<shapes>.*)\))?$")
OPS_COLUMNS = ["op", "calls", "cpu_ns", "gpu_ns", "kernels", "top_kernel", "backward_of"]
RANGE_COLUMNS = ["start_ns", "end_ns", "duration_ns", "pid", "tid", "op", "phase", "forward_op", "shapes", "depth",
                 "parent", "owner", "visible"]
# PyTorch's emit_nvtx (and nsys --pytorch) ranges: "<name>, seq = N, op_id = N, sizes = [[...]], input_op_ids = ..."
EMITTED = re.compile(r"^(?P<name>[^,]+?)(?:, seq = (?P<seq>\d+))?(?:, op_id = \d+)?(?:, sizes = (?P<sizes>.*?))?"
                     r"(?:, input_op_ids = .*)?$")
# framework operator ranges, whoever emitted them: no structure of the user's loop (analysis.steps leaves them out)
FRAMEWORK_OPS = r"^(?:aten|autograd|prim|c10d|cudnn|cublas|nccl|torch|triton)::|, seq = |, op_id = |^Autograd::"
_OPERATOR = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*::")          # a namespaced operator: aten::mm, c10d::allreduce_
_NOT_OPERATOR = ("autograd::", "torch::autograd::", "profiler::")  # the autograd engine's and record_function's own
_NODE = re.compile(r"^(?:torch::autograd::\w+|[A-Za-z0-9_]+Backward\d*)$")  # an autograd node: its ops are backward
_ENGINE = "autograd::engine::evaluate_function: "
# the two name patterns in RE2's dialect, for Arrow (text.extract: no broader than Python's); neither matches a
# newline, since Python's `$` also matches before a last one (what "aten::mm\n" makes is Python's to say)
_NAME_RE2 = (r"^(?P<op>[^" + tx.PY_SPACE + r"\[(]+)(?:" + re.escape(BACKWARD_OF) + r"(?P<fwd>[^\]\n]+)\])?"
             r"(?: \((?P<shapes>.*)\))?$")
_EMITTED_RE2 = (r"^(?P<name>[^,\n]+?)(?:, seq = (?P<seq>[0-9]+))?(?:, op_id = [0-9]+)?"
                r"(?:, sizes = (?P<sizes>.*?))?(?:, input_op_ids = .*)?$")


def ops_source(report: NsysFrames) -> str | None:
    """Which recording made the operator ranges: 'dispatch' (nsight-magic's dispatch mode), 'emit_nvtx' (PyTorch's
    C++ ranges), or None (no --ops)."""
    nv = report.nvtx
    if nv.empty:
        return None
    ours = (nv["domain"].astype("string") == OPS_DOMAIN).fillna(False).to_numpy()
    if (ours & (~tx.eq(nv["kind"], "mark"))).any():
        return "dispatch"
    return "emit_nvtx" if emitted(nv).any() else None


def composite_marked(report: NsysFrames) -> set[str]:
    """The composite operators the child listed in its marks (emit_nvtx runs of --ops); empty without them."""
    nv = report.nvtx
    if nv.empty:
        return set()
    m = nv[(nv["domain"].astype("string") == OPS_DOMAIN).fillna(False).to_numpy()
           & (tx.eq(nv["kind"], "mark"))]
    names = m["name"].astype(str)
    out: set[str] = set()
    for text in names[names.str.startswith(COMPOSITE_MARK)]:
        out.update(text[len(COMPOSITE_MARK):].split())
    return out


def op_ranges(report: NsysFrames) -> pd.DataFrame:
    """The operator ranges: start_ns, end_ns, duration_ns, pid, tid, op ('aten::mm'), phase (forward/backward),
    forward_op (for backward ones: the forward operator they belong to), shapes ('' without --ops shapes), depth and
    parent (row of the operator range around it, -1: none), owner (row of the operator it counts for: itself when
    visible, else the visible one around it, -1: none) and visible (an operator of the table); sorted by start.
    Made once per report: the rules and the view's operator table ask four times, and an emit_nvtx run of a
    million kernels has millions of ranges."""
    memo = report_memo(report)
    if "op_ranges" not in memo:
        memo["op_ranges"] = _op_ranges(report)
    made: pd.DataFrame = memo["op_ranges"]
    return made.copy(deep=False)  # a caller's new columns stay its own


def _op_ranges(report: NsysFrames) -> pd.DataFrame:
    nv = report.nvtx
    if nv.empty:
        return pd.DataFrame(columns=RANGE_COLUMNS)
    closed = (~tx.eq(nv["kind"], "mark")) & nv["end_ns"].notna().to_numpy()
    ours = tx.eq(nv["domain"], OPS_DOMAIN) & closed
    if ours.any():
        out = _dispatch_ranges(nv[ours])
    else:
        mine = emitted(nv) & closed
        if not mine.any():
            return pd.DataFrame(columns=RANGE_COLUMNS)
        out = _emitted_ranges(nv[mine], composite_marked(report))
    return _nested(out)


def _dispatch_ranges(r: pd.DataFrame) -> pd.DataFrame:
    import pyarrow.compute as pc

    codes, g = tx.extract(r["name"], _NAME, _NAME_RE2)
    at = _pa_indices(codes)
    op = pc.take(g["op"], at)
    return pd.DataFrame({"start_ns": r["start_ns"].to_numpy(np.int64), "end_ns": r["end_ns"].astype(np.int64).to_numpy(),
                         "pid": r["pid"].to_numpy(np.int64), "tid": r["tid"].to_numpy(np.int64),
                         "op": tx.arrow_text(pc.if_else(pc.equal(op, ""), "?", op)),  # an op is never empty
                         "forward_op": tx.arrow_text(pc.take(g["fwd"], at)),
                         "shapes": tx.arrow_text(pc.take(g["shapes"], at)), "composite": False})


def _pa_indices(rows: np.ndarray) -> Any:
    """Row positions as Arrow indices (pyarrow.compute.take)."""
    import pyarrow as pa

    return pa.array(np.asarray(rows, np.int64))


def _sizes(text: str | None) -> str:
    """emit_nvtx's "[[4096, 64], [64, 256], [], []]" in the dispatch mode's words: "4096x64, 64x256"."""
    if not text:
        return ""
    return ", ".join("x".join(x.split(", ")) for x in re.findall(r"\[([0-9][0-9, ]*)\]", text))


def _emitted_ranges(r: pd.DataFrame, composite: set[str]) -> pd.DataFrame:
    """emit_nvtx's ranges as operator ranges: the operators (namespaced names, not the autograd engine's), each
    backward one with the forward operator of the autograd node it ran in (the node's name, else its sequence
    number: the forward range with the same seq).

    The names are parsed by Arrow, once per distinct name (emit_nvtx numbers every call, so there are about as
    many as ranges), and what follows works on codes: the operators' and nodes' own names number hundreds."""
    import pyarrow as pa
    import pyarrow.compute as pc

    codes, g = tx.extract(r["name"], EMITTED, _EMITTED_RE2)
    # each distinct name's operator or node name, as an index into `texts` (few: aten::addmm, AddmmBackward0, ...)
    enc = pc.dictionary_encode(g["name"])
    texts: list[str] = enc.dictionary.to_pylist()
    name_of = np.asarray(enc.indices, np.int64)[codes]  # per row, into texts
    is_op_t = np.array([bool(_OPERATOR.match(n)) and not n.startswith(_NOT_OPERATOR) for n in texts], bool)
    index = {t: i for i, t in enumerate(texts)}

    def code_of(t: str) -> int:
        return index.setdefault(t, len(index)) if t else -1

    # the autograd node each backward op runs for: its own range, or the engine's evaluate_function range around it
    # (the engine reduces a gradient to its input's shape there, after the node's range: AddmmBackward0's bias sum)
    nodes_t = [n[len(_ENGINE):] if n.startswith(_ENGINE) else n if _NODE.match(n) else "" for n in texts]
    node_t = np.array([code_of(n) for n in nodes_t], np.int64)
    fwd_of_t = np.array([code_of(forward_op_of(n) or "") if n else -1 for n in nodes_t], np.int64)
    seq_v = _numbers(g["seq"])
    seq = seq_v[codes]
    start = r["start_ns"].to_numpy(np.int64)
    end = r["end_ns"].astype(np.int64).to_numpy()
    pid, tid = r["pid"].to_numpy(np.int64), r["tid"].to_numpy(np.int64)
    fwd = np.full(len(r), -1, np.int64)  # into `index` (the texts, then the nodes' and forward ops' names)
    ops = np.flatnonzero(is_op_t[name_of])
    nodes = np.flatnonzero(node_t[name_of] >= 0)
    if len(nodes) and len(ops):
        # the forward operator of each sequence number: the innermost forward range that carries it
        numbered = seq[ops] >= 0
        first_of_seq = pd.Series(name_of[ops][numbered], index=seq[ops][numbered])
        last_of_seq = first_of_seq[~first_of_seq.index.duplicated(keep="last")]
        by_seq = last_of_seq.reindex(seq[nodes]).to_numpy(float)
        node_fwd = fwd_of_t[name_of[nodes]]
        node_fwd = np.where(node_fwd >= 0, node_fwd, np.where(np.isnan(by_seq), -1, by_seq).astype(np.int64))
        node_fwd = np.where(node_fwd >= 0, node_fwd, node_t[name_of[nodes]])  # AccumulateGrad & co: their own name
        for (p, t), idx in pd.Series(np.arange(len(nodes))).groupby([pid[nodes], tid[nodes]]):  # threads: a few
            k = nodes[idx.to_numpy()]
            o = np.lexsort((start[k] - end[k], start[k]))  # by start, the longest first
            k, nf = k[o], node_fwd[idx.to_numpy()][o]
            m = ops[(pid[ops] == p) & (tid[ops] == t)]
            if not len(m):
                continue
            _, parent = I.nest(start[k], end[k])
            j = I.innermost(start[k], end[k], parent, start[m])
            fwd[m[j >= 0]] = nf[j[j >= 0]]
    all_texts = pa.array(list(index) + [""], type=pa.string())  # -1: the last, ''
    sizes = pc.dictionary_encode(g["sizes"])  # emit_nvtx's shapes repeat: each distinct one rewritten once
    shapes = pa.array([_sizes(x) for x in sizes.dictionary.to_pylist()], type=pa.string())
    return pd.DataFrame({"start_ns": start[ops], "end_ns": end[ops], "pid": pid[ops], "tid": tid[ops],
                         "op": tx.arrow_text(pc.take(all_texts, _pa_indices(name_of[ops]))),
                         "forward_op": tx.arrow_text(pc.take(all_texts, _pa_indices(
                             np.where(fwd[ops] >= 0, fwd[ops], len(index))))),
                         "shapes": tx.arrow_text(pc.take(shapes, _pa_indices(
                             np.asarray(sizes.indices, np.int64)[codes[ops]]))),
                         "composite": np.isin(name_of[ops], [i for t, i in index.items() if t in composite])})


def _numbers(text: Any) -> np.ndarray:
    """Decimal numbers as int64 (-1: none, '', or beyond int64)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        return np.asarray(pc.fill_null(pc.cast(pc.if_else(pc.equal(text, ""), None, text), pa.int64()), -1), np.int64)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # a Unicode digit (Python's `re` found it), an overflow
        return np.array([int(x) if x and -1 < int(x) < 2 ** 63 else -1 for x in text.to_pylist()], np.int64)


def _nested(out: pd.DataFrame) -> pd.DataFrame:
    """Sorted by start (longest first at equal starts), with duration, phase, depth, parent, owner and visible."""
    out = out.assign(_len=out["end_ns"] - out["start_ns"]).sort_values(
        ["start_ns", "_len"], ascending=[True, False], kind="stable").drop(columns="_len").reset_index(drop=True)
    out.insert(2, "duration_ns", out["end_ns"] - out["start_ns"])
    out.insert(6, "phase", np.where(out["forward_op"] != "", "backward", "forward"))
    n = len(out)
    depth = np.zeros(n, np.int64)
    parent = np.full(n, -1, np.int64)
    for _, idx in out.groupby(["pid", "tid"], sort=False).indices.items():  # threads: a few
        d, p = I.nest(out["start_ns"].to_numpy(np.int64)[idx], out["end_ns"].to_numpy(np.int64)[idx])
        depth[idx] = d
        parent[idx] = np.where(p >= 0, idx[np.maximum(p, 0)], -1)
    # the operator each range counts for: the outermost non-composite one around it (itself included)
    composite = out["composite"].to_numpy(bool)
    owner = np.full(n, -1, np.int64)
    for level in range(int(depth.max()) + 1 if n else 0):  # parents first
        i = np.flatnonzero(depth == level)
        p = parent[i]
        above = np.where(p >= 0, owner[np.maximum(p, 0)], -1)
        owner[i] = np.where(above >= 0, above, np.where(composite[i], -1, i))
    return out.assign(depth=depth, parent=parent, owner=owner, visible=owner == np.arange(n))[RANGE_COLUMNS]


def attribute(report: NsysFrames, ranges: pd.DataFrame | None = None) -> pd.DataFrame:
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
    parent = ranges["parent"].to_numpy(np.int64) if "parent" in ranges else np.full(len(ranges), -1, np.int64)
    for (pid, th), idx in ranges.groupby(["pid", "tid"], sort=False).indices.items():  # threads: a few
        m = np.flatnonzero((g["pid"].to_numpy() == pid) & (tid == th))
        if not len(m):
            continue
        rows = ranges.index.to_numpy()[idx]
        local = pd.Series(np.arange(len(idx)), index=rows)
        p = parent[idx]
        p = np.where(p >= 0, local.reindex(p).fillna(-1).to_numpy(np.int64), -1)
        j = I.innermost(ranges["start_ns"].to_numpy(np.int64)[idx], ranges["end_ns"].to_numpy(np.int64)[idx], p,
                        at[m])  # the innermost operator open at the launch ...
        ok = j >= 0
        out[m[ok]] = rows[j[ok]]
    if "owner" in ranges and (out >= 0).any():  # ... counted for the operator it belongs to
        own = ranges["owner"].to_numpy(np.int64)[out[out >= 0]]
        out[out >= 0] = np.where(own >= 0, own, out[out >= 0])
    g["range"] = out
    return g.drop(columns="correlation_id")


def ops_summary(report: NsysFrames, by: str | None = None) -> pd.DataFrame:
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
    # rows: the operators a dispatch mode sees (composites and what runs inside an operator count for it)
    ranges = ranges[ranges["visible"].to_numpy(bool) | np.isin(np.arange(len(ranges)), gpu["range"].to_numpy())]
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


def _enclosing(report: NsysFrames, ranges: pd.DataFrame) -> np.ndarray:
    """The innermost user NVTX range (a --modules range, or the user's own) open around each operator range on its
    thread; '' where there is none."""
    names = Enclosing.of(report)(ranges["pid"], ranges["tid"], ranges["start_ns"])
    return np.array(["" if n is None else n for n in names], dtype=object)
