"""The views in a real browser: Debian's Chromium driven by Playwright.

Standalone HTML and an nbconvert'd notebook must draw the timeline, show a tooltip on hover and log no
console errors; a profile recorded here with an NVTX range named like an HTML tag must not run it.
Screenshots go to test-artifacts/.  Skipped when Chromium is absent
(scripts/install-browser-debian.sh installs it).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import BOKEH_IDLE, fixture_path, in_page, requires_chromium
from nsight_magic.views.bokehjs import LOADER_MARKER

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "test-artifacts"
XSS = "<img src=x onerror=alert(1)>"
# every view of every Bokeh document, children of layouts included (Bokeh.index is a Map of root views), minus the
# row-name plots beside the timelines
VIEWS = ("(() => { const i = Bokeh.index; const roots = (i && typeof i.values === 'function') ? [...i.values()] "
         ": Object.values(i || {}); const all = []; const walk = v => { all.push(v); "
         "for (const c of (v.child_views || [])) walk(c); }; roots.forEach(walk); "
         "return all.filter(v => !(v.model.name || '').endsWith('-rowlabels')); })()")

pytestmark = [
    pytest.mark.browser,
    requires_chromium,
]


def js(code: str) -> str:
    return code.replace("$VIEWS", VIEWS)


class Page:
    """A page with its console errors and dialogs recorded."""

    def __init__(self, browser, url: str):
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.errors, self.dialogs, self.failed = [], [], []
        self.page.on("requestfailed", lambda r: self.failed.append(r.url))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.goto(url)
        self.page.wait_for_function(js("() => window.Bokeh && Bokeh.index && $VIEWS.some("
                                    "v => v.frame && v.canvas_view)"), timeout=30_000)
        self.page.wait_for_function(BOKEH_IDLE, timeout=30_000)

    def plots(self) -> int:
        return self.page.evaluate(js("() => $VIEWS.filter(v => v.frame).length"))

    def hover_widest_exact_glyph(self, plot: int = 0, cat: int = -1, name: str | None = None) -> dict:
        """Move the mouse over the middle of the widest exactly-drawn event of a plot (of category cat when
        given; named `name` in the page's name table first, when given); return the tooltip text."""
        pos = self.page.evaluate(js("""([k, cat, name]) => {
          const v = $VIEWS.filter(v => v.frame)[k];
          const src = v.model.renderers.map(r => r.data_source).find(s => 'detail' in s.data);
          const d = src.data; let best = -1, w = -1;
          for (let i = 0; i < d.left.length; i++)
            if ((cat < 0 || d.cat[i] == cat) && d.right[i] - d.left[i] > w) { w = d.right[i] - d.left[i]; best = i; }
          if (name !== null) {   // the hover's name formatter reads its table by the event's name index
            const tool = v.model.toolbar.tools.find(t => t.tooltips && t.tooltips[0] && t.tooltips[0][0] == 'name');
            const f = tool.formatters instanceof Map ? tool.formatters.get('@name') : tool.formatters['@name'];
            (f.args instanceof Map ? f.args.get('table') : f.args.table)[d.name[best]] = name;
          }
          v.el.scrollIntoView();
          const r = v.el.getBoundingClientRect();
          const x = v.frame.x_scale.compute((d.left[best] + d.right[best]) / 2);
          const y = v.frame.y_scale.compute(d.y[best]);
          return {x: r.x + x, y: r.y + y};
        }"""), [plot, cat, name])
        self.page.mouse.move(pos["x"] - 3, pos["y"])
        self.page.mouse.move(pos["x"], pos["y"])
        # the tooltip's text once it shows
        text = in_page(self.page, """() => {
          const out = [];
          const walk = (n) => { if (!n) return;
            if (n.classList && [...n.classList].some(c => c.startsWith('bk-tooltip')) && n.offsetParent !== null)
              out.push(n.innerText);
            if (n.shadowRoot) walk(n.shadowRoot);
            for (const c of n.children || []) walk(c); };
          walk(document.body);
          return out.join('\\n');
        }""", "text => text.length > 0")
        return {"pos": pos, "tooltip": text}

    def tooltip_box(self) -> dict:
        """The shown tooltip's box (left, right, width) and the page's width."""
        return self.page.evaluate("""() => {
          const t = [...document.querySelectorAll('.bk-Tooltip')].find(n => n.offsetParent !== null || n.getClientRects().length);
          const r = t.getBoundingClientRect();
          return {left: r.left, right: r.right, width: r.width, page: document.documentElement.clientWidth};
        }""")

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        p = ARTIFACTS / name
        self.page.screenshot(path=str(p), full_page=True)
        return p


def _fixture(name: str) -> Path:
    return fixture_path("nsys", "h100-2025.3", name)


LONG_KERNEL = ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
               "BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::"
               "TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::"
               "MulFunctor<float> > const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<...>)")


def test_the_static_copy_reads_as_well_as_the_live_view(browser, tmp_path):
    """Issue 65: the static copy (an untrusted notebook, a page without our style sheet or scripts) pushed the
    kernels table's number columns out of view behind a 300-character name, and ran the advice's words together
    ("highThe GPU waited").  Here the H100 report's top kernel is renamed so, the view's HTML stripped of every
    <style> and <script>, and each tab's section read in a 1000-px-wide page: no number column past the right
    edge, the badges apart from their words."""
    import re
    import shutil
    import sqlite3

    from nsight_magic import open_report
    from nsight_magic.views.report_view import NsysView

    db = tmp_path / "report.sqlite"
    shutil.copy(_fixture("b_cuda_nvtx_osrt.sqlite"), db)
    with sqlite3.connect(db) as c:  # the kernel with the most time gets a templated name of 300 characters
        sid = c.execute("SELECT k.shortName FROM CUPTI_ACTIVITY_KIND_KERNEL k GROUP BY k.shortName "
                        "ORDER BY SUM(k.end - k.start) DESC LIMIT 1").fetchone()[0]
        c.execute("UPDATE StringIds SET value = ? WHERE id = ?", (LONG_KERNEL, sid))
    rep = open_report(db)
    try:
        html = NsysView(rep).static_fragment(include_bokehjs=False)
    finally:
        rep.close()
    bare = re.sub(r"<(script|style)\b.*?</\1>", "", html, flags=re.S | re.I)
    assert "<script" not in bare and "<style" not in bare
    page_file = tmp_path / "static.html"
    page_file.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>{bare}</body></html>')
    page = browser.new_page(viewport={"width": 1000, "height": 900})
    try:
        page.goto(page_file.as_uri())
        page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
        # the kernels table: its name column holds the long name, and its number columns are in view
        table = page.locator("table", has_text="lambda(int)#1").first
        heads = table.evaluate("t => [...t.querySelectorAll('th')].map(th => [th.innerText.trim(), "
                               "th.getBoundingClientRect().right])")
        width = page.evaluate("() => document.documentElement.clientWidth")
        assert heads and all(right <= width for _, right in heads), (heads, width)
        assert any(h.startswith("total") for h, _ in heads), heads
        text = page.evaluate("() => document.body.innerText")
        assert not re.search(r"\b(high|medium|low)[A-Z]", text), re.findall(r"\b(?:high|medium|low)[A-Z]\w*", text)
        assert not re.search(r"(\w+)\1-bound", text), re.findall(r"\w+-bound", text)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "static_copy_long_name.png"), full_page=True)
    finally:
        page.close()


def test_standalone_html_draws_timeline_and_hover_shows_a_tooltip(browser, tmp_path):
    from nsight_magic import open_report
    from nsight_magic.views import write_view_html

    rep = open_report(_fixture("b_cuda_nvtx_osrt.sqlite"))
    path = write_view_html(rep, tmp_path / "view.html")
    pg = Page(browser, path.as_uri())
    assert pg.plots() == 1
    hover = pg.hover_widest_exact_glyph()
    assert "name:" in hover["tooltip"] and "duration:" in hover["tooltip"] and " ms" in hover["tooltip"]
    shot = pg.screenshot("standalone_hover.png")
    assert shot.stat().st_size > 10_000
    # a templated kernel name of 300 characters: BokehJS sizes its tooltip to the content (1,948 px seen, past the
    # output's right edge); view.css keeps it within the page and wraps the name
    pg.page.mouse.move(1, 1)
    hover = pg.hover_widest_exact_glyph(name=LONG_KERNEL)
    assert "lambda(int)#1" in hover["tooltip"], hover
    box = pg.tooltip_box()
    assert box["left"] >= 0 and box["right"] <= box["page"] and box["width"] <= 740, box
    pg.screenshot("standalone_long_tooltip.png")
    pg.page.mouse.move(1, 1)
    # the Kernels tab shows the reader's table, sorted by total time (its header's arrow says so); a click on a
    # kernel name zooms the timeline to its first instance, its arrow to the next one
    pg.page.click(".nm-tabbtn[data-tab='1']")
    table = pg.page.locator("table.nm-table").first
    assert table.locator("th[data-dir=desc]").inner_text() == "total"
    first = pg.page.locator("table.nm-table td.nm-zoom:has(.nm-step)").first
    spans = json.loads(first.get_attribute("data-spans"))
    assert len(spans) >= 2 and spans == sorted(spans)
    window = js("() => { const v = $VIEWS.find(v => v.frame); return [v.model.x_range.start, v.model.x_range.end]; }")
    for click, (t0, t1) in ((lambda: first.click(position={"x": 5, "y": 5}), spans[0]),
                            (lambda: pg.page.click(".nm-stepper .nm-step[data-d='1']"), spans[1])):
        before = pg.page.evaluate(window)
        click()
        start, end = in_page(pg.page, window, "(now, before) => now[0] != before[0] || now[1] != before[1]", before)
        assert start <= t0 and end >= t1 and end - start < 1.2 * (t1 - t0) + 0.01, (start, end, t0, t1)
    # the name's click showed the timeline, with a stepper above it: the name and where we are
    name = first.evaluate("td => td.childNodes[0].textContent")
    assert pg.page.locator(".nm-stepper .nm-what").inner_text() == name
    assert pg.page.locator(".nm-stepper .nm-pos").inner_text() == f"2/{len(spans)}"
    assert first.locator(".nm-pos").text_content() == f"2/{len(spans)}"
    pg.screenshot("standalone_stepper.png")
    # filter and sort the kernel table in the page
    pg.page.click(".nm-tabbtn[data-tab='1']")
    table = pg.page.locator("table.nm-table").first
    pg.page.locator("input.nm-filter").first.fill("cudnn")
    visible = [t for t, shown in zip(table.locator("tbody tr").all_inner_texts(),
                                     table.locator("tbody tr").evaluate_all("rs => rs.map(r => r.style.display)"))
               if shown != "none"]
    assert visible and all("cudnn" in t.lower() for t in visible)
    assert len(visible) < len(rep.kernel_summary())
    pg.page.locator("input.nm-filter").first.fill("")
    col = list(rep.kernel_summary().columns).index("total_ns")
    table.locator("th").nth(col).click()  # ascending by the raw nanoseconds, whatever unit is shown
    raw = table.locator(f"tbody tr td:nth-child({col + 1})").evaluate_all("cs => cs.map(c => +c.dataset.v)")
    assert raw == sorted(raw) and raw[0] == rep.kernel_summary()["total_ns"].min()
    assert pg.errors == [] and pg.dialogs == []
    pg.page.close()


def test_a_long_names_table_travels_with_the_names_of_the_events_shown(browser, tmp_path, monkeypatch):
    """Beyond NAMES_INLINE names (a --pytorch run's NVTX ranges: one per operator call), the page carries only
    the names its events use, as {code: name}: the hover and the names on the bars still read them."""
    from nsight_magic import open_report
    from nsight_magic.views import timeline, write_view_html
    from nsight_magic.views.timeline_prepare import prepare_timeline

    monkeypatch.setattr(timeline, "NAMES_INLINE", 0)  # every table is a long one
    rep = open_report(_fixture("b_cuda_nvtx_osrt.sqlite"))
    names = prepare_timeline(rep).names
    path = write_view_html(rep, tmp_path / "view.html")
    pg = Page(browser, path.as_uri())
    assert pg.plots() == 1
    shown = pg.page.evaluate(js("""() => { const v = $VIEWS.find(v => v.frame);
      const tool = v.model.toolbar.tools.find(t => t.tooltips && t.tooltips[0] && t.tooltips[0][0] == 'name');
      const f = tool.formatters instanceof Map ? tool.formatters.get('@name') : tool.formatters['@name'];
      const t = f.args instanceof Map ? f.args.get('table') : f.args.table;
      const src = v.model.renderers.map(r => r.data_source).find(s => 'detail' in s.data).data;
      let best = -1, w = -1;
      for (let i = 0; i < src.left.length; i++)
        if (src.right[i] - src.left[i] > w) { w = src.right[i] - src.left[i]; best = i; }
      return {array: Array.isArray(t), size: t instanceof Map ? t.size : Object.keys(t).length,
              code: src.name[best]}; }"""))
    assert not shown["array"] and 0 < shown["size"] < len(names), (shown, len(names))
    hover = pg.hover_widest_exact_glyph()
    assert f"name: {names[shown['code']]}"[:60] in hover["tooltip"].replace("\n", " "), (hover, names[shown["code"]])
    texts = pg.page.evaluate(js("() => { const v = $VIEWS.find(v => v.frame); return v.model.renderers"
                                ".map(r => r.data_source).find(s => s.name && s.name.endsWith('-labels')).data.text; }"))
    assert texts and all(any(n.startswith(t.rstrip("…")) for n in names) for t in texts), texts
    assert pg.errors == [] and pg.dialogs == []
    pg.page.close()


def _notebook(tmp_path: Path, reports: list[Path]) -> Path:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    cells = [nbformat.v4.new_code_cell("from nsight_magic import open_report\n"
                                       "from nsight_magic.views import display_nsys")]
    cells += [nbformat.v4.new_code_cell(f"display_nsys(open_report({str(r)!r}))") for r in reports]
    nb = nbformat.v4.new_notebook(cells=cells)
    nbclient.NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}},
                            store_widget_state=False).execute()
    path = tmp_path / "views.ipynb"
    nbformat.write(nb, path)
    return path


def test_nbconvert_html_of_an_executed_notebook_draws_both_timelines(browser, tmp_path):
    import json

    from nbconvert import HTMLExporter

    nb_path = _notebook(tmp_path, [_fixture("a_cuda_nvtx.sqlite"), _fixture("c_range.sqlite")])
    nb = json.loads(nb_path.read_text())
    outs = [c["outputs"] for c in nb["cells"][1:]]
    assert all(o["output_type"] == "display_data" for cell in outs for o in cell), outs
    # BokehJS inline exactly once per notebook, in the first view's own HTML
    marker = LOADER_MARKER  # the loader of BokehJS (views/bokehjs.py)
    assert [len(cell) for cell in outs] == [1, 1]
    html_of = lambda o: "".join(o["data"].get("text/html", ""))  # noqa: E731 (.ipynb keeps lists of lines)
    assert sum(marker in html_of(o) for cell in outs for o in cell) == 1
    assert marker in html_of(outs[0][0])
    sizes = [len(json.dumps(cell)) for cell in outs]
    # issue 9's output budgets (BokehJS deflated in the first; both carry their timeline's picture)
    assert sizes[0] <= 2_100_000 and sizes[1] <= 600_000, sizes
    for o in (outs[0][0], outs[1][0]):
        assert {"text/html", "text/plain"} <= set(o["data"])
        assert "application/vnd.jupyter.widget-view+json" not in o["data"]  # never "model not found"
    body, _ = HTMLExporter(template_name="lab").from_filename(str(nb_path))
    html = tmp_path / "views.html"
    html.write_text(body, encoding="utf-8")
    pg = Page(browser, html.as_uri())
    pg.page.wait_for_function(js("() => $VIEWS.filter(v => v.frame).length == 2"), timeout=30_000)
    hover = pg.hover_widest_exact_glyph(1)
    assert "name:" in hover["tooltip"]
    pg.screenshot("nbconvert_hover.png")
    # nbconvert's lab template itself loads require.js and MathJax from cdnjs (unreachable offline); those
    # two failed loads are its console errors, none comes from our outputs
    template = ("https://cdnjs.cloudflare.com/ajax/libs/require.js/", "https://cdnjs.cloudflare.com/ajax/libs/mathjax/")
    assert all(u.startswith(template) for u in pg.failed), pg.failed
    ours = [e for e in pg.errors if not e.startswith("Failed to load resource")]
    assert ours == [] and len(pg.errors) - len(ours) <= len(pg.failed) and pg.dialogs == []
    pg.page.close()


def test_nvtx_range_named_like_html_is_shown_as_text_and_never_runs(browser, tmp_path):
    from nsight_magic import open_report
    from nsight_magic.views import write_view_html
    from nsight_magic.views.timeline_prepare import prepare_timeline

    from test_readers_nsys import record_cpu_report

    # real nsys, as the readers' tests record (and, as %%nsys, once more when it fails at start-up)
    rep = open_report(record_cpu_report(tmp_path, f"import time\nimport nvtx\nwith nvtx.annotate({XSS!r}):\n"
                                                  "    time.sleep(0.2)\n"))
    assert XSS in rep.nvtx["name"].astype(str).tolist()
    page_path = write_view_html(rep, tmp_path / "xss.html")
    assert XSS not in page_path.read_text(encoding="utf-8").split("<script", 1)[0]
    data = prepare_timeline(rep)
    assert {"nvtx", "osrt"} <= set(data.rows["kind"])  # a CPU-only profile: NVTX and OS runtime rows
    pg = Page(browser, page_path.as_uri())
    hover = pg.hover_widest_exact_glyph(cat=data.categories.index("NVTX"))
    assert XSS in hover["tooltip"]  # shown literally, as text
    pg.screenshot("xss_hover.png")
    pg.page.click(".nm-tabbtn[data-tab='4']")  # the NVTX table holds the name too
    assert pg.page.locator("table.nm-table td", has_text=XSS).count() >= 1
    pg.screenshot("xss_nvtx.png")
    has_img = pg.page.evaluate("""() => { let n = 0; const walk = (x) => { if (!x) return;
        if (x.tagName === 'IMG' && !x.classList.contains('nm-picture')) n++;  // but our picture of the timeline
        if (x.shadowRoot) walk(x.shadowRoot);
        for (const c of x.children || []) walk(c); };
        walk(document.body); return n; }""")
    assert has_img == 0
    assert pg.dialogs == [] and pg.errors == []
    pg.page.close()


def test_clicking_an_nvtx_range_highlights_the_kernels_launched_inside_it(browser, tmp_path):
    from nsight_magic import open_report
    from nsight_magic.views import write_view_html
    from nsight_magic.views.timeline_prepare import prepare_timeline

    rep = open_report(_fixture("c_range.sqlite"))
    nv = rep.nvtx[rep.nvtx["depth"] == 0].sort_values("duration_ns").iloc[-1]  # the longest top-level range
    # expected, straight from the reader's frames: kernels whose launching API call (same pid and thread)
    # starts inside the range
    api = rep.cuda_api[(rep.cuda_api["pid"] == nv["pid"]) & (rep.cuda_api["tid"] == nv["tid"])
                       & rep.cuda_api["start_ns"].between(nv["start_ns"], nv["end_ns"])]
    launched = rep.kernels.merge(api[["pid", "correlation_id"]], on=["pid", "correlation_id"])
    assert len(launched) > 0
    data = prepare_timeline(rep)
    nvtx_cat, name_code = data.categories.index("NVTX"), data.names.index(str(nv["name"]))
    path = write_view_html(rep, tmp_path / "view.html")
    pg = Page(browser, path.as_uri())
    pos = pg.page.evaluate(js("""([cat, name, t0]) => {
      const v = $VIEWS.find(v => v.frame);
      const d = v.model.renderers.map(r => r.data_source).find(s => 'detail' in s.data).data;
      let i = -1;
      for (let j = 0; j < d.left.length; j++)
        if (d.cat[j] == cat && d.name[j] == name && Math.abs(d.left[j] - t0) < 1e-3) i = j;
      const r = v.el.getBoundingClientRect();
      return {x: r.x + v.frame.x_scale.compute((d.left[i] + d.right[i]) / 2),
              y: r.y + v.frame.y_scale.compute(d.y[i])};
    }"""), [nvtx_cat, name_code, float((nv["start_ns"] - data.origin_ns) / 1e6)])
    pg.page.mouse.click(pos["x"], pos["y"])
    hl = in_page(pg.page, js("""() => { const v = $VIEWS.find(v => v.frame);
      const s = v.model.renderers.map(r => r.data_source).find(s => Object.keys(s.data).length == 4 && 'row' in s.data);
      return {n: s.data.left.length, rows: [...new Set(s.data.row)]}; }"""), "hl => hl.n > 0")
    assert hl["n"] == len(launched)
    gpu_rows = data.rows.loc[data.rows["kind"] == "gpu", "row"].tolist()
    assert set(hl["rows"]) <= set(gpu_rows)
    pg.screenshot("nvtx_highlight.png")
    assert pg.errors == []
    pg.page.close()


def test_clicking_a_finding_zooms_the_timeline_to_its_evidence(browser, tmp_path):
    """The Advice tab of the standalone page: a click on the pageable-copy finding moves the plot's range to the
    copies and shades them."""
    from nsight_magic import open_report
    from nsight_magic.views import write_view_html

    rep = open_report(_fixture("a_cuda_nvtx.sqlite"))
    path = write_view_html(rep, tmp_path / "view.html")
    pg = Page(browser, path.as_uri())
    before = pg.page.evaluate(js("() => { const v = $VIEWS.find(v => v.frame);"
                                 " return [v.model.x_range.start, v.model.x_range.end]; }"))
    pg.page.click(".nm-tabbtn[data-tab='5']")
    finding = pg.page.locator(".nm-finding[data-rule='cuda_memcpy_async']")
    assert "pageable host memory" in finding.inner_text()
    t0, t1 = float(finding.get_attribute("data-t0")), float(finding.get_attribute("data-t1"))
    pg.screenshot("advice_tab.png")
    finding.locator(".nm-title").click()
    start, end, bands = in_page(pg.page, js(
        "() => { const v = $VIEWS.find(v => v.frame), d = Bokeh.documents[0];"
        " const src = d.get_model_by_name(v.model.name + '-bands');"
        " return [v.model.x_range.start, v.model.x_range.end, src.data.left.length]; }"),
        "(now, before) => now[0] != before[0] || now[1] != before[1]", before)
    assert (start, end) != tuple(before)
    assert start <= t0 and end >= t1 and end - start <= 1.2 * (t1 - t0) + 0.01
    assert bands == len(rep.findings(rules=["cuda_memcpy_async"])[0].ranges) > 0
    # the zoom is around the copies that hold the time: the 3 MiB batches of steps 0, 2 and 4, not start-up
    nv = rep.nvtx.set_index("name")
    origin = rep.time_span.origin_ns
    assert t0 >= (nv.loc["step 0", "start_ns"] - origin) / 1e6 and t1 <= (nv.loc["step 5", "end_ns"] - origin) / 1e6
    assert pg.page.is_visible(".nm-pane >> nth=0")  # back on the Timeline tab
    pg.screenshot("advice_click_zoomed.png")
    assert pg.errors == [] and pg.dialogs == []
    pg.page.close()


def test_a_profile_loaded_again_in_one_notebook_draws_each_copy_from_its_kept_page(browser, tmp_path):
    """Issue 62: a profile drawn before is shown from its kept page (saved_analysis.kept_page), its ids made anew.
    Three %nsys_load of one profile in one notebook (the first draws and keeps it), nbconvert'd: three timelines
    drawn, no console error, and a kernel name clicked in the last copy zooms that copy's timeline only."""
    import re

    from nbconvert import HTMLExporter

    from conftest import run_notebook
    from nsight_magic.readers import nsys_cache

    folder = tmp_path / "prof"
    folder.mkdir()
    shutil.copy(REPO / "tests" / "data" / "nsys_h100_a_cuda_nvtx.sqlite", folder / "report.sqlite")
    nb = run_notebook(["%load_ext nsight_magic", *[f"%nsys_load {folder}"] * 3], tmp_path)
    assert list((nsys_cache.cache_dir(folder / "report.sqlite") / nsys_cache.RESULTS_DIR).glob("*/page.arrow"))
    outs = [c.outputs for c in nb.cells[1:]]
    assert [[o.output_type for o in cell] for cell in outs] == [["display_data"]] * 3, outs
    texts = [cell[0].data["text/plain"] for cell in outs]
    assert texts[1] == texts[2] == texts[0]
    uids = [re.search(r'class="nm-report" id="nm-([0-9a-f-]{36})"', cell[0].data["text/html"]).group(1)
            for cell in outs]
    assert len(set(uids)) == 3
    nbformat = pytest.importorskip("nbformat")
    nb_path = tmp_path / "again.ipynb"
    nbformat.write(nb, nb_path)
    body, _ = HTMLExporter(template_name="lab").from_filename(str(nb_path))
    html = tmp_path / "again.html"
    html.write_text(body, encoding="utf-8")
    pg = Page(browser, html.as_uri())
    pg.page.wait_for_function(js("() => $VIEWS.filter(v => v.frame).length == 3"), timeout=30_000)
    ranges = js("() => $VIEWS.filter(v => v.frame).map(v => [v.model.name, v.model.x_range.start, "
                "v.model.x_range.end])")
    before = pg.page.evaluate(ranges)
    assert sorted(r[0] for r in before) == sorted(f"nsight-timeline-{u}" for u in uids)
    last = pg.page.locator(f"#nm-{uids[2]}")
    last.locator(".nm-tabbtn[data-tab='1']").click()
    last.locator("table.nm-table td.nm-zoom").first.click(position={"x": 5, "y": 5})
    after = in_page(pg.page, ranges, "(now, before) => JSON.stringify(now) != JSON.stringify(before)", before)
    moved = [a[0] for a, b in zip(after, before) if a != b]
    assert moved == [f"nsight-timeline-{uids[2]}"], (before, after)
    pg.screenshot("kept_page_three_copies.png")
    ours = [e for e in pg.errors if not e.startswith("Failed to load resource")]
    assert ours == [] and pg.dialogs == []
    pg.page.close()
