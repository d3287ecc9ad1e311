"""The saved notebook is the product (issue 43): what a user sees in a real JupyterLab and Notebook 7 (Chromium,
real server and kernel, Debian's nsys) when they Run All, save, shut the kernel down and reload; open a notebook
someone else saved (untrusted, then trusted); restart the kernel while a profile loads; use the profiles sidebar.

Every profile must stay visible: a drawn plot or the timeline's picture in each profile's output, never "model not
found".  Screenshots go to test-artifacts/ (saved_*.png): look at them when a test changes.
"""
from __future__ import annotations

import json
from pathlib import Path
import platform
import re
import shutil
import time

import nbformat
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from conftest import ARGS, CHROMIUM, REPO, eventually, in_page, requires_nsys
from jupyterlab_server import TOKEN, answer_dialog, jupyterlab_server, needs_jupyterlab

ARTIFACTS = REPO / "test-artifacts"
QUICKSTART = REPO / "notebooks" / "quickstart.ipynb"
SHIPPED = sorted(p for p in (REPO / "notebooks").glob("*.ipynb")
                 if any(c.get("outputs") for c in json.loads(p.read_text())["cells"]))

pytestmark = [*needs_jupyterlab, pytest.mark.timeout(600)]

# ipywidgets logs this when our renderer asks for the live widget of an output whose kernel is gone: the answer
# we ask for (the static view stays).  Notebook 7's own code throws the 'schema' error in this isolated setup, with
# or without our extension (tried), and asks for a file browser command it lacks for a notebook in a subfolder.
EXPECTED_ERRORS = ("widget model not found", "Failed to load resource", "reading 'schema'",
                   "Command 'filebrowser:open-path' not registered")


class Frontend:
    """A notebook open in JupyterLab ('lab') or Notebook 7 ('notebook') in Chromium, driven as a user drives it."""

    def __init__(self, browser, server, app: str, name: str):
        base, _root, folder = server
        name = f"{folder}/{name}"
        self.app, self.base, self.name = app, base, name
        self.page = browser.new_page(viewport={"width": 1500, "height": 1100})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.open()

    def open(self) -> None:
        # reset: JupyterLab's workspace would reopen the notebooks of the module's other tests too
        path = f"lab/tree/{self.name}?reset&" if self.app == "lab" else f"notebooks/{self.name}?"
        self.page.goto(f"{self.base}/{path}token={TOKEN}")
        self.page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)

    def idle(self, timeout: float = 120) -> None:
        self.page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=timeout * 1000)

    def menu(self, top: str, command: str) -> None:
        # a dialog Lab raised meanwhile (seen once before Run All, on a loaded machine) would take the click: a
        # kernel failure fails the test with its text, another is accepted and named in a warning
        answer_dialog(self.page, f"saved_{self.app}_dialog")
        self.page.keyboard.press("Escape")
        self.page.locator(".lm-MenuBar-item", has_text=top).first.click()
        self.page.locator(f".lm-Menu-item[data-command='{command}']").first.click()

    def accept_dialog(self, timeout: float = 10) -> None:
        self.page.locator(".jp-Dialog .jp-mod-accept").first.click(timeout=timeout * 1000)

    def run_all(self, timeout: float = 300) -> None:
        """Run > Run All Cells, then wait until every code cell has run (a number in its prompt) and all is idle.
        Requests sent while the page's kernel connection still settles can be lost (seen in both frontends): if no
        cell started after 20 s, Run All once more, as a user would."""
        self.idle()
        prompts = "() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(p => p.innerText)"
        for _ in range(3):
            self.menu("Run", "runmenu:run-all")
            try:
                self.page.wait_for_function(f"() => ({prompts})().some(p => /\\[(\\*|\\d+)\\]/.test(p))",
                                            timeout=20_000)
                break
            except PlaywrightTimeout:  # nothing ran: again
                continue
        try:
            self.page.wait_for_function(f"() => {{ const all = ({prompts})();"
                                        " return all.length > 0 && all.every(p => /\\[\\d+\\]/.test(p)); }",
                                        timeout=timeout * 1000)
        except PlaywrightTimeout:
            self.shot("run_all_timeout")
            raise AssertionError(f"Run All did not finish: prompts {self.page.evaluate(prompts)}") from None
        self.idle()

    def save(self) -> None:
        self.page.locator(".jp-Notebook").first.click(position={"x": 5, "y": 5})
        self.page.keyboard.press("Escape")
        self.page.keyboard.press("Control+s")
        # the document is clean again once saved
        dirty = ".jp-mod-dirty" if self.app == "lab" else ".jp-NotebookCheckpoint .jp-mod-dirty, .jp-mod-dirty"
        try:
            self.page.locator(dirty).first.wait_for(state="detached", timeout=10_000)
        except PlaywrightTimeout:
            raise AssertionError("the notebook stayed unsaved") from None

    def kernel_id(self) -> str | None:
        """The id of this notebook's kernel, from the server's sessions (REST API)."""
        sessions = self.page.request.get(f"{self.base}/api/sessions?token={TOKEN}").json()
        return next((x["kernel"]["id"] for x in sessions if x["path"] == self.name and x.get("kernel")), None)

    def shut_down_kernel(self) -> None:
        """Kernel > Shut Down, until the server no longer runs this notebook's kernel (its REST API; a notebook of
        the module's other tests may still have one: Lab starts a kernel when a page reloads a notebook)."""
        ours = self.kernel_id()
        assert ours is not None, "the notebook has no kernel to shut down"
        running = lambda: [k["id"] for k in self.page.request.get(f"{self.base}/api/kernels?token={TOKEN}").json()]
        self.menu("Kernel", "kernelmenu:shutdown")
        try:
            self.accept_dialog(3)
        except PlaywrightTimeout:  # Notebook 7 asks nothing
            pass
        if not eventually(lambda: ours not in running(), 30):
            raise AssertionError(f"the notebook's kernel {ours} still runs 30 s after Kernel > Shut Down")

    def views(self):
        """Each profile's output (our renderer's, or Lab's sanitized HTML for an untrusted one)."""
        return self.page.locator(".jp-OutputArea-output:has(.nm-report)")

    def outputs_text(self) -> str:
        return self.page.locator(".jp-Notebook").first.inner_text()

    def visible_profiles(self) -> list[str]:
        """Per profile output: 'plot' (a drawn canvas), 'picture' (the timeline's picture shown) or 'nothing'."""
        out = []
        for i in range(self.views().count()):
            v = self.views().nth(i)
            v.scroll_into_view_if_needed()
            drawn = v.evaluate("""el => { let n = 0; const walk = x => { if (!x) return;
                if (x.tagName === 'CANVAS' && x.width > 50 && x.offsetParent !== null) n++;
                if (x.shadowRoot) walk(x.shadowRoot); for (const c of x.children || []) walk(c); };
                walk(el); return n; }""")
            picture = v.locator("img.nm-picture").count() and v.locator("img.nm-picture").first.is_visible()
            out.append("plot" if drawn else "picture" if picture else "nothing")
        return out

    def profiles_become(self, want, timeout: float = 60) -> list[str]:
        """visible_profiles() once want(it) holds, or its last value after `timeout` s: Bokeh draws a view some
        time after its output appears (and after it is scrolled into view), so the test waits on the drawing."""
        end = time.monotonic() + timeout
        while True:
            got = self.visible_profiles()
            if want(got) or time.monotonic() > end:
                return got
            self.page.wait_for_timeout(200)

    def ours(self) -> list[str]:
        return [e for e in self.errors if not any(x in e for x in EXPECTED_ERRORS)]

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"saved_{name}.png"))

    def close(self) -> None:
        self.page.close()


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, timeout=60_000)
        yield b
        b.close()


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory):
    """One server for the module (its start costs seconds); each test works in a folder of its own."""
    tmp = tmp_path_factory.mktemp("lab")
    with jupyterlab_server(tmp) as server:
        yield server


@pytest.fixture
def server(lab_server, request):
    base, root = lab_server
    name = re.sub(r"\W+", "-", request.node.name).strip("-")[-50:]
    (root / name).mkdir()
    return base, root / name, name


def _header_glyph(page) -> str:
    return page.evaluate("""() => { const th = document.querySelector('.nm-output table.nm-table th:not([data-dir])');
        return th ? getComputedStyle(th, '::after').content : null; }""")


@requires_nsys
@pytest.mark.nsys
@pytest.mark.parametrize("app", ["lab", "notebook"])
def test_run_all_of_the_quickstart_then_save_shut_down_and_reload_shows_every_profile(browser, server, app):
    root = server[1]
    shutil.copy(QUICKSTART, root / "quickstart.ipynb")
    fe = Frontend(browser, server, app, "quickstart.ipynb")
    try:
        fe.idle()
        saved = json.loads(QUICKSTART.read_text())["metadata"]["language_info"]["version"]
        if saved == platform.python_version():  # Lab writes the kernel's Python version into the notebook
            # opening it changed nothing: that something does not happen has no event to wait on, hence a pause
            # (Lab writes the kernel's info when its reply comes, about when the kernel shows idle)
            fe.page.wait_for_timeout(2000)
            assert fe.page.locator(".jp-mod-dirty").count() == 0
        fe.run_all()
        text = fe.outputs_text()
        # open_report(folder) ran while the profile was still loading: it waited, with a line, and read it
        assert "Traceback" not in text and "ReportError" not in text, text[-3000:]
        assert "waiting for profile quickstart-" in text or "make inputs" in text
        summary = fe.page.locator(".jp-CodeCell", has_text="readable(report.nvtx_summary())").first
        assert "make inputs" in summary.locator(".jp-OutputArea").inner_text()
        # both profiles (the %%nsys cell's and %nsys_load's) are live views: the static one under the widget
        fe.page.wait_for_function("() => document.querySelectorAll('.nm-output.nm-is-live').length == 2",
                                  timeout=60_000)
        assert fe.views().count() == 2 and fe.visible_profiles() == ["plot", "plot"]
        assert _header_glyph(fe.page) == '" ↕"'  # U+2195, not the octal escape's "\x11" + "95"
        # a click on a table head of the live view sorts it: the NVTX table, by count (every range: 5, 1, ...)
        view = fe.views().first
        view.locator(".nm-tabbtn", has_text="NVTX").click()
        table = view.locator("table.nm-table").filter(has=fe.page.locator("th", has_text="count")).first
        head = table.locator("th", has_text=re.compile(r"^count$")).first
        def counts() -> list[int]:
            return table.evaluate("""t => { const i = [...t.tHead.rows[0].cells].findIndex(c => c.title === 'count');
                return [...t.tBodies[0].rows].map(r => parseInt(r.cells[i].dataset.v)); }""")

        head.click()
        assert head.get_attribute("data-dir") == "desc"
        assert counts() == sorted(counts(), reverse=True) and len(set(counts())) > 1, counts()
        head.click()
        assert head.get_attribute("data-dir") == "asc" and counts() == sorted(counts()), counts()
        # a range's name zooms the live timeline to it, and the kernel sends that window's exact events
        name_cell = table.locator("td.nm-zoom", has_text=re.compile(r"^step 1")).first
        name_cell.click()
        assert view.locator(".nm-tabbtn.nm-on").inner_text() == "Timeline"
        fe.page.wait_for_function("""el => { const live = el.querySelector('.nm-live'); return live &&
            live.offsetParent !== null; }""", arg=view.element_handle(), timeout=30_000)
        fe.shot(f"{app}_run_all_live")
        fe.save()
        fe.shut_down_kernel()
        fe.page.reload()
        fe.page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
        fe.page.wait_for_function("() => document.querySelectorAll('.nm-output').length == 2", timeout=60_000)
        # the kernel that made them is gone: every profile shows its saved, static view, drawn
        shown = fe.profiles_become(lambda s: s == ["plot", "plot"])
        assert shown == ["plot", "plot"], shown
        assert "model not found" not in fe.outputs_text()
        assert fe.page.locator(".nm-output.nm-is-live").count() == 0
        fe.views().first.scroll_into_view_if_needed()
        fe.shot(f"{app}_reloaded")
        assert not [u for u in fe.requests if "cdn." in u or "cdnjs" in u], "a view asked a CDN"
        assert fe.ours() == [], fe.ours()
    finally:
        fe.close()


def _code_cell(fe: Frontend, i: int):
    return fe.page.locator(".jp-Notebook .jp-CodeCell").nth(i)


def _run_cell(fe: Frontend, i: int) -> None:
    """Select code cell i (its prompt) and Shift+Enter; again if the request was lost while the kernel settled."""
    cell = _code_cell(fe, i)
    for _ in range(3):
        answer_dialog(fe.page, "saved_dialog")  # one over the cell takes the click (seen once, under load)
        try:
            cell.locator(".jp-InputPrompt").click(timeout=15_000)
            fe.page.keyboard.press("Shift+Enter")
            fe.page.wait_for_function("el => /\\[(\\*|\\d+)\\]/.test(el.innerText)",
                                      arg=cell.locator(".jp-InputPrompt").element_handle(), timeout=20_000)
            return
        except PlaywrightTimeout:
            continue
    answer_dialog(fe.page, "saved_dialog")  # a dialog that says what went wrong fails with its text
    fe.shot(f"cell_{i}_never_ran")
    raise AssertionError(f"cell {i} never ran")


def _sidebar_entries(fe: Frontend, count: int) -> dict[str, str]:
    """The sidebar's entries by name once it lists `count` profiles, none of them loading, after a refresh (or what
    it lists after 30 s)."""
    fe.page.locator(".nm-profiles-refresh").click()
    in_page(fe.page, "() => [...document.querySelectorAll('.nm-profile')].map(e => e.className)",
            "(classes, n) => classes.length == n && !classes.some(c => c.includes('nm-profile-loading'))", count, 30)
    entries = fe.page.locator(".nm-profile")
    out = {}
    for i in range(entries.count()):
        e = entries.nth(i)
        name = e.locator(".nm-profile-name").inner_text()
        out[name.rsplit("-", 2)[0]] = " | ".join([name, e.locator(".nm-profile-meta").inner_text(),
                                                  e.locator(".nm-profile-top").inner_text()])
    return out


@requires_nsys
@pytest.mark.nsys
def test_a_restart_while_a_profile_loads_reads_its_folder_again_when_it_is_not_there(browser, server):
    """The kernel restarts while a profile loads, and the profile's folder cannot be listed at that moment (here:
    moved away for 1.5 s; seen as a failed listing in a loaded full run): the line does not settle on "its folder"
    at once, it reads the folder again and says what is kept there."""
    root = server[1]
    slow = ("%%nsys --name delta -t nvtx\nimport nvtx\nfor i in range(1_000_000):\n"  # loads for seconds
            "    nvtx.push_range('tiny')\n    nvtx.pop_range()")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in ("%load_ext nsight_magic", slow)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "away.ipynb")
    fe = Frontend(browser, server, "lab", "away.ipynb")
    try:
        fe.idle()
        _run_cell(fe, 0)
        fe.idle()
        _run_cell(fe, 1)
        out = _code_cell(fe, 1).locator(".jp-OutputArea")
        out.locator("[data-nm-state='loading']").wait_for(timeout=120_000)
        folder = next((root / "nsight-profiles").glob("delta-*"))
        assert eventually(lambda: (folder / "report.sqlite").exists(), 120)  # exported: now it is being read
        away = folder.with_name(folder.name + "-away")
        fe.menu("Kernel", "kernelmenu:restart")
        # moved away once the restart is asked for, not before: a kernel still loading would find its own folder
        # gone and say so ("no such file or folder", in place of the loading line), which a faster load met
        # under a busy machine's timing
        fe.accept_dialog()
        folder.rename(away)
        try:
            time.sleep(1.5)  # the line's first reading of the folder finds nothing
        finally:
            away.rename(folder)
        settled = out.locator("[data-nm-state='interrupted'], [data-nm-state='finished']").first
        settled.wait_for(timeout=60_000)
        line = settled.inner_text()
        if (folder / "summary.json").exists():  # it finished loading as the kernel stopped
            assert line == f"nsys: the profile finished loading after this output was saved: %nsys_load {folder} " \
                           "shows it", line
        else:
            assert line == (f"nsys: not finished: the kernel stopped while this profile was loading; what nsys "
                            f"recorded is kept in {folder}/ (%nsys_load {folder} opens it)"), line
        fe.shot("restart_folder_away")
    finally:
        fe.close()


@requires_nsys
@pytest.mark.nsys
def test_a_restart_while_a_profile_loads_and_the_sidebar_after_reload(browser, server):
    root = server[1]
    cell = "%%nsys --name {n} -t nvtx\nimport nvtx, time\nfor i in range(3):\n    with nvtx.annotate('{n} step'):\n" \
           "        time.sleep(0.02)"
    slow = ("%%nsys --name gamma -t nvtx\nimport nvtx\nfor i in range(250_000):\n"  # enough ranges to load slowly
            "    nvtx.push_range('tiny')\n    nvtx.pop_range()")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in
                                         ("%load_ext nsight_magic", cell.format(n="alpha"), cell.format(n="beta"),
                                          slow)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "restart.ipynb")
    fe = Frontend(browser, server, "lab", "restart.ipynb")
    try:
        fe.idle()
        for i in (0, 1, 2):
            _run_cell(fe, i)
            fe.idle()
        fe.page.wait_for_function("() => document.querySelectorAll('.nm-output').length == 2", timeout=120_000)
        _run_cell(fe, 3)
        gamma = _code_cell(fe, 3).locator(".jp-OutputArea")
        loading = gamma.locator("[data-nm-state='loading']")
        loading.wait_for(timeout=120_000)
        assert "nsys: loading the profile" in loading.inner_text()
        # restart once nsys has written its report (the line says "loading" from `nsys stop` on; a restart during
        # the stop, seen on a loaded machine, leaves nothing recorded to load)
        folder = next((root / "nsight-profiles").glob("gamma-*"))
        assert eventually(lambda: any((folder / n).exists() for n in ("report.nsys-rep", "report.sqlite")), 60)
        fe.menu("Kernel", "kernelmenu:restart")
        fe.accept_dialog()
        # the line that said "loading" now says what happened, and how to open what nsys wrote
        settled = gamma.locator("[data-nm-state='interrupted'], [data-nm-state='finished']").first
        settled.wait_for(timeout=60_000)
        finished = (folder / "summary.json").exists()
        line = settled.inner_text()
        if finished:  # its loading ended as the kernel stopped (the restart waits up to 2 s for it)
            assert "finished loading after this output was saved" in line, line
        else:
            assert line.startswith("nsys: not finished: the kernel stopped while this profile was loading"), line
        assert f"%nsys_load {folder}" in line, line
        fe.shot("restart_settled")
        fe.idle()
        fe.save()
        fe.page.reload()
        fe.page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
        gamma = _code_cell(fe, 3).locator(".jp-OutputArea")
        again = gamma.locator("[data-nm-state='interrupted'], [data-nm-state='finished']").first
        again.wait_for(timeout=60_000)
        assert again.inner_text() == line  # the saved notebook says the same
        # the sidebar lists at once after the reload, in the right words
        fe.page.locator(".jp-SideBar [data-id='nsight-magic-profiles']").click()
        fe.page.locator(".nm-profile").first.wait_for(timeout=30_000)
        entries = _sidebar_entries(fe, 3)
        assert set(entries) == {"alpha", "beta", "gamma"}, entries
        assert "top NVTX range" not in entries["gamma"]
        if not finished:
            assert "not finished: raw recording kept" in entries["gamma"], entries
        assert "loading" not in " ".join(entries.values()) and "failed" not in " ".join(entries.values()), entries
        fe.shot("restart_sidebar")
        # compare two from the sidebar: %nsys_diff runs in a new cell below
        fe.idle()
        for name in ("alpha", "beta"):
            fe.page.locator(".nm-profile", has_text=f"{name}-").locator(".nm-profile-pick").check()
        fe.page.locator(".nm-profiles-compare").click()
        diff = fe.page.locator(".jp-CodeCell", has_text="%nsys_diff").first
        diff.locator(".nm-diff").wait_for(timeout=120_000)
        assert "alpha step" in diff.inner_text() and "beta step" in diff.inner_text()
        assert "alpha-" in diff.locator(".jp-InputArea").inner_text()
        fe.shot("sidebar_compare")
        # "Open last Nsight profile" opens the newest run: gamma
        fe.page.keyboard.press("Escape")
        fe.page.keyboard.press("Control+Shift+c")
        fe.page.locator(".lm-CommandPalette-input").fill("Open last Nsight profile")
        fe.page.keyboard.press("Enter")
        if finished:
            fe.page.locator(".lm-TabBar-tab", has_text="gamma-").wait_for(timeout=30_000)
        else:
            dialog = fe.page.locator(".jp-Dialog")
            dialog.wait_for(timeout=30_000)
            assert "gamma-" in dialog.inner_text() and "not finished" in dialog.inner_text()
            fe.page.keyboard.press("Escape")
            dialog.wait_for(state="detached", timeout=10_000)
        assert fe.ours() == [], fe.ours()
    finally:
        fe.close()


def _saved_since(path: Path, mtime_ns: int) -> dict | None:
    """The notebook at `path` once written after `mtime_ns` and whole (the server may still be writing it)."""
    try:
        return json.loads(path.read_text()) if path.stat().st_mtime_ns > mtime_ns else None
    except (OSError, ValueError):
        return None


def _trust(fe: Frontend) -> None:
    """The command palette's "Trust Notebook", then its dialog's Trust: outputs are rendered again, trusted."""
    fe.page.locator(".jp-Notebook").first.click(position={"x": 5, "y": 5})
    fe.page.keyboard.press("Escape")
    fe.page.keyboard.press("Control+Shift+c")
    fe.page.locator(".lm-CommandPalette-input").fill("Trust Notebook")
    fe.page.locator(".lm-CommandPalette-item[data-command='notebook:trust']").first.click()
    fe.accept_dialog()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_a_shipped_notebook_shows_its_profiles_untrusted_and_trusted(browser, server, path):
    """A notebook someone else saved: untrusted, each profile is plain HTML (the timeline's picture, the tables,
    one line saying how to make it interactive); trusted (Lab), drawn and interactive from the BokehJS it carries,
    offline (no CDN).  It opens clean: nothing to save."""
    root, app = server[1], "lab"
    shutil.copy(path, root / path.name)
    saved = json.loads(path.read_text())
    n_nsys = sum(1 for c in saved["cells"] for o in c.get("outputs", [])
                 if '<img class="nm-picture"' in "".join(o.get("data", {}).get("text/html", "")))
    n_views = sum(1 for c in saved["cells"] for o in c.get("outputs", [])
                  if "nm-report" in "".join(o.get("data", {}).get("text/html", "")))
    assert n_views >= 1
    fe = Frontend(browser, server, app, path.name)
    try:
        fe.page.wait_for_function(f"() => document.querySelectorAll('.nm-report').length == {n_views}",
                                  timeout=60_000)
        shown = fe.profiles_become(lambda s: s.count("picture") == n_nsys)
        assert shown.count("picture") == n_nsys and "plot" not in shown, shown  # no script ran
        assert "model not found" not in fe.outputs_text()
        for i in range(n_views):  # every view: its tables, and the line saying how to get the interactive view
            v = fe.views().nth(i)
            assert v.locator("table").count() >= 1
            assert "Trust the notebook" in (v.locator(".nm-noscript").text_content() or "")
        # opening it changed nothing (JupyterLab writes the kernel's name and Python version into the notebook:
        # where the Python version differs from the one it was saved with, that change is Lab's own)
        if saved["metadata"].get("language_info", {}).get("version") == platform.python_version():
            assert fe.page.locator(".jp-mod-dirty").count() == 0
        fe.views().first.scroll_into_view_if_needed()
        fe.shot(f"{app}_{path.stem}_untrusted")
        # then trusted
        _trust(fe)
        # re-rendered trusted (by Lab's HTML renderer: a headless run saved no live part): the scripts ran
        fe.page.wait_for_function("() => document.querySelectorAll('.nm-noscript').length == 0", timeout=60_000)
        # every timeline drawn (and Nsight Compute's charts)
        shown = fe.profiles_become(lambda s: s.count("plot") >= n_nsys and "picture" not in s)
        assert shown.count("plot") >= n_nsys and "picture" not in shown, shown
        assert fe.page.locator(".nm-noscript").count() == 0
        assert "model not found" not in fe.outputs_text()
        fe.views().first.scroll_into_view_if_needed()
        fe.shot(f"{app}_{path.stem}_trusted")
        assert not [u for u in fe.requests if "cdn." in u or "cdnjs" in u], [u for u in fe.requests if "cdn" in u]
        assert fe.ours() == [], fe.ours()
        # saved trusted: no output doubled (JupyterLab's Trust-then-save doubled consecutive stream outputs)
        before = (root / path.name).stat().st_mtime_ns
        fe.save()
        again = eventually(lambda: _saved_since(root / path.name, before), 30)
        assert again, "Lab's save did not rewrite the notebook"
        counts = lambda nb: [len(c.get("outputs", [])) for c in nb["cells"]]  # noqa: E731
        texts = lambda nb: ["".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", [])  # noqa: E731
                            if o["output_type"] == "stream"]
        assert counts(again) == counts(saved) and "".join(texts(again)) == "".join(texts(saved)), \
            f"{counts(saved)} -> {counts(again)}; {len(''.join(texts(saved)))} -> {len(''.join(texts(again)))} chars"
    finally:
        fe.close()
