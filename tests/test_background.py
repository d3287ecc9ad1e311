"""A profiled cell returns when its code has finished; the profile is written, exported, read and drawn in the
background and fills the same output in place.  Real kernels (jupyter_client as JupyterLab drives them; nbclient,
nbconvert and papermill headless), real nsys (Debian's 2022.4 on CPU)."""
from __future__ import annotations

import json
import queue
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from conftest import READY_KEY, cell_text, nvtx_ranges, requires_nsys, started_by_this_worker
from nsight_magic.views.output import STATUS_MIME, VIEW_MIME

pytestmark = [requires_nsys, pytest.mark.nsys, pytest.mark.timeout(400)]

SETUP = "%%nsight_setup\nimport time, nvtx\nprint('setup ran')"
CELL = "%%nsys --name {name} -t nvtx\nfor i in range(3):\n    with nvtx.annotate('{name} step'):\n        time.sleep(0.05)\n"


def _ours() -> list[str]:
    """Processes of nsight-magic's runs and sessions (they carry our ids in their environment)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                env = (d / "environ").read_bytes()
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:160]
            except OSError:
                continue
            if any(k in env for k in (b"NSIGHT_MAGIC_SESSION_ID=", b"NSIGHT_MAGIC_RUN_ID=", b"NSIGHT_MAGIC_TOOL_OF=")) \
                    and started_by_this_worker(env):
                out.append(f"{d.name} {cmd}")
    return out


def _none_left(before, timeout: float = 30.0) -> list[str]:
    end = time.monotonic() + timeout
    while time.monotonic() < end and set(_ours()) - set(before):
        time.sleep(0.2)
    return sorted(set(_ours()) - set(before))


class Frontend:
    """A kernel driven as JupyterLab drives it (allow_stdin), every iopub message kept with its arrival."""

    def __init__(self, cwd: Path):
        from conftest import start_kernel

        self.km, self.kc = start_kernel(cwd)
        self.msgs: list[dict] = []

    def execute(self, code: str, timeout: float = 240) -> dict:
        """Run a cell; returns its execute_reply (with 'arrived', a monotonic time) once the kernel is idle."""
        msg_id = self.kc.execute(code, allow_stdin=True)
        reply, idle, end = None, False, time.monotonic() + timeout
        while (reply is None or not idle) and time.monotonic() < end:
            if reply is None:
                try:
                    r = self.kc.get_shell_msg(timeout=0.05)
                    if r["parent_header"].get("msg_id") == msg_id:
                        reply = {**r, "arrived": time.monotonic()}
                except queue.Empty:
                    pass
            for m in self.drain(0.05):
                if m["parent_header"].get("msg_id") == msg_id and m["header"]["msg_type"] == "status" \
                        and m["content"]["execution_state"] == "idle":
                    idle = True
        assert reply is not None and idle, f"{code[:40]!r} did not finish within {timeout} s"
        reply["msg_id"] = msg_id
        return reply

    def drain(self, timeout: float) -> list[dict]:
        got = []
        try:
            m = self.kc.get_iopub_msg(timeout=timeout)
            while True:
                m["arrived"] = time.monotonic()
                got.append(m)
                m = self.kc.get_iopub_msg(timeout=0)
        except queue.Empty:
            pass
        self.msgs += got
        return got

    def of(self, msg_id: str, kinds=None) -> list[dict]:
        return [m for m in self.msgs if m["parent_header"].get("msg_id") == msg_id and
                (kinds is None or m["header"]["msg_type"] in kinds)]

    def text(self, msg_id: str) -> str:
        out = []
        for m in self.of(msg_id, ("stream", "display_data", "update_display_data", "error")):
            c = m["content"]
            out.append(c.get("text") or "\n".join(c.get("traceback", [])) or c.get("data", {}).get("text/plain", ""))
        return "\n".join(out)

    def drawn(self, msg_id: str, timeout: float = 120) -> dict:
        """The update that drew the profile of cell `msg_id` (its display metadata carries READY_KEY)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            hits = [m for m in self.of(msg_id, ("update_display_data",)) if READY_KEY in m["content"]["metadata"]]
            if hits:
                return hits[-1]
            self.drain(0.2)
        pytest.fail(f"no profile drawn within {timeout} s:\n{self.text(msg_id)[-3000:]}")

    def run(self, code: str) -> str:
        return self.text(self.execute(code)["msg_id"])

    def close(self, now: bool = False) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=now)


@pytest.fixture
def lab(tmp_path):
    before = _ours()
    fe = Frontend(tmp_path)
    fe.run("%load_ext nsight_magic")
    fe.before = before
    yield fe
    fe.close()
    assert _none_left(before) == []


def _profiles(root: Path) -> dict[str, Path]:
    return {p.name.rsplit("-", 2)[0]: p for p in sorted(root.iterdir()) if p.is_dir()}


def test_the_cell_returns_before_its_profile_is_drawn_and_the_output_fills_in_place(lab, tmp_path):
    lab.run(SETUP)
    reply = lab.execute(CELL.format(name="first"))
    assert reply["content"]["status"] == "ok"
    # before the reply: the status line, the cell's own output, and the place where the profile will appear
    early = [m for m in lab.of(reply["msg_id"]) if m["header"]["date"] <= reply["header"]["date"]]  # kernel clock
    placeholders = [m for m in early if m["header"]["msg_type"] == "display_data" and
                    m["content"]["data"].get("text/plain", "").startswith("nsys: loading the profile")]
    assert len(placeholders) == 1, lab.text(reply["msg_id"])
    # the loading line says which folder and kernel, for the frontend to tell when its kernel stops first
    status = placeholders[0]["content"]["data"][STATUS_MIME]
    assert status["state"] == "loading" and status["tool"] == "nsys" and status["rel"].startswith("nsight-profiles/")
    display_id = placeholders[0]["content"]["transient"]["display_id"]
    drawn = lab.drawn(reply["msg_id"])
    # after the reply, the same output is replaced: the view (live widget, static page, text)
    assert drawn["header"]["date"] > reply["header"]["date"]
    assert drawn["content"]["transient"]["display_id"] == display_id
    data = drawn["content"]["data"]
    assert VIEW_MIME in data and "nm-report" in data["text/html"]  # the static view and its live part
    assert "application/vnd.jupyter.widget-view+json" not in data
    assert data["text/plain"].startswith("Verdict:"), data["text/plain"][:300]
    assert drawn["content"]["metadata"][READY_KEY]["state"] == "ready"
    status = [m["content"]["data"]["text/plain"] for m in lab.of(reply["msg_id"], ("update_display_data",))
              if m["content"]["data"].get("text/plain", "").startswith("nsys: ok in")]
    assert "the profile loads below" in status[0] and "profile ready" in status[-1], status
    folder = Path(drawn["content"]["metadata"][READY_KEY]["folder"])
    assert (folder / "view.html").is_file() and (folder / "report.sqlite").is_file()
    assert not (folder / "finishing.json").exists()
    timings = json.loads((folder / "timings.json").read_text())
    assert timings["record_s"] > 0 and timings["finish_s"] > 0  # both stages timed, each on its own
    # the view came first with its live timeline only (about half of the drawing), then whole: same live model,
    # and the saved timeline (its picture and plot) only in the whole one, which the notebook saves
    views = [m for m in lab.of(reply["msg_id"], ("update_display_data",)) if VIEW_MIME in m["content"]["data"]]
    assert len(views) == 2 and views[-1] is drawn, [m["content"]["metadata"] for m in views]
    first = views[0]["content"]
    assert READY_KEY not in first["metadata"] and first["data"][VIEW_MIME] == data[VIEW_MIME]
    picture, drawing = 'class="nm-picture"', 'class="nm-drawing"'
    assert drawing in first["data"]["text/html"] and picture not in first["data"]["text/html"]
    assert picture in data["text/html"] and drawing not in data["text/html"]
    assert first["data"]["text/plain"] == data["text/plain"]
    assert 0 < timings["drawn_s"] < timings["draw_s"], timings


def test_two_cells_in_a_row_give_two_profiles_and_last_and_diff_wait_for_them(lab, tmp_path):
    lab.run(SETUP)
    a = lab.execute(CELL.format(name="alpha"))
    b = lab.execute(CELL.format(name="beta"))   # while alpha's recording is still being written
    # last(): the newest profile, waited for
    shown = lab.run("r = __import__('nsight_magic').last()\nprint(type(r).__name__, sorted(set(r.nvtx_summary()['name'])))")
    assert "NsysReport ['beta step']" in shown, shown
    out = lab.run("%nsys_diff --no-render")
    assert "alpha step" in out and "beta step" in out, out
    for m in (a, b):
        lab.drawn(m["msg_id"])
    folders = _profiles(tmp_path / "nsight-profiles")
    for name in ("alpha", "beta"):
        ranges = set(nvtx_ranges(folders[name] / "report.sqlite"))
        assert f"{name} step" in ranges and ({"alpha step", "beta step"} - {f"{name} step"}).isdisjoint(ranges)


def test_older_profiles_let_go_of_their_report_and_open_it_again_when_asked(lab, tmp_path):
    """A kernel that profiles cell after cell keeps the newest reports open (last(), %nsys_diff) and closes the
    older ones (their frames, their sqlite connection): memory stays bounded; an old report opens again."""
    lab.run(SETUP)
    msgs = [lab.execute(CELL.format(name=n)) for n in ("one", "two", "three")]
    for m in msgs:
        lab.drawn(m["msg_id"])
    four = lab.execute(CELL.format(name="four"))  # the job that releases the oldest when it starts
    lab.drawn(four["msg_id"])  # its finish no longer opens and closes files while the kernel's are listed
    shown = lab.run(
        "import os\nfrom nsight_magic import background as b\njs = b.jobs()\n"
        "print('released', [j.released for j in js])\n"
        "first = str(js[0].folder / 'report.sqlite')\n"
        "def target(f):\n"
        "    try:\n        return os.readlink(f'/proc/self/fd/{f}')\n"
        "    except OSError:  # closed since it was listed\n        return ''\n"
        "print('open', sum(target(f) == first for f in os.listdir('/proc/self/fd')))\n"
        "print('again', sorted(set(js[0].report_or_raise().nvtx_summary()['name'])))")
    assert "released [True, True, False, False]" in shown, shown
    assert "open 0" in shown and "again ['one step']" in shown, shown


def test_the_first_cell_after_the_setup_is_warm_and_a_user_who_never_profiles_pays_nothing(tmp_path):
    before = _ours()
    fe = Frontend(tmp_path)
    try:
        loaded = fe.run("%load_ext nsight_magic")
        assert loaded == "", loaded          # nothing to see
        assert fe.run("x = 2 + 2\nprint(x)") == "4\n"
        fe.run("%%nsight_setup\nimport time, nvtx\nSTARTED = time.time()\ntime.sleep(1)")
        end = time.monotonic() + 60
        while "ready" not in (state := fe.run("%nsys_session")) and time.monotonic() < end:
            time.sleep(0.5)
        assert "ready" in state, state
        first = fe.run("%%nsys --no-render -t nvtx\nwith nvtx.annotate('w'):\n    time.sleep(0.05)")
        assert "warm session (cell 1 in this process, started" in first, first
    finally:
        fe.close()
    assert _none_left(before) == []


def test_ctrl_c_while_the_profile_loads_stops_the_loading_and_keeps_the_report(lab, tmp_path):
    lab.run(SETUP)
    reply = lab.execute(CELL.format(name="stopped"))
    lab.km.interrupt_kernel()  # the kernel is idle: its stop button
    drawn = lab.drawn(reply["msg_id"])
    text = drawn["content"]["data"]["text/plain"]
    # what nsys wrote is kept (Debian's nsys leaves its raw .qdstrm; a full install the .nsys-rep)
    assert "interrupted before the profile was loaded" in text and re.search(r"report\.(nsys-rep|qdstrm) is kept",
                                                                             text), text
    folder = _profiles(tmp_path / "nsight-profiles")["stopped"]
    assert not (folder / "finishing.json").exists() and not (folder / "report.sqlite").exists()
    # the kernel lives on, and the kept report opens
    shown = lab.run(f"%nsys_load {folder} --no-render")
    assert "Verdict:" in shown, shown


@pytest.mark.parametrize("how", ["restart", "kill"])
def test_the_kernels_end_while_a_profile_loads_leaves_no_process_and_no_false_profile(tmp_path, how):
    import signal

    from nsight_magic.store import list_profiles

    before = _ours()
    fe = Frontend(tmp_path)
    try:
        fe.run("%load_ext nsight_magic")
        fe.run(SETUP)
        fe.execute(CELL.format(name="cut"))
        if how == "restart":
            fe.km.restart_kernel(now=False)
        else:
            import os

            os.kill(fe.km.provisioner.process.pid, signal.SIGKILL)
    finally:
        fe.close(now=True)
    assert _none_left(before) == []
    root = tmp_path / "nsight-profiles"
    every = list_profiles(root, include_failed=True)
    assert len(every) == 1, every
    row = every.iloc[0]
    folder = Path(row["folder"])
    # either its loading finished before the end, or the folder says it was cut short: never a half profile
    assert row["state"] in ("finished", "interrupted"), row.to_dict()
    if row["state"] == "finished":  # the recording was written whole (perhaps only nsys's raw .qdstrm): it opens
        from nsight_magic import open_report

        assert "w step" not in set(open_report(folder).nvtx_summary()["name"])
        assert "cut step" in set(open_report(folder).nvtx_summary()["name"])
    else:
        assert len(list_profiles(root)) == 0 and (folder / "finishing.json").exists()
    assert not list(folder.glob(".*.partial*"))


def _notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in
                ("%load_ext nsight_magic", SETUP, CELL.format(name="headless"))]
    nbformat.write(nb, path)


def _final_outputs_saved(nb) -> None:
    cell = nb.cells[-1]
    views = [o for o in cell.outputs if o.output_type == "display_data" and READY_KEY in o.get("metadata", {})]
    assert len(views) == 1, cell_text(cell)
    assert views[0].metadata[READY_KEY]["state"] == "ready"
    assert "nm-report" in views[0].data["text/html"] and views[0].data["text/plain"].startswith("Verdict:")
    assert "loading the profile" not in cell_text(cell)


def test_nbconvert_execute_keeps_the_final_outputs(tmp_path):
    """nbconvert --execute runs the notebook through nbclient (as tests/test_notebooks.py's quick start does)."""
    path = tmp_path / "run.ipynb"
    _notebook(path)
    subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", "--inplace",
                    "--ExecutePreprocessor.timeout=240", str(path)], check=True, cwd=tmp_path, capture_output=True)
    _final_outputs_saved(nbformat.read(path, as_version=4))


def test_papermill_keeps_the_final_outputs(tmp_path):
    pytest.importorskip("papermill")
    path, out = tmp_path / "run.ipynb", tmp_path / "out.ipynb"
    _notebook(path)
    subprocess.run([sys.executable, "-m", "papermill", str(path), str(out), "--cwd", str(tmp_path),
                    "--kernel", "python3"], check=True, capture_output=True)
    _final_outputs_saved(nbformat.read(out, as_version=4))


def test_wait_and_fresh_keep_their_meaning(lab, tmp_path):
    """--wait: the cell returns once the profile is drawn; --fresh: a fresh process, returning at once too."""
    lab.run(SETUP)
    waited = lab.execute(CELL.format(name="waited").replace("-t nvtx", "-t nvtx --wait"))
    drawn = lab.drawn(waited["msg_id"])
    assert drawn["header"]["date"] <= waited["header"]["date"]
    fresh = lab.execute(CELL.format(name="fresh").replace("-t nvtx", "-t nvtx --fresh"))
    assert "fresh process (--fresh)" in lab.text(fresh["msg_id"])
    assert lab.drawn(fresh["msg_id"])["header"]["date"] > fresh["header"]["date"]
    assert shutil.which("nsys")


def test_a_profile_that_finished_with_nothing_to_show_says_why_in_its_summary(tmp_path):
    """A finish stage that ended (its report could not be read) is a finished profile, not one its kernel left
    half-loaded: summary.json says why, finishing.json is gone, and the listing calls it finished."""
    from nsight_magic import background
    from nsight_magic.profilers.process import Recording, RunResult
    from nsight_magic.store import ProfileFolder, create_profile_folder, list_profiles

    folder = ProfileFolder(create_profile_folder(tmp_path, "unreadable"))
    folder.cell.write_text("print('ran')\n")
    damaged = folder.path / "report.sqlite"
    damaged.write_bytes(b"not a database, whatever its name says" * 100)

    def finish(on_status=None, cancel=None):
        return RunResult(folder, "ok", 0, 0.1, None, damaged)

    job = background.start(Recording(folder, "nsys", "ok", 0.1, {}, [], [], [], finish), render=False)
    assert job.wait(60) and job.error
    summary = json.loads((folder.path / "summary.json").read_text())
    assert summary["error"] == job.error.splitlines()[0] and summary["tool"] == "nsys"
    assert not (folder.path / "finishing.json").exists()
    listed = list_profiles(tmp_path, include_failed=True)
    assert listed.iloc[0]["state"] == "finished" and listed.iloc[0]["error"] == summary["error"]


def test_a_load_and_a_diff_wait_for_the_extensions_background_imports(monkeypatch, tmp_path, capsys):
    """%load_ext imports the finish stage's modules in a thread; a %nsys_load or %nsys_diff right after it imports
    them too, and two threads importing one package at once can see a module half made (an ImportError seen once in
    a full run). Both wait for that thread first."""
    import argparse
    import threading

    from nsight_magic import background, cell_display

    for call in (lambda: cell_display.open_again(argparse.Namespace(path=str(tmp_path / "none"), pattern=None)),
                 lambda: cell_display.diff_command(argparse.Namespace(profiles=[str(tmp_path / "a")]), None, {})):
        done = threading.Event()
        importing = threading.Thread(target=lambda: (time.sleep(0.5), done.set()))
        monkeypatch.setattr(background, "_IMPORTING", [importing])
        importing.start()
        try:
            call()
        except Exception:  # noqa: BLE001 - what the call says about the missing profile is not what is tested
            pass
        assert done.is_set(), "went on while the background imports ran"
    capsys.readouterr()


def test_a_profile_loaded_again_shows_its_kept_page_then_its_live_timeline_in_place(lab, tmp_path):
    """Issue 62: a profile drawn before is shown at once from its kept page (saved_analysis.kept_page), then, in
    the same output, the whole view with its live timeline; the live timeline answers to the plot name the page
    it came with uses (the tables' clicks reach it), and each copy's ids are its own."""
    import re
    import shutil

    folder = tmp_path / "prof"
    folder.mkdir()
    shutil.copy(Path(__file__).parent / "data" / "nsys_h100_a_cuda_nvtx.sqlite", folder / "report.sqlite")
    first_load = lab.execute(f"%nsys_load {folder}")
    made = [m["content"] for m in lab.of(first_load["msg_id"], ("display_data",))]
    assert len(made) == 1 and VIEW_MIME in made[0]["data"], lab.text(first_load["msg_id"])
    reply = lab.execute(f"%nsys_load {folder}")
    shown = lab.of(reply["msg_id"], ("display_data", "update_display_data"))
    assert [m["header"]["msg_type"] for m in shown] == ["display_data", "update_display_data"], lab.text(
        reply["msg_id"])
    page, whole = (m["content"] for m in shown)
    assert page["transient"]["display_id"] == whole["transient"]["display_id"]
    assert VIEW_MIME not in page["data"] and VIEW_MIME in whole["data"]
    assert page["data"]["text/plain"] == whole["data"]["text/plain"] == made[0]["data"]["text/plain"]
    uid = [re.search(r'class="nm-report" id="nm-([0-9a-f-]{36})"', c["data"]["text/html"]).group(1)
           for c in (made[0], page, whole)]
    assert len(set(uid)) == 3
    plot = f"nsight-timeline-{uid[2]}"
    assert f'id="nm-{uid[2]}-kernels"' in whole["data"]["text/html"] and plot in whole["data"]["text/html"]
    widgets = [m for m in lab.of(reply["msg_id"], ("comm_open",)) if plot in json.dumps(m["content"])]
    assert widgets, "the live timeline does not answer to its page's plot name"
