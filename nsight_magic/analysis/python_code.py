"""Which of the user's code the host ran, from the Python samples (readers/python_samples.py).

Every stack is summarised once, from the cell down: the cell's line, then the user's own functions it went
through, then the first library or standard-library function they called (the API the user's code used), e.g.

    line 11 › save (torch/serialization.py)
    line 9 › bookkeeping (<%%nsight_setup cell 1 of 1>:5) › dumps (json/__init__.py)

Tables: functions (own and total time, as py-spy and pyinstrument show them), cell lines, what ran inside given
stretches of time (the advice: "the GPU idled 2.1 s while the host was in save ..."), and runs of one summary per
thread for the timeline.  Sample weights are the time each sample stands for (readers/python_samples.py).
"""
from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..inside.marks import CAPTURE_DOMAIN
from ..inside.python_samples import waiting_file
from ..readers.contract import NsysFrames
from ..readers.python_samples import PythonSamples, short_file
from . import intervals as iv
from .frame_memo import report_memo

SEP = " › "
MIN_COVERAGE = 0.5   # of a stretch's time the samples must cover for its code to be named


class Stacks(Protocol):
    """What stack_info reads: readers.python_samples.PythonSamples, or a memory history's stacks in its shape."""

    frames: pd.DataFrame        # function, file, first_line, kind
    stacks: list[np.ndarray]    # per stack: its frames (indexes into frames), from the leaf
    lines: list[np.ndarray]     # per stack: the line in each frame
    cell_first_line: int


@dataclass
class StackInfo:
    label: np.ndarray        # per stack: the summary (object array of str)
    cell_line: np.ndarray    # per stack: the cell's line number as the editor shows it, -1 outside the cell
    leaf: np.ndarray         # per stack: the innermost frame that is not ours (-1: none)
    labels: list[str]        # distinct summaries
    label_code: np.ndarray   # per stack: index into labels
    machinery: np.ndarray    # per stack: bool, the machinery that runs the cell (see thread_roles)


def stack_info(ps: Stacks) -> StackInfo:
    """Summaries of every stack (computed once per samples object: the stacks are few, the samples many)."""
    memo = report_memo(ps)
    if "stack_info" in memo:
        known: StackInfo = memo["stack_info"]
        return known
    kind = ps.frames["kind"].to_numpy(object)
    func = ps.frames["function"].to_numpy(object)
    files = [short_file(f) for f in ps.frames["file"]]
    first = ps.frames["first_line"].to_numpy()
    n = len(ps.stacks)
    label = np.empty(n, object)
    cell_line = np.full(n, -1, np.int64)
    leaf = np.full(n, -1, np.int64)
    machinery = np.zeros(n, bool)
    bootstrap = np.array([str(f).replace("\\", "/").endswith("/threading.py") for f in ps.frames["file"]], bool)
    for s, (fids, lines) in enumerate(zip(ps.stacks, ps.lines)):
        ids = np.asarray(fids)
        # a thread's own code starts below threading's bootstrap: when that is ours (ipykernel, IPython, tornado,
        # nsight-magic) and no frame of the user's is on the stack, the stack is the machinery's
        started = [j for j in range(len(ids) - 1, -1, -1) if not bootstrap[ids[j]]]
        machinery[s] = bool(started) and kind[ids[started[0]]] == "ours" and \
            not any(kind[i] in ("cell", "user") for i in ids)
        notours = [j for j in range(len(ids)) if kind[ids[j]] != "ours"]
        if not notours:
            label[s] = "(nsight-magic)"
            continue
        leaf[s] = ids[notours[0]]
        # the cell: the outermost frame of a cell's code (the profiled cell's <module>)
        cells = [j for j in notours if kind[ids[j]] == "cell"]
        top = cells[-1] if cells else notours[-1]
        parts = []
        if cells:
            cell_line[s] = int(lines[top]) + ps.cell_first_line - 1  # the editor's numbers
            parts.append(f"line {cell_line[s]}")
        else:
            parts.append(f"{func[ids[top]]} ({files[ids[top]]}:{first[ids[top]]})")
        for j in range(top - 1, -1, -1):  # toward the leaf
            fid = ids[j]
            k = kind[fid]
            if k == "ours":
                continue
            if k in ("user", "cell"):
                parts.append(f"{func[fid]} ({files[fid]}:{first[fid]})")
                continue
            # the first library call: the API the code used (past the library's private plumbing, as
            # nn.Module's _wrapped_call_impl -> _call_impl -> forward, where a public function follows)
            for jj in range(j, -1, -1):
                name = str(func[ids[jj]])
                if kind[ids[jj]] in ("library", "stdlib") and (not name.startswith("_") or name.startswith("__")):
                    fid = ids[jj]
                    break
            parts.append(f"{func[fid]} ({files[fid]})")
            break
        label[s] = SEP.join(parts)
    codes, uniq = pd.factorize(pd.Series(label, dtype=object), sort=False)
    info = StackInfo(label, cell_line, leaf, list(uniq), codes.astype(np.int32), machinery)
    memo["stack_info"] = info
    return info


CELL, PROGRAM, KERNEL = "cell", "program", "kernel"


def thread_roles(ps: PythonSamples) -> dict[tuple[int, int], str]:
    """(pid, tid) -> the sampled thread's role: CELL, the thread that ran the cell (per process, the one with the
    most samples inside the cell's lines); PROGRAM, another thread of the program (the user's, a library's); KERNEL,
    a thread of the machinery that runs the cell (in the in-place kernel ipykernel's IOPub, heartbeat, control and
    history threads, nsight-magic's own): the sampler named it so (machinery_threads), or every sample of it is a
    machinery stack (StackInfo.machinery)."""
    memo = report_memo(ps)
    if "thread_roles" not in memo:  # asked by every rule and table that splits the samples by thread
        memo["thread_roles"] = _thread_roles(ps)
    roles: dict[tuple[int, int], str] = memo["thread_roles"]
    return roles


def _thread_roles(ps: PythonSamples) -> dict[tuple[int, int], str]:
    s = ps.samples
    if s.empty:
        return {}
    info = stack_info(ps)
    st = s["stack"].to_numpy(np.int64)
    df = pd.DataFrame({"pid": s["pid"].to_numpy(np.int64), "tid": s["tid"].to_numpy(np.int64),
                       "ours": info.machinery[st], "cell": info.cell_line[st] >= 0})
    per = df.groupby(["pid", "tid"], sort=True).agg(ours=("ours", "all"), cell=("cell", "sum"))
    if ps.machinery_threads:  # the sampler knew these threads as the machinery's, whatever code they ran
        per.loc[per.index.isin(list(ps.machinery_threads)) & (per["cell"] == 0), "ours"] = True
    roles = {k: (KERNEL if r.ours else PROGRAM) for k, r in zip(per.index, per.itertuples())}
    for pid, g in per[~per["ours"] & (per["cell"] > 0)].groupby(level=0):
        roles[g["cell"].idxmax()] = CELL
    return roles


def _by_role(ps: PythonSamples, roles: dict[tuple[int, int], str], wanted: Container[str]) -> np.ndarray:
    """A mask of the samples of the threads whose role is in `wanted`."""
    s = ps.samples
    keys = [k for k, r in roles.items() if r in wanted]
    if not keys:
        return np.zeros(len(s), bool)
    idx = pd.MultiIndex.from_arrays([s["pid"].to_numpy(np.int64), s["tid"].to_numpy(np.int64)])
    return np.asarray(idx.isin(keys))


def cell_thread_ns(ps: PythonSamples) -> float:
    """The sampled time of the threads that ran the cell (the shares' whole), else of every program thread, else
    of all: the in-place kernel's idle threads would otherwise make the cell's own code look small."""
    roles = thread_roles(ps)
    w = ps.samples["weight_ns"].to_numpy(float)
    for wanted in ((CELL,), (CELL, PROGRAM)):
        m = _by_role(ps, roles, wanted)
        if m.any():
            return float(w[m].sum()) or 1.0
    return float(w.sum()) or 1.0


def functions(ps: PythonSamples, mask: np.ndarray | None = None) -> pd.DataFrame:
    """Per function: own_ns (on top of the Python stack), total_ns (anywhere on it), their shares of the time the
    cell's thread was sampled (cell_thread_ns), samples; the machinery that runs the cell (ours, IPython, the kernel's
    own threads) left out.  `mask`: these samples only."""
    cols = ["function", "file", "line", "kind", "own_ns", "total_ns", "own_pct", "total_pct", "samples"]
    program = ~_by_role(ps, thread_roles(ps), (KERNEL,))
    s = ps.samples[program if mask is None else (program & mask)]
    if s.empty:
        return pd.DataFrame(columns=cols)
    info = stack_info(ps)
    w = s.groupby("stack")["weight_ns"].agg(["sum", "size"])
    sid = w.index.to_numpy(np.int64)
    wsum, wcnt = w["sum"].to_numpy(float), w["size"].to_numpy(np.int64)
    kind = ps.frames["kind"].to_numpy(object)
    nf = len(ps.frames)
    own = np.zeros(nf)
    total = np.zeros(nf)
    count = np.zeros(nf, np.int64)
    lf = info.leaf[sid]
    ok = lf >= 0
    np.add.at(own, lf[ok], wsum[ok])
    for k, st in enumerate(sid):  # distinct stacks: hundreds to thousands
        u = np.unique(ps.stacks[st])
        total[u] += wsum[k]
        count[u] += wcnt[k]
    all_ns = cell_thread_ns(ps) if mask is None else (float(wsum.sum()) or 1.0)
    keep = (total > 0) & (kind != "ours")
    fr = ps.frames
    out = pd.DataFrame({"function": fr["function"].to_numpy(object)[keep],
                        "file": [short_file(f) for f in fr["file"].to_numpy(object)[keep]],
                        "line": fr["first_line"].to_numpy()[keep], "kind": kind[keep],
                        "own_ns": own[keep].round().astype(np.int64), "total_ns": total[keep].round().astype(np.int64),
                        "own_pct": 100 * own[keep] / all_ns, "total_pct": 100 * total[keep] / all_ns,
                        "samples": count[keep]})
    return out.sort_values(["total_ns", "own_ns"], ascending=False, kind="stable").reset_index(drop=True)


def sampled_precision(values: npt.ArrayLike, samples: npt.ArrayLike) -> np.ndarray:
    """`values` measured by `samples` samples each, rounded to the significant digits that count supports: a time
    of n samples is good to about 1/sqrt(n) of itself, so 1 digit under 100 samples, 2 under 10,000, then 3."""
    v = np.asarray(values, float)
    n = np.maximum(np.asarray(samples, float), 1)
    digits = 1 + np.floor(np.log10(np.sqrt(n)))
    scale = 10.0 ** (np.floor(np.log10(np.where(v == 0, 1, np.abs(v)))) - digits + 1)
    return np.where(np.isfinite(v), np.round(v / scale) * scale, v)


def cell_lines(ps: PythonSamples) -> pd.DataFrame:
    """Per line of the cell (the editor's numbers): the sampled time spent in it (and below it), its share, the
    samples it rests on (a time of n samples is good to about 1/sqrt(n) of itself), and what it spent it in most
    (the summary below the line)."""
    cols = ["line", "total_ns", "pct", "samples", "top_call", "top_call_pct"]
    if ps.samples.empty:
        return pd.DataFrame(columns=cols)
    info = stack_info(ps)
    s = ps.samples
    st = s["stack"].to_numpy(np.int64)
    line = info.cell_line[st]
    inside = line >= 0
    if not inside.any():
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame({"line": line[inside], "label": info.label_code[st][inside],
                       "w": s["weight_ns"].to_numpy(float)[inside]})
    per = df.groupby("line")["w"].sum()
    n = df.groupby("line").size()
    top = df.groupby(["line", "label"])["w"].sum().reset_index().sort_values("w", ascending=False, kind="stable")
    top = top.drop_duplicates("line").set_index("line")
    all_ns = cell_thread_ns(ps)
    out = pd.DataFrame({"line": per.index.to_numpy(np.int64), "total_ns": per.to_numpy().round().astype(np.int64)})
    out["pct"] = 100 * out["total_ns"] / all_ns
    out["samples"] = n.reindex(per.index).to_numpy(np.int64)
    labels = np.asarray(info.labels, dtype=object)
    out["top_call"] = [labels[int(top.loc[ln, "label"])] for ln in out["line"]]
    out["top_call_pct"] = [100 * float(top.loc[ln, "w"]) / float(per.loc[ln]) for ln in out["line"]]
    return out.sort_values("total_ns", ascending=False, kind="stable").reset_index(drop=True)


MEASURED_SHARE = 0.9  # of a line's samples the NVTX ranges that hold only that line must hold to measure it
# how far from its true time a sample may sit on the report's clock (the clock mark made a little after its
# reading, the two clocks' drift over the cell: 0.1-21 us over 0.4 s cells here): a sample this close to a range's
# edge may belong to either side (seen: the last sample of one line 0.6-6 us inside the next line's range)
PLACED_WITHIN_NS = 50_000
OWN_DOMAINS = (CAPTURE_DOMAIN,)  # our ranges around the whole cell and our marks


def measured_lines(ps: PythonSamples, nvtx: pd.DataFrame) -> pd.DataFrame:
    """Per line of the cell that NVTX ranges measured exactly (issue 65: "17.264 ms, 77.5 %" from 4 samples beside
    a range that measured the same code at 9.3 ms): the ranges of the cell's thread of a name whose samples are
    that one line's (MEASURED_SHARE of them; with its ranges that fell between samples), when they hold at least
    MEASURED_SHARE of the line's samples.  `measured_ns` is the time their union covers (nested ranges count once),
    `measured_by` their name (the innermost such name).  `--lines` ranges measure every line so; a user's range
    around one line, that line."""
    cols = ["line", "measured_ns", "measured_by"]
    none = pd.DataFrame({"line": pd.Series([], dtype=np.int64), "measured_ns": pd.Series([], dtype=float),
                         "measured_by": pd.Series([], dtype=object)})
    if ps.samples.empty or not ps.placed or nvtx is None or nvtx.empty:
        return none
    info = stack_info(ps)
    roles = thread_roles(ps)
    s = ps.samples
    nv = nvtx[nvtx["end_ns"].notna() & (nvtx["kind"].astype(str) != "mark")
              & ~nvtx["domain"].astype(str).isin(OWN_DOMAINS)]
    rows = []
    for (pid, tid), role in roles.items():
        if role != CELL:
            continue
        mine = (s["pid"].to_numpy(np.int64) == pid) & (s["tid"].to_numpy(np.int64) == tid)
        t = s["time_ns"].to_numpy(float)[mine]
        line = info.cell_line[s["stack"].to_numpy(np.int64)[mine]]
        order = np.argsort(t, kind="stable")
        t, line = t[order], line[order]
        r = nv[(nv["pid"].to_numpy(np.int64) == pid) & (nv["tid"].to_numpy(np.int64) == tid)]
        if r.empty or not len(t):
            continue
        rs = r["start_ns"].to_numpy(np.int64)
        re_ = pd.to_numeric(r["end_ns"]).to_numpy(np.int64)
        lo, hi = np.searchsorted(t, rs, "left"), np.searchsorted(t, re_, "left")
        sampled = hi > lo
        if not sampled.any():
            continue
        # every sample inside a range, with the range's name, to count per name how many are each line's (all of
        # them: the middle sample of each range alone missed the measured line's where a range held two samples
        # of two lines), less those that may belong across the range's edge
        names = r["name"].astype(str).to_numpy()
        held = np.flatnonzero(sampled)
        count = (hi - lo)[held]
        of_range = np.repeat(held, count)
        at_sample = np.repeat(lo[held] - (np.cumsum(count) - count), count) + np.arange(int(count.sum()))
        when = t[at_sample]
        clear = (when - rs[of_range] >= PLACED_WITHIN_NS) & (re_[of_range] - when >= PLACED_WITHIN_NS)
        by = pd.DataFrame({"name": names[of_range][clear], "line": line[at_sample][clear]})
        # a name measures line L when MEASURED_SHARE of the samples inside its ranges are L's (a sample in the
        # `with` statement's own line as the range opens is noise); its ranges that fell between samples (a 4 ms
        # line sampled every 5 ms) ran the same code and count too
        best = by.groupby(["name", "line"]).size().rename("held").reset_index() \
            .sort_values("held", ascending=False, kind="stable").drop_duplicates("name").set_index("name")
        best["n"] = by.groupby("name").size()
        per = best[(best["line"] >= 0) & (best["held"] >= MEASURED_SHARE * best["n"])]["line"]
        if per.empty:
            continue
        for name, ln in per.items():
            k = np.flatnonzero(names == name)
            ranges = iv.union(rs[k], re_[k])
            at = t[line == ln]
            near = iv.union(rs[k] - PLACED_WITHIN_NS, re_[k] + PLACED_WITHIN_NS)  # (a sample just past an edge)
            if iv.contains(near, at).sum() >= MEASURED_SHARE * len(at):
                rows.append((int(ln), float(iv.total(ranges)), name))
    if not rows:
        return none
    # of the names that measure a line, the innermost (the least time): `with nvtx.annotate("log"):` around it
    # rather than --lines' range of the `with` statement, which holds the range's own entry and exit too
    out = pd.DataFrame(rows, columns=cols).sort_values(["line", "measured_ns"], kind="stable")
    return out.drop_duplicates("line").reset_index(drop=True)


def code_in(ps: PythonSamples, pid: npt.ArrayLike, tid: npt.ArrayLike, start_ns: np.ndarray, end_ns: np.ndarray,
            stacks: np.ndarray | None = None) -> tuple[pd.DataFrame, float]:
    """What the samples of threads (pid, tid) show inside the stretches [start, end): per summary its time and
    share of the sampled time, most first; and the share of the stretches' time the samples cover.  `stacks`: a
    mask over ps.stacks, the samples of the others left out."""
    cols = ["label", "ns", "pct"]
    s = ps.samples
    if s.empty or not ps.placed or not len(start_ns):
        return pd.DataFrame(columns=cols), 0.0
    info = stack_info(ps)
    pid, tid = np.asarray(pid, np.int64), np.asarray(tid, np.int64)
    start_ns, end_ns = np.asarray(start_ns, np.int64), np.asarray(end_ns, np.int64)
    # a sample stands for the time before it: it belongs to the stretch that holds the middle of that time
    picked = _picked(ps, pid, tid, start_ns, end_ns)
    if stacks is not None:
        picked &= np.asarray(stacks, bool)[s["stack"].to_numpy(np.int64)]
    if not picked.any():
        return pd.DataFrame(columns=cols), 0.0
    w = s["weight_ns"].to_numpy(float)[picked]
    codes = info.label_code[s["stack"].to_numpy(np.int64)[picked]]
    per = pd.Series(w).groupby(codes).sum().sort_values(ascending=False, kind="stable")
    labels = np.asarray(info.labels, dtype=object)
    got = float(w.sum())
    out = pd.DataFrame({"label": labels[per.index.to_numpy(np.int64)], "ns": per.to_numpy().round().astype(np.int64),
                        "pct": 100 * per.to_numpy() / got})
    span = float(np.maximum(end_ns - start_ns, 0).sum()) or 1.0
    return out, min(got / span, 1.0)


def segments(ps: PythonSamples) -> pd.DataFrame:
    """Runs of consecutive samples of a thread with one summary: start_ns, end_ns, pid, tid, name (the summary),
    detail (the innermost frames of the run's first stack), samples; for the timeline's Python rows."""
    cols = ["start_ns", "end_ns", "pid", "tid", "name", "detail", "samples"]
    s = ps.samples
    if s.empty or not ps.placed:
        return pd.DataFrame(columns=cols)
    info = stack_info(ps)
    st = s["stack"].to_numpy(np.int64)
    code = info.label_code[st]
    pid, tid = s["pid"].to_numpy(np.int64), s["tid"].to_numpy(np.int64)
    t = s["time_ns"].to_numpy(float)
    w = s["weight_ns"].to_numpy(float)
    new = np.ones(len(s), bool)
    new[1:] = (code[1:] != code[:-1]) | (pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(s)) - 1
    labels = np.asarray(info.labels, dtype=object)
    details = {}
    fr_func = ps.frames["function"].to_numpy(object)
    fr_file = [short_file(f) for f in ps.frames["file"]]
    kind = ps.frames["kind"].to_numpy(object)

    def detail(stack_id: int) -> str:
        if stack_id not in details:
            ids, lines = ps.stacks[stack_id], ps.lines[stack_id]
            shown = [f"{fr_func[i]} ({fr_file[i]}:{ln})" for i, ln in zip(ids, lines) if kind[i] != "ours"][:12]
            details[stack_id] = " ← ".join(shown)
        return details[stack_id]

    # a sample stands for the time before it (readers/python_samples.py): a run spans its first sample's share
    return pd.DataFrame({"start_ns": (t[starts] - w[starts]).astype(np.int64), "end_ns": t[ends].astype(np.int64),
                         "pid": pid[starts], "tid": tid[starts], "name": labels[code[starts]],
                         "detail": [detail(int(x)) for x in st[starts]], "samples": ends - starts + 1})


def describe(table: pd.DataFrame, coverage: float, total_ns: float, top: int = 2) -> str | None:
    """'save (torch/serialization.py) called from line 11 of the cell, 2.1 s (91% of the sampled time); ...'
    for the advice, or None when the samples cover too little of the stretches to say."""
    if table.empty or coverage < MIN_COVERAGE:
        return None
    parts = []
    for r in table.head(top).itertuples():
        parts.append(f"`{_readable(r.label)}` {r.pct:.0f}%")
    return "; ".join(parts)


def _readable(label: str) -> str:
    """'line 11 › save (torch/serialization.py)' -> 'save (torch/serialization.py), called from line 11 of the
    cell'."""
    parts = label.split(SEP)
    if parts[0].startswith("line ") and len(parts) > 1:
        return f"{SEP.join(parts[1:])} from {parts[0]} of the cell"
    if parts[0].startswith("line "):
        return f"{parts[0]} of the cell itself"
    return label


def sync_sites(ps: PythonSamples) -> pd.DataFrame:
    """Where the program synchronised with the GPU (ps.syncs: torch flagged each synchronising operation at its
    own stack): label (as the samples' summaries), cell_line (-1 outside the cell), count; most first."""
    cols = ["label", "cell_line", "count"]
    if ps is None or ps.syncs.empty:
        return pd.DataFrame(columns=cols)
    info = stack_info(ps)
    sid = ps.syncs["stack"].to_numpy(np.int64)
    t = pd.DataFrame({"label": info.label[sid], "cell_line": info.cell_line[sid]})
    out = t.groupby(["label", "cell_line"], sort=False).size().rename("count").reset_index()
    return out.sort_values("count", ascending=False, kind="stable").reset_index(drop=True)[cols]


def sync_words(ps: PythonSamples, top: int = 3) -> CodeSaid:
    """'`line 7 of the cell itself` 60 times; ...' from sync_sites, or nothing where none were recorded."""
    sites = sync_sites(ps)
    if sites.empty:
        return CodeSaid()
    said = "; ".join(f"`{_readable(r.label)}` {r.count:,} times" for r in sites.head(top).itertuples())
    more = int(sites["count"].iloc[top:].sum())
    return CodeSaid(f" torch reported each synchronising operation at its line: {said}"
                    + (f"; {more:,} more elsewhere" if more else "") + ".", said, _readable(sites["label"].iloc[0]))


@dataclass(frozen=True)
class CodeSaid:
    words: str = ""   # the sentence a finding adds (or how to get samples)
    code: str = ""    # the summaries with their shares: "`save (...) from line 11 of the cell` 91%; ..."
    top: str = ""     # the first summary, readable


def code_words(report: NsysFrames, ev: pd.DataFrame) -> CodeSaid:
    """What a finding says about the code the host ran in its evidence's stretches (ev: start_ns, end_ns, pid,
    tid), from the Python samples, or how to get them."""
    ps = report.python_samples
    if ps is None or ps.empty:
        return CodeSaid(" Which code that was, Python samples would say: %%nsys records them unless --no-samples "
                        "is given (this profile has none).")
    if not ps.placed:
        return CodeSaid(" The Python samples of this profile could not be placed on its timeline (no clock mark).")
    if ev.empty or "tid" not in ev or ev["tid"].isna().all():
        return CodeSaid()
    e = ev.dropna(subset=["pid", "tid"])
    table, coverage = code_in(ps, e["pid"].to_numpy(np.int64), e["tid"].to_numpy(np.int64),
                              e["start_ns"].to_numpy(np.int64), e["end_ns"].to_numpy(np.int64))
    said = describe(table, coverage, float((e["end_ns"] - e["start_ns"]).sum()))
    if said is None:
        if table.empty:
            return CodeSaid(" No Python sample fell in these stretches.")
        return CodeSaid(f" The Python samples cover {100 * coverage:.0f}% of these stretches: too little to name "
                        "the code.")
    rest = table.iloc[2:]["pct"].sum()
    return CodeSaid(f" Python samples in these stretches: the host was in {said}"
                    + (f"; other code {rest:.0f}%" if rest >= 1 else "") + ".", said, _readable(table["label"].iloc[0]))


@dataclass(frozen=True)
class GilHolder:
    thread: str       # the thread's name ("metrics"), or "thread N"
    code: str         # what the samples show it ran: "`aggregate (In [3]:4)` 88%; ..."
    ns: float         # the sampled time of that thread inside the waits


def waiting_stacks(ps: PythonSamples) -> np.ndarray:
    """A mask over ps.stacks: the innermost frame is where a thread waits (inside/python_samples.waiting_file)."""
    waits = np.fromiter((waiting_file(f) for f in ps.frames["file"]), bool, len(ps.frames))
    return np.array([bool(len(fids)) and bool(waits[fids[0]]) for fids in ps.stacks], bool)


def gil_holder(report: NsysFrames, waits: pd.DataFrame, running: bool = False) -> GilHolder | None:
    """The other Python thread of the process that ran while a thread waited for the GIL (waits: pid, tid,
    start_ns, end_ns of its GIL calls): the one the samples saw most inside those waits, with its code; None
    without samples or when no program thread was seen there.  running: count only the samples that ran Python
    (waiting_stacks left out): where the waits are not known to be the GIL's."""
    ps = report.python_samples
    if ps is None or ps.empty or not ps.placed or waits.empty:
        return None
    mask = ~waiting_stacks(ps) if running else None
    roles = thread_roles(ps)
    best = None
    for pid, w in waits.groupby("pid"):
        waiting = set(w["tid"].astype(np.int64).tolist())
        for (p, th), role in roles.items():
            if p != pid or th in waiting or role == KERNEL:
                continue
            n = len(w)
            table, _ = code_in(ps, np.full(n, p), np.full(n, th), w["start_ns"].to_numpy(np.int64),
                               w["end_ns"].to_numpy(np.int64), mask)
            got = float(table["ns"].sum()) if len(table) else 0.0
            if got and (best is None or got > best[0]):
                best = (got, (p, th), table)
    if best is None:
        return None
    got, key, table = best
    name = ps.thread_names.get(key) or f"thread {key[1]}"
    return GilHolder(name, describe(table, 1.0, got) or "", got)


_IMPORTING = {"_find_and_load", "_find_and_load_unlocked", "_load_unlocked", "exec_module", "_gcd_import"}


def importing(ps: PythonSamples, ev: pd.DataFrame) -> tuple[float, str]:
    """(share, module): how much of the sampled time of the evidence's threads inside its stretches (ev: pid, tid,
    start_ns, end_ns) Python spent importing a module, and the module most imported ("torch/_dynamo/__init__.py")."""
    s = ps.samples if ps is not None else None
    if s is None or s.empty or not ps.placed or ev.empty:
        return 0.0, ""
    e = ev.dropna(subset=["pid", "tid"])
    picked = _picked(ps, e["pid"].to_numpy(np.int64), e["tid"].to_numpy(np.int64),
                     e["start_ns"].to_numpy(np.int64), e["end_ns"].to_numpy(np.int64))
    if not picked.any():
        return 0.0, ""
    func = ps.frames["function"].to_numpy(object)
    files = ps.frames["file"].astype(str).to_numpy(object)
    boot = np.array([f.startswith("<frozen importlib") for f in files], bool)
    modules = {}
    for sid in np.unique(s["stack"].to_numpy(np.int64)[picked]):
        ids = np.asarray(ps.stacks[sid])
        imp = [j for j in range(len(ids)) if boot[ids[j]] and func[ids[j]] in _IMPORTING]
        if imp:  # the module: the outermost <module> run below the outermost import
            inner = [j for j in range(imp[-1]) if func[ids[j]] == "<module>" and not boot[ids[j]]]
            modules[int(sid)] = short_file(files[ids[inner[-1]]]) if inner else "?"
    w = s["weight_ns"].to_numpy(float)[picked]
    st = s["stack"].to_numpy(np.int64)[picked]
    mod = pd.Series([modules.get(int(x)) for x in st], dtype=object)
    share = float(w[mod.notna().to_numpy()].sum() / max(w.sum(), 1.0))
    top = pd.Series(w).groupby(mod.to_numpy()).sum().sort_values(ascending=False)
    return share, (str(top.index[0]) if len(top) else "")


def _picked(ps: PythonSamples, pid: np.ndarray, tid: np.ndarray, start_ns: np.ndarray,
            end_ns: np.ndarray) -> np.ndarray:
    """A mask of the samples of threads (pid, tid) inside their stretches [start, end): a sample stands for the
    time before it, so it belongs to the stretch that holds the middle of that time."""
    s = ps.samples
    t = s["time_ns"].to_numpy(float) - s["weight_ns"].to_numpy(float) / 2
    spid, stid = s["pid"].to_numpy(np.int64), s["tid"].to_numpy(np.int64)
    picked = np.zeros(len(s), bool)
    for p, th in set(zip(pid.tolist(), tid.tolist())):
        rows = np.flatnonzero((spid == p) & (stid == th))
        if not len(rows):
            continue
        m = (pid == p) & (tid == th)
        order = np.argsort(start_ns[m], kind="stable")
        a, b = start_ns[m][order], end_ns[m][order]
        tt = t[rows]
        i = np.searchsorted(a, tt, side="right") - 1
        ok = (i >= 0) & (tt < b[np.clip(i, 0, None)])
        picked[rows[ok]] = True
    return picked
