"""Timeline preparation and tables: DataFrames (the reader's contract) -> rows, glyphs, formatted tables."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import fixture_path
from fakes import FakeMeta, frame, nsys_fake
from nsight_magic.errors import ReportError
from nsight_magic.views.tables import format_table, table_html
from nsight_magic.views.timeline_prepare import prepare_timeline, view_glyphs

XSS = "<img src=x onerror=alert(1)>"


def _fixture(name: str) -> Path:
    return fixture_path("nsys", "h100-2025.3", name)


def _report(n_kernels=4, kernel_gap=1000, kernel_len=500, nvtx=None, memcpy=None, span=None, streams=(7,)):
    """A small report with the reader's columns; kernel i is launched by API call i (same pid/correlation)."""
    starts = np.arange(n_kernels, dtype=np.int64) * kernel_gap + 10_000
    stream = np.resize(np.array(streams), n_kernels)
    kernels = frame(
        "kernels", start_ns=starts, end_ns=starts + kernel_len, duration_ns=kernel_len,
        name=[f"void k{i % 3}<float>(float*)" for i in range(n_kernels)],
        short_name=[f"k{i % 3}" for i in range(n_kernels)], device_id=0, context_id=1,
        stream_id=stream, correlation_id=np.arange(n_kernels) + 100, pid=42,
        grid_x=128, grid_y=1, grid_z=1, block_x=256, block_y=1, block_z=1,
        registers_per_thread=32, static_smem_bytes=0, dynamic_smem_bytes=0, launch_tid=43)
    api = frame("cuda_api", start_ns=starts - 400, end_ns=starts - 100, duration_ns=300, name="cudaLaunchKernel",
                pid=42, tid=43, correlation_id=np.arange(n_kernels) + 100, return_value=0)
    end = int(max(kernels["end_ns"].max() if n_kernels else 0, 20_000)) + 1000
    return nsys_fake(kernels=kernels, cuda_api=api, **({"nvtx": nvtx} if nvtx is not None else {}),
                     **({"memcpy": memcpy} if memcpy is not None else {}), end_ns=end, duration_ns=span or end,
                     threads=frame("threads", pid=[42], tid=[43], name=["python3"]),
                     processes=frame("processes", pid=[42], name=["python3"]),
                     gpus=frame("gpus", id=[0], name=["Test GPU"]))


def _nvtx(rows):
    df = pd.DataFrame(rows, columns=["start_ns", "end_ns", "name", "depth"])
    return frame("nvtx", **df.assign(duration_ns=df.end_ns - df.start_ns, domain="", kind="push_pop", pid=42, tid=43,
                                     color=None))


def test_rows_are_a_tree_of_processes_threads_and_gpus_streams():
    nv = _nvtx([(9_000, 20_000, "outer", 0), (9_500, 12_000, "inner", 1)])
    rep = _report(nvtx=nv, streams=(7, 13))
    thread_calls = pd.DataFrame({"start_ns": [100, 300], "end_ns": [200, 400], "duration_ns": 100,
                                 "name": ["read", "cublasSgemm_v2"], "pid": 42, "tid": [44, 43]})
    rep.osrt, rep.cublas = frame("osrt", **thread_calls.iloc[:1]), frame("cublas", **thread_calls.iloc[1:])
    data = prepare_timeline(rep)
    r = data.rows
    assert r["kind"].tolist() == ["process", "thread", "nvtx", "nvtx", "cuda_api", "cublas", "thread", "osrt",
                                  "util", "gpu", "gpu"]
    assert r["label"].tolist() == ["Process 42 python3", "python3 [43]", "NVTX", "NVTX ·1", "CUDA API", "cuBLAS",
                                   "thread [44]", "OS runtime", "GPU 0 Test GPU", "stream 7", "stream 13"]
    assert r["level"].tolist() == [0, 1, 2, 2, 2, 2, 1, 2, 0, 2, 2]
    assert r.loc[3, "ancestors"] == "p42|p42/t43" and r.loc[9, "ancestors"] == "g0"
    assert r.loc[3, "path"] == "Process 42 python3 / python3 [43] / NVTX level 1"
    assert r["group"].tolist() == ["Process 42 python3"] * 8 + ["GPU 0 Test GPU"] * 3
    # NVTX rows know the CUDA API row of their thread (for highlighting launched kernels)
    assert data.api_row_of_row.tolist()[2:5] == [4, 4, -1]
    # every event sits on a leaf row
    assert set(data.events["row"]) <= set(r.index[r["level"] == 2])


def test_folding_hides_a_groups_rows_and_keeps_its_header():
    from nsight_magic.views.timeline_prepare import default_folds, fold_layout

    nv = _nvtx([(9_000, 20_000, "outer", 0)])
    rep = _report(nvtx=nv, streams=(7, 13))
    rep.osrt = frame("osrt", start_ns=[100], end_ns=[200], duration_ns=100, name=["read"], pid=42, tid=[44])
    rows = prepare_timeline(rep).rows
    y = fold_layout(rows, {"p42"})
    assert y.tolist()[:1] == [0] and np.isnan(y[1:6]).all() and y.tolist()[6:] == [1, 2, 3]
    y = fold_layout(rows, {"p42/t43"})
    assert np.isnan(y[2:4]).all() and not np.isnan(y[1])  # the thread's rows, not the thread header
    assert default_folds(rows) == set() and default_folds(rows, budget=5)


def test_colours_follow_the_code_and_the_names():
    from nsight_magic.views.timeline_prepare import NAME_PALETTE, name_color

    nv = frame("nvtx", **{"start_ns": [0, 10, 20], "end_ns": [5, 15, 25], "name": ["blue one", "plain", "plain"],
                          "depth": 0, "domain": "", "kind": "push_pop", "pid": 42, "tid": 43,
                          "color": pd.array([0xFF0000FF, pd.NA, pd.NA], dtype="Int64")})
    data = prepare_timeline(_report(nvtx=nv))
    e = data.events
    nv_rows = e[e["cat"] == data.categories.index("NVTX")].sort_values("start_ns")
    colors = [data.palette[c] for c in nv_rows["color"]]
    assert colors[0] == "#0000ff"  # the NVTX colour attribute (ARGB)
    assert colors[1] == colors[2] == NAME_PALETTE[name_color("plain")]  # a stable colour per name
    k = e[e["cat"] == data.categories.index("kernel")]
    names = [data.names[n] for n in k["name"]]
    assert all(data.palette[c] == NAME_PALETTE[name_color(n)] for c, n in zip(k["color"], names))


def test_our_cell_range_frames_the_timeline_and_is_no_row():
    nv = frame("nvtx", **{"start_ns": [9_000, 9_500], "end_ns": [30_000, 12_000], "name": ["cell-20261123", "mine"],
                          "depth": [0, 1], "domain": ["nsight-magic", None], "kind": "push_pop", "pid": 42, "tid": 43,
                          "color": pd.array([pd.NA, pd.NA], dtype="Int64")})
    rep = _report(nvtx=nv)
    rep.meta = FakeMeta(9_000, 30_000, 21_000, span_source="cell range")  # the reader's span: our cell range
    data = prepare_timeline(rep)
    names = set(data.names[n] for n in data.events["name"])
    assert "cell-20261123" not in names and "mine" in names
    assert data.origin_ns == 9_000 and data.frame_ns == (0, 21_000)
    assert data.first_ns == 9_500 - 9_000  # "mine", the first event: x = 0 is the cell's start


def test_strings_are_stored_once_and_events_carry_codes():
    data = prepare_timeline(_report(n_kernels=300))
    assert sorted(data.names) == sorted(set(data.names))
    assert {"k0", "k1", "k2", "cudaLaunchKernel"} <= set(data.names)
    assert data.events["name"].dtype.kind == "i"
    # 300 kernels share one launch configuration: one detail string
    assert sum(d.startswith("grid (128,1,1) block (256,1,1) regs 32") for d in data.details) == 1


def test_small_window_gives_exact_events_with_launch_links():
    rep = _report(n_kernels=5)
    data = prepare_timeline(rep)
    g = view_glyphs(data, budget=1000)
    assert g.shown == g.total == 10 and g.agg["count"].lt(0).all()  # only the utilization strip is binned
    assert g.caption == "showing all 10 events"
    k = g.exact[g.exact["cat"] == data.categories.index("kernel")].sort_values("left")
    a = g.exact[g.exact["cat"] == data.categories.index("CUDA API")].sort_values("left")
    assert k["link"].tolist() == a["link"].tolist() and len(set(k["link"])) == 5
    assert (k["dur_us"] == 0.5).all()


def test_busy_rows_become_busy_fraction_bins_under_the_budget():
    # 20k kernels, each 500 ns every 1000 ns: every bin of the kernel row is 50 % busy.
    data = prepare_timeline(_report(n_kernels=20_000))
    g = view_glyphs(data, 0, 10_000 + 20_000 * 1000, width_px=400, budget=1000)
    assert len(g.exact) + len(g.agg) <= 1000
    assert g.total == 40_000 and g.shown < g.total
    assert re.fullmatch(r"[\d,]+ of 40,000 events exact, the rest as busy bins; .*", g.caption)
    krow = data.rows.index[data.rows["label"] == "stream 7"][0]
    bins = g.agg[g.agg["row"] == krow]
    assert len(bins) > 10
    np.testing.assert_allclose(bins["busy"].to_numpy()[1:], 0.5, atol=0.01)  # bin 0 holds 10 us of idle start
    busy_ns = (bins["busy"] * (bins["right"] - bins["left"])).sum()
    assert busy_ns == pytest.approx(20_000 * 500, rel=1e-9)  # the bins add up to the kernels' total time
    assert bins["count"].sum() >= 20_000


def test_zooming_in_returns_the_exact_events_of_the_window():
    data = prepare_timeline(_report(n_kernels=20_000))
    g = view_glyphs(data, 10_000 + 5_000 * 1000, 10_000 + 5_010 * 1000, budget=1000)
    kernels = g.exact[g.exact["cat"] == data.categories.index("kernel")]
    assert len(kernels) == 10 and g.shown == g.total
    assert kernels["left"].min() == 10_000 + 5_000 * 1000


def test_a_row_whose_ranges_overlap_keeps_its_ends_sorted_for_the_busy_bins():
    # ranges on one row that overlap end out of their start order: the index sorts that row's ends (only the
    # rows that need it), which the busy bins count on
    inner = [(12_000 + 100 * i, 12_050 + 100 * i, "inner", 0) for i in range(150)]
    nvtx = _nvtx([(10_000, 30_000, "outer", 0), *inner, (31_000, 32_000, "next", 0)])
    data = prepare_timeline(_report(n_kernels=20, nvtx=nvtx))
    ix, ends = data._index, data.events["end_ns"].to_numpy()
    nrow = int(data.events.loc[data.events["start_ns"] == 12_000, "row"].iloc[0])
    lo, hi = ix["ptr"][nrow], ix["ptr"][nrow + 1]
    assert hi - lo == 152 and not (np.diff(ends[lo:hi]) >= 0).all()  # this row's ends go back
    for r in range(len(data.rows)):
        lo, hi = ix["ptr"][r], ix["ptr"][r + 1]
        np.testing.assert_array_equal(ix["ends_sorted"][lo:hi], np.sort(ends[lo:hi]))
    g = view_glyphs(data, 10_000, 34_000, width_px=8, budget=100)  # too few glyphs for the ranges: binned
    bins = g.agg[g.agg["row"] == nrow]
    s, e = nvtx["start_ns"].to_numpy(), nvtx["end_ns"].to_numpy()
    for a, b, busy in zip(bins["left"], bins["right"], bins["busy"]):  # each range's time in the bin, capped at 1
        assert busy == pytest.approx(min(1.0, np.clip(np.minimum(e, b) - np.maximum(s, a), 0, None).sum() / (b - a)))
    assert len(bins) == 8 and bins["busy"].min() < 1  # 31-32 us is one range in a bin of 3 us


def test_utilization_is_the_union_of_overlapping_work_per_gpu():
    rep = _report(n_kernels=2, kernel_gap=0, kernel_len=1000, streams=(7, 13))  # two kernels at the same time
    data = prepare_timeline(rep)
    util_row = data.rows.index[data.rows["kind"] == "util"][0]
    g = view_glyphs(data, 10_000, 11_000, width_px=10)
    u = g.agg[g.agg["row"] == util_row]
    np.testing.assert_allclose(u["busy"].to_numpy(), 1.0)


def test_copies_are_coloured_by_direction_and_host_memory_kind():
    mc = frame("memcpy", **{"start_ns": [100, 200, 300], "end_ns": [150, 250, 350], "duration_ns": 50,
                            "bytes": [1 << 20, 1 << 20, 4], "kind": ["HtoD", "HtoD", "DtoH"],
                            "src_kind": ["pageable", "pinned", "device"], "dst_kind": ["device", "device", "pinned"],
                            "device_id": 0, "stream_id": 7, "correlation_id": [1, 2, 3], "pid": 42})
    data = prepare_timeline(_report(memcpy=mc))
    assert {"memcpy HtoD pageable", "memcpy HtoD pinned", "memcpy DtoH pinned"} <= set(data.categories)
    colors = dict(zip(data.categories, data.colors))
    assert len({colors["memcpy HtoD pageable"], colors["memcpy HtoD pinned"], colors["memcpy DtoH pinned"]}) == 3
    g = view_glyphs(data)
    assert sorted(g.exact.loc[g.exact["bytes"] > 0, "bytes"].tolist()) == [4, 1 << 20, 1 << 20]


def test_missing_column_is_a_one_line_report_error():
    rep = _report()
    with pytest.raises(ValueError, match="kernels lacks the contract's columns"):  # the fakes keep the contract
        rep.kernels = rep.kernels.drop(columns=["stream_id"])
    rep._frames["kernels"] = rep.kernels.drop(columns=["stream_id"])  # a report-like object that does not
    with pytest.raises(ReportError, match="report.kernels lacks column.*stream_id"):
        prepare_timeline(rep)


def test_empty_window_is_a_clear_error():
    data = prepare_timeline(_report())
    with pytest.raises(ReportError, match="empty time window"):
        view_glyphs(data, 500, 500)


def test_report_without_gpu_work_still_prepares():
    rep = _report(n_kernels=0)
    rep.nvtx = _nvtx([(0, 100, "only", 0)])
    data = prepare_timeline(rep)
    assert data.rows["kind"].tolist() == ["process", "nvtx"]
    assert view_glyphs(data).caption == "showing the one event"


def test_tables_escape_names_and_sort_by_raw_values():
    df = pd.DataFrame({"name": [XSS, "b"], "count": [3, 1], "total_ns": [1_500_000, 800], "pct": [99.9, 0.1]})
    html = table_html(df, table_id="t1", zoom={XSS: [(1.0, 2.0), (3.0, 4.0)]}, plot_name="p")
    assert XSS not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    # a number and its unit on one line (&nbsp;), with or without a style sheet
    assert 'data-v="1500000.0">1.500&nbsp;ms<' in html and 'data-v="800.0">800&nbsp;ns<' in html
    assert 'class="nm-zoom"' in html and 'data-spans="[[1.0, 2.0], [3.0, 4.0]]"' in html and "1/2" in html
    # headers without the unit the values carry; sorted by total time, which the header's arrow says
    assert '>total</th>' in html and ">total_ns<" not in html and 'title="total_ns" data-dir=desc' in html
    text = format_table(df)
    assert text["pct"].tolist() == ["99.9 %", "0.1 %"] and text["total_ns"].tolist() == ["1.500 ms", "800 ns"]


# ---- on a real report, through the reader ------------------------------------------------------------------

def test_fixture_timeline_holds_every_event_of_the_reader():
    from nsight_magic import open_report

    rep = open_report(_fixture("a_cuda_nvtx.sqlite"))
    data = prepare_timeline(rep)
    expected = len(rep.kernels) + len(rep.memcpy) + len(rep.memset) + len(rep.cuda_api) + len(rep.nvtx)
    assert data.total_events == expected
    streams = sorted(rep.kernels["stream_id"].unique().tolist() + rep.memcpy["stream_id"].unique().tolist()
                     + rep.memset["stream_id"].unique().tolist())
    assert (data.rows["kind"] == "gpu").sum() == len(set(streams))
    # every kernel's launch link matches exactly one CUDA API call
    kcat, acat = data.categories.index("kernel"), data.categories.index("CUDA API")
    ev = data.events
    k_links = set(ev.loc[ev["cat"] == kcat, "link"])
    a_links = ev.loc[(ev["cat"] == acat) & (ev["link"].isin(k_links)), "link"]
    assert len(k_links) == len(rep.kernels) and a_links.is_unique and set(a_links) == k_links


def test_fixture_tables_show_the_same_numbers_as_the_reader_summaries():
    from nsight_magic import open_report
    from nsight_magic.views.report_view import NsysView

    rep = open_report(_fixture("a_cuda_nvtx.sqlite"))
    view = NsysView(rep)
    html = view.static_fragment(include_bokehjs=False)
    ks = rep.kernel_summary()
    for row in ks.head(5).itertuples():
        assert f'data-v="{float(row.total_ns)!r}"' in html
        assert f'data-v="{float(row.pct)!r}"' in html
    ns = rep.nvtx_summary()
    assert f'data-v="{float(ns["gpu_ns"].iloc[0])!r}"' in html


def test_fixture_view_text_html_and_files(tmp_path):
    from nsight_magic import open_report
    from nsight_magic.views import nsys_html, nsys_text, write_view_html
    from nsight_magic.views.output import bundle_bytes
    from nsight_magic.views.report_view import nsys_bundle

    src = _fixture("c_range.sqlite")
    folder = tmp_path / "prof"
    folder.mkdir()
    (folder / "report.sqlite").write_bytes(src.read_bytes())
    (folder / f"stdout {XSS}.txt").write_text("hello")
    rep = open_report(folder / "report.sqlite")
    text = nsys_text(rep)
    assert "Kernels (top" in text and "cudaLaunchKernel" in text
    page = nsys_html(rep, folder=folder)
    assert "cdn.bokeh.org" not in page and "Bokeh" in page
    assert "findings, most time at stake first" in page and 'class="nm-finding"' in page
    assert "Advice (top" in text
    assert "report.sqlite" in page and "stdout &lt;img src=x onerror=alert(1)&gt;.txt" in page and XSS not in page
    out = write_view_html(rep, tmp_path / "view.html", folder=folder)
    assert out.read_text(encoding="utf-8") != "" and out.stat().st_size < 3.5e6
    bundle = nsys_bundle(rep, widget=False)
    assert set(bundle) == {"text/plain", "text/html"} and bundle_bytes(bundle) < 2e6
    assert json.loads(json.dumps(bundle))["text/plain"] == text


def test_x_zero_is_the_readers_capture_start_and_the_axis_covers_every_event():
    # the reader decides the span (readers.capture_span; tests/test_readers_nsys_versions.py): the view follows it
    rep = _report(n_kernels=3)
    rep.meta = FakeMeta(start_ns=10_000, end_ns=11_000, duration_ns=1_000, span_source="capture bounds")
    data = prepare_timeline(rep)
    assert data.origin_ns == 10_000 and data.first_ns == -400 and data.span_ns == 12_500 - 10_000
    rep.meta = FakeMeta(start_ns=0, end_ns=0, duration_ns=0, span_source="none")  # no span: the events' own
    data = prepare_timeline(rep)
    assert data.origin_ns == 9_600 and data.first_ns == 0 and data.span_ns == 12_500 - 9_600
    g = view_glyphs(data)
    assert g.shown == g.total == 6 and g.exact["left"].min() == 0


def test_every_nvtx_table_row_zooms_including_ranges_of_a_named_domain():
    """The NVTX table lists nvtx_summary() names ('domain:name'); a click must find a span for each of them."""
    p = fixture_path("nsys", "public-sqlite", "nsightful_power_iteration__baseline.sqlite")
    from nsight_magic import open_report
    from nsight_magic.views.report_view import prepare_tables

    rep = open_report(p)
    t = prepare_tables(rep)
    names = set(t.nvtx["name"])
    assert "CCCL:cub::DeviceReduce::Sum" in names and names <= set(t.nvtx_zoom)
    a, b = t.nvtx_zoom["CCCL:cub::DeviceReduce::Sum"][0]  # the first instance (next / previous step on)
    nv = rep.nvtx
    sel = nv[(nv["domain"] == "CCCL") & (nv["name"] == "cub::DeviceReduce::Sum")].sort_values("start_ns")
    assert a == (sel["start_ns"].iloc[0] / 1e6) and b == (sel["end_ns"].iloc[0] / 1e6)


def test_two_views_never_share_a_bokeh_model_id():
    """Two notebooks' views in one browser window (BokehJS keys its views by model id): ids are UUIDs, not the
    process's counter, which restarts at p1000 in every kernel."""
    from nsight_magic import open_report
    from nsight_magic.views.report_view import NsysView

    ids = [re.findall(r'data-root-id="([^"]+)"', NsysView(open_report(_fixture("c_range.sqlite"))).static_fragment(
        include_bokehjs=False)) for _ in range(2)]
    assert ids[0] and ids[1] and not set(ids[0]) & set(ids[1])
    assert all(re.fullmatch(r"[0-9a-f-]{36}", i) for i in ids[0] + ids[1])


def test_a_table_of_many_names_carries_a_bounded_number_of_zoom_spans():
    """5,000 NVTX names of 60 instances each made a 4.9 MB NVTX table (round 4's 3.15M ranges: 2.3 MB of output):
    the table's click-to-zoom spans are bounded in all, the first instances of each name kept."""
    from nsight_magic.views.tables import ZOOM_SPANS

    names = [f"range {i}" for i in range(3000)]
    df = pd.DataFrame({"name": names, "count": 60, "total_ns": 1000})
    zoom = {n: [(float(j), float(j) + 0.5) for j in range(60)] for n in names}
    html = table_html(df, table_id="t", zoom=zoom, plot_name="p", max_rows=2000)
    spans = [json.loads(s.replace("&quot;", '"')) for s in re.findall(r'data-spans="([^"]*)"', html)]
    assert len(spans) == 2000 and all(len(s) >= 1 for s in spans)
    assert sum(len(s) for s in spans) <= ZOOM_SPANS and spans[0][0] == [0.0, 0.5]
    few = table_html(df.head(10), table_id="u", zoom=zoom, plot_name="p")  # a few names keep every instance
    assert all(len(json.loads(s)) == 60 for s in re.findall(r'data-spans="([^"]*)"', few))


def test_a_static_copy_keeps_words_apart_and_long_names_breakable():
    """Issue 65: without the style sheet (an untrusted notebook, GitHub) the advice read "highThe GPU waited" and
    "inputinput-bound", and a 300-character kernel name pushed the number columns out of view.  The parts are
    separated by spaces, long names may break after `::` `,` `<` `(` `_` (<wbr>: the text a reader copies is the
    same), and a number keeps its unit on its line."""
    import html as H
    import re

    from nsight_magic.views.tables import breakable, table_html

    name = "void at::native::vectorized_elementwise_kernel<(int)4, at::native::BinaryFunctor<float, float, " \
           "float, void at::native::<unnamed>::threshold_kernel_impl<float>>(T1)"
    out = table_html(pd.DataFrame({"name": [name], "total_ns": [1.5e6]}), table_id="t")
    cell = re.search(r'<td data-v="[^"]*">(.*?)</td>', out).group(1)
    assert H.unescape(cell.replace("<wbr>", "")) == name and cell.count("<wbr>") >= 8
    assert max(len(H.unescape(w)) for w in re.split(r"<wbr>|\s", cell)) < 40  # no piece wider than 40 characters
    assert "1.500&nbsp;ms" in out
    assert breakable("short_name") == "short_name"  # short words as they are


def test_the_advice_keeps_its_badges_apart_from_their_words_without_a_style_sheet():
    import html as H

    from nsight_magic.analysis.findings import Finding
    from nsight_magic.views.advice import advice_html

    f = Finding("launch_bound", "high", "The GPU waited", "why", "what", 5_000_000, "est", pd.DataFrame(), ())
    # the text as it runs without a style sheet: the badge and the title are inline spans, side by side
    text = H.unescape(re.sub(r"<[^>]+>", "", advice_html([f], origin_ns=0, plot_name="p", uid="u")))
    assert "high The GPU waited" in text and "highThe" not in text


def test_what_samples_measured_is_shown_to_the_digits_their_count_supports():
    """Issue 65: the Lines table printed "17.264 ms 77.5 %" from 4 samples.  A time of n samples is good to about
    1/sqrt(n) of itself: one significant digit under 100 samples, two under 10,000, then three."""
    from nsight_magic.analysis.python_code import sampled_precision
    from nsight_magic.views.report_view import _sampled
    from nsight_magic.views.tables import table_html

    got = sampled_precision([17_264_000, 77.5, 9_310_000, 123_456_789, 0.0], [4, 4, 100, 20_000, 50])
    assert got.tolist() == [20_000_000, 80, 9_300_000, 123_000_000, 0]
    df = pd.DataFrame({"line": [5], "total_ns": got[:1], "pct": got[1:2], "samples": [4]})
    html = table_html(df, table_id="t", formats=_sampled(df))
    assert ">20&nbsp;ms<" in html and ">80&nbsp;%<" in html and "20.000" not in html
    assert 'data-v="20000000.0"' in html  # sorted by the value itself


def test_models_made_in_unique_ids_get_uuids_to_its_end_however_the_blocks_nest():
    """A block inside another (or one in another thread: a profile drawn in the background while a cell loads
    another) ends without giving the outer one's later models Bokeh's counter ids (p1001, ...)."""
    import threading

    from bokeh.models import Range1d

    from nsight_magic.views.bokehjs import unique_ids
    from nsight_magic.views.kept_page import UUID

    with unique_ids():
        with unique_ids():
            inner = Range1d()
        outer = Range1d()
        done = threading.Event()

        def block():
            with unique_ids():
                pass
            done.set()

        threading.Thread(target=block).start()
        assert done.wait(10)
        after_thread = Range1d()
    plain = Range1d()
    assert all(UUID.fullmatch(str(m.id)) for m in (inner, outer, after_thread)), (inner.id, outer.id)
    assert not UUID.fullmatch(str(plain.id))  # outside every block: Bokeh's own ids again


def test_table_spans_are_made_for_the_rows_a_table_shows():
    """A --pytorch run's NVTX summary has a row per operator call: the zoom spans are made for the MAX_ROWS
    rows the table shows, with the same spans those rows had, not for millions of names."""
    from nsight_magic.views.report_view import _instance_spans
    from nsight_magic.views.tables import MAX_ROWS

    n = MAX_ROWS + 500
    names = [f"aten::mm, op_id = {i}" for i in range(n)]
    ev = pd.DataFrame({"name": pd.Categorical(names + names[:3]), "start_ns": np.arange(n + 3) * 10,
                       "end_ns": np.arange(n + 3) * 10 + 5})
    table = pd.Series(names[::-1])  # the summary's order: its first MAX_ROWS rows are shown
    every = _instance_spans(ev, 0)
    shown = _instance_spans(ev, 0, shown=table)
    assert set(shown) == set(names[::-1][:MAX_ROWS]) and len(every) == n
    assert all(shown[k] == every[k] for k in shown)
    assert _instance_spans(ev, 0, shown=table.head(10)) == every  # a short table: every name's spans, as before
