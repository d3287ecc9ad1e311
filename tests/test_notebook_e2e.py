"""End to end: a real Jupyter kernel (nbclient) runs %%nsys cells under a real nsys."""
from __future__ import annotations

import json
import uuid

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import cell_text, nvtx_ranges, requires_nsys
from nsight_magic.views.output import VIEW_MIME

pytestmark = [requires_nsys, pytest.mark.nsys, pytest.mark.timeout(300)]

SECRET = uuid.uuid4().hex


def _notebook(cells: list[str]):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    return nb


def _run(nb, cwd, monkeypatch):
    # The kernel inherits this environment: a secret-looking variable the profiled process must not get.
    monkeypatch.setenv("NSIGHT_E2E_ACCESS_TOKEN", SECRET)
    client = NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


def test_nsys_cell_in_a_real_kernel(tmp_path, monkeypatch):
    nb = _notebook([
        "%load_ext nsight_magic",
        "%%nsight_setup\nimport time, nvtx\nwith nvtx.annotate('setup work'):\n    time.sleep(0.01)\n"
        "def helper(v):\n    return v * 2",
        "import time\nx = 20\nunused_here = object()\ndef spin(s):\n    end = time.perf_counter() + s\n"
        "    while time.perf_counter() < end:\n        pass",
        "%%nsys --name e2e --return y\nwith nvtx.annotate('outer'):\n    with nvtx.annotate('inner'):\n"
        "        print('cell sees x =', x, flush=True)\n        y = helper(x) + 2\n        spin(0.3)\n",
        "print('back in the notebook: y =', y)",
        "import glob\n%nsys_load {glob.glob('nsight-profiles/e2e-*')[0]}",
    ])
    _run(nb, tmp_path, monkeypatch)
    cells = nb.cells
    assert "remembered as setup code" in cell_text(cells[1])
    profiled = cell_text(cells[3])
    # the manifest: free names only, setup names excluded
    assert "sending 2 variables: spin (function" in profiled and "x (int" in profiled, profiled
    assert "cell sees x = 20" in cell_text(cells[3], "stdout")  # streamed from the child
    assert "nsys:" in profiled  # the status line
    assert "back in the notebook: y = 42" in cell_text(cells[4])
    for view_cell in (cells[3], cells[5]):  # the run's view, and the saved folder shown again
        bundles = [o.data for o in view_cell.outputs if o.output_type == "display_data"]
        report_bundle = [d for d in bundles if "nm-report" in d.get("text/html", "")]
        # headless: the static view only (no live part no frontend could show), never a bare widget
        assert not [d for d in bundles if VIEW_MIME in d or "application/vnd.jupyter.widget-view+json" in d]
        assert len(report_bundle) == 1
        assert "Timeline" in report_bundle[0]["text/html"] and "outer" in report_bundle[0]["text/plain"]

    folders = list((tmp_path / "nsight-profiles").iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("e2e-")
    folder = folders[0]
    for f in ("cell.py", "setup.py", "vars.json", "stdout.txt", "stderr.txt", "command.txt", "versions.json",
              "report.nsys-rep", "report.sqlite", "view.html"):
        assert (folder / f).exists(), f
    assert [v["name"] for v in json.loads((folder / "vars.json").read_text())] == ["spin", "x"]
    assert "def helper" in (folder / "setup.py").read_text()
    ranges = nvtx_ranges(folder / "report.sqlite")
    assert "outer" in ranges and "inner" in ranges
    assert "setup work" not in ranges  # setup ran outside the capture
    blob = (folder / "report.sqlite").read_bytes() + (folder / "report.nsys-rep").read_bytes()
    assert SECRET.encode() not in blob
    # a function the notebook sent (cloudpickle names its code "<dynamic-code>") is named by the cell that defined it
    from nsight_magic.report import open_report

    sent = json.loads((folder / "run.json").read_text())["sent_code"]
    assert [c for c in sent if c[0] == "spin"] == [["spin", 4, [c for c in sent if c[0] == "spin"][0][2], "In [3]"]]
    rep = open_report(folder / "report.sqlite")
    try:
        fr = rep.python_samples.frames
        if not rep.python_samples.empty:  # (once, under the suite's three workers, this profile had no samples)
            assert (fr[fr["function"] == "spin"]["file"] == "In [3]").all() and (fr["function"] == "spin").any(), fr
            assert not fr["file"].eq("<dynamic-code>").any(), fr
    finally:
        rep.close()
    versions = json.loads((folder / "versions.json").read_text())
    assert versions["nsys"].startswith("20")


def test_magic_help_and_usage_errors(tmp_path, monkeypatch):
    nb = _notebook([
        "%load_ext nsight_magic",
        "%%nsys --nsys-args '-o elsewhere'\npass",
        "%%nsys --capture sometimes\npass",
        "from nsight_magic.magics import NsightMagics\nprint(NsightMagics.nsys.__doc__)",
        "%nsys_load /no/such/report.nsys-rep",
    ])
    client = NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    assert "may not contain -o" in cell_text(nb.cells[1])
    assert "invalid choice: 'sometimes'" in cell_text(nb.cells[2])
    doc = cell_text(nb.cells[3])
    for flag in ("--trace", "--capture", "--timeout", "--vars", "--no-vars", "--return", "--nsys-args",
                 "--no-render", "--quiet", "--name", "--dir"):
        assert flag in doc
    assert "no such file" in cell_text(nb.cells[4])


def test_vars_quiet_no_render_and_nsys_args_change_what_happens(tmp_path, monkeypatch):
    nb = _notebook([
        "%load_ext nsight_magic",
        "a, b = 1, 2",
        "%%nsys --name picked --vars a --quiet --no-render --nsys-args '--trace-fork-before-exec=true'\n"
        "print('a is', a)\nprint('b sent:', 'b' in globals())",
        "%%nsys --name none --no-vars\nprint('a sent:', 'a' in globals())",
        "%nsys_load nsight-profiles --no-render",
        "%nsys_load nsight-profiles --pick picked --no-render",
        "%nsys_load nsight-profiles --pick 1 --no-render",
        "%nsys_load nsight-profiles",
        "%nsys_load nsight-profiles --pick no-such-name",
    ])
    nb.cells[-1].metadata["tags"] = ["raises-exception"]
    _run(nb, tmp_path, monkeypatch)
    quiet = nb.cells[2]
    assert "a is" not in cell_text(quiet, "stdout")  # --quiet: the cell's output is not streamed...
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in quiet.outputs)
    assert "Nsight Systems report" in cell_text(quiet)  # --no-render: the text view instead of the widget
    picked = next((tmp_path / "nsight-profiles").glob("picked-*"))
    assert (picked / "stdout.txt").read_text() == "a is 1\nb sent: False\n"  # ...but it is saved; --vars a only
    assert "--trace-fork-before-exec=true" in (picked / "command.txt").read_text()
    none = next((tmp_path / "nsight-profiles").glob("none-*"))
    assert (none / "stdout.txt").read_text() == "a sent: False\n"
    assert "sending" not in cell_text(nb.cells[3])
    # a folder of profiles: listed newest first, the newest shown unless --pick chooses another
    listing = cell_text(nb.cells[4])
    assert "2 profiles, newest first" in listing and "showing none-" in listing
    assert listing.index("none-") < listing.index("picked-") and "Nsight Systems report" in listing
    assert "showing picked-" in cell_text(nb.cells[5]) and "showing picked-" in cell_text(nb.cells[6])
    rendered = [o for o in nb.cells[7].outputs if o.output_type == "display_data"]
    assert "2 profiles" in rendered[0].data["text/html"]
    assert "no profile of that name" in cell_text(nb.cells[8])
    summary = json.loads((picked / "summary.json").read_text())
    assert summary["tool"] == "nsys" and summary["name"] == picked.name and summary["capture_ns"] > 0
    assert (picked / "report.nsight-cache" / "key.json").exists()


def test_streamed_output_is_bounded_and_all_of_it_is_saved(tmp_path, monkeypatch):
    nb = _notebook(["%load_ext nsight_magic",
                    "%%nsys --name chatty --no-render\nfor i in range(100_000):\n    print('line', i)"])
    _run(nb, tmp_path, monkeypatch)
    shown = cell_text(nb.cells[1], "stdout")
    assert "output cut after 200,000 characters" in shown and len(shown) < 210_000
    saved = next((tmp_path / "nsight-profiles").glob("chatty-*")) / "stdout.txt"
    assert saved.read_text().count("\n") == 100_000


@requires_nsys
@pytest.mark.nsys
@pytest.mark.timeout(240)
def test_a_cell_that_raises_in_the_profiled_process_fails_in_the_notebook(tmp_path, monkeypatch):
    """Issue 64: the profiled process's exception did not fail the notebook's cell, so Run All, nbclient and
    papermill went on past it.  Now the cell fails with one line (the traceback of the profiled cell stays above
    it), after its profile is drawn and kept; the cells after it are not run."""
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in (
        "%load_ext nsight_magic",
        "%%nsys --name raises --fresh\nimport nvtx\nwith nvtx.annotate('before'):\n    x = 1\nraise ValueError('planted')",
        "print('after')",
    )])
    with pytest.raises(CellExecutionError) as got:
        _run(nb, tmp_path, monkeypatch)
    assert got.value.ename == "CellRaised" and "nsight-magic: the profiled cell raised" in str(got.value)
    out = nb.cells[1].outputs
    err = [o for o in out if o.output_type == "error"]
    assert len(err) == 1 and err[0].ename == "CellRaised" and "its profile is kept in" in err[0].evalue
    assert err[0].traceback == [f"nsight-magic: {err[0].evalue}"]  # one line, no traceback of ours
    assert "ValueError: planted" in cell_text(nb.cells[1])  # the profiled cell's own traceback, above
    assert not nb.cells[2].get("outputs")  # Run All stopped there
    folder = next((tmp_path / "nsight-profiles").glob("raises-*"))
    assert (folder / "report.sqlite").exists() and "before" in nvtx_ranges(folder / "report.sqlite")
