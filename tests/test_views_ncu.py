"""Nsight Compute view: tabs, tables, charts, escaping of user-controlled names; a real Chromium for the page."""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from conftest import ARGS, BOKEH_IDLE, CHROMIUM, fixture_path, requires_chromium
from nsight_magic.views.bokehjs import LOADER_MARKER
from nsight_magic import open_report
from nsight_magic.readers.ncu import open_ncu_report
from nsight_magic.report import as_report
from nsight_magic.views.ncu import (STATIC_METRIC_ROWS, TABS, ncu_bundle, ncu_html, ncu_text, prepare_ncu,
                                    rule_summary, show_ncu)

NSYS_DATA = Path(__file__).resolve().parent / "data"
EVIL = "<img src=x onerror=window.__xss=1><script>window.__xss=2</script>"


def fixture(*parts) -> Path:
    return fixture_path("ncu", *parts)


@pytest.fixture(scope="module")
def h100():
    return open_ncu_report(fixture("h100-2025.3", "full-set-40-kernels_details.csv"))


@pytest.fixture
def evil_report(tmp_path):
    """A real ncu CSV whose kernel name and NVTX range are markup (user code names them)."""
    text = fixture("public-csv", "nsightful_copy_blocked_ncu_details.csv").read_text()
    name = re.search(r'"(copy_blocked\[[^"]*)"', text).group(1)
    p = tmp_path / "evil_details.csv"
    p.write_text(text.replace(name, EVIL))
    return open_ncu_report(p)


def test_page_has_the_five_tabs_charts_and_every_kernel(h100):
    html = ncu_html(h100)
    for tab in TABS:
        assert f">{tab}</button>" in html
    assert html.count('class="nm-pane"') == 5
    assert "Speed of Light" in html and "No L2 &lt;-&gt; device memory byte counts" not in html
    assert "transfer vs duration, per module" in html
    ids = set(re.findall(r'id="(nc-[0-9a-f]+-kernels)"', html))
    assert len(ids) == 1
    assert html.count("<tr>") > len(h100.kernels) + len(h100.rules)


def test_rules_sorted_by_estimated_speedup_and_grouped_by_rule(h100):
    t = prepare_ncu(h100)
    sp = t.rules["speedup_pct"].dropna().tolist()
    assert sp == sorted(sp, reverse=True) and t.rules["speedup_pct"].notna().sum() == len(sp)
    s = rule_summary(h100.rules)
    assert s[["rule", "section"]].duplicated().sum() == 0  # one row per rule
    assert s["max_speedup_pct"].iloc[0] == h100.rules["speedup_pct"].max()
    assert s["kernels"].sum() >= s.shape[0]


def test_memory_tab_data_per_module(h100):
    t = prepare_ncu(h100)
    assert set(t.scatter["module"]) == {"0", "1", "2", "3", "4", "5", "6", "8", "step 3"}
    assert t.per_kernel.shape[0] == 20
    step = t.per_range.set_index("nvtx").loc["step 3"]  # the table sums nested ranges: the step holds all kernels
    assert step["kernels"] == 20 and step["l2_dram_bytes"] == pytest.approx(t.per_kernel["l2_dram_bytes"].sum())


def test_report_without_byte_counts_says_which_section_to_collect():
    pytest.importorskip("ncu_report")
    rep = open_ncu_report(fixture("public-rep", "spyinfer_report.ncu-rep"))
    assert "No L2 &lt;-&gt; device memory byte counts in this report" in ncu_html(rep)


def test_user_controlled_names_stay_text(evil_report):
    html = ncu_html(evil_report)
    assert EVIL not in html and "<img src=x" not in html
    assert "&lt;img src=x onerror=window.__xss=1&gt;" in html  # shown, escaped, in the tables
    text = ncu_text(evil_report)
    assert "Nsight Compute report" in text and "1 kernels" in text


def test_widget_has_tabs_and_searchable_metrics(h100):
    box = show_ncu(h100).live  # the live view: tables searched in Python over all rows
    tab = box.children[1]
    assert [tab.get_title(i) for i in range(len(TABS))] == list(TABS)
    metrics_tab = tab.children[3]
    filt, _, _ = metrics_tab.children[0].children
    out = metrics_tab.children[-1]
    before = out.value.count("<tr>")
    filt.value = "L2 Hit Rate"
    after = out.value.count("<tr>")
    assert before > after == 1 + 20  # header + one row per kernel


def test_bundle_has_html_text_and_the_live_part_never_a_bare_widget(h100):
    from nsight_magic.views.output import VIEW_MIME

    b = ncu_bundle(h100, include_bokehjs=False)
    # the live widget rides by its model id in our own type: no frontend shows "model not found" for it
    assert set(b) == {"text/plain", "text/html", VIEW_MIME} and b[VIEW_MIME]["model_id"]
    assert "Bokeh.embed" in b["text/html"] and len(b["text/html"]) < 1_500_000


def test_display_in_ipython_sends_bokehjs_once_and_show_returns_the_view(h100):
    """BokehJS rides in the first view's own HTML, once per notebook for both views: the nsys view shown after
    an ncu view does not send it again."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    import nsight_magic.views.ncu as view
    import nsight_magic.views.bokehjs as bokehjs
    import nsight_magic.views.report_view as nsys_view
    from nsight_magic.views.output import VIEW_MIME

    InteractiveShell.instance()
    bokehjs._bokehjs_cell[:] = []
    with capture_output() as cap:
        view.display_ncu(h100)
        view.display_ncu(h100)
        nsys_view.display_nsys(open_report(NSYS_DATA / "nsys_h100_a_cuda_nvtx.sqlite"))
    first, second, nsys = (o.data for o in cap.outputs)
    assert set(first) == set(second) == set(nsys) == {"text/plain", "text/html", VIEW_MIME}
    assert first["text/html"].startswith(bokehjs.bokehjs_html()) and LOADER_MARKER in first["text/html"]
    for out in (second, nsys):  # the charts' script, never BokehJS itself
        assert "Bokeh.embed" in out["text/html"] and LOADER_MARKER not in out["text/html"]
    assert not hasattr(view, "_bokehjs_sent")
    shown = as_report(h100).show()
    assert type(shown).__name__ == "ProfileView" and type(shown.live).__name__ == "VBox"


def test_files_tab_lists_the_folder(h100, tmp_path):
    (tmp_path / "report.ncu-rep").write_bytes(b"NVR\x00")
    (tmp_path / "report_raw.csv").write_text("x")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "log.txt").write_text("hello")
    t = prepare_ncu(h100, folder=tmp_path)
    assert t.files["file"].tolist() == ["report.ncu-rep", "report_raw.csv", "sub/log.txt"]
    assert t.files["bytes"].tolist() == [4, 1, 5]
    # one listing for both views
    from nsight_magic.views.report_view import NsysView

    nsys_files = NsysView(open_report(NSYS_DATA / "nsys_h100_a_cuda_nvtx.sqlite"), tmp_path).files
    pd.testing.assert_frame_equal(nsys_files, t.files)
    assert prepare_ncu(h100).files["file"].tolist() == [str(h100.path)]


def test_folder_listing_of_something_not_a_folder_is_a_report_error(tmp_path):
    from nsight_magic.errors import ReportError
    from nsight_magic.store import folder_files

    f = tmp_path / "report.ncu-rep"
    f.write_bytes(b"NVR\x00")
    with pytest.raises(ReportError, match="not a folder"):
        folder_files(f)
    assert folder_files(None).empty


@pytest.mark.browser
@requires_chromium
@pytest.mark.timeout(120)
def test_page_in_chromium_tabs_filter_charts_and_no_script_from_names(evil_report, h100, tmp_path):
    from playwright.sync_api import sync_playwright

    page_h100, page_evil = tmp_path / "h100.html", tmp_path / "evil.html"
    page_h100.write_text(ncu_html(h100))
    page_evil.write_text(ncu_html(evil_report))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page()
            errors = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(page_h100.as_uri())
            page.wait_for_function("() => document.querySelectorAll('.bk-Figure, .bk-Canvas, canvas').length > 0",
                                   timeout=30000)
            page.click("button.nm-tabbtn:has-text('Rules')")
            panes = page.query_selector_all(".nm-pane")
            assert [pn.is_visible() for pn in panes] == [False, False, True, False, False]
            first = page.query_selector_all(".nm-pane >> nth=2 >> table.nm-table")[0]
            top = first.query_selector("tbody tr").inner_text().replace("\xa0", " ")  # a number's unit: &nbsp;
            assert f"{h100.rules['speedup_pct'].max():.1f} %" in top
            page.click("button.nm-tabbtn:has-text('Raw metrics')")
            box = page.query_selector(".nm-pane >> nth=3 >> input.nm-filter")
            box.fill("L2 Hit Rate")
            rows = page.query_selector_all(".nm-pane >> nth=3 >> tbody tr")
            shown = h100.metrics.head(STATIC_METRIC_ROWS)  # saved output carries the first rows only
            assert sum(r.is_visible() for r in rows) == (shown["metric"] == "L2 Hit Rate").sum() > 0
            assert errors == []

            page.goto(page_evil.as_uri())  # its load event: images failed, the inline scripts ran
            page.wait_for_function(BOKEH_IDLE, timeout=30000)
            assert page.evaluate("() => window.__xss") is None
            assert EVIL in page.inner_text(".nm-pane >> nth=0")
        finally:
            browser.close()
