"""The runner with real nsys processes: files kept, capture range, state, environment, and every failure path."""
from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import TEST_TRACE, eventually, nvtx_ranges, processes_mentioning, requires_nsys
from nsight_magic.errors import OptionError
from nsight_magic.options import NsysOptions
from nsight_magic.report import NsysReport
from nsight_magic.run import RunFailed, run_nsys
from nsight_magic.inside.state import UnpicklableVariable

pytestmark = [pytest.mark.timeout(180)]


@pytest.fixture(autouse=True)
def _no_zombies(no_zombies):
    """Aborted, timed-out and interrupted runs leave no <defunct> process behind (issue 29)."""


CELL = """
import nvtx, time
with nvtx.annotate("work A"):
    time.sleep(0.02)
    with nvtx.annotate("inner B"):
        print("hello from the cell", x)
y = x + 1
"""

SETUP = """
import nvtx, time
with nvtx.annotate("setup range"):
    time.sleep(0.01)
"""


def _opts(tmp_path: Path, **kw) -> NsysOptions:
    kw.setdefault("trace", TEST_TRACE)
    return NsysOptions(name=kw.pop("name", "t"), directory=str(tmp_path), **kw)


@requires_nsys
@pytest.mark.nsys
def test_cell_runs_under_nsys_and_every_file_is_kept(tmp_path):
    out, phases = [], []
    r = run_nsys(CELL, _opts(tmp_path, return_vars=("y",)), setup_sources=[SETUP], namespace={"x": 41},
                 on_output=lambda s, t: out.append((s, t)), on_status=lambda p, t: phases.append(p))
    assert r.ok, r.messages
    names = {p.name for p in r.folder.files()}
    for f in ("cell.py", "setup.py", "vars.json", "stdout.txt", "stderr.txt", "command.txt", "versions.json",
              "report.nsys-rep", "report.sqlite"):
        assert f in names
    assert "hello from the cell 41" in "".join(t for s, t in out if s == "stdout")
    assert "hello from the cell 41" in r.folder.stdout.read_text()
    assert r.returned == {"y": 42}
    assert [v.name for v in r.manifest] == ["x"]
    assert {"starting", "importing", "running", "finished", "exporting"} <= set(phases)
    ranges = nvtx_ranges(r.sqlite)
    assert "work A" in ranges and "inner B" in ranges
    # --capture cell: the setup code's range is outside the capture
    assert "setup range" not in ranges
    argv = r.folder.command.read_text()
    assert "--capture-range=nvtx" in argv and "nsight_magic.inside.child" in argv
    # nsys takes no CPU samples here: its namespace hides the kernel's symbols, which it would parse for nothing
    assert "inside.isolate --no-kernel-symbols" in argv
    # nsys starts its target with umask 0: the child restores the notebook's, files are not world-writable
    assert r.folder.returns_blob.stat().st_mode & 0o002 == 0
    # the report as nsight_magic.open_report opens it: the facade, with the findings on top
    with r.open() as rep:
        assert type(rep) is NsysReport and "work A" in set(rep.nvtx_summary()["name"])
        assert isinstance(rep.findings(), list)


@requires_nsys
@pytest.mark.nsys
def test_capture_all_includes_setup(tmp_path):
    r = run_nsys(CELL, _opts(tmp_path, capture="all"), setup_sources=[SETUP], namespace={"x": 1})
    assert r.ok, r.messages
    assert "setup range" in nvtx_ranges(r.sqlite)


@requires_nsys
@pytest.mark.nsys
def test_secret_looking_variables_never_reach_the_report(tmp_path, monkeypatch):
    plain, tok = uuid.uuid4().hex, uuid.uuid4().hex
    # by name, and by value whatever the name (issue 29's list); each holds the token `tok`
    secrets = {"NSIGHT_TEST_API_KEY": tok, "GITHUB_PAT": tok, "MY_PASS": tok, "SENTRY_DSN": tok, "JWT": tok,
               "BEARER": tok, "DATABASE_URL": f"postgres://app:{tok}@db:5432/x",
               "SLACK_HOOK": f"https://hooks.slack.com/services/T0/B0/{tok}"}
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("NSIGHT_MAGIC_TEST_PLAIN", plain)  # allow-listed (tools/environment.py)
    r = run_nsys("print('x')", _opts(tmp_path, capture="all"))
    blob = r.sqlite.read_bytes() + r.report_file.read_bytes()
    assert plain.encode() in blob  # nsys does record the environment...
    assert tok.encode() not in blob  # ...but not what looks secret


def test_two_runs_in_one_second_get_distinct_folders(tmp_path):
    from nsight_magic.store import create_profile_folder

    now = time.time()
    a = create_profile_folder(tmp_path, "same", now)
    b = create_profile_folder(tmp_path, "same", now)
    assert a != b and a.exists() and b.exists() and b.name.endswith("-2")


def test_syntax_error_is_reported_before_nsys_starts(tmp_path):
    with pytest.raises(OptionError, match=r"syntax error in the cell, line 2") as e:
        run_nsys("x = 1\nif x = 2:\n  pass\n", _opts(tmp_path))
    folder = next(tmp_path.iterdir())
    assert str(folder) in str(e.value)
    assert (folder / "cell.py").read_text().startswith("x = 1")
    assert not (folder / "tool-output.txt").exists()
    # under the %%nsys line the editor numbers the same line 3 (the magic's line is 1)
    with pytest.raises(OptionError, match=r"syntax error in the cell, line 3"):
        run_nsys("x = 1\nif x = 2:\n  pass\n", _opts(tmp_path), cell_first_line=2)


def test_ipython_syntax_in_the_cell_is_explained(tmp_path):
    with pytest.raises(OptionError, match="magics and shell escapes"):
        run_nsys("!ls\n", _opts(tmp_path))


def test_unpicklable_variable_stops_before_nsys_starts(tmp_path):
    lock = threading.Lock()
    with pytest.raises(UnpicklableVariable, match=r"variable 'lock' \(lock\) cannot be sent.*%%nsight_setup"):
        run_nsys("with lock:\n    pass", _opts(tmp_path), namespace={"lock": lock})
    folder = next(tmp_path.iterdir())
    assert not (folder / "tool-output.txt").exists()


@requires_nsys
@pytest.mark.nsys
def test_exception_in_cell_shows_traceback_and_keeps_report(tmp_path):
    cell = "import nvtx\nwith nvtx.annotate('before error'):\n    pass\nraise ValueError('boom')\n"
    r = run_nsys(cell, _opts(tmp_path))
    assert r.status == "cell-error"
    err = r.folder.stderr.read_text()
    assert "ValueError: boom" in err and "cell.py" in err and "nsight_magic/child.py" not in err
    assert r.sqlite is not None and "before error" in nvtx_ranges(r.sqlite)
    assert any("raised an exception" in m and str(r.folder.path) in m for m in r.messages)


@requires_nsys
@pytest.mark.nsys
def test_a_traceback_numbers_the_cells_lines_as_the_editor(tmp_path):
    """Under %%nsys the magic's line is line 1: a traceback names the cell's lines as the editor (and the Python
    rows, the Lines tab) do, with their own source text, through a chained exception too."""
    cell = "x = 1\ntry:\n    {}['k']\nexcept KeyError as e:\n    raise ValueError('boom') from e\n"
    r = run_nsys(cell, _opts(tmp_path), cell_first_line=2)
    assert r.status == "cell-error"
    err = r.folder.stderr.read_text()
    assert 'cell.py", line 4' in err and "{}['k']" in err, err          # body line 3
    assert 'cell.py", line 6' in err and "raise ValueError('boom') from e" in err, err  # body line 5
    assert "KeyError: 'k'" in err and "direct cause" in err and err.rstrip().endswith("ValueError: boom")


@requires_nsys
@pytest.mark.nsys
def test_nonzero_exit_is_reported(tmp_path):
    r = run_nsys("import sys\nprint('leaving')\nsys.exit(3)\n", _opts(tmp_path))
    assert r.status == "exited" and r.returncode == 3
    assert any("sys.exit() with exit status 3" in m and str(r.folder.path) in m for m in r.messages)
    assert "leaving" in r.folder.stdout.read_text()
    r = run_nsys("import sys\nsys.exit('bad input file')\n", _opts(tmp_path))
    assert r.status == "exited" and "bad input file" in r.folder.stderr.read_text()


@requires_nsys
@pytest.mark.nsys
def test_segfault_is_reported_and_files_kept(tmp_path):
    r = run_nsys("print('about to crash', flush=True)\nimport ctypes\nctypes.string_at(0)\n", _opts(tmp_path))
    assert r.status == "failed"
    assert any(("SIGSEGV" in m or "died" in m) and str(r.folder.path) in m for m in r.messages), r.messages
    assert "about to crash" in r.folder.stdout.read_text()


@requires_nsys
@pytest.mark.nsys
def test_timeout_stops_the_whole_process_group(tmp_path):
    t0 = time.monotonic()
    cell = "import time, nvtx\nwith nvtx.annotate('before'):\n    time.sleep(0.2)\ntime.sleep(120)\n"
    r = run_nsys(cell, _opts(tmp_path, timeout=5), stop_grace_s=15)
    assert time.monotonic() - t0 < 60
    assert r.status == "timeout"
    # SIGINT first: nsys writes what it recorded until the timeout
    assert r.sqlite is not None and "before" in nvtx_ranges(r.sqlite)
    assert any("--timeout of 5 s" in m and str(r.folder.path) in m for m in r.messages)
    # the cell's process ends before nsys (whose exit kills what is left): where it was stopped, whole
    assert "time.sleep(120)\nKeyboardInterrupt\n" in r.folder.stderr.read_text()
    assert eventually(lambda: processes_mentioning(str(r.folder.path)) == [], timeout=10)


@requires_nsys
@pytest.mark.nsys
def test_keyboard_interrupt_stops_the_run_and_keeps_files(tmp_path):
    progress = []

    def interrupt_when_running(phase, t):
        progress.append(phase)
        if phase == "running" and progress.count("running") == 1:
            threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()

    r = run_nsys("import time\ntime.sleep(120)\n", _opts(tmp_path), on_status=interrupt_when_running,
                 stop_grace_s=15)
    assert r.status == "interrupted"
    assert any(m.startswith("interrupted") and str(r.folder.path) in m for m in r.messages)
    assert r.folder.cell.exists()
    assert eventually(lambda: processes_mentioning(str(r.folder.path)) == [], timeout=10)


def test_missing_nsys_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("NSIGHT_MAGIC_NSYS", str(tmp_path / "no-such-nsys"))
    with pytest.raises(RunFailed, match="NSIGHT_MAGIC_NSYS=.*not an executable"):
        run_nsys("pass", _opts(tmp_path))
    monkeypatch.delenv("NSIGHT_MAGIC_NSYS")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RunFailed, match=r"not found: install Nsight Systems.*NSIGHT_MAGIC_NSYS.*kept in"):
        run_nsys("pass", _opts(tmp_path))


@requires_nsys
@pytest.mark.nsys
def test_trace_option_decides_what_nsys_records(tmp_path):
    import sqlite3

    def osrt_rows(trace):
        r = run_nsys("import time\nfor _ in range(5):\n    time.sleep(0.01)\n", _opts(tmp_path, trace=trace))
        con = sqlite3.connect(r.sqlite)
        has = con.execute("SELECT count(*) FROM sqlite_master WHERE name='OSRT_API'").fetchone()[0]
        return con.execute("SELECT count(*) FROM OSRT_API").fetchone()[0] if has else 0

    assert osrt_rows("nvtx,osrt") > 0
    assert osrt_rows("nvtx") == 0


@requires_nsys
@pytest.mark.nsys
def test_shared_objects_stay_shared_and_reassigned_names_are_not_sent(tmp_path):
    params = [1.0, 2.0]
    ns = {"model": {"params": params}, "opt": {"params": params}, "handle": threading.Lock()}
    cell = "print('shared', model['params'] is opt['params'])\nhandle = 5\nprint('handle', handle)\n"
    r = run_nsys(cell, _opts(tmp_path), namespace=ns)
    assert r.ok, r.messages
    assert r.folder.stdout.read_text() == "shared True\nhandle 5\n"
    assert [v.name for v in r.manifest] == ["model", "opt"]  # the lock is reassigned by the cell: not sent


@requires_nsys
@pytest.mark.nsys
def test_relative_dir_when_the_notebook_is_not_the_working_directory(tmp_path, monkeypatch):
    nbdir, cwd = tmp_path / "nb", tmp_path / "cwd"
    nbdir.mkdir(), cwd.mkdir()
    monkeypatch.setenv("JPY_SESSION_NAME", str(nbdir / "analysis.ipynb"))
    monkeypatch.chdir(cwd)
    r = run_nsys("print('ran')", NsysOptions(name="rel", directory="profiles", trace=TEST_TRACE))
    assert r.ok, r.messages
    assert r.folder.path.parent == cwd / "profiles" and r.sqlite.exists()


def test_a_profile_folder_that_cannot_be_created_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(OptionError, match="cannot create a profile folder under .*--dir"):
        run_nsys("pass", NsysOptions(directory=str(blocker / "sub")))
