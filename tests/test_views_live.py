"""The live timeline: a zoom message from the browser reaches Python through jupyter_bokeh and the
widget's sources are refilled with the exact events of the visible window."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import fixture_path


def _fixture(name: str) -> Path:
    return fixture_path("nsys", "h100-2025.3", name)


def _bokeh_model(widget):
    from jupyter_bokeh import BokehModel

    stack = [widget]
    while stack:
        w = stack.pop()
        if isinstance(w, BokehModel):
            return w
        stack.extend(getattr(w, "children", ()))
    raise AssertionError("no BokehModel in the view")


def test_zoom_message_from_the_browser_fetches_exact_events_of_the_window():
    pytest.importorskip("jupyter_bokeh")
    import ipywidgets as w

    from nsight_magic import open_report
    from nsight_magic.views import show_nsys

    rep = open_report(_fixture("b_cuda_nvtx_osrt.sqlite"))
    tab = show_nsys(rep)
    assert [tab.get_title(i) for i in range(len(tab.children))] == [
        "Timeline", "Kernels", "Memory", "CUDA API", "NVTX", "Advice", "Files"]
    tv = tab._nsight_timeline
    model = _bokeh_model(tab)
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
    # the caption shows once: as the plot's title (no label above the legend repeats it)
    labels = [c for c in tab.children[0].children if isinstance(c, w.Label)]
    assert labels == [] and tv.figure.title.text == tv.glyphs.caption


def test_picking_a_kernel_name_in_the_table_zooms_the_timeline_to_its_instances():
    pytest.importorskip("jupyter_bokeh")
    import ipywidgets as w

    from nsight_magic import open_report
    from nsight_magic.views import show_nsys

    rep = open_report(_fixture("a_cuda_nvtx.sqlite"))
    tab = show_nsys(rep)
    tv = tab._nsight_timeline
    tab.selected_index = 1
    row = next(c for c in tab.children[1].children if isinstance(c, w.HBox)
               and any(isinstance(x, w.Dropdown) and x.description == "zoom to" for x in c.children))
    pick = next(x for x in row.children if isinstance(x, w.Dropdown))
    prev, nxt, where = (x for x in row.children if not isinstance(x, w.Dropdown))
    ks = rep.kernel_summary()
    name = ks[ks["count"] >= 2]["name"].iloc[-1]  # a rare kernel that ran at least twice
    inst = rep.kernels[rep.kernels["name"] == name].sort_values("start_ns")
    xr = tv.figure.x_range
    pick.value = name  # the first instance ...
    for i in (0, 1):
        t0 = (inst["start_ns"].iloc[i] - tv.data.origin_ns) / 1e6
        t1 = (inst["end_ns"].iloc[i] - tv.data.origin_ns) / 1e6
        assert xr.start <= t0 and xr.end >= t1 and (xr.end - xr.start) <= 1.2 * (t1 - t0) + 0.01
        assert tab.selected_index == 0 and where.value == f"instance {i + 1} of {len(inst)}"
        if i == 0:
            tab.selected_index = 1
            nxt.click()  # ... then the next one
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
    assert v.index("2.000 ms") < v.index("50.000 µs") < v.index("900 ns")


def test_files_tab_lists_the_profile_folder_and_the_advice_tab_shows_the_findings(tmp_path):
    from nsight_magic import open_report
    from nsight_magic.views import show_nsys

    (tmp_path / "report.sqlite").write_bytes(_fixture("c_range.sqlite").read_bytes())
    (tmp_path / "stdout <b>x.txt").write_text("cell output")
    tab = show_nsys(open_report(tmp_path / "report.sqlite"), folder=tmp_path)
    advice, files = tab.children[5], tab.children[6]
    rep = open_report(tmp_path / "report.sqlite")
    findings = rep.findings()
    assert findings and findings[0].title in advice.children[1].children[0].value
    # "show on timeline" zooms the live timeline to the evidence and shades it
    tv = tab._nsight_timeline
    advice.children[1].children[1].click()
    bands = list(zip(tv.band_src.data["left"], tv.band_src.data["right"]))
    from nsight_magic.views.advice import bands_ms, focus_ms

    t0, _t1 = focus_ms(bands_ms(findings[0], tv.data.origin_ns))
    assert bands and abs(bands[0][0] - (findings[0].ranges[0][0] - tv.data.origin_ns) / 1e6) < 1e-6
    assert tv.figure.x_range.start <= t0 <= tv.figure.x_range.end and tab.selected_index == 0
    listing = files.children[1].children[-1].value
    assert "report.sqlite" in listing and "stdout &lt;b&gt;x.txt" in listing and "<b>x" not in listing


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
