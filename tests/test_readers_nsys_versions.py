"""One capture span for every report, and row labels as `nsys stats` of the report's own version prints them.

Labels are compared with what nsys 2025.3.1 printed for each fixture (recorded on the lent GPU, kept in
tests/data/nsys-stats-2025.3/) when the report was written by a version whose labels 2025.3 shares, and with the
installed nsys 2022.4 for older reports.  The numbers of every summary are compared with both versions.
"""
from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import pytest

from conftest import DATA, FIXTURES, recorded_stats
from nsight_magic.readers.capture_span import foreign_span, own_span
from nsight_magic.readers.nsys import open_nsys_report
from nsight_magic.readers.nsys_labels import (MEMCPY_ENUM_LABEL_SINCE, NVTX_DEFAULT_DOMAIN_COLON_SINCE,
                                              version_key)

BROKEN = {"cardiac_report1_PARTIAL.sqlite"}


def _all_sqlite():
    files = sorted(FIXTURES.glob("nsys/*/*.sqlite")) + sorted(FIXTURES.glob("peers/*.sqlite"))
    files += sorted(DATA.glob("nsys_*.sqlite"))
    return [pytest.param(p, id=f"{p.parent.name}/{p.name}") for p in files if p.name not in BROKEN]



# -- the capture span ------------------------------------------------------------------------------------------

def test_capture_bounds_are_trusted_only_where_their_clock_is_proven():
    # events inside the bounds, past the recording's own [0, duration]: the bounds' clock is the events'
    s = foreign_span((5_000, 9_000, 4_000), (6_000, 8_000))
    assert (s.start_ns, s.end_ns, s.source) == (5_000, 9_000, "capture bounds") and s.note is None
    # bounds on another clock that happen to overlap the events (a recording's own clock): not trusted
    s = foreign_span((1_000, 5_000, 4_000), (500, 2_000))
    assert (s.start_ns, s.end_ns, s.source) == (500, 2_000, "events") and "do not contain" in s.note
    # bounds that even contain the events prove nothing when the events also fit [0, duration]
    s = foreign_span((100, 4_100, 4_000), (1_000, 3_000))
    assert s.source == "events" and "not proven" in s.note
    s = foreign_span((5000, 6000, 1000), (100, 200))
    assert (s.start_ns, s.end_ns, s.source) == (100, 200, "events")
    s = foreign_span(None, (100, 200))
    assert s.source == "events" and "no capture bounds" in s.note
    s = foreign_span((100, 200, 100), None)
    assert (s.start_ns, s.end_ns, s.origin_ns) == (100, 200, 100)


def test_our_cell_ranges_are_the_capture_whatever_else_the_report_says():
    s = own_span([(7, 100, 300)], [], last_event_ns=10_000)
    assert (s.start_ns, s.end_ns, s.source, s.note) == (100, 300, "cell range", None)
    # two ranks: the first rank's start to the last rank's end
    s = own_span([(7, 100, 300), (8, 90, 450)], [], last_event_ns=10_000)
    assert (s.start_ns, s.end_ns, s.source) == (90, 450, "ranks' cell ranges") and "2 processes" in s.note
    # a killed cell never closed its range: it ends at the last event
    s = own_span([(7, 100, None)], [], last_event_ns=900)
    assert (s.start_ns, s.end_ns) == (100, 900) and "never closed" in s.note
    # --capture all: the process's own start and end marks
    s = own_span([], [(7, 50, "process start"), (7, 800, "process end")], last_event_ns=900)
    assert (s.start_ns, s.end_ns, s.source) == (50, 800, "process marks")
    assert own_span([], [], last_event_ns=900) is None
    # nsys dropped the range's push (the first milliseconds after `nsys start` on the H100): the mark made as the
    # range closed carries its length
    s = own_span([], [(7, 5_000, "cell ended after 3000 ns"), (7, 2_500, "nsight-magic clock 1")], last_event_ns=9)
    assert (s.start_ns, s.end_ns, s.source) == (2_000, 5_000, "cell range") and "not recorded" in s.note


@pytest.mark.parametrize("path", _all_sqlite())
def test_every_report_has_a_capture_span_that_overlaps_its_events(path, opened):
    rep = opened(path)
    lo, hi = rep.event_span
    m = rep.meta
    assert lo is not None and m.end_ns >= m.start_ns
    assert not (hi < m.start_ns or lo > m.end_ns), (m, lo, hi)
    if m.span_source == "events":
        assert (m.start_ns, m.end_ns) == (lo, hi) and m.span_note
    span = rep.time_span
    assert span.origin_ns == m.start_ns and span.axis_end_ns >= max(hi, m.end_ns)


@pytest.mark.parametrize("path", _all_sqlite())
def test_gpu_utilization_is_not_zero_where_kernels_ran(path, opened):
    rep = opened(path)
    k = rep.kernels
    u = rep.gpu_utilization(bins=100)
    if k.empty and rep.memcpy.empty:
        return
    for dev in k["device_id"].unique():
        assert u.loc[u["device_id"] == dev, "busy_fraction"].sum() > 0, dev
    # busy time inside the capture never exceeds what ran there
    width = (u["bin_end_ns"] - u["bin_start_ns"]).to_numpy()
    assert (u["busy_fraction"] * width).sum() <= (k["duration_ns"].sum() + rep.memcpy["duration_ns"].sum()
                                                  + rep.memset["duration_ns"].sum()) * 1.0001


def test_capture_range_report_on_another_clock_uses_the_events(opened):
    """c_range.sqlite's ANALYSIS_DETAILS lie 5 s after all its events (cudaProfilerApi capture range)."""
    path = FIXTURES / "nsys" / "h100-2025.3" / "c_range.sqlite"
    if not path.exists():
        path = DATA / "nsys_h100_c_range.sqlite"
    rep = opened(path)
    assert rep.meta.span_source == "events" and "not used" in rep.meta.span_note
    assert rep.gpu_utilization(bins=50)["busy_fraction"].max() > 0.5


def test_timeline_and_reader_share_the_origin(opened):
    from nsight_magic.views.timeline_prepare import prepare_timeline

    path = FIXTURES / "nsys" / "h100-2025.3" / "c_range.sqlite"
    if not path.exists():
        path = DATA / "nsys_h100_c_range.sqlite"
    rep = opened(path)
    data = prepare_timeline(rep)
    assert data.origin_ns == rep.time_span.origin_ns
    assert data.first_ns == 0


# -- labels ----------------------------------------------------------------------------------------------------

def _era_2025(version, since) -> bool:
    v = version_key(version)
    return v is not None and v >= since


@pytest.mark.parametrize("path", _all_sqlite())
def test_memcpy_labels_are_those_of_the_reports_nsys(path, opened):
    from test_readers_nsys import nsys_stats

    rep = opened(path)
    ours = rep.memcpy_summary()
    if _era_2025(rep.meta.nsys_version, MEMCPY_ENUM_LABEL_SINCE):
        ref = recorded_stats(path.stem.removeprefix("nsys_h100_"), "cuda_gpu_mem_time_sum")
    else:
        ref = nsys_stats("gpumemtimesum", path)
    if ref is None:
        assert ours.empty
        return
    assert sorted(ours["operation"]) == sorted(ref["Operation"])
    o = ours.set_index("operation").loc[ref["Operation"]]
    assert (o["count"].to_numpy() == ref["Count"].to_numpy()).all()
    assert (o["total_ns"].to_numpy() == ref["Total Time (ns)"].to_numpy()).all()


@pytest.mark.parametrize("path", _all_sqlite())
def test_nvtx_labels_are_those_of_the_reports_nsys(path, opened):
    from test_readers_nsys import nsys_stats

    rep = opened(path)
    ours = rep.nvtx_summary()
    if _era_2025(rep.meta.nsys_version, NVTX_DEFAULT_DOMAIN_COLON_SINCE):
        ref = recorded_stats(path.stem.removeprefix("nsys_h100_"), "nvtx_sum")
    else:
        ref = nsys_stats("nvtxsum", path)
    if ref is None:
        assert ours.empty
        return
    keys = list(zip(ref["Range"].astype(str), ref["Style"]))
    assert sorted(zip(ours["range"].astype(str), ours["style"])) == sorted(keys)
    o = ours.set_index(["range", "style"]).loc[keys]
    assert (o["count"].to_numpy() == ref["Instances"].to_numpy()).all()
    assert (o["total_ns"].to_numpy() == ref["Total Time (ns)"].to_numpy()).all()
    assert np.allclose(o["med_ns"].to_numpy(float), ref["Med (ns)"].to_numpy(float), atol=0.051)


@pytest.mark.parametrize("path", _all_sqlite())
def test_numbers_equal_nsys_2025_3(path, opened):
    """Kernel and CUDA API summaries and the NVTX projection against nsys 2025.3 (recorded), every fixture."""
    rep = opened(path)
    stem = path.stem.removeprefix("nsys_h100_")
    ref = recorded_stats(stem, "cuda_gpu_kern_sum")
    k = rep.kernel_summary()
    if ref is None:
        assert k.empty
    else:
        o = k.set_index("name").loc[ref["Name"]]
        assert (o["count"].to_numpy() == ref["Instances"].to_numpy()).all()
        assert (o["total_ns"].to_numpy() == ref["Total Time (ns)"].to_numpy()).all()
        assert np.allclose(o["med_ns"].to_numpy(float), ref["Med (ns)"].to_numpy(float), atol=0.051)
    ref = recorded_stats(stem, "cuda_api_sum")
    a = rep.cuda_api_summary()
    if ref is None:
        assert a.empty
    else:
        o = a.set_index("name").loc[ref["Name"]]
        assert (o["count"].to_numpy() == ref["Num Calls"].to_numpy()).all()
        assert (o["total_ns"].to_numpy() == ref["Total Time (ns)"].to_numpy()).all()
    ref = recorded_stats(stem, "nvtx_gpu_proj_sum")
    if ref is not None:
        s = rep.nvtx_summary().set_index(["range", "style"])
        o = s.loc[list(zip(ref["Range"].astype(str), ref["Style"]))]
        assert (o["gpu_ns"].to_numpy() == ref["Total Proj Time (ns)"].to_numpy()).all()


def test_label_eras_follow_the_reports_version(tmp_path):
    """The same events under another EXPORT_PRODUCT_VERSION get that version's labels."""
    src = DATA / "nsys_h100_a_cuda_nvtx.sqlite"
    labels = {}
    for version in ("2022.4.2.1", "2023.3.3.42", "2024.1.1.59", "2025.3.2.0"):
        p = tmp_path / f"{version}.sqlite"
        shutil.copy(src, p)
        con = sqlite3.connect(p)
        with con:
            con.execute("UPDATE META_DATA_EXPORT SET value = ? WHERE name = 'EXPORT_PRODUCT_VERSION'", (version,))
        con.close()
        with open_nsys_report(p) as rep:
            labels[version] = (set(rep.memcpy_summary()["operation"]), set(rep.nvtx_summary()["range"]))
    assert "[CUDA memcpy HtoD]" in labels["2022.4.2.1"][0] and "step 0" in labels["2022.4.2.1"][1]
    assert "[CUDA memcpy Host-to-Device]" in labels["2023.3.3.42"][0] and "step 0" in labels["2023.3.3.42"][1]
    assert ":step 0" in labels["2025.3.2.0"][1] and ":step 0" not in labels["2024.1.1.59"][1]
    assert all("[CUDA memset]" in m for m, _ in labels.values())
