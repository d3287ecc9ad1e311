"""The live view in a real JupyterLab: display_nsys in a notebook, wheel-zoom in Chromium, and the kernel
sends back the exact events of the visible window (jupyter_bokeh's BokehModel).

Needs JupyterLab, which the project does not depend on: skipped unless `jupyterlab` imports, or
NSIGHT_TEST_JUPYTERLAB_SITE names a folder made with `pip install --target DIR jupyterlab` (the server then
runs with DIR appended to its sys.path; the kernel keeps the project's environment).
"""
from __future__ import annotations

import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import fixture_path
CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
SITE = os.environ.get("NSIGHT_TEST_JUPYTERLAB_SITE")
VIEWS = ("(() => { const i = Bokeh.index; "
         "return (i && typeof i.values === 'function') ? [...i.values()] : Object.values(i || {}); })()")
TOKEN = "nsight-magic-test"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium (scripts/install-browser-debian.sh)"),
    pytest.mark.skipif(importlib.util.find_spec("jupyterlab") is None and not SITE,
                       reason="JupyterLab not installed (see this module's docstring)"),
    pytest.mark.skipif(importlib.util.find_spec("jupyter_bokeh") is None, reason="jupyter_bokeh not installed"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def jupyterlab(tmp_path):
    port = _free_port()
    root = tmp_path / "notebooks"
    root.mkdir()
    argv = ["jupyter-lab", "--no-browser", f"--port={port}", f"--IdentityProvider.token={TOKEN}",
            f"--ServerApp.root_dir={root}", "--allow-root"]
    env = dict(os.environ)
    if SITE:
        argv.append(f"--app-dir={Path(SITE) / 'share' / 'jupyter' / 'lab'}")
        env["JUPYTER_PATH"] = str(Path(SITE) / "share" / "jupyter")
    code = (f"import sys; sys.path.append({SITE!r}) if {bool(SITE)} else None; "
            f"from jupyterlab.labapp import main; sys.argv = {argv!r}; sys.exit(main())")
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while True:  # poll the server's API until it answers
            try:
                urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"JupyterLab did not start: {(tmp_path / 'server.log').read_text()[-2000:]}")
                time.sleep(0.3)
        yield base, root
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and the kernels it started
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def test_wheel_zoom_in_jupyterlab_fetches_exact_events_from_the_kernel(jupyterlab):
    import nbformat
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
            page.locator(".jp-InputArea-editor").first.click()
            page.keyboard.press("Shift+Enter")
            try:
                page.wait_for_function("(el) => /\\[(\\*|\\d+)\\]/.test(el.innerText)", arg=prompt.element_handle(),
                                       timeout=15_000)
                break
            except Exception:
                continue
        try:
            page.wait_for_function(f"() => window.Bokeh && {VIEWS}.some(v => v.frame)", timeout=90_000)
        except Exception:
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "jupyterlab_no_plot.png"))
            raise AssertionError(f"no plot; console errors: {errors[-5:]}; failed loads: {bad[-5:]}") from None
        caption = page.locator(".widget-label").first
        page.wait_for_function("() => document.querySelector('.widget-label').innerText.startsWith('showing')")
        before = caption.inner_text()
        assert re.match(r"showing [\d,]+ of 38,588 events", before), before
        pos = page.evaluate(f"""() => {{ const v = {VIEWS}.find(v => v.frame); v.el.scrollIntoView();
            const r = v.el.getBoundingClientRect();
            return {{x: r.x + v.frame.x_scale.compute(3300), y: r.y + v.frame.bbox.top + 30}}; }}""")
        page.mouse.move(pos["x"], pos["y"])
        for _ in range(9):
            page.mouse.wheel(0, -300)
            page.wait_for_timeout(80)
        page.wait_for_function("() => document.querySelector('.widget-label').innerText.startsWith('showing all')",
                               timeout=60_000)
        page.wait_for_timeout(1000)
        after = caption.inner_text()
        start, end, drawn = page.evaluate(f"""() => {{ const v = {VIEWS}.find(v => v.frame);
            const src = v.model.renderers.map(r => r.data_source).find(s => 'detail' in s.data);
            return [v.model.x_range.start, v.model.x_range.end, src.get_length()]; }}""")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "jupyterlab_live_zoom.png"))
        b.close()
    # the same window, computed here from the same report, has exactly the events the browser received
    data = prepare_timeline(open_report(report))
    g = view_glyphs(data, int(start * 1e6), int(end * 1e6), width_px=1100, budget=LIVE_BUDGET)
    assert g.shown == g.total and drawn == g.shown > 0 and after == g.caption
    # failed loads may only be JupyterLab's own optional server extensions (e.g. /lsp/ without jupyter-lsp)
    assert all("/lsp/" in u for u in bad), bad
    assert [e for e in errors if not e.startswith("Failed to load resource")] == []
    assert len([e for e in errors if e.startswith("Failed to load resource")]) <= len(bad)
