"""The rules' shared helpers (analysis/rules/common.py) against the plain pandas they stand for."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import DATA
from nsight_magic.analysis.rules.common import API_OF, api_of, pair_sums
from nsight_magic.report import open_report


@pytest.mark.parametrize("pairs", [1, 3])
def test_pair_sums_equal_a_groupby_by_process_and_gpu(pairs):
    rng = np.random.default_rng(pairs)
    n = 10_000
    pid = rng.choice(np.array([4100, 77, 4100 + pairs])[:pairs], n)
    dev = rng.choice(np.array([0, 1])[:min(pairs, 2)], n)
    values = rng.random(n) * 1e6
    got = pair_sums(values, pid, dev)
    want = pd.Series(values).groupby([pid, dev]).sum()
    assert got.index.tolist() == want.index.tolist()
    np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), rtol=1e-12)
    assert got.max() == pytest.approx(want.max(), rel=1e-12)


def test_pair_sums_keep_missing_keys_out_as_a_groupby_does():
    pid = pd.array([1, 1, None, 1], dtype="Int64")
    got = pair_sums([1.0, 2.0, 4.0, 8.0], pid, np.zeros(4, np.int64))
    assert got.to_dict() == {(1, 0): 11.0}


def test_api_of_some_columns_equal_those_of_all():
    rep = open_report(DATA / "nsys_h100_a_cuda_nvtx.sqlite")
    k = rep.kernels
    whole = api_of(k, rep.cuda_api)
    assert tuple(whole.columns) == API_OF and whole["api_tid"].notna().any()
    some = api_of(k, rep.cuda_api, ("api_tid", "api_start_ns"))
    assert list(some.columns) == ["api_tid", "api_start_ns"]
    pd.testing.assert_frame_equal(some, whole[["api_tid", "api_start_ns"]])
    assert list(api_of(k.iloc[:0], rep.cuda_api, ("api_tid",)).columns) == ["api_tid"]


def _ops_frame(n: int, rng, pids, devices, ctx_na: bool = False) -> pd.DataFrame:
    start = np.sort(rng.integers(-5, 10_000, n))
    ctx = pd.array(rng.integers(1, 3, n), dtype="Int64")
    if ctx_na:
        ctx[::7] = pd.NA
    corr = pd.array(rng.integers(1, 1000, n), dtype="Int64")
    corr[::5] = pd.NA
    return pd.DataFrame({"start_ns": start, "end_ns": pd.array(start + rng.integers(0, 50, n), dtype="Int64"),
                         "pid": rng.choice(pids, n), "device_id": rng.choice(devices, n), "context_id": ctx,
                         "correlation_id": corr})


def _plain_ops(report) -> pd.DataFrame:
    """What GpuOps stands for, in plain pandas: the frames' rows that start after 0, then nsys's overhead inside
    each (pid, device)'s range, with the first known context of that pair."""
    ops = pd.concat([f[f["start_ns"] > 0][["start_ns", "end_ns", "pid", "device_id", "context_id", "correlation_id"]]
                     for f in (report.kernels, report.memcpy, report.memset)], ignore_index=True)
    from nsight_magic.analysis.rules.gpu_ops import OVERHEAD_NAMES

    ops["end_ns"] = ops["end_ns"].astype("int64")
    ov = report.overhead[report.overhead["name"].isin(OVERHEAD_NAMES)]
    extra = []
    for (d, p), g in ops.groupby(["device_id", "pid"], sort=True):
        o = ov[(ov["pid"] == p) & (ov["start_ns"] > g["start_ns"].min()) & (ov["end_ns"] < g["end_ns"].max())]
        known = g["context_id"].dropna()
        extra += [{"start_ns": s, "end_ns": e, "pid": p, "device_id": d,
                   "context_id": known.iloc[0] if len(known) else pd.NA, "correlation_id": pd.NA}
                  for s, e in zip(o["start_ns"], o["end_ns"])]
    return pd.concat([ops, pd.DataFrame(extra)], ignore_index=True) if extra else ops


@pytest.mark.parametrize("pairs,ctx_na", [(1, False), (1, True), (3, False), (3, True)])
def test_gpu_ops_hold_what_the_frames_hold(pairs, ctx_na):
    from types import SimpleNamespace

    from nsight_magic.analysis.rules.gpu_ops import OVERHEAD_NAMES, GpuOps

    rng = np.random.default_rng(pairs + 10 * ctx_na)
    pids, devices = [11, 22, 33][:pairs], [0, 1][:min(pairs, 2)]
    overhead = pd.DataFrame({"start_ns": [100, 200, 20_000, 300], "end_ns": [150, 260, 20_050, 310],
                             "pid": [11, 22, 11, 33], "name": [OVERHEAD_NAMES[0], OVERHEAD_NAMES[2], OVERHEAD_NAMES[1],
                                                                "something else"]})
    report = SimpleNamespace(kernels=_ops_frame(400, rng, pids, devices, ctx_na), memcpy=_ops_frame(60, rng, pids,
                             devices), memset=_ops_frame(30, rng, pids, devices), overhead=overhead)
    report.kernels.loc[0, "start_ns"] = -1  # recorded before the clock's start: left out, as nsys analyze does
    got, want = GpuOps(report), _plain_ops(report)
    assert got.start.tolist() == want["start_ns"].tolist() and got.end.tolist() == want["end_ns"].tolist()
    kept = sum(int((f["start_ns"] > 0).sum()) for f in (report.kernels, report.memcpy, report.memset))
    assert kept < 490 and len(want) > kept and len(got) == len(want)  # some left out, some overhead taken in
    groups = want.groupby(["pid", "device_id"], sort=True).indices
    assert [k for k, _ in got.pairs] == sorted(groups)
    for key, rows in got.pairs:
        assert np.arange(len(want))[rows].tolist() == list(groups[key])
    rows = rng.choice(len(want), 80)
    np.testing.assert_array_equal(got.context_ids(rows), want["context_id"].to_numpy()[rows])
    pd.testing.assert_extension_array_equal(got.correlation_ids(rows),
                                            pd.array(want["correlation_id"], dtype="Int64")[rows])
    for r in rows[:10].tolist() + [len(want) - 1]:
        a, b = got.context_at(r), want["context_id"].iloc[r]
        assert (a is pd.NA and b is pd.NA) or a == b


def test_queued_readback_gaps_found_from_the_copies_equal_those_found_from_the_gaps():
    from types import SimpleNamespace

    from nsight_magic.analysis.rules.host_calls import _queued_readback_gaps

    rng = np.random.default_rng(7)
    n = 5000
    bounds = np.sort(rng.choice(10_000_000, 2 * n, replace=False)).reshape(n, 2)  # disjoint gaps, in order
    g = pd.DataFrame({"start_ns": bounds[:, 0], "end_ns": bounds[:, 1], "in_window": rng.random(n) < 0.9,
                      "launch": rng.integers(0, 3, n), "round_trip": rng.random(n) < 0.1})
    ends_at = rng.choice(g["end_ns"].to_numpy(), 800)  # copies that start as a gap ends (some twice) ...
    starts = np.r_[ends_at, rng.integers(0, 10_000_000, 400)]  # ... and others
    call_end = starts - rng.integers(-50, 2_000_000, len(starts))  # some calls returned before the gap began
    copies = pd.DataFrame({"start_ns": starts, "call_end_ns": call_end})
    found = _queued_readback_gaps(SimpleNamespace(diag=SimpleNamespace(gaps=lambda: g)), copies)
    shuffled = g.sample(frac=1, random_state=1)  # not in order: each gap searches the copies
    again = _queued_readback_gaps(SimpleNamespace(diag=SimpleNamespace(gaps=lambda: shuffled)), copies)
    assert 50 < len(found) < 800 and sorted(found.index) == sorted(again.index)
    assert found.index.is_monotonic_increasing


@pytest.mark.parametrize("durations", [[5, 3, 3, 1, 3], [5.0, 3.0, np.nan, 3.0, 1.0]], ids=["ints", "floats with NA"])
def test_where_words_names_the_longest_events_ranges_in_time_order(durations):
    from nsight_magic.analysis.rules.common import where_words

    ev = pd.DataFrame({"start_ns": [40, 30, 20, 10, 0], "duration_ns": durations,
                       "nvtx_range": ["e", "d", "c", "b", "a"]})
    total = np.nansum(durations)
    # 80% of the time: the 5 and, of the 3s tied, the first ones in the frame's order until 80% is passed
    words = where_words(ev)
    if np.isnan(durations).any():  # 5 + 3 + 3 = 11 of 12
        assert words == f" 3 of them take {11 * 100 / total:.0f}% of that time, in NVTX ranges b, d, e."
    else:  # 5 + 3 + 3 = 11 of 15 < 80%, with the third 3: 14 of 15
        assert words == f" 4 of them take {14 * 100 / total:.0f}% of that time, in NVTX ranges a, c, d, e."
    assert where_words(ev, share=1.0).startswith(" All") == (not np.isnan(durations).any())


def test_a_column_held_once_gives_its_value_without_a_pass():
    from nsight_magic.readers.constant_columns import constant, held_value

    n = 1000
    gaps = pd.DataFrame({"none": constant(0, n, np.int64), "zeros": np.zeros(n, np.int64),
                         "one": constant(1, n, np.int64),
                         "masked": pd.arrays.IntegerArray(constant(0, n, np.int64), np.r_[True, np.zeros(n - 1, bool)]),
                         "missing": pd.arrays.IntegerArray(constant(0, n, np.int64), constant(True, n, bool))},
                        copy=False)
    assert held_value(gaps["none"]) == 0 and held_value(gaps[gaps["one"] == 1]["none"]) == 0
    assert held_value(gaps["one"]) == 1 and held_value(gaps["missing"]) is pd.NA
    assert held_value(gaps["zeros"]) is None  # zeros in full: summed as before
    assert held_value(gaps["masked"]) is None and held_value(np.zeros(0, np.int64)) is None


def test_an_edit_of_the_evidence_leaves_the_report_and_its_sources_as_they_were():
    from nsight_magic.analysis.rules.common import evidence

    rep = open_report(DATA / "nsys_h100_a_cuda_nvtx.sqlite")
    k = rep.kernels
    api = api_of(k, rep.cuda_api)
    assert isinstance(api["api_name"].dtype, pd.CategoricalDtype)
    before = k.copy(deep=True)
    stake = np.arange(len(k), dtype=np.int64)
    ev = evidence(k, k["name"], {"api_name": api["api_name"], "stake": stake, "stream": k["stream_id"]})
    # names stay codes, with only the names in use and their text as the frame's
    for c in ("name", "api_name"):
        assert isinstance(ev[c].dtype, pd.CategoricalDtype) and (ev[c].value_counts() > 0).all()
    assert ev["api_name"].astype(str).tolist() == api["api_name"].astype(str).tolist()
    assert ev["name"].astype(str).tolist() == k["name"].astype(str).tolist()
    for c in ("start_ns", "end_ns", "pid", "device_id", "stream_id", "stake", "stream", "name", "api_name"):
        ev.loc[0, c] = ev.loc[1, c]  # in place: every column of the evidence written into
    ev.iloc[:, :] = ev.iloc[::-1].to_numpy()
    pd.testing.assert_frame_equal(k, before)
    assert (stake == np.arange(len(k))).all()
    assert api_of(k, rep.cuda_api)["api_name"].astype(str).tolist() == api["api_name"].astype(str).tolist()


def test_used_only_equals_pandas_remove_unused_categories():
    from nsight_magic.analysis.rules.common import _used_only

    for seed in range(200):
        rng = np.random.default_rng(seed)
        k = int(rng.integers(1, 8))
        codes = rng.integers(-1, k, int(rng.integers(0, 30)))
        s = pd.Series(pd.Categorical.from_codes(codes, categories=[f"c{i}" for i in rng.permutation(k)]))
        pd.testing.assert_series_equal(_used_only(s), s.cat.remove_unused_categories())
