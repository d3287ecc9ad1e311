"""The JupyterLab extension (labextension/) in a real JupyterLab and Chromium: the toolbar button profiles a cell
under a real nsys without changing its text, the Stop button interrupts a profile, the "Nsight profiles" sidebar
lists the new profile and opens its view in a sandboxed frame.  Screenshots go to test-artifacts/."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from conftest import ARGS, BOKEH_IDLE, CHROMIUM, requires_nsys
from jupyterlab_server import TOKEN, isolated_env, jupyterlab_server, needs_jupyterlab

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
CELL = "import time, nvtx\nwith nvtx.annotate('lab-range'):\n    time.sleep(0.05)\nprint('the cell ran')"
SLOW = "import time\nprint('sleeping', flush=True)\ntime.sleep(60)\nprint('not reached')"
BROKEN = "def broken(:\n    pass"  # a syntax error: the run leaves a folder with its cell, but no report

# the saved timeline of a view whose live one is gone: what its slot shows, outside the (hidden) live box
SAVED_TIMELINE_SHOWN = """slot => Array.from(slot.querySelectorAll(':scope > :not(.nm-live)')).some(el =>
    getComputedStyle(el).display !== 'none' && Array.from(el.querySelectorAll('*')).some(e =>
        e.shadowRoot && e.getBoundingClientRect().width > 100 && e.getBoundingClientRect().height > 50))"""

pytestmark = [*needs_jupyterlab, pytest.mark.timeout(420)]


def test_the_extension_is_installed_and_enabled(tmp_path):
    out = subprocess.run([sys.executable, "-m", "jupyterlab.labextensions", "list"], capture_output=True,
                         text=True, env=isolated_env(tmp_path), timeout=120)
    text = out.stdout + out.stderr
    line = next((x for x in text.splitlines() if "nsight-magic" in x), "")
    assert "enabled" in line and "OK" in line, text


def _open_notebook(page, base: str, name: str) -> None:
    page.goto(f"{base}/lab/tree/{name}?token={TOKEN}")
    page.wait_for_selector(".jp-Notebook .jp-InputArea-editor", timeout=90_000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)


def _cell_text(cell) -> str:
    return "\n".join(cell.locator(".cm-line").all_inner_texts())


@requires_nsys
@pytest.mark.nsys
def test_toolbar_button_profiles_the_cell_and_the_sidebar_opens_it(tmp_path):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with jupyterlab_server(tmp_path) as (base, root):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in (CELL, SLOW, BROKEN)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, root / "lab.ipynb")
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            page = b.new_page(viewport={"width": 1500, "height": 1000})
            errors, missing = [], []
            page.on("pageerror", lambda e: errors.append(str(e)))
            # the sidebar asks for the profiles folder before it exists: quietly, no 404 in the browser's log
            page.on("response", lambda r: missing.append(r.url) if r.status == 404 and "nsight-profiles" in r.url
                    else None)
            _open_notebook(page, base, "lab.ipynb")
            # the palette, searched for "nsys", offers profiling the cell first
            first_item = None
            for _ in range(5):  # the modal palette closes when the Lab, still settling, takes the focus: again
                page.locator(".lm-MenuBar-item", has_text="View").click()
                page.locator(".lm-Menu-item", has_text="Activate Command Palette").click()
                try:
                    page.locator(".lm-CommandPalette-input").fill("nsys", timeout=5_000)
                    first_item = page.locator(".lm-CommandPalette-item").first.inner_text(timeout=5_000)
                    break
                except PlaywrightTimeout:
                    page.keyboard.press("Escape")
            assert first_item is not None and "Profile cell with Nsight Systems" in first_item, first_item
            page.keyboard.press("Escape")
            cells = page.locator(".jp-Notebook .jp-CodeCell")
            first = cells.nth(0)
            first.locator(".jp-InputPrompt").click()  # make it the active cell
            button = page.locator(".jp-NotebookPanel-toolbar .nm-toolbar-nsys").first
            button.wait_for(timeout=30_000)
            out = first.locator(".jp-OutputArea")
            # every live view box our renderer makes (labextension/src/output.ts): counted from now on
            page.evaluate("""() => { window.nmLiveBoxes = 0; new MutationObserver(ms => ms.forEach(m =>
                m.addedNodes.forEach(n => { if (n.classList && n.classList.contains('nm-live') && !n.nmSeen) {
                    n.nmSeen = true; window.nmLiveBoxes += 1; } }))).observe(document.body,
                {childList: true, subtree: true}); }""")
            for _ in range(3):  # a request sent while the kernel connection settles can be dropped: retry
                button.click()
                try:
                    out.get_by_text("nsys: ok", exact=False).first.wait_for(timeout=150_000)
                    break
                except PlaywrightTimeout:
                    if "nsys:" in out.inner_text():
                        raise
            # the cell has returned: its output says the profile is loading, then the view takes that place
            loading = out.get_by_text("nsys: loading the profile", exact=False).first
            loading.wait_for(timeout=60_000)
            page.screenshot(path=str(ARTIFACTS / "labextension_profile_loading.png"))
            out.get_by_text("Timeline").first.wait_for(timeout=60_000)  # the view (the live widget's tabs)
            loading.wait_for(state="detached", timeout=10_000)
            out.get_by_text("profile ready", exact=False).first.wait_for(timeout=30_000)
            page.wait_for_function(BOKEH_IDLE, timeout=30_000)  # drawn, for the screenshot
            # the view came first with its live timeline only, then whole (views/output.py): the second update
            # put the saved timeline under the live one, which was moved there, not drawn again
            out.locator(".nm-live-slot .nm-picture").first.wait_for(state="attached", timeout=30_000)
            assert out.locator(".nm-live-slot .nm-drawing").count() == 0
            assert out.locator(".nm-output.nm-is-live .nm-live-slot .nm-live").count() == 1
            assert page.evaluate("() => window.nmLiveBoxes") == 1
            text = out.inner_text()
            assert "the cell ran" in text and "saved in" in text and "profile ready" in text, text
            assert "loading the profile" not in text, text
            assert _cell_text(first) == CELL  # the magic line was added for that execution only
            page.screenshot(path=str(ARTIFACTS / "labextension_profiled_cell.png"))

            # the sidebar lists the new profile; a click opens its view in a sandboxed frame
            page.locator(".jp-SideBar [data-id='nsight-magic-profiles']").click()
            entry = page.locator(".nm-profile").first
            entry.wait_for(timeout=30_000)
            # refreshed when the profile was drawn (the update's metadata), not only when the cell returned
            entry.get_by_text("top NVTX range: lab-range").wait_for(timeout=30_000)
            # named after the prompt the user sees ([1]), not one higher
            assert first.locator(".jp-InputPrompt").inner_text().strip() == "[1]:"
            assert entry.locator(".nm-profile-name").inner_text().startswith("cell1-")
            assert entry.locator(".nm-profile-meta").inner_text().startswith("nsys · ")
            assert "top NVTX range: lab-range" in entry.inner_text()
            page.screenshot(path=str(ARTIFACTS / "labextension_sidebar.png"))
            entry.click()
            frame_el = page.locator(".nm-viewer iframe").first
            frame_el.wait_for(timeout=30_000)
            assert frame_el.get_attribute("sandbox") == "allow-scripts"
            view = page.frame_locator(".nm-viewer iframe")
            view.locator("button.nm-tabbtn", has_text="Timeline").wait_for(timeout=60_000)
            view.locator("canvas").first.wait_for(timeout=60_000)
            frame_el.element_handle().content_frame().wait_for_function(BOKEH_IDLE, timeout=30_000)
            page.screenshot(path=str(ARTIFACTS / "labextension_view.png"))
            # the page's scripts run in an opaque origin: they cannot read the Lab's document
            reach = frame_el.evaluate("el => { try { return !!el.contentWindow.parent.document; } "
                                      "catch (e) { return 'blocked'; } }")
            assert reach in (True, "blocked")  # evaluated from the Lab itself: allowed; the frame's own check:
            inside = page.frames[-1].evaluate("() => { try { return !!window.parent.document.body; } "
                                              "catch (e) { return 'blocked'; } }")
            assert inside == "blocked"

            # Stop interrupts a running profile cleanly; the cell's text stays as it was
            page.locator(".lm-TabBar-tab", has_text="lab.ipynb").click()
            page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=60_000)
            second = cells.nth(1)
            second.locator(".jp-InputPrompt").click()
            button.click()
            second.locator(".jp-OutputArea").get_by_text("sleeping").first.wait_for(timeout=150_000)
            page.locator(".jp-NotebookPanel-toolbar [data-command='notebook:interrupt-kernel']").first.click()
            second.locator(".jp-OutputArea").get_by_text("interrupted", exact=False).first.wait_for(timeout=120_000)
            assert "not reached" not in second.locator(".jp-OutputArea").inner_text()
            assert _cell_text(second) == SLOW
            page.screenshot(path=str(ARTIFACTS / "labextension_interrupted.png"))

            # a run that failed before nsys started: the sidebar says which tool and that it left no report
            page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=60_000)
            third = cells.nth(2)
            third.locator(".jp-InputPrompt").click()
            button.click()
            said = third.locator(".jp-OutputArea").get_by_text("syntax error in the cell", exact=False)
            said.first.wait_for(timeout=120_000)
            failed = page.locator(".nm-profile", has_text="no report (failed run)").first
            failed.wait_for(timeout=30_000)
            assert failed.locator(".nm-profile-meta").inner_text().startswith("nsys · ")

            # "Insert %nsys_load cell" from the sidebar's menu leaves the focus in the notebook: Shift+Enter runs it
            page.locator(".nm-profile", has_text="top NVTX range: lab-range").first.click(button="right")
            page.locator(".lm-Menu-item", has_text="Insert %nsys_load cell").click()
            inserted = cells.nth(3)
            inserted.wait_for(timeout=10_000)
            assert _cell_text(inserted).startswith("%nsys_load ")
            page.keyboard.press("Shift+Enter")
            inserted.locator(".jp-OutputArea").get_by_text("Timeline").first.wait_for(timeout=120_000)
            page.screenshot(path=str(ARTIFACTS / "labextension_inserted_load.png"))

            # the kernel keeps the newest views' live timelines (views/live_views.py): with one kept, the first
            # cell's is closed, and its output shows the saved timeline in its place
            page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=60_000)
            assert out.locator(".nm-output.nm-is-live").count() == 1
            setting = cells.nth(4)
            setting.wait_for(timeout=10_000)  # Shift+Enter on the last cell added this one
            setting.locator(".cm-content").click()
            page.keyboard.type("%config NsightMagics.live_views = 1")
            page.keyboard.press("Shift+Enter")
            out.locator(".nm-output:not(.nm-is-live)").first.wait_for(timeout=30_000)
            assert out.locator(".nm-live:visible").count() == 0
            # the saved timeline shows: a drawn Bokeh plot, outside the hidden live box
            page.wait_for_function(SAVED_TIMELINE_SHOWN, arg=first.locator(".nm-live-slot").element_handle(),
                                   timeout=30_000)
            # the newest keeps its live one (its widget view is drawn asynchronously: output.ts syncLive)
            inserted.locator(".nm-output.nm-is-live").first.wait_for(timeout=30_000)
            assert inserted.locator(".nm-output.nm-is-live").count() == 1
            first.scroll_into_view_if_needed()
            page.screenshot(path=str(ARTIFACTS / "labextension_older_view_saved_timeline.png"))
            b.close()
        assert errors == [], errors
        assert missing == [], missing
        profiles = sorted((root / "nsight-profiles").iterdir())
        assert len(profiles) == 3
        assert json.loads((profiles[0] / "summary.json").read_text())["top_range"] == "lab-range"
