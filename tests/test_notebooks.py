"""The notebooks as a user runs them: the quick start executed headless like scripts/quickstart.sh (real kernel,
real nsys), its HTML copy under the output budget and drawing the timeline in a real Chromium; every notebook in
notebooks/ is valid and its saved outputs stay within the views' size budget."""
from __future__ import annotations

import json
import shutil

import pytest

from conftest import REPO, requires_nsys
from nsight_magic.views.bokehjs import LOADER_MARKER

NOTEBOOKS = REPO / "notebooks"
FIRST_OUTPUT_BUDGET = 2_100_000   # bytes of the first profile output of a notebook (BokehJS inline, plain:
#                                   the live view needs it at once; views/bokehjs.py)
LATER_OUTPUT_BUDGET = 300_000     # each later one (a 160k-kernel trace: benchmarks/view.py)


def _outputs(nb) -> list[int]:
    return [len(json.dumps(o)) for c in nb["cells"] for o in c.get("outputs", [])]


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_notebooks_are_valid_and_their_saved_outputs_are_bounded(path):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    sizes = _outputs(nb)
    assert all(s <= 2_000_000 for s in sizes), (path.name, max(sizes))


@requires_nsys
@pytest.mark.nsys
@pytest.mark.timeout(300)
def test_quickstart_runs_headless_and_its_html_draws_the_timeline(tmp_path):
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import ExecutePreprocessor
    import nbformat

    work = tmp_path / "notebooks"
    work.mkdir()
    shutil.copy(NOTEBOOKS / "quickstart.ipynb", work)
    nb = nbformat.read(work / "quickstart.ipynb", as_version=4)
    # what scripts/quickstart.sh does (store_widget_state=False: the static copy shows offline)
    ExecutePreprocessor(timeout=240, kernel_name="python3", store_widget_state=False).preprocess(
        nb, {"metadata": {"path": str(work)}})
    profile_outputs = [len(json.dumps(o)) for c in nb.cells for o in c.get("outputs", [])
                       if "Timeline" in json.dumps(o.get("data", {}).get("text/html", ""))]
    assert len(profile_outputs) == 2  # the %%nsys cell and %nsys_load
    loader = [len(json.dumps(o)) for c in nb.cells for o in c.get("outputs", [])
              if LOADER_MARKER in json.dumps(o.get("data", {}))]
    assert len(loader) == 1 and loader[0] + profile_outputs[0] <= FIRST_OUTPUT_BUDGET
    assert profile_outputs[1] <= LATER_OUTPUT_BUDGET
    # the summary reads as people read it: times with units, no raw nanoseconds or exponents
    summary = next(c for c in nb.cells if "readable(report.nvtx_summary())" in c.source)
    shown = summary.outputs[0]["data"]["text/html"]
    assert " ms<" in shown or " µs<" in shown
    assert "e+0" not in shown and ">total<" in shown
    assert shown.count(">step 0<") == 1  # nsys's label and ours are the same text here: one column shows it
    # scripts/quickstart.sh's template: nbconvert's lab page without the scripts it fetches from CDNs
    exporter = HTMLExporter(template_name="offline", extra_template_basedirs=[str(REPO / "nsight_magic" / "templates")])
    body, _ = exporter.from_notebook_node(nb)
    html = work / "quickstart.html"
    html.write_text(body, encoding="utf-8")
    assert html.stat().st_size <= FIRST_OUTPUT_BUDGET + 400_000  # + nbconvert's own page
    import re

    assert not re.findall(r"<script[^>]+src=\"https?://", body), re.findall(r"<script[^>]+src=\"[^\"]+", body)
    from conftest import ARGS, CHROMIUM
    if not CHROMIUM.exists():
        pytest.skip(f"no {CHROMIUM} (scripts/install-browser-debian.sh)")
    from test_views_browser import VIEWS

    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        errors, asked = [], []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.route("http*://**", lambda route: (asked.append(route.request.url), route.abort()))  # offline
        page.goto(html.as_uri())
        page.wait_for_function(f"() => window.Bokeh && Bokeh.index && {VIEWS}.filter(v => v.frame).length == 2",
                               timeout=30_000)
        labels = (f"() => {VIEWS}.filter(v => v.frame).map(v => v.model.renderers"
                  ".map(r => r.data_source).find(s => s.name && s.name.endsWith('-labels')).data.text)")
        # names on the bars: written by a script once the plot has its size (later on a busy machine), cut with an
        # ellipsis to the bar's width.  Which bars are wide enough follows the cell's timing ('make inputs' was
        # once too narrow for any label on a loaded machine): some range of the cell is named whole, and every cut
        # label is the start of one
        ranges = "['make inputs', 'checksum', 'step 0', 'step 1', 'step 2', 'step 3']"
        whole = f"x => {ranges}.includes(x)"
        # ... or of a bar of another row: the Python row's summary of what the host ran ('line 3 › main (…)', or
        # '(nsight-magic)' for a sample that caught only our frames: seen on a loaded machine), an OS call of the OS
        # runtime row
        shown = ranges[:-1] + (", 'line ', '(nsight-magic)', 'pthread_cond_timedwait', 'pthread_cond_wait', 'poll', 'read', 'write', "
                               "'select', 'epoll_wait', 'sem_wait', 'sem_timedwait', 'nanosleep', 'ioctl', 'open', "
                               "'close', 'fopen', 'mmap', 'munmap']")
        cut_ok = (f"x => !x.endsWith('…') || x.startsWith('line ') || "
                  f"(x.length > 1 && {shown}.some(n => n.startsWith(x.slice(0, -1))))")
        try:
            page.wait_for_function(f"() => ({labels})().every(t => t.some({whole}) && t.every({cut_ok}))",
                                   timeout=30_000)
        except Exception:  # noqa: BLE001 - say what was there instead
            raise AssertionError(f"bar names: {page.evaluate(labels)}") from None
        page.screenshot(path=str(REPO / "test-artifacts" / "quickstart.png"), full_page=True)
        b.close()
    assert asked == [], asked  # nothing was fetched from the network
    assert errors == []


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_shipped_outputs_name_no_folder_of_the_machine_that_ran_them(path):
    """Issue 65: the saved outputs cited the GPU check's temporary folders (/tmp/gpu-check-.../nsight-profiles/...),
    which exist nowhere else: they name the profile folder relative to the notebook, as a user who runs it gets
    it (scripts/ship_notebook.py, applied by the GPU check), and the notebook says that the folders are not
    shipped."""
    import re

    text = path.read_text()
    assert not re.findall(r"/(?:tmp|home|root|work|check)/[^\s\"'<>]*nsight-profiles", text)
    nb = json.loads(text)
    if any("nsight-profiles/" in json.dumps(c.get("outputs", [])) for c in nb["cells"]):
        first = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
        assert "not part of the repository" in "".join(first["source"])
    # every link of the outputs resolves from the repository: data URIs, anchors, or files beside the notebook
    for c in nb["cells"]:
        for o in c.get("outputs", []):
            html = "".join(o.get("data", {}).get("text/html", ""))
            for ref in re.findall(r"""(?:href|src)\s*=\s*["']([^"']*)["']""", html):
                assert ref.startswith(("data:", "#")) or (path.parent / ref.split("#")[0]).exists(), ref[:120]
    # one output per run of one stream: JupyterLab's Trust-then-save merges consecutive ones into the first and
    # keeps the rest, saving every line twice (test_saved_notebook checks it in Lab)
    for c in nb["cells"]:
        kinds = [(o["output_type"], o.get("name")) for o in c.get("outputs", [])]
        assert not any(a == b and a[0] == "stream" for a, b in zip(kinds, kinds[1:])), kinds
