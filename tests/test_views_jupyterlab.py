"""The live view in a real JupyterLab: display_nsys in a notebook, wheel-zoom in Chromium, and the kernel
sends back the exact events of the visible window (jupyter_bokeh's BokehModel).

The server runs with its own temporary config, data and workspace folders (tests/jupyterlab_server.py).
"""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from conftest import ARGS, CHROMIUM, eventually, fixture_path
from jupyterlab_server import TOKEN, answer_dialog, jupyterlab_server, needs_jupyterlab

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
# every view of every Bokeh document, children of layouts included (Bokeh.index holds the root views only)
# of the live view only: our renderer puts it in the place of the static timeline (.nm-live), which stays hidden
VIEWS = ("(() => { const i = Bokeh.index; const roots = (i && i.roots) ? [...i.roots] : []; const all = []; "
         "const walk = v => { all.push(v); for (const c of (v.child_views || [])) walk(c); }; "
         "roots.filter(v => v.el && v.el.closest && v.el.closest('.nm-live')).forEach(walk); "
         "return all.filter(v => !(v.model.name || '').endsWith('-rowlabels')); })()")  # not the row-name plots

pytestmark = [
    *needs_jupyterlab,
    pytest.mark.timeout(300),
    pytest.mark.skipif(importlib.util.find_spec("jupyter_bokeh") is None, reason="jupyter_bokeh not installed"),
]


@pytest.fixture
def jupyterlab(tmp_path):
    with jupyterlab_server(tmp_path) as server:
        yield server


def test_wheel_zoom_in_jupyterlab_fetches_exact_events_from_the_kernel(jupyterlab):
    import nbformat
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    from nsight_magic import open_report
    from nsight_magic.views.report_view import LIVE_BUDGET
    from nsight_magic.views.timeline_prepare import prepare_timeline, view_glyphs

    report = fixture_path("nsys", "h100-2025.3", "b_cuda_nvtx_osrt.sqlite")
    base, root = jupyterlab
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from nsight_magic import open_report\nfrom nsight_magic.views import display_nsys\n"
        f"display_nsys(open_report({str(report)!r}))")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "live.ipynb")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = b.new_page(viewport={"width": 1500, "height": 1100})
        errors, bad = [], []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("response", lambda r: bad.append(r.url) if r.status >= 400 else None)
        page.goto(f"{base}/lab/tree/live.ipynb?token={TOKEN}")
        page.wait_for_selector(".jp-Notebook .jp-InputArea-editor", timeout=90_000)
        # run the cell once the kernel is idle (JupyterLab's execution indicator says so)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
        prompt = page.locator(".jp-Cell .jp-InputPrompt").first
        for _ in range(4):  # an execute request sent while the kernel connection settles can be dropped: retry
            answer_dialog(page)
            try:
                page.locator(".jp-InputArea-editor").first.click(timeout=15_000)
                page.keyboard.press("Shift+Enter")
                page.wait_for_function("(el) => /\\[(\\*|\\d+)\\]/.test(el.innerText)", arg=prompt.element_handle(),
                                       timeout=15_000)
                break
            except PlaywrightTimeout:
                continue
        else:
            answer_dialog(page)
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "jupyterlab_not_run.png"))
            raise AssertionError(f"the cell never ran; console errors: {errors[-5:]}")
        try:
            page.wait_for_function(f"() => window.Bokeh && {VIEWS}.some(v => v.frame)", timeout=90_000)
        except PlaywrightTimeout:
            answer_dialog(page)  # one that says the kernel died fails with its text
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "jupyterlab_no_plot.png"))
            raise AssertionError(f"no plot; console errors: {errors[-5:]}; failed loads: {bad[-5:]}") from None
        title = f"(() => ({VIEWS}.find(v => v.frame) || {{model: {{title: {{text: ''}}}}}}).model.title.text)()"
        page.wait_for_function(f"() => {title}.includes('events')")
        before = page.evaluate(f"() => {title}")
        # the caption shows once, as the plot's title: no label repeats it above the legend
        assert page.evaluate("() => [...document.querySelectorAll('.widget-label')]"
                             ".filter(e => e.innerText.startsWith('showing')).length") == 0
        data = prepare_timeline(open_report(report))
        total = len(data.events)
        assert re.match(rf"[\d,]+ of {total:,} events exact", before), before
        # the static view under it stays, hidden: a reopened notebook shows it (tests/test_saved_notebook.py)
        assert page.locator(".nm-output.nm-is-live .nm-live-slot.nm-live-on").count() == 1
        pos = page.evaluate(f"""() => {{ const v = {VIEWS}.find(v => v.frame); v.el.scrollIntoView();
            const r = v.el.getBoundingClientRect();
            return {{x: r.x + v.frame.x_scale.compute(3300), y: r.y + v.frame.bbox.top + 30}}; }}""")
        page.mouse.move(pos["x"], pos["y"])
        for _ in range(9):
            page.mouse.wheel(0, -300)
            page.wait_for_timeout(80)  # a user's pace: wheel steps apart, each a window of its own
        page.wait_for_function(f"() => {title}.startsWith('showing all')", timeout=60_000)
        # each wheel step asks the kernel for its window: wait until the browser shows the answer for the range it
        # shows (on a busy machine the caption of an earlier window can still be showing)
        state = f"""() => {{ const v = {VIEWS}.find(v => v.frame);
            const src = v.model.renderers.map(r => r.data_source).find(s => 'detail' in s.data);
            return [v.model.x_range.start, v.model.x_range.end, src.get_length(), v.model.title.text]; }}"""

        def answered():
            now = page.evaluate(state)
            g = view_glyphs(data, int(now[0] * 1e6), int(now[1] * 1e6), width_px=1100, budget=LIVE_BUDGET)
            return now if (now[2], now[3]) == (g.shown, g.caption) else None

        start, end, drawn, after = eventually(answered, 60, every=0.2) or page.evaluate(state)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "jupyterlab_live_zoom.png"))
        b.close()
    # the same window, computed here from the same report, has exactly the events the browser received
    g = view_glyphs(data, int(start * 1e6), int(end * 1e6), width_px=1100, budget=LIVE_BUDGET)
    assert g.shown == g.total and drawn == g.shown > 0 and after == g.caption
    # failed loads may only be JupyterLab's own optional server extensions (e.g. /lsp/ without jupyter-lsp)
    assert all("/lsp/" in u for u in bad), bad
    assert [e for e in errors if not e.startswith("Failed to load resource")] == []
    assert len([e for e in errors if e.startswith("Failed to load resource")]) <= len(bad)
