"""Build the DataFrames of an Nsight Systems export from the column specs (no per-row Python)."""
from __future__ import annotations

import functools
import warnings
from typing import Callable

import numpy as np
import pandas as pd

from .nsys_schema import (ACTIVITY_SPECS, NVTX_DOMAIN_CREATE, NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END, Col,
                          TableSpec, frame_columns)
from .nsys_sql import (NULL, TS_LIMIT, Strings, check_range, columns_of, decode_enum, find_spec_table, read_ints,
                       read_text_codes, read_texts, to_categorical, coded)

from .constant_columns import one_value
from ..errors import ReportError, ReportWarning
from ..inside.marks import CAPTURE_DOMAIN  # the NVTX domain of the range nsight-magic pushes around a profiled cell

_MASK24 = 0xFFFFFF
TEXT_CODES_MIN_ROWS = 100_000  # below this the one joined string of read_texts is as quick as Arrow's encoding


def read_raw(con, table: str, spec: TableSpec, names: list[str] | None = None, path=None,
             have: dict[str, np.ndarray] | None = None, span: list | None = None,
             span_kinds: tuple[str, tuple[int, ...]] | None = None) -> dict[str, np.ndarray]:
    """Integer columns of `spec` (our names; all non-text ones by default) as raw int64 arrays.

    Each raw column is read once even when several of ours come from it (pid and tid both come from
    globalTid, decoded here with numpy); a column absent from this export version reads as NULL.  `have`: columns
    this function already returned for the same table and spec (the core columns the summaries read), taken as
    they are instead of read again (read_frame shares them with the frame it makes).  `span`: where start and end
    are read, raw_span() of the rows as the export holds them is appended to it (span_kinds: of the rows whose raw
    column holds one of these values only: NVTX's ranges and marks)."""
    wanted = [c for c in spec.cols if c.how != "text" and (names is None or c.name in names)]
    have = {c.name: have[c.name] for c in wanted if have and c.name in have}
    cols = [c for c in wanted if c.name not in have]
    if not cols:
        return have
    present = set(columns_of(con, table))
    raws = {c.name: next((r for r in c.raw if r in present), None) for c in cols}
    # what travels from SQLite, one entry per distinct expression: a GlobalId as its pid when only the pid is
    # wanted.  `end` travels as it is: read as `end - start` it was a number even where the export holds text
    # there, which then went unnoticed (as integers through ADBC, the digits cost nothing)
    uses = {}
    for c in cols:
        if raws[c.name]:
            uses.setdefault(raws[c.name], set()).add(c.how)
    pid_only = {r for r, hows in uses.items() if hows == {"pid"}}

    def expr(r):
        if r in pid_only:
            return f'(("{r}" >> 24) & {_MASK24})'
        return f'"{r}"'

    uniq = list(uses)
    arrays = dict(zip(uniq, read_ints(con, table, [expr(r) for r in uniq], spec.where, path))) if uniq else {}
    stamps = [r for r in ("start", "end") if r in arrays]
    if any(((a != NULL) & ((a > TS_LIMIT) | (a < -TS_LIMIT))).any() for a in map(arrays.get, stamps)):
        check_range(con, table, stamps, spec.where, path)
    if "start" in arrays and "end" in arrays:
        if span is not None:  # before the damaged rows are mended below: the span of what the export holds
            kind = arrays.get(span_kinds[0]) if span_kinds else None
            if span_kinds and kind is None:
                span.append(None)  # the rows' kinds are not known here: SQL tells
            else:
                rows = slice(None) if kind is None or not span_kinds else np.isin(kind, span_kinds[1])
                span.append(raw_span(arrays["start"][rows], arrays["end"][rows]))
        _no_negative_spans(table, arrays["start"], arrays["end"])
    n = len(next(iter(arrays.values()))) if arrays else len(next(iter(have.values()), ()))
    if have and arrays and n != len(next(iter(have.values()))):
        raise ReportError(f"{path or 'report'}: {table} changed while it was read; open the report again")
    out = dict(have)
    for c in cols:
        r = raws[c.name]
        a = arrays.get(r)
        if a is None:
            a = np.full(n, NULL, np.int64)
        elif c.how in ("pid", "tid") and r not in pid_only:
            null = a == NULL
            a = (a >> 24) & _MASK24 if c.how == "pid" else a & _MASK24
            a[null] = NULL
        out[c.name] = a
    return out


MAX_SPAN_NS = 2 ** 50  # 13 days: a longer event is damage, and a few of them would overflow any int64 total


def raw_span(start: np.ndarray, end: np.ndarray) -> tuple | None:
    """What the reader's event span asks of a table in SQL (min(start >= 0), max(coalesce(end, start)),
    min(start), max(start); None where no row has it), from its raw start and end columns (NULL: missing),
    read anyway for the summaries, instead of a scan of its own.  None where a start is missing (a damaged
    export: SQL says what it holds)."""
    if not len(start):
        return None, None, None, None
    if not (start != NULL).all():
        return None
    lo, hi = int(start.min()), int(start.max())
    nonneg = lo if lo >= 0 else (int(start[start >= 0].min()) if hi >= 0 else None)
    ended = end != NULL
    last = int(end.max()) if ended.all() else max(int(end[ended].max(initial=NULL)), int(start[~ended].max()))
    return nonneg, last, lo, hi


def _no_negative_spans(table: str, start: np.ndarray, end: np.ndarray) -> None:
    """Rows that end before they start, have an end but no start, or last longer than MAX_SPAN_NS (a damaged or
    altered report) are read as 0 ns long at their known end (or start), with a warning, so that no total goes
    negative or overflows."""
    no_start = (start == NULL) & (end != NULL)
    start[no_start] = end[no_start]
    with np.errstate(over="ignore"):
        bad = (end != NULL) & (start != NULL) & ((end < start) | (end - start > MAX_SPAN_NS))
    if bad.any():
        end[bad] = start[bad]
    n = int(bad.sum() + no_start.sum())
    if n:
        warnings.warn(f"{table}: {n} row(s) end before they start, have no start or last longer than "
                      f"{MAX_SPAN_NS / 86.4e12:.0f} days; read as 0 ns long (the report was damaged or altered)",
                      ReportWarning, stacklevel=2)


def empty_frame(frame: str) -> pd.DataFrame:
    """A frame with no rows and the same columns and dtypes as a read one."""
    from .nsys_schema import ALL_SPECS, NVTX_COLUMNS

    dtypes = {}
    if frame == "nvtx":
        dtypes = dict(zip(NVTX_COLUMNS, ("int64", "Int64", "Int64", "category", "category", "category", "int64",
                                         "int64", "int64", "Int64", "Int64", "category")))
    else:
        for c in ALL_SPECS[frame].cols:
            dtypes[c.name] = c.dtype
        dtypes["duration_ns"] = dtypes.get("end_ns", "int64")
        dtypes["launch_tid"] = "Int64"
        dtypes.update(rank="Int64", world_size="Int64", devices="object")
    cols = frame_columns(frame)
    return pd.DataFrame({c: pd.Series([], dtype=_pd_dtype(dtypes[c])) for c in cols})


def _pd_dtype(d: str):
    return pd.CategoricalDtype(pd.Index([], dtype=object)) if d == "category" else d


def read_frame(con, tables: set[str], strings: Strings, spec: TableSpec, path=None,
               have: dict[str, np.ndarray] | None = None, lend: Callable[[str, Callable], pd.Series] | None = None,
               span: list | None = None, span_kinds: tuple[str, tuple[int, ...]] | None = None) -> pd.DataFrame:
    """The frame of `spec`'s table.  `have`: its core columns read already (NsysData.core), shared with the frame,
    not copied (107 MB of the kernels' and CUDA calls' at 1M kernels): `lend(name, make)` gives the Series that
    holds each (made by `make()` once), which the caller keeps as long as the columns it lent, so that pandas'
    copy-on-write sees the reference and an edit of the frame (`rep.kernels.loc[i, c] = v`) copies instead of
    writing into them; it holds a column of one value as that value (constant_columns).  Without `lend` the frame
    gets copies of the core columns and every column in full.  span, span_kinds: read_raw's."""
    table = find_spec_table(tables, spec)
    if table is None:
        return empty_frame(spec.frame)
    present = set(columns_of(con, table))
    raws = {c.name: next((r for r in c.raw if r in present), None) for c in spec.cols}
    if spec.frame in ("threads", "processes", "gpus") and not any(raws.values()):
        return empty_frame(spec.frame)
    ints = read_raw(con, table, spec, path=path, have=have, span=span, span_kinds=span_kinds)
    n = len(next(iter(ints.values()))) if ints else 0
    data: dict[str, object] = {}
    for c in spec.cols:
        if c.how != "text":
            make = functools.partial(convert, con, tables, strings, c, ints[c.name])
            if have and c.name in have:
                data[c.name] = lend(c.name, make) if lend is not None else pd.Series(make(), copy=True)
            else:
                v = make()
                once = one_value(v) if lend is not None else v
                # a column of one value (the context and stream of a one-GPU run, graph nodes never set) is held
                # as that value, 80 MB less a column at 10M kernels, in the Series `lend` keeps: an edit of the
                # frame then copies it rather than writing into a read-only array
                data[c.name] = v if once is v else lend(c.name, lambda once=once: once)
    for c in spec.cols:
        if c.how == "text":
            raw = raws[c.name]
            coded = read_text_codes(con, path, table, f'"{raw}"', spec.where) \
                if raw and c.dtype == "category" and n >= TEXT_CODES_MIN_ROWS else None
            if coded is not None and len(coded) == n:
                data[c.name] = coded
                continue
            vals = read_texts(con, table, f'"{raw}"', spec.where) if raw else np.full(n, None, dtype=object)
            data[c.name] = pd.array(vals, dtype="string") if c.dtype == "string" else to_categorical(vals)
    df = pd.DataFrame({c.name: data[c.name] for c in spec.cols}, copy=False)  # each column its own: not copied into blocks
    if spec.frame in ACTIVITY_SPECS:
        df.insert(2, "duration_ns", df["end_ns"] - df["start_ns"])
    return df


def convert(con, tables, strings: Strings, col: Col, a: np.ndarray):
    """A raw int64 column as the frame has it (ids decoded, nullable, unsigned)."""
    null = a == NULL
    if col.how == "strid":
        return strings.decode(a)
    if col.how == "enum":
        return decode_enum(con, tables, col.enum, a)
    if col.dtype == "uint64":  # serialized GlobalIds are unsigned 64-bit
        return a.view(np.uint64)
    if col.dtype == "Int64":
        return pd.arrays.IntegerArray(a, null)
    if col.dtype == "float64":
        return np.where(null, np.nan, a.astype(np.float64))
    if null.any():  # a NOT NULL column in the schema that still has NULLs: -1 marks "unknown"
        a = np.where(null, -1, a)
    return a


def sort_by_start(df: pd.DataFrame) -> pd.DataFrame:
    if len(df) < 2 or df["start_ns"].is_monotonic_increasing:
        return df.reset_index(drop=True)
    order = np.argsort(df["start_ns"].to_numpy(), kind="stable")
    return df.take(order).reset_index(drop=True)


def gkey(pid, tid) -> np.ndarray:
    """One integer per thread (pid, tid), like globalTid without the high bits (one array made: millions of
    rows)."""
    key = np.left_shift(np.asarray(pid, np.int64), 24)
    key |= np.asarray(tid, np.int64)
    return key


def ckey(pid, corr) -> np.ndarray:
    """One integer per (process, correlation id): correlation ids repeat across processes.  corr: nullable (NA)
    or raw int64 columns (NULL); a missing id becomes -1."""
    if isinstance(corr, np.ndarray) and corr.dtype == np.int64:
        c = np.where(corr == NULL, -1, corr)
    else:  # one copy: the column's own array (no copy), its values with -1 for NA
        c = np.asarray(pd.array(corr, dtype="Int64", copy=False).to_numpy(np.int64, na_value=-1))
    key = np.left_shift(np.asarray(pid, np.int64), 36)
    key ^= c
    return key


class FirstMatch:
    """A join on the first equal key, prepared once for many probes: a binary search where the keys increase (API
    calls in export order: correlation ids grow within a process), a hash table otherwise."""

    def __init__(self, keys: np.ndarray):
        self.keys = keys = np.asarray(keys, np.int64)
        self.ordered = len(keys) > 0 and (len(keys) == 1 or bool((keys[1:] > keys[:-1]).all()))
        self.first = self.index = None
        if not self.ordered:
            index = pd.Index(keys)
            if not index.is_unique:
                self.first = np.flatnonzero(~index.duplicated())
                index = pd.Index(keys[self.first])
            self.index = index

    def __call__(self, probe) -> np.ndarray:
        """For each probe key, the index of the first equal key (-1: none)."""
        probe = np.asarray(probe, np.int64)
        if self.ordered:  # worked in place: a probe of a million keys makes two arrays, not four
            i = np.searchsorted(self.keys, probe)
            np.minimum(i, len(self.keys) - 1, out=i)
            np.putmask(i, self.keys[i] != probe, -1)
            return i
        i = self.index.get_indexer(probe)
        return i if self.first is None else np.where(i >= 0, self.first[np.maximum(i, 0)], -1)


def first_match(keys: np.ndarray, probe: np.ndarray) -> np.ndarray:
    """For each probe key, the index of the first equal key in `keys` (-1: none), as a join on the first match."""
    return FirstMatch(keys)(probe)


def launch_tids(kernels: pd.DataFrame, api_pid, api_tid, api_corr) -> pd.array:
    """tid of the runtime API call with the same (pid, correlation id) as each kernel; NA when none."""
    idx = first_match(ckey(api_pid, api_corr), ckey(kernels["pid"], kernels["correlation_id"]))
    tids = np.asarray(api_tid, np.int64)
    tids = tids[np.maximum(idx, 0)] if len(tids) else np.zeros(len(idx), np.int64)
    return pd.arrays.IntegerArray(tids, (idx < 0) | kernels["correlation_id"].isna().to_numpy())


_STYLES = np.array(["PushPop", "StartEnd"], dtype=object)


def nvtx_texts(values) -> np.ndarray:
    """build_nvtx's text (a Categorical, or an object array) as an object array, None where missing."""
    if not isinstance(values, pd.Categorical):
        return np.asarray(values, dtype=object)
    codes = np.asarray(values.codes)
    out = np.asarray(values.categories, dtype=object).take(np.maximum(codes, 0)) if len(values.categories) else \
        np.full(len(codes), None, dtype=object)
    out[codes < 0] = None
    return out


def nvtx_styles(kind: np.ndarray) -> np.ndarray:
    """nsys's style of NVTX rows from build_nvtx's kind codes: two shared strings, not one per row."""
    return _STYLES[(np.asarray(kind) != 0).astype(np.intp)]


def build_nvtx(raw: pd.DataFrame, strings: Strings) -> dict[str, np.ndarray]:
    """Raw NVTX rows -> plain arrays, sorted by start: what the summaries need, and what nvtx_frame() turns into the
    public frame (only when someone asks for it: the summaries need neither depths nor categoricals).  `raw` is
    taken apart: its columns are let go as they are taken.

    name: registered string (textId) else text.  domain: text of the domain-create event (same domainId and
    process).  tag: nsys's grouping key, 'domain:name' when the row has a domain, else name.
    """
    et = raw["event_type"].to_numpy()
    dom = raw[et == NVTX_DOMAIN_CREATE]
    keep = np.flatnonzero(np.isin(et, NVTX_PUSH_POP + NVTX_START_END + NVTX_MARK))
    # the events in start order, taken in one copy (every array below is built in that order: no second copy)
    starts = raw["start_ns"].to_numpy(np.int64)[keep]
    if len(starts) > 1 and not bool((starts[1:] >= starts[:-1]).all()):
        keep = keep[np.argsort(starts, kind="stable")]
    del starts, et
    if len(keep) == len(raw) and (keep[1:] > keep[:-1]).all():
        ev = raw
    else:  # column by column, each of the raw rows let go once taken: one extra column at a time, not a frame
        ev = pd.DataFrame({c: raw.pop(c).array.take(keep) for c in list(raw.columns)}, copy=False)
    name = _by_text(*_either_codes(ev["text_id"], ev["text"]))
    # domain names: first create event per (domainId, pid), like nsys's report scripts
    dname = dom["text"].astype(object).where(dom["text"].notna(), dom["text_id"].astype(object))
    dkey = pd.Series(dname.to_numpy(object), index=ckey(dom["pid"], dom["domain_id"]))
    dkey = dkey[~dkey.index.duplicated()]
    # looked up once per distinct (pid, domainId) of the events, not per row
    at, keys = pd.factorize(ckey(ev["pid"], ev["domain_id"]))
    dnames = dkey.reindex(keys).to_numpy(object)
    domain = _by_text(np.where(ev["domain_id"].isna().to_numpy(), -1, at), dnames)
    etype = ev["event_type"].to_numpy()
    kind = np.full(len(etype), 2, np.int8)  # push_pop 0, start_end 1, mark 2: one byte a row, held for the report
    kind[np.isin(etype, NVTX_START_END)] = 1
    kind[np.isin(etype, NVTX_PUSH_POP)] = 0
    is_range = kind != 2
    end = ev["end_ns"].to_numpy(np.float64, na_value=np.nan)
    end[~is_range] = np.nan
    has_dom = np.asarray(domain.codes) >= 0
    tag = name
    if has_dom.any():  # "domain:name", built once per distinct pair of codes
        n_codes, d_codes = np.asarray(name.codes, np.int64), np.asarray(domain.codes, np.int64)
        width = len(name.categories) + 1  # a pair's key: domain code * width + name code + 1 (0: no name)
        pair, first = pd.factorize(d_codes[has_dom] * width + n_codes[has_dom] + 1)
        dcat, ncat = np.asarray(domain.categories, dtype=object), np.asarray(name.categories, dtype=object)
        labels = [f"{dcat[k // width]}:{ncat[k % width - 1] if k % width else ''}" for k in np.asarray(first).tolist()]
        t_codes = n_codes.copy()
        t_codes[has_dom] = len(ncat) + np.asarray(pair)
        tag = _by_text(t_codes, [name.categories, pd.Index(np.asarray(labels, dtype=object), dtype=object)])
        del n_codes, d_codes, t_codes, pair
    pid, tid = ev["pid"].to_numpy(np.int64), ev["tid"].to_numpy(np.int64)
    arrays = {
        # the texts as codes (the frame takes them as they are): a pointer a row each would be 24 MB at 3M rows
        "start": ev["start_ns"].to_numpy(np.int64), "end": end, "name": name, "domain": domain, "kind": kind,
        "pid": pid, "tid": tid, "color": ev["color"].array, "category": ev["category"].array,
        # a row's thread (gkey) and style ("PushPop"/"StartEnd") are made where they are asked for, not held
        "tag": tag, "is_range": is_range, "same_thread": ev["end_global_tid"].isna().to_numpy(), "has_domain": has_dom,
        # nsight-magic's own cell range: kept in the frame, left out of the summaries (it is ours, not the user's)
        "ours": (dnames == CAPTURE_DOMAIN)[at] & ev["domain_id"].notna().to_numpy(),
    }
    return arrays


def _either_codes(first: pd.Series, second: pd.Series) -> tuple[np.ndarray, list[pd.Index]]:
    """Row-wise `first` where it is set, else `second` (two categoricals), as codes: each row's code into the texts
    of `first`'s categories then `second`'s (-1: neither set), and those two sets of texts."""
    a, b = pd.Categorical(first), pd.Categorical(second)
    ac, bc = np.asarray(a.codes, np.int64), np.asarray(b.codes, np.int64)
    codes = np.where(ac >= 0, ac, np.where(bc >= 0, len(a.categories) + bc, -1))
    return codes, [a.categories, b.categories]


def _by_text(codes: np.ndarray, texts: np.ndarray | list[pd.Index]) -> pd.Categorical:
    """Rows given as codes into `texts` (which may repeat a text; None or NaN: missing), as to_categorical makes
    them from the rows' texts: one category per distinct text, in the order the rows first show them.  Only integer
    arrays a row long are made (3M NVTX rows: no object array, no hash of a million strings).  `texts` may come as
    parts that are each distinct (categories): the few texts of the smaller parts are hashed and the largest part
    looked up among them, never hashed into a table of its own (emit_nvtx's millions of literal names beside a few
    registered ones)."""
    text_id, distinct = _distinct_texts(texts)
    row = np.where(codes >= 0, text_id[np.maximum(codes, 0)], -1) if len(text_id) else np.full(len(codes), -1)
    seen_at, seen = pd.factorize(row)  # the texts in the order of the rows
    seen = np.asarray(seen, np.int64)
    new = np.full(len(seen), -1, np.int64)
    present = seen >= 0
    new[present] = np.arange(int(present.sum()))
    out = new[np.asarray(seen_at)] if len(seen) else np.full(len(codes), -1, np.int64)
    return coded(out, pd.Index(np.asarray(distinct, dtype=object)[seen[present]], dtype=object))


def _distinct_texts(texts: np.ndarray | list[pd.Index]) -> tuple[np.ndarray, np.ndarray]:
    """(text_id, distinct): each text's index into the distinct texts (-1: missing).  Only which texts are alike
    matters to _by_text (its order is the rows'), not how they are numbered."""
    if not isinstance(texts, list):
        ids, distinct = pd.factorize(np.asarray(texts, dtype=object), use_na_sentinel=True)
        return np.asarray(ids, np.int64), np.asarray(distinct, dtype=object)
    if not texts:
        return np.empty(0, np.int64), np.empty(0, dtype=object)
    big = int(np.argmax([len(t) for t in texts]))
    whole = texts[big] if texts[big].dtype == object else pd.Index(np.asarray(texts[big], dtype=object), dtype=object)
    rest = [np.asarray(t, dtype=object) for i, t in enumerate(texts) if i != big]
    others = np.concatenate(rest) if rest else np.empty(0, dtype=object)
    # the few other texts hashed, the big part's looked up among them (no table of millions built)
    small_id, small = pd.factorize(others, use_na_sentinel=True)
    found = pd.Index(np.asarray(small, dtype=object), dtype=object).get_indexer(whole) if len(small) else \
        np.full(len(whole), -1)
    pos = np.full(len(small), -1, np.int64)
    hit = np.flatnonzero(np.asarray(found) >= 0)
    pos[np.asarray(found)[hit]] = hit  # the big part is distinct: one position at most
    lacking = np.flatnonzero(pos < 0)  # texts the big part lacks: new ones, after it
    pos[lacking] = len(whole) + np.arange(len(lacking))
    extra = np.asarray(small, dtype=object)[lacking]
    small_id = np.asarray(small_id, np.int64)
    at = np.where(small_id >= 0, pos[np.maximum(small_id, 0)] if len(pos) else -1, -1)
    ids = []
    k = 0
    for i, t in enumerate(texts):
        if i == big:
            ids.append(np.arange(len(t), dtype=np.int64))
        else:
            ids.append(at[k:k + len(t)])
            k += len(t)
    return np.concatenate(ids), np.concatenate([np.asarray(whole, dtype=object), np.asarray(extra, dtype=object)])


def nvtx_frame(a: dict[str, np.ndarray]) -> pd.DataFrame:
    """The public NVTX frame from build_nvtx's arrays.

    kind: push_pop / start_end / mark.  depth: ranges of the same thread open at the row's start.  color: ARGB as
    an integer (0xAARRGGBB), NA when unset.  label: 'domain:name' when the row has a domain, else name (what
    nvtx_summary() calls the row's range in its `name` column)."""
    start, end = a["start"], a["end"]
    end_ns = pd.arrays.IntegerArray(np.nan_to_num(end, nan=0).astype(np.int64), np.isnan(end))
    return pd.DataFrame({
        "start_ns": start,
        "end_ns": end_ns,
        "duration_ns": end_ns - start,
        "name": a["name"],  # build_nvtx's categoricals, shared
        "domain": a["domain"],
        "kind": pd.Categorical.from_codes(a["kind"], categories=pd.Index(["push_pop", "start_end", "mark"],
                                                                           dtype=object)),
        "pid": a["pid"],
        "tid": a["tid"],
        "depth": _depth(gkey(a["pid"], a["tid"]), start, np.where(np.isnan(end), np.inf, end), a["is_range"]),
        "color": a["color"],
        "category": a["category"],
        "label": a["tag"],
    }, copy=False)  # the arrays' own columns, shared (3M ranges: not 220 MB more)


def _depth(thread: np.ndarray, start: np.ndarray, end: np.ndarray, is_range: np.ndarray) -> np.ndarray:
    """Number of ranges of the same thread that are open at each row's start (vectorised sweep).

    Events sorted by (thread, time, type): range ends (0) before starts (1) before point queries (2); at equal
    starts the longer range comes first, so it counts as the parent.  Zero-length ranges and marks are queries.
    """
    n = len(start)
    if n == 0:
        return np.empty(0, np.int64)
    # the sort keys in the narrowest types, each freed once used: 3M ranges make 6M events
    opens = is_range & (end > start)
    e_idx = np.flatnonzero(opens & np.isfinite(end))
    one_thread = bool((thread == thread[0]).all())  # the NVTX-heavy case: no thread key to sort or split by
    t = np.concatenate([start, end[e_idx].astype(np.int64)])
    th = None if one_thread else np.concatenate([thread, thread[e_idx]])
    typ = np.concatenate([np.where(opens, 1, 2).astype(np.int8), np.zeros(len(e_idx), np.int8)])
    neg_len = np.concatenate([-(np.minimum(end, 2.0**62) - start), np.zeros(len(e_idx))])
    order = np.lexsort((neg_len, typ, t) if th is None else (neg_len, typ, t, th))
    del t, typ, neg_len
    delta = np.concatenate([opens.astype(np.int8), np.full(len(e_idx), -1, np.int8)])
    d = delta[order]
    del delta, e_idx
    c = np.cumsum(d, dtype=np.int64)
    if th is None:
        c -= d  # the ranges open before each event
        before = c
    else:
        ths = th[order]
        del th
        first = np.r_[True, ths[1:] != ths[:-1]]
        del ths
        base = np.maximum.accumulate(np.where(first, np.arange(len(c)), 0))  # index of the thread's first event
        before = c - d - (c[base] - d[base])
        del c, base, first
    depth = np.empty(n, np.int64)
    is_row = order < n
    depth[order[is_row]] = before[is_row]
    return depth
