"""Profile in place (issue 44): a real kernel started from the in-place kernelspec (installed into a temporary
prefix) runs under Debian's nsys; `%%nsys` records the cell in the kernel itself, between `nsys start` and
`nsys stop` of the kernel's session.  Driven as JupyterLab drives a kernel (allow_stdin), so the profile loads in
the background as in the Lab."""
from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

import pytest

from conftest import ARGS, BOKEH_IDLE, CHROMIUM, requires_chromium, requires_nsys
from kernels import inplace_kernel, nsys_of

pytestmark = [requires_nsys, pytest.mark.nsys, pytest.mark.timeout(400)]

SECRET = f"inplace-{uuid.uuid4().hex}"


@pytest.fixture
def kernel(tmp_path):
    k = inplace_kernel(tmp_path, env={"MY_SERVICE_CREDS": SECRET})
    session = k.session
    yield k
    k.close()
    end = time.monotonic() + 20
    while nsys_of(session) and time.monotonic() < end:
        time.sleep(0.2)
    assert nsys_of(session) == []  # nothing of the kernel's nsys is left


def test_the_cell_runs_once_in_the_kernel_and_its_state_stays(kernel):
    assert "in-place kernel" not in kernel.run("counter = 0")
    out = kernel.run("%%nsys --name first\nimport nvtx\nwith nvtx.annotate('inside the cell'):\n    counter += 1\n"
                     "print('counter', counter)")
    assert "counter 1" in out and "profiled in place" in out and "profile ready" in out, out
    assert "environment variables are not passed" not in out  # the kernel's own environment is the profiled one
    # back to back: the second waits for the first's nsys stop, if needed, and both record
    out2 = kernel.run("%%nsys --name second\ncounter += 1\nbig = list(range(10))\nprint('counter', counter)")
    assert "counter 2" in out2 and "profile ready" in out2, out2
    assert "counter 2 [0, 1, 2]" in kernel.run("print('counter', counter, big[:3])")  # what the cell made stays
    folders = {p.name.rsplit("-", 2)[0]: p for p in (kernel.cwd / "nsight-profiles").iterdir()}
    assert set(folders) == {"first", "second"}
    from nsight_magic import open_report

    first = open_report(folders["first"])
    names = set(first.nvtx_summary()["name"])
    assert names == {"inside the cell"}, names  # the cell's range; the magic's own work is outside the capture
    assert json.loads((folders["first"] / "run.json").read_text())["mode"] == "in place"
    assert "nsys" in kernel.run("%nsys_session") and "2 cells recorded" in kernel.run("%nsys_session")
    # the kernel is the profiled process: it got the allow-listed environment, so no secret is in the reports
    for f in folders.values():
        for p in f.rglob("*"):
            if p.is_file():
                assert SECRET.encode() not in p.read_bytes(), p


def test_an_exception_and_ctrl_c_in_the_cell_keep_the_profile_and_the_kernel(kernel):
    out = kernel.run("%%nsys --name boom\nimport nvtx\nwith nvtx.annotate('before the error'):\n    x = 1\n"
                     "raise ValueError('boom in the cell')")
    assert "ValueError: boom in the cell" in out and "profile ready" in out, out
    out = kernel.run("%%nsys --name stopped\nimport time, nvtx\nwith nvtx.annotate('sleeping'):\n"
                     "    time.sleep(30)\nprint('not reached')", interrupt_after=4)
    assert "KeyboardInterrupt" in out and not re.search("^not reached", out, re.M) and "profile ready" in out, out
    assert "alive 1" in kernel.run("print('alive', x)")
    from nsight_magic import open_report

    folder = next((kernel.cwd / "nsight-profiles").glob("stopped-*"))
    assert "sleeping" in set(open_report(folder).nvtx_summary()["name"])


def test_what_cannot_be_in_place_says_so_and_runs_fresh(kernel):
    out = kernel.run("%%nsys --name other -t nvtx,osrt\nprint('ran fresh')")
    assert "in a fresh process, not in place: this kernel traces nvtx" in out, out
    assert "nsight-magic kernel install --trace nvtx,osrt" in out and "ran fresh" in out
    out = kernel.run("%%nsys --name timed --timeout 2\nimport time\nfor _ in range(100):\n    time.sleep(0.1)\n"
                     "print('not reached')")
    assert "ran past --timeout 2 s" in out and not re.search("^not reached", out, re.M), out
    assert "still here" in kernel.run("print('still here')")


@pytest.mark.parametrize("how", ["restart", "shutdown"])
def test_a_restart_or_shutdown_leaves_no_nsys(tmp_path, how):
    k = inplace_kernel(tmp_path)
    first = last = k.session
    try:
        assert "profile ready" in k.run("%%nsys --name once\nprint('once')")
        assert nsys_of(first)
        if how == "restart":
            k.km.restart_kernel(now=False)
            k.kc.wait_for_ready(timeout=120)
            last = k.session
            assert "profile ready" in k.run("%%nsys --name after\nprint('after the restart')")
            assert nsys_of(first) == [] or last == first  # the old session went with its kernel
    finally:
        k.close()
    end = time.monotonic() + 20
    while (nsys_of(last) or nsys_of(first)) and time.monotonic() < end:
        time.sleep(0.2)
    assert nsys_of(last) == [] and nsys_of(first) == []


@pytest.mark.browser
@requires_chromium
@pytest.mark.timeout(400)
def test_jupyterlab_offers_the_kernel_and_it_profiles_a_cell_in_place(tmp_path, monkeypatch):
    """The kernel in JupyterLab's launcher; a notebook made from it profiles a cell in place and draws it."""
    from jupyterlab_server import TOKEN, jupyterlab_server
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    from kernels import install_inplace_kernel

    kernels = install_inplace_kernel(tmp_path / "prefix", "nvtx")
    monkeypatch.setenv("JUPYTER_PATH", str(kernels.parent))
    artifacts = Path(__file__).resolve().parents[1] / "test-artifacts"
    with jupyterlab_server(tmp_path) as (base, root):
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            page = b.new_page(viewport={"width": 1500, "height": 1000})
            page.goto(f"{base}/lab?reset&token={TOKEN}")
            card = page.locator(".jp-LauncherCard", has_text="Python 3 (nsight-magic, profile in place)").first
            card.wait_for(timeout=90_000)
            artifacts.mkdir(exist_ok=True)
            page.screenshot(path=str(artifacts / "inplace_launcher.png"))
            card.click()
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=120_000)
            editor = page.locator(".jp-Notebook .jp-Cell .cm-content[contenteditable='true']").first
            editor.click(timeout=30_000)
            # no indented block: whether the editor auto-indents depends on when its Python mode loaded
            page.keyboard.type("%%nsys --name lab\nimport nvtx\nnvtx.push_range('in the lab')\n")
            page.keyboard.type("value = 41 + 1\nprint('value', value)\nnvtx.pop_range()")
            assert "%%nsys --name lab" in editor.inner_text() and "nvtx.pop_range()" in editor.inner_text()
            out = page.locator(".jp-Notebook .jp-CodeCell").first.locator(".jp-OutputArea")
            for _ in range(3):  # a request sent while the kernel connection settles can be lost: again
                page.keyboard.press("Shift+Enter")
                try:
                    out.get_by_text("profiled in place", exact=False).first.wait_for(timeout=60_000)
                    break
                except PlaywrightTimeout:
                    editor.click()
            out.locator(".nm-output").first.wait_for(timeout=120_000)
            page.wait_for_function(BOKEH_IDLE, timeout=60_000)  # drawn, for the screenshot
            text = out.inner_text()
            assert "value 42" in text and "profiled in place" in text, text
            assert page.locator(".jp-Notebook-ExecutionIndicator").count() >= 1
            page.screenshot(path=str(artifacts / "inplace_lab_cell.png"))
            b.close()
    names = [p.name for p in (root / "nsight-profiles").iterdir()]
    assert len(names) == 1 and names[0].startswith("lab-")


def test_when_nsys_dies_the_kernel_lives_and_says_the_session_is_gone(kernel):
    """nsys's agent killed: `nsys launch` exits (Jupyter would restart the kernel: its handle is that process);
    until then the kernel answers, and %%nsys says the session has ended instead of recording nothing."""
    import os
    import signal

    assert "profile ready" in kernel.run("%%nsys --name before\nkept = 7")
    session = kernel.session
    agents = [int(line.split()[0]) for line in nsys_of(session) if "--start-agent" in line]
    assert agents, nsys_of(session)
    for pid in agents:
        os.kill(pid, signal.SIGKILL)
    end = time.monotonic() + 20
    while any(" launch " in line for line in nsys_of(session)) and time.monotonic() < end:
        time.sleep(0.2)
    out = kernel.run("%%nsys --name after\nprint('not run', kept)")
    assert f"nsys session {session} has ended" in out and "%%nsys --fresh" in out, out
    assert "not run" not in out.replace("was not run", "")
    assert "kept 7" in kernel.run("print('kept', kept)")
    after = next((kernel.cwd / "nsight-profiles").glob("after-*"))
    assert (after / "cell.py").read_text().strip() == "print('not run', kept)"  # nothing lost: the cell stays
