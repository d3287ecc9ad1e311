"""What every rule shares: the Finding, its severity, the evidence helpers, and the Context a run of the rules
passes around (the report, its thresholds and its diagnosis: analysis.bottleneck)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd

from ...inside.marks import CAPTURE_DOMAIN
from ...readers.nsys_frames import FirstMatch, ckey
from ..enclosing import Enclosing as Enclosing  # the rules' import point
from ..frame_memo import per_frame, report_memo
from .. import intervals as I
from .. import text as tx
from ..top import largest
from ...readers.contract import NsysFrames

if TYPE_CHECKING:  # types only: the rules read a report through the readers' contract, never import the reader
    from ...readers.contract import NsysTables
    from ..bottleneck import Diagnosis


# rows of evidence a finding keeps: the longest (a rule can flag half a million small kernels; its count says how
# many, its numbers and words come from all of them)
MAX_EVIDENCE = 10_000


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str                 # high | medium | low | info
    title: str
    explanation: str
    suggestion: str
    time_at_stake_ns: int         # what the cell would save if this were fixed (critical path, whole loop)
    estimate: str                 # how time_at_stake_ns was estimated
    evidence: pd.DataFrame = field(repr=False)  # the events concerned: start_ns/end_ns on the report's clock, ...
    # ((start_ns, end_ns), ...) on the same clock: where to look on the timeline
    ranges: tuple[tuple[int, int], ...] = ()
    related: tuple[str, ...] = ()  # rules whose findings are about the same time (merged into this one)
    code: str = ""                # the user's code the host ran in the evidence's stretches (Python samples)
    events: int | None = None     # how many events it concerns, where the evidence keeps only the longest of them

    @property
    def count(self) -> int:
        return len(self.evidence) if self.events is None else self.events

    def longest(self, n: int) -> pd.DataFrame:
        """The evidence's n longest rows (duration_ns), longest first, ties in their order: a stable sort's head,
        without sorting every row (the evidence may be half a million small kernels).  No duration: the first n."""
        return self.evidence.iloc[self._longest_rows(n)]

    def bounded(self, n: int = MAX_EVIDENCE) -> "Finding":
        """The same finding with at most n rows of evidence, its longest in the order the rule gave them; its count
        stays the number of events it concerns."""
        if len(self.evidence) <= n:
            return self
        ev = self.evidence.iloc[np.sort(self._longest_rows(n))].reset_index(drop=True)
        return replace(self, evidence=ev, events=self.count)

    def _longest_rows(self, n: int) -> np.ndarray:
        ev = self.evidence
        if "duration_ns" not in ev:
            return np.arange(min(n, len(ev)))
        d = ev["duration_ns"]
        if len(ev) <= n or d.dtype.kind != "i":  # a few rows, or floats and NA (sorted last): the sort itself
            order = d.reset_index(drop=True).sort_values(ascending=False, kind="stable").index[:n]
            return np.asarray(order, np.intp)
        return largest(d.to_numpy(), n)

    def __str__(self) -> str:
        return f"[{self.severity}] {self.title} ({self.time_at_stake_ns / 1e6:,.3f} ms at stake)"


def evidence_rows(durations: np.ndarray, n: int = MAX_EVIDENCE) -> np.ndarray:
    """Positions of the rows a finding's evidence keeps, as Finding.bounded keeps them: the n longest of these
    integer durations (ties in their order), in the rows' own order.  For a rule that frames only those rows."""
    return np.sort(largest(np.asarray(durations), n))


SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}
HIGH_SHARE, MEDIUM_SHARE = 0.2, 0.05  # of the capture without its start-up
MIN_ALARM_NS = 2_000_000  # less than this saved in the whole cell is low whatever its share: a 2.5 ms cell's 0.3 ms
#                           of allocator calls or 1 ms of unfused kernels is no alarm (thresholds: alarm.min_ms)


def severity(at_stake_ns: float, span_ns: int, min_alarm_ns: float = MIN_ALARM_NS) -> str:
    """From the time the fix saves, as a share of the span judged: high >= 20%, medium >= 5%, else low; low
    below `min_alarm_ns` whatever the share."""
    share = at_stake_ns / span_ns if span_ns > 0 else 0.0
    if at_stake_ns < min_alarm_ns:
        return "low"
    return "high" if share >= HIGH_SHARE else "medium" if share >= MEDIUM_SHARE else "low"


PidDevice = tuple[int, int]  # (pid, device): a process on one GPU


@dataclass
class Claims:
    """What one rule took for its cause, handed back with its findings (Found).  The runner adds it to the run's
    Context, which the later rules read: each nanosecond is counted once, by the first cause that names it."""

    ns: dict[str, int] = field(default_factory=dict)  # breakdown category -> ns
    # per (pid, device): {category: ns} of growing_steps' steps; the start_ns of the gaps small_copies,
    # implicit_sync and autotune took
    growth_idle: dict[PidDevice, dict[str, float]] = field(default_factory=dict)
    small_copy_gaps: dict[PidDevice, np.ndarray] = field(default_factory=dict)
    readback_gaps: dict[PidDevice, np.ndarray] = field(default_factory=dict)
    autotune_gaps: dict[PidDevice, np.ndarray] = field(default_factory=dict)

    def take(self, category: str, ns: float) -> None:
        self.ns[category] = self.ns.get(category, 0) + int(ns)


class Found(NamedTuple):
    """A rule's answer when it claims time: its findings (none, where its cause fell under the threshold after it
    took its time) and its claims."""

    findings: list[Finding]
    claims: Claims


@dataclass
class Context:
    """One run of the rules over a report: what they read, and what the causes before them claimed (written by the
    runner, analysis.findings, from each rule's Claims; a rule never writes it)."""

    report: NsysTables
    th: dict[str, Any]
    diag: Diagnosis
    straggler: dict[str, Any] | None = None  # collective_wait's verdict: {"pid": the rank waited for, "ns": cost}
    # category -> ns a named cause took of it (the generic rule keeps the rest: each nanosecond is counted once)
    claimed: dict[str, int] = field(default_factory=dict)
    # per (pid, device), as Claims
    growth_idle: dict[PidDevice, dict[str, float]] = field(default_factory=dict)
    small_copy_gaps: dict[PidDevice, np.ndarray] = field(default_factory=dict)
    readback_gaps: dict[PidDevice, np.ndarray] = field(default_factory=dict)
    autotune_gaps: dict[PidDevice, np.ndarray] = field(default_factory=dict)
    memo: dict[str, Any] = field(default_factory=dict)  # what several rules read, computed once (the memory summary)
    fired: set[str] = field(default_factory=set)  # the causes (not symptoms) that found time at stake so far

    @property
    def span(self) -> int:
        return int(getattr(self.report.meta, "duration_ns", 0) or 0)

    @property
    def loop_span(self) -> int:
        """The capture without its start-up (time before the first step): what severities are shares of, so that
        a cell that builds its model or initialises NCCL first is judged by its loop; at most the steady state scaled
        to the loop, so that a first step slowed by lazy loading and autotuning (the startup finding) does not."""
        start = max(self.diag.startup.values(), default=0) if self.diag.startup else 0
        if not self.span:
            return 0
        loop = max(self.span - int(start), 1)
        steady = self.diag.window_total
        return min(loop, steady) if steady > 0 else loop

    def severity(self, at_stake_ns: float) -> str:
        return severity(at_stake_ns, self.loop_span, self.th.get("alarm.min_ms", MIN_ALARM_NS / 1e6) * 1e6)

    def stake(self, category: str) -> int:
        """A breakdown category's time on the critical path, scaled to the whole loop: the largest over processes
        and GPUs (they run at once).  The straggler's own share of it is the collectives' waiting, counted once by
        collective_wait: only what exceeds that stays here."""
        by = self.diag.by_pair(category)
        s = self.straggler
        vals = [v if s is None or pid != s["pid"] else max(0, v - s["ns"]) for (pid, _), v in by.items()]
        return int(max(vals, default=0))

    def absorb(self, claims: Claims) -> None:
        """Add a rule's claims (the runner's, after the rule returned)."""
        for category, ns in claims.ns.items():
            self.claimed[category] = self.claimed.get(category, 0) + int(ns)
        self.growth_idle.update(claims.growth_idle)
        self.small_copy_gaps.update(claims.small_copy_gaps)
        self.readback_gaps.update(claims.readback_gaps)
        self.autotune_gaps.update(claims.autotune_gaps)

    def left(self, category: str, ns: int) -> int:
        """`ns` of a category less what named causes claimed of it."""
        return max(0, int(ns) - self.claimed.get(category, 0))

    def host_stake(self, category: str, gaps: pd.DataFrame | None = None) -> int:
        """A host-paced idle category (launch, ...) on the critical path, scaled to the loop, less the time tracing
        added to the CUDA calls the launching thread made meanwhile (analysis/overhead.py): what the plain run
        would get back.  `gaps`: only these of the diagnosis's gaps (default: all in the steady windows)."""
        from ..overhead import cuda_call_ns

        if gaps is None:  # of every gap: asked by several rules, the same for the run (13M gaps at 10M kernels)
            key = f"host_stake {category}"
            if key not in self.memo:
                self.memo[key] = self.host_stake(category, self.diag.gaps())
            known: int = self.memo[key]
            return known
        g = gaps
        if g.empty:
            return 0
        w = g["in_window"].to_numpy(bool)  # columns, not a copy of the frame's rows
        per_call = cuda_call_ns(self.report)
        val = g[category].to_numpy(float)[w]
        net = np.maximum(val - g["calls"].to_numpy(float)[w] * per_call, 0) * g["scale"].to_numpy(float)[w]
        by = pair_sums(net, g["pid"].to_numpy()[w], g["device_id"].to_numpy()[w])
        s = self.straggler
        vals = [v if s is None or pid != s["pid"] else max(0.0, v - s["ns"]) for (pid, _), v in by.items()]
        return int(max(vals, default=0))

    def process_start_stake(self, category: str) -> tuple[int, list[int]]:
        """(ns, pids): how much of a category's gaps nsys spent setting itself up in processes the cell started
        (overhead.PROCESS_START_MS before each one's first call; a plain run does not pay it), scaled to the loop,
        the largest over pairs; and the processes that began in those gaps."""
        from ..overhead import PROCESS_START_MS, process_firsts

        g = self.diag.gaps(category)
        g = g[g["in_window"].to_numpy(bool)] if len(g) else g
        if g.empty:
            return 0, []
        firsts = process_firsts(self.report, skip_pids={p.pid for p in self.diag.pairs})
        if firsts.empty:
            return 0, []
        first = firsts.to_numpy(np.int64)
        iv = I.union(first - int(PROCESS_START_MS * 1e6), first)
        s, e = g["start_ns"].to_numpy(np.int64), g["end_ns"].to_numpy(np.int64)
        spent = np.minimum(I.overlap(iv, s, e), g[category].to_numpy(np.int64)) * g["scale"].to_numpy(float)
        by = pair_sums(spent, g["pid"].to_numpy(), g["device_id"].to_numpy())
        gs, ge = I.union(s, e)
        at = np.searchsorted(gs, first, side="right") - 1
        began = (at >= 0) & (first <= ge[np.maximum(at, 0)])
        return int(by.max()), [int(p) for p in firsts.index[began]]

    def window_share(self, ns: float) -> float:
        """ns as a share of the steady windows scaled to their loops."""
        return ns / max(self.diag.window_total, 1)


def pair_sums(values: Any, pid: Any, device: Any) -> pd.Series:
    """The sum of `values` per (process, GPU), indexed by (pid, device_id).  Most reports hold one pair: then it is
    one sum, without the groupby that factorizes both keys of every row (0.1 s at a million gaps)."""
    v, pid, device = np.asarray(values, float), np.asarray(pid), np.asarray(device)
    if len(v) and pid.dtype.kind in "iu" and device.dtype.kind in "iu" and bool((pid == pid[0]).all()) \
            and bool((device == device[0]).all()):
        return pd.Series([v.sum()], index=pd.MultiIndex.from_arrays([pid[:1], device[:1]]))
    return pd.Series(v).groupby([pid, device]).sum()


def estimate_words(ctx: Context, what: str) -> str:
    """'<what>, in the steady state (steps 2-30 of 'step'), scaled to the whole loop'."""
    srcs = sorted(set(ctx.diag.sources.values()))
    where = srcs[0] if len(srcs) == 1 else "each process's steady state"
    return f"{what}; measured over {where}, scaled to the whole loop"


def ranges_of(ev: pd.DataFrame, limit: int = 200) -> tuple[tuple[int, int], ...]:
    """(start, end) of the evidence, merged where they touch, the longest `limit` of them."""
    if ev.empty:
        return ()
    s = ev["start_ns"].to_numpy(np.int64)
    e = pd.to_numeric(ev["end_ns"], errors="coerce").fillna(ev["start_ns"]).to_numpy(np.int64)
    if len(s) > 1 and not (s[1:] >= s[:-1]).all():  # evidence mostly comes in time order: no gather then
        o = np.argsort(s, kind="stable")
        s, e = s[o], e[o]
    e = np.maximum(e, s)
    run = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > run[:-1]]
    starts, ends = s[new], np.maximum.reduceat(e, np.flatnonzero(new))
    if len(starts) > limit:
        # the longest, ties to the later ones (a stable sort read backwards), by partition rather than a sort of
        # millions of ranges
        d = ends - starts
        cut = np.partition(d, len(d) - limit)[len(d) - limit]
        above, tied = np.flatnonzero(d > cut), np.flatnonzero(d == cut)
        keep = np.sort(np.r_[above, tied[len(tied) - (limit - len(above)):]])
        starts, ends = starts[keep], ends[keep]
    return tuple(zip(starts.tolist(), ends.tolist()))


def size_words(n: float) -> str:
    """Bytes as people read them: '32 MiB', '5 GiB', '640 bytes'."""
    return next(f"{n / d:,.0f} {u}" for d, u in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"), (1, "bytes"))
                if n >= d or d == 1)


def like(names: pd.Series, pattern: str) -> np.ndarray:
    """SQL LIKE as nsys's rules use it (case-insensitive), on a categorical or text column."""
    rx = "^" + re.escape(pattern).replace("%", ".*").replace("_", ".") + "$"
    found: np.ndarray = tx.contains(names, rx, case=False, regex=True) & pd.notna(names).to_numpy()
    return found


API_OF = ("api_name", "api_tid", "api_start_ns", "api_end_ns")


def api_of(ops: pd.DataFrame, api: pd.DataFrame, columns: tuple[str, ...] = API_OF) -> pd.DataFrame:
    """For each GPU op: the runtime call with its correlation id in its process (name, tid, start, end; the first
    such call); NaN/NA where there is none (the name as a categorical when the calls' names are one).  columns:
    those of API_OF to make (each is an op-long array: 10M kernels)."""
    if ops.empty or api.empty:
        return pd.DataFrame({c: pd.Series([pd.NA] * len(ops), dtype="object") for c in columns}, index=ops.index)
    a = _calls_by_correlation(api)
    idx = a["match"](ckey(ops["pid"].to_numpy(np.int64), ops["correlation_id"]))
    ok = idx >= 0
    take = np.maximum(idx, 0)
    out: dict[str, Any] = {}  # framed once at the end
    name = a["name"]
    if "api_name" in columns:
        if not len(name):
            out["api_name"] = np.full(len(ops), None, object)
        elif isinstance(name.dtype, pd.CategoricalDtype):  # codes, not a million strings
            out["api_name"] = pd.Categorical.from_codes(np.where(ok, name.cat.codes.to_numpy()[take], -1),
                                                        dtype=name.dtype)
        else:
            out["api_name"] = np.where(ok, name.take(take).to_numpy(object), None)
    missing = ~ok
    for c, col in (("api_tid", "tid"), ("api_start_ns", "start_ns"), ("api_end_ns", "end_ns")):
        if c in columns:  # the gather is the column: zeroed where missing in place, framed without a copy
            v = a[col][take] if len(name) else np.zeros(len(ops), np.int64)
            np.putmask(v, missing, 0)
            out[c] = pd.arrays.IntegerArray(v, missing.copy())  # a mask each: an edit of one leaves the others
    return pd.DataFrame({c: out[c] for c in columns}, index=ops.index, copy=False)


def launch_call_ns(ops: pd.DataFrame, api: pd.DataFrame) -> np.ndarray:
    """For each GPU op: how long the runtime call with its correlation id in its process ran (api_of's end - start),
    NaN where there is none, without framing the calls' other columns for every op (10M kernels)."""
    if ops.empty or api.empty:
        return np.full(len(ops), np.nan)
    a = _calls_by_correlation(api)
    if not len(a["name"]):
        return np.full(len(ops), np.nan)
    idx = a["match"](ckey(ops["pid"].to_numpy(np.int64), ops["correlation_id"]))
    take = np.maximum(idx, 0)
    ns = a["end_ns"][take] - a["start_ns"][take]
    return np.where(idx >= 0, ns.astype(float), np.nan)


@per_frame
def _calls_by_correlation(api: pd.DataFrame) -> dict[str, Any]:
    """The CUDA calls with a correlation id as arrays (name as a pandas Series) and their join on (pid, id)
    (readers.nsys_frames.FirstMatch): prepared once per frame, since every rule asks about the same report's
    calls."""
    have = api["correlation_id"].notna().to_numpy()
    # every call has one (CUDA's runtime calls do): the frame's columns themselves, not copies (13M calls)
    rows: Any = slice(None) if have.all() else np.flatnonzero(have)
    corr = api["correlation_id"].to_numpy(np.int64, na_value=-1)[rows]
    return {"match": FirstMatch(ckey(api["pid"].to_numpy(np.int64)[rows], corr)),
            "tid": api["tid"].to_numpy(np.int64)[rows], "start_ns": api["start_ns"].to_numpy(np.int64)[rows],
            "end_ns": pd.to_numeric(api["end_ns"]).to_numpy(np.int64)[rows],
            "name": api["name"].iloc[rows].reset_index(drop=True)}


def _nullable_int(col: pd.Series) -> Any:
    """A column as Int64 (NA kept), without a round trip through Python objects where it is numeric already; an
    array of its own (evidence frames it without a copy)."""
    if pd.api.types.is_integer_dtype(col.dtype) and not isinstance(col.dtype, pd.ArrowDtype):
        return pd.array(col.to_numpy(), dtype="Int64", copy=True) if col.dtype.kind in "iu" else \
            pd.array(col.array, dtype="Int64", copy=True)
    return pd.array(pd.to_numeric(col, errors="coerce"), dtype="Int64", copy=True)


def evidence_names(name: Any, n: int) -> Any:
    """The evidence's name column for n rows: a name per row (a Series or an array) or one for all."""
    if isinstance(name, pd.Series) and isinstance(name.dtype, pd.CategoricalDtype):
        # the readers' names are categoricals: a million kernels share a few hundred names, kept as codes (only
        # the names present: counts and groups by name list no empty ones); codes of its own (the frame's, where
        # every name is in use, would be written into by an edit of the evidence)
        return tx.as_text_categories(_used_only(name)).array.copy()
    if isinstance(name, pd.Series):
        name = name.to_numpy()
    return pd.Series(name if isinstance(name, (np.ndarray, list)) else [name] * n, dtype=object).astype(str).array


def _used_only(col: pd.Series) -> pd.Series:
    """col.cat.remove_unused_categories(), the categories in use counted rather than sorted out of every code."""
    codes = col.cat.codes.to_numpy()
    cats = col.cat.categories
    used = np.bincount(codes[codes >= 0] if len(codes) and codes.min() < 0 else codes, minlength=len(cats)) > 0
    if used.all():
        return col
    keep = np.cumsum(used) - 1  # a used category's new code
    new = np.where(codes >= 0, keep[np.maximum(codes, 0)], -1)
    return pd.Series(pd.Categorical.from_codes(new, categories=cats[used], ordered=col.cat.ordered), index=col.index,
                     name=col.name, copy=False)


def _extra_column(v: Any) -> Any:
    """An extra evidence column as the frame holds it: a Series's values (a categorical of names as codes with text
    categories and only those in use, as the name column: a million kernels' CUDA calls share a few names), an
    array of its own."""
    if isinstance(v, pd.Series):
        if isinstance(v.dtype, pd.CategoricalDtype) and all(isinstance(c, str) for c in v.cat.categories):
            return tx.as_text_categories(_used_only(v)).array.copy()
        v = v.to_numpy()
    return _own(v)


def evidence(df: pd.DataFrame, name: Any, extra: dict[str, Any] | None = None) -> pd.DataFrame:
    """Common evidence columns: start_ns, end_ns, duration_ns, name, pid, tid, device_id, stream_id (+ extra)."""
    n = len(df)
    # every column an array of the evidence's own, framed once at the end without copying them again or into
    # blocks (a million rows: the copies were half of the evidence's time); a frame's column taken as it is would
    # be written into by an edit of the evidence
    start = np.array(df["start_ns"].to_numpy(np.int64))
    end = np.array(pd.to_numeric(df["end_ns"]).to_numpy(np.int64))
    cols: dict[str, Any] = {"start_ns": start, "end_ns": end, "duration_ns": end - start,
                            "name": evidence_names(name, n)}
    for c in ("pid", "tid", "device_id", "stream_id"):
        cols[c] = _nullable_int(df[c]) if c in df else pd.arrays.IntegerArray(np.zeros(n, np.int64), np.ones(n, bool))
    for k, v in (extra or {}).items():
        cols[k] = _extra_column(v)
    return pd.DataFrame(cols, copy=False)


def _own(v: Any) -> Any:
    """A copy of an array (numpy's or pandas'), which may be another frame's column; anything else as it is."""
    return v.copy() if isinstance(v, (np.ndarray, pd.api.extensions.ExtensionArray)) else v


def where_words(ev: pd.DataFrame, share: float = 0.8) -> str:
    """' 3 of them take 97% of that time, in NVTX ranges step 0, step 2, step 4.': the few events that matter."""
    if ev.empty or ev["duration_ns"].sum() <= 0:
        return ""
    dur = ev["duration_ns"].to_numpy()
    if dur.dtype.kind in "iu":
        # the longest first (ties in their order), as positions: only the rows that matter are taken, not every
        # column of every row sorted (a million evidence rows)
        order = np.argsort(-dur.astype(np.int64), kind="stable")
        cum = np.cumsum(dur[order]) / dur.sum()
        top = ev.iloc[order[: int(np.searchsorted(cum, share) + 1)]]
    else:  # durations that may be missing: pandas' sort puts them last and its sums skip them
        d = ev.sort_values("duration_ns", ascending=False, kind="stable")
        top = d.iloc[: int(np.searchsorted((d["duration_ns"].cumsum() / d["duration_ns"].sum()).to_numpy(), share)
                           + 1)]
    pct = top["duration_ns"].sum() * 100.0 / ev["duration_ns"].sum()
    top = top.sort_values("start_ns", kind="stable")
    ranges = [r for r in dict.fromkeys(top.get("nvtx_range", pd.Series(dtype=object)).dropna())][:6]
    where = f", in NVTX range{'s' if len(ranges) > 1 else ''} {', '.join(map(str, ranges))}" if ranges else ""
    ops = [o for o in dict.fromkeys(top.get("op", pd.Series(dtype=object)).dropna())][:4]
    if ops:  # %%nsys --ops: the PyTorch operators that made these calls
        where += f"{',' if where else ''} from PyTorch operator{'s' if len(ops) > 1 else ''} {', '.join(map(str, ops))}"
    if len(top) == len(ev):
        return f" All {len(ev)} take their time{where}." if where else ""
    return f" {len(top)} of them take {pct:.0f}% of that time{where}."


def with_operator(report: NsysFrames, extra: dict[str, Any], pid: np.ndarray, tid: np.ndarray,
                  t: np.ndarray) -> dict[str, Any]:
    """`extra` plus an "op" column where the report has %%nsys --ops ranges: the PyTorch operator open on each
    call's thread when it was made (aten::copy_, aten::_local_scalar_dense, ...)."""
    ops = _operators(report)
    return extra if ops is None else {**extra, "op": ops(pid, tid, t)}


def has_operators(report: NsysFrames) -> bool:
    """The report has %%nsys --ops ranges (with_operator adds an "op" column)."""
    return _operators(report) is not None


def _operators(report: NsysFrames) -> Enclosing | None:
    from ..ops import op_ranges

    cache = report_memo(report).setdefault("enclosing", {})
    if "ops" not in cache:
        r = op_ranges(report)
        cache["ops"] = Enclosing.from_ranges(r, r["op"].to_numpy(object)[np.where(
            r["owner"].to_numpy(np.int64) >= 0, r["owner"].to_numpy(np.int64), np.arange(len(r)))]) if len(r) else None
    found: Enclosing | None = cache["ops"]
    return found


def _ids(col: pd.Series) -> np.ndarray:
    """A pid/tid column as int64, -2 where missing (never equal to a real id, nor to -1: "any thread")."""
    if isinstance(col, pd.Series) and col.dtype == np.int64:  # nothing missing: the column itself, not a copy
        same: np.ndarray = col.to_numpy()
        return same
    ids: np.ndarray = pd.array(col, dtype="Int64").to_numpy(np.int64, na_value=-2)
    return ids


CONTEXT_CHUNK = 500_000  # candidate (gap, row) pairs held at once (each pair: several int64 arrays)


def _covering(rows: tuple[np.ndarray, ...], gpid: np.ndarray, gtid: np.ndarray, gs: np.ndarray,
              ge: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each gap [gs, ge): the row (of `rows`, sorted by start with their running maximum end) of its process,
    and of its thread where gtid >= 0, that covers most of the gap (the first on ties), -1 where none; and that
    cover in ns.  All gaps at once: their candidate rows are the slices from the first row whose running end passes
    the gap's start to the last that starts before its end."""
    pid, tid, s, e, run_end = rows
    lo, hi = np.searchsorted(run_end, gs, "right"), np.searchsorted(s, ge, "left")
    n = np.maximum(hi - lo, 0)
    best, best_cover = np.full(len(gs), -1, np.int64), np.zeros(len(gs), np.int64)
    bounds = np.r_[0, np.cumsum(n)]
    # the (gap, row) pairs, numbered gap by gap and row by row, in chunks: one gap over millions of rows (a stretch
    # across the whole capture) is split too, so that the pairs in memory stay bounded
    for k0 in range(0, int(bounds[-1]), CONTEXT_CHUNK):
        k = np.arange(k0, min(k0 + CONTEXT_CHUNK, int(bounds[-1])))
        gap = np.searchsorted(bounds, k, "right") - 1
        idx = lo[gap] + (k - bounds[gap])
        del k
        ok = (pid[idx] == gpid[gap]) & (e[idx] > gs[gap]) & ((gtid[gap] < 0) | (tid[idx] == gtid[gap]))
        gap, idx = gap[ok], idx[ok]
        if not len(gap):
            continue
        cover = np.minimum(e[idx], ge[gap]) - np.maximum(s[idx], gs[gap])
        order = np.lexsort((idx, -cover, gap))  # per gap: the largest cover, then the first row
        first = order[np.r_[True, gap[order][1:] != gap[order][:-1]]]
        g, c = gap[first], cover[first]
        # a later chunk holds later rows: it wins a gap only with a larger cover (a row's cover is never 0)
        win = c > best_cover[g]
        best[g[win]], best_cover[g[win]] = idx[first][win], c[win]
    return best, best_cover


def cpu_context(report: NsysFrames, gaps: pd.DataFrame, launch_tid: np.ndarray) -> pd.DataFrame:
    """What the launching thread did during each gap: the NVTX range, CUDA API call and OS runtime call that cover
    most of it (with the share of the gap they cover)."""
    keys = ("cpu_nvtx", "cpu_cuda_api", "cpu_osrt")
    picked = {k: np.full(len(gaps), -1, np.int64) for k in keys}  # the covering row (by start), -1: none
    shares = {k + "_pct": np.full(len(gaps), np.nan) for k in keys}
    sources = {"cpu_nvtx": report.nvtx, "cpu_cuda_api": report.cuda_api, "cpu_osrt": report.osrt}
    gs, ge = gaps["start_ns"].to_numpy(np.int64), gaps["end_ns"].to_numpy(np.int64)
    gpid = _ids(gaps["pid"])
    gtid = _ids(np.asarray(launch_tid, dtype=object))
    gtid[gtid == -2] = -1  # no launching thread known: any thread of the process
    labels = {}
    for key, df in sources.items():
        if df is None or df.empty or not len(gaps):
            continue
        d = df
        if key == "cpu_nvtx":
            d = d[~tx.eq(d["kind"], "mark")]
            d = d[~tx.eq(d["domain"], CAPTURE_DOMAIN)]  # our own cell range says nothing
        never = np.iinfo(np.int64).max  # a range never closed covers the rest
        end = d["end_ns"].to_numpy(np.int64, na_value=never) if pd.api.types.is_integer_dtype(d["end_ns"].dtype) \
            else pd.to_numeric(d["end_ns"], errors="coerce").fillna(never).to_numpy(np.int64)
        start = d["start_ns"].to_numpy(np.int64)
        label = d["label"] if key == "cpu_nvtx" else d["name"]
        if len(start) > 1 and not bool((start[1:] >= start[:-1]).all()):
            o = np.argsort(start, kind="stable")
            labels[key] = label.iloc[o]
            rows = (_ids(d["pid"])[o], _ids(d["tid"])[o], start[o], end[o], np.maximum.accumulate(end[o]))
        else:  # by start already (the frames come so): the columns as they are, no gathered copies
            labels[key] = label
            rows = (_ids(d["pid"]), _ids(d["tid"]), start, end, np.maximum.accumulate(end))
        picked[key], cover = _covering(rows, gpid, gtid, gs, ge)
        hit = np.flatnonzero(picked[key] >= 0)
        shares[key + "_pct"][hit] = [round(100.0 * c / max(b - a, 1), 1)
                                     for c, a, b in zip(cover[hit].tolist(), gs[hit].tolist(), ge[hit].tolist())]
    out = {}
    for key in keys:
        at = picked[key]
        col = np.full(len(gaps), None, object)
        if key in labels and (at >= 0).any():
            col[at >= 0] = labels[key].take(at[at >= 0]).astype(str).to_numpy(object)
        out[key] = col
    return pd.DataFrame({**out, **shares})


