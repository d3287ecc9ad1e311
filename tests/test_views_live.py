"""The live timeline: a zoom message from the browser reaches Python through jupyter_bokeh and the
widget's sources are refilled with the exact events of the visible window."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from conftest import fixture_path


def _fixture(name: str) -> Path:
    return fixture_path("nsys", "h100-2025.3", name)


def _zoom_spans(html: str, name: str) -> tuple[str, list]:
    """The plot a table name zooms and its instances' spans (ms), as the static table carries them."""
    import json
    from html import escape, unescape

    m = re.search(r'<table class="nm-table" id="[^"]*-kernels" data-filter-id="[^"]*" data-plot="([^"]*)">', html)
    cell = re.search(r'<td class="nm-zoom" data-v="' + re.escape(escape(name, quote=True)) +
                     r'" data-spans="([^"]*)"', html)
    assert m and cell, name
    return m.group(1), json.loads(unescape(cell.group(1)))


def test_zoom_message_from_the_browser_fetches_exact_events_of_the_window():
    pytest.importorskip("jupyter_bokeh")
    from jupyter_bokeh import BokehModel

    from nsight_magic import open_report
    from nsight_magic.views import show_nsys

    rep = open_report(_fixture("b_cuda_nvtx_osrt.sqlite"))
    view = show_nsys(rep)
    html = view.html()
    assert re.findall(r'data-tab="\d">([^<]+)</button>', html) == [
        "Timeline", "Kernels", "Memory", "CUDA API", "NVTX", "Advice", "Files"]
    model, tv = view.live, view.timeline
    assert isinstance(model, BokehModel)  # the live part is the timeline; the tables are the static view's
    assert tv.glyphs.shown < tv.glyphs.total  # zoomed out, 35k OS runtime calls are binned
    k = rep.kernels
    t0 = (k["start_ns"].min() - tv.data.origin_ns) / 1e6
    xr = tv.figure.x_range
    # what BokehJS sends when the user zooms: two ModelChanged events on the x range, as jsevent messages
    for attr, value in (("start", t0), ("end", t0 + 5.0)):
        model._sync_model(model, {"event": "jsevent", "kind": "ModelChanged", "model": {"id": xr.id},
                                  "attr": attr, "new": value}, [])
    assert (xr.start, xr.end) == (t0, t0 + 5.0)
    kcat = tv.data.categories.index("kernel")
    expected = int(((k["start_ns"] - tv.data.origin_ns) / 1e6 < t0 + 5.0).sum())
    assert (np.asarray(tv.exact_src.data["cat"]) == kcat).sum() == expected
    assert tv.glyphs.shown == tv.glyphs.total and tv.figure.title.text.startswith("showing all")
    assert tv.figure.title.text == tv.glyphs.caption  # the caption shows once: as the plot's title


def test_a_kernel_name_in_the_table_zooms_the_live_timeline_to_its_instances():
    """The table's names carry their instances; the live timeline has the static one's name, so a click
    (view.js, clicked in tests/test_saved_notebook.py) zooms it, and its zoom fetches the exact events."""
    pytest.importorskip("jupyter_bokeh")
    from nsight_magic import open_report
    from nsight_magic.views import show_nsys

    rep = open_report(_fixture("a_cuda_nvtx.sqlite"))
    view = show_nsys(rep)
    tv = view.timeline
    ks = rep.kernel_summary()
    name = ks[ks["count"] >= 2]["name"].iloc[-1]  # a rare kernel that ran at least twice
    inst = rep.kernels[rep.kernels["name"] == name].sort_values("start_ns")
    plot, spans = _zoom_spans(view.html(), str(name))
    assert plot == tv.plot_name
    assert len(spans) == min(len(inst), 100)
    for i in (0, 1):
        t0 = (inst["start_ns"].iloc[i] - tv.data.origin_ns) / 1e6
        t1 = (inst["end_ns"].iloc[i] - tv.data.origin_ns) / 1e6
        assert spans[i] == pytest.approx([t0, t1], abs=1e-5)
    tv.show_range(*spans[1])  # what the click sets on the plot's range
    kcat = tv.data.categories.index("kernel")
    names = np.asarray(tv.exact_src.data["name"])[np.asarray(tv.exact_src.data["cat"]) == kcat]
    assert (names == tv.data.names.index(str(inst["short_name"].iloc[0]))).sum() >= 1


def test_table_widget_filters_and_sorts_by_raw_values():
    import pandas as pd

    from nsight_magic.views.tables import table_widget

    df = pd.DataFrame({"name": ["alpha", "beta", "<b>gamma</b>"], "total_ns": [2_000_000, 900, 50_000]})
    box = table_widget(df)
    filt, sort, desc = box.children[0].children
    html = box.children[-1]
    assert "&lt;b&gt;gamma&lt;/b&gt;" in html.value and "<b>gamma" not in html.value
    filt.value = "ALPHA"
    assert "alpha" in html.value and "beta" not in html.value
    filt.value = ""
    sort.value, desc.value = "total_ns", True
    v = html.value
    assert v.index("2.000&nbsp;ms") < v.index("50.000&nbsp;µs") < v.index("900&nbsp;ns")


def test_files_tab_lists_the_profile_folder_and_the_advice_tab_shows_the_findings(tmp_path):
    from html import unescape

    from nsight_magic import open_report
    from nsight_magic.views import show_nsys
    from nsight_magic.views.advice import bands_ms, focus_ms

    (tmp_path / "report.sqlite").write_bytes(_fixture("c_range.sqlite").read_bytes())
    (tmp_path / "stdout <b>x.txt").write_text("cell output")
    (tmp_path / "finishing.json").write_text("{}")  # the profile being drawn: not listed, it goes once drawn
    view = show_nsys(open_report(tmp_path / "report.sqlite"), folder=tmp_path)
    html = view.html()
    findings = open_report(tmp_path / "report.sqlite").findings()
    first = re.search(r'<div class="nm-finding"[^>]*data-plot="([^"]*)" data-t0="([^"]*)" data-t1="([^"]*)" '
                      r'data-bands="([^"]*)"', html)
    assert findings and first and unescape(findings[0].title) in unescape(html)
    # a click (view.js) zooms the plot of that name, the live timeline's too, to the evidence and shades it
    tv = view.timeline
    assert first.group(1) == tv.plot_name
    t0, t1 = focus_ms(bands_ms(findings[0], tv.data.origin_ns))
    assert float(first.group(2)) == pytest.approx(t0, abs=1e-5) and float(first.group(3)) == pytest.approx(t1, abs=1e-5)
    files = html[html.index("<summary>Files</summary>"):]
    assert "report.sqlite" in files and "stdout &lt;b&gt;x.txt" in files and "<b>x" not in files
    assert "view.html" in files and "finishing.json" not in files


def test_a_microsecond_event_late_in_a_long_capture_keeps_its_width_in_the_live_window():
    """mordred_report1 lasts 39.7 s: float32 ms would snap both edges of its 1.164 us event to one value."""
    p = fixture_path("nsys", "public-sqlite", "mordred_report1.sqlite")
    from nsight_magic import open_report
    from nsight_magic.views.timeline import build_timeline
    from nsight_magic.views.timeline_prepare import prepare_timeline

    data = prepare_timeline(open_report(p))
    ev = data.events
    late = ev[(ev["end_ns"] - ev["start_ns"]) == 1164]["start_ns"].max() / 1e6  # ms, about 39.7 s in
    assert late > 39_000
    tv = build_timeline(data)
    tv.set_window(late - 0.05, late + 0.05)
    ex = tv.exact_src.data
    left, right, dur = (np.asarray(ex[c], dtype=np.float64) for c in ("left", "right", "dur_us"))
    i = int(np.argmin(np.abs(left - late)))
    assert abs(dur[i] - 1.164) < 1e-3
    assert right[i] - left[i] == pytest.approx(dur[i] / 1e3, rel=1e-3)
    assert np.all(right - left > 0)


def test_only_the_newest_live_views_are_kept_and_an_older_ones_memory_is_freed():
    """Issue 63: a kernel driven by a frontend kept every profile's live timeline (+6 MB a cell of 60k ranges on
    this machine, benchmarks/kernel_memory.py --watched).  Past NsightMagics.live_views the oldest is closed and
    what it held is freed; its output shows the saved timeline."""
    pytest.importorskip("jupyter_bokeh")
    import gc
    import weakref

    from nsight_magic import open_report
    from nsight_magic.views import live_views, show_nsys

    rep = open_report(_fixture("b_cuda_nvtx_osrt.sqlite"))
    before = live_views.KEEP
    try:
        live_views.keep(2)
        views = [show_nsys(rep) for _ in range(3)]
        first = views[0].live
        gone = weakref.ref(views[0].timeline)
        assert first.comm is not None
        views[1].live, views[2].live
        assert first.comm is None  # closed: the frontend drops it and shows the saved copy
        assert views[1].live.comm is not None and views[2].live.comm is not None
        assert views[0].timeline is None
        del first, views[0]  # what the kernel keeps of a shown view: its widget, while it is open
        gc.collect()
        assert gone() is None  # the prepared events and sources it held are freed
        live_views.keep(0)  # %config NsightMagics.live_views = 0: none kept from now on, the held ones closed now
        assert views[0].live.comm is None and views[1].live.comm is None
        assert live_views.held() == []
    finally:
        live_views.keep(before)
