"""Hostile and faulty inputs, round 4 (issue 46): each ends at once with one line that says what to do, nothing of
ours in a traceback, nothing started."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import eventually, requires_nsys
from nsight_magic.errors import OptionError, ReportError
from nsight_magic.options import NSYS_OWNED_FLAGS, NsysOptions
from nsight_magic.report import open_report
from nsight_magic.thresholds import parse_assignments
from nsight_magic.tools.argv import validate_passthrough



@contextlib.contextmanager
def _kernel(tmp_path, *setups: str):
    """A kernel driven as JupyterLab drives it, with the extension loaded and these setup cells run."""
    from kernels import DrivenKernel

    k = DrivenKernel(tmp_path / "nb")
    try:
        k.run("%load_ext nsight_magic")
        for setup in setups:
            k.run(f"%%nsight_setup\n{setup}")
        yield k
    finally:
        k.km.shutdown_kernel(now=True)


def _altered_export(tmp_path, table: str | None = None):
    """(path, connection) of a copy of our H100 export to alter; with `table`, that table made again without its
    constraints (CREATE TABLE AS keeps none), as a damaged or altered export has it."""
    import shutil
    import sqlite3

    from conftest import DATA

    db = tmp_path / "altered.sqlite"
    shutil.copy(DATA / "nsys_h100_a_cuda_nvtx.sqlite", db)
    con = sqlite3.connect(db)
    if table:
        con.executescript(f"ALTER TABLE {table} RENAME TO t_old; CREATE TABLE {table} AS SELECT * FROM t_old; "
                          "DROP TABLE t_old;")
    return db, con

def test_a_path_with_a_nul_or_to_a_pipe_is_refused_without_blocking(tmp_path):
    with pytest.raises(ReportError, match="cannot hold a NUL"):
        open_report("run\x00.sqlite")
    fifo = tmp_path / "run.sqlite"
    os.mkfifo(fifo)
    (tmp_path / "link.sqlite").symlink_to(fifo)
    for p in (fifo, tmp_path / "link.sqlite"):
        with pytest.raises(ReportError, match="not a regular file"):
            open_report(p)


@pytest.mark.parametrize("value", ["nan", "-5", "inf"])
def test_thresholds_must_be_finite_and_not_negative(value):
    with pytest.raises(OptionError, match="finite number >= 0"):
        parse_assignments([f"gpu_gaps.gap_ms={value}"])
    with pytest.raises(OptionError, match=">= 1"):
        parse_assignments(["gpu_time_util.chunks=0"])
    assert parse_assignments(["gpu_gaps.gap_ms=0"]) == {"gpu_gaps.gap_ms": 0.0}


def test_a_word_in_nsys_args_would_be_the_program_and_is_refused():
    with pytest.raises(OptionError, match="'touch' would be read as the program"):
        validate_passthrough("touch FILE", NSYS_OWNED_FLAGS, "nsys")
    # values after their switch, with or without '=', short or long
    assert validate_passthrough("--sample none -b none --cpuctxsw=none", NSYS_OWNED_FLAGS, "nsys") == (
        "--sample", "none", "-b", "none", "--cpuctxsw=none")


@requires_nsys
@pytest.mark.parametrize("trace,said", [("bogus", "'bogus' is not an API this nsys traces"),
                                        ("osrt;x", "'osrt;x' is not an API"), ("", "--trace is empty")])
def test_a_bad_trace_list_is_refused_before_any_folder_or_process(tmp_path, trace, said):
    from nsight_magic.run import run_nsys

    with pytest.raises(OptionError, match=said) as e:
        run_nsys("x = 1\n", NsysOptions(name="t", directory=str(tmp_path), trace=trace, fresh=True), namespace={})
    assert "nvtx" in str(e.value) or not trace  # the valid values are named
    assert not any(tmp_path.iterdir())  # no profile folder left behind


def test_a_lone_surrogate_in_the_cell_is_refused_and_the_cell_kept(tmp_path):
    from nsight_magic.run import run_nsys

    with pytest.raises(OptionError, match=r"lone surrogate \(U\+D800, line 2\)") as e:
        run_nsys("x = 1\ny = 'a\ud800'\n", NsysOptions(name="s", directory=str(tmp_path), fresh=True), namespace={})
    (folder,) = [p for p in (tmp_path / "nsight-profiles").iterdir()] if (tmp_path / "nsight-profiles").exists() \
        else [p for p in tmp_path.iterdir()]
    assert (folder / "cell.py").read_bytes().startswith(b"x = 1\n") and str(folder) in str(e.value)


@pytest.mark.parametrize("summary", ['[1, 2, 3]', '{"capture_ns": "lots", "kernels": "x", "top_kernel_pct": "high", '
                                     '"created": 5, "top_kernel": 7}', '{"capture_ns": NaN}', 'not json'])
def test_a_damaged_summary_json_is_listed_with_what_the_folder_says(tmp_path, summary):
    from nsight_magic.store import list_profiles
    from nsight_magic.views.profiles import profiles_html, profiles_text

    for name, text in (("good-20260101-000000", '{"capture_ns": 1500000, "kernels": 3, "tool": "nsys"}'),
                       ("bad-20260101-000001", summary)):
        d = tmp_path / name
        d.mkdir()
        (d / "report.sqlite").write_bytes(b"")
        (d / "summary.json").write_text(text)
    df = list_profiles(tmp_path)
    assert sorted(df["name"]) == ["bad-20260101-000001", "good-20260101-000000"]
    bad = df[df["name"] == "bad-20260101-000001"].iloc[0]
    assert bad["capture_ns"] is None or bad["capture_ns"] != bad["capture_ns"]  # None (or NaN in the frame)
    assert "good-20260101-000000" in profiles_text(df) and "bad-20260101-000001" in profiles_html(df)


@pytest.mark.parametrize("names", [("report.0.sqlite", "report.3000000.sqlite"), ("myrun-20240101.sqlite",),
                                   ("profile_v2.sqlite",)])
def test_numbers_that_are_not_ranks_are_said_at_once(tmp_path, names):
    from nsight_magic.jobs.discover import find_rank_reports

    for n in names:
        (tmp_path / n).write_bytes(b"")
    with pytest.raises(OptionError, match="are not a job's ranks"):
        find_rank_reports(tmp_path)


def test_a_job_with_a_few_ranks_missing_is_still_a_job(tmp_path):
    from nsight_magic.jobs.discover import find_rank_reports, missing_ranks

    for r in (0, 1, 3):
        (tmp_path / f"report.{r}.sqlite").write_bytes(b"")
    files = find_rank_reports(tmp_path)
    assert [f.rank for f in files] == [0, 1, 3] and missing_ranks(files) == [2]


def test_a_scheduler_address_nobody_answers_at_is_one_line(tmp_path):
    from nsight_magic.jobs.job import open_job

    for r in (0, 1):
        (tmp_path / f"report.{r}.sqlite").write_bytes(b"")
    with pytest.raises(OptionError, match="no Dask scheduler answered there"):
        open_job(tmp_path, scheduler="tcp://127.0.0.1:1")


def test_ctrl_c_while_a_jobs_dask_workers_start_is_one_line(tmp_path):
    """Jupyter's stop button signals the kernel's whole process group: Dask's worker processes, spawned mid-start,
    printed a dozen tracebacks into the cell.  They start with SIGINT blocked (forked by a forkserver that
    started so); the kernel says one line."""
    from conftest import unpack_job_rank

    job = tmp_path / "job"
    job.mkdir()
    for r in (0, 1):
        unpack_job_rank(job, r)
    with _kernel(tmp_path) as k:
        def ours():  # the forkserver's processes: itself, and the workers it forked
            return [p for p, c in k.descendants().items() if "multiprocessing.forkserver" in c]

        def forked():
            return len(ours())

        out = k.run(f"%nsys_load {job} --no-render", timeout=120, interrupt_when=lambda: forked() >= 2)
        assert "stopped loading the job in" in out and "(Ctrl-C)" in out, out
        assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
        # the cluster is gone with its workers, and the kernel loads the job when asked again
        # (the forkserver stays for the kernel's next job, and ends with it)
        assert eventually(lambda: forked() == 1, 30), k.descendants()
        again = k.run(f"%nsys_load {job} --no-render", timeout=120)
        assert "Job: 2 ranks loaded" in again, again
        assert "Traceback" not in again, again
        left = ours()
    # the kernel killed (a shutdown "now"): its forkserver sees its end and goes, with no worker left behind
    assert left and eventually(lambda: not any(Path(f"/proc/{p}").exists() for p in left), 10), left


SIGINT_WHILE_STARTING = """
import os, signal, sys, threading, time
if __name__ == "__main__":
    from nsight_magic.jobs.job import local_cluster
    def stop():
        time.sleep(float(sys.argv[1]))
        os.killpg(os.getpgrp(), signal.SIGINT)   # as Jupyter's stop button signals the kernel's process group
    threading.Thread(target=stop, daemon=True).start()
    try:
        cluster = local_cluster(2)
        time.sleep(3)
        cluster.close()
    except KeyboardInterrupt:
        print("stopped")
"""


@pytest.mark.parametrize("after_s", [0.2, 0.5, 0.9])
def test_a_ctrl_c_to_the_process_group_while_the_workers_start_reaches_none_of_them(tmp_path, after_s):
    """The workers' forkserver, and the workers it forks, start with SIGINT blocked: a Ctrl-C while they import,
    fork or start (here in a session of its own) prints no traceback of theirs; the caller alone takes it."""
    p = subprocess.run([sys.executable, "-c", SIGINT_WHILE_STARTING, str(after_s)], capture_output=True, text=True,
                       timeout=120, start_new_session=True, cwd=tmp_path)
    assert "Traceback" not in p.stderr and "KeyboardInterrupt" not in p.stderr, p.stderr[-3000:]
    assert p.returncode == 0, p.stderr[-3000:]


@requires_nsys
@pytest.mark.nsys
def test_a_cell_that_deletes_its_own_profile_folder_is_told_in_one_line(tmp_path):
    from nsight_magic.run import run_nsys

    cell = f"import pathlib, shutil\nfor p in pathlib.Path({str(tmp_path)!r}).glob('gone-*'):\n    shutil.rmtree(p)\n"
    r = run_nsys(cell, NsysOptions(name="gone", directory=str(tmp_path), fresh=True, render=False, quiet=True,
                                   trace="nvtx"), namespace={})
    assert r.sqlite is None
    assert any("was deleted before nsys wrote its report" in m for m in r.messages), r.messages
    assert not any("capture range was never recorded" in m for m in r.messages)


@requires_nsys
def test_a_folder_deleted_before_its_records_were_read_is_no_start_up_failure(tmp_path, monkeypatch):
    """Under load the cell above deleted its folder before the notebook had read a record from it, nsys failed, and
    the run took that for nsys's start-up failure: its retry raised FileNotFoundError.  A front for nsys makes that
    order certain: it deletes the folder and fails, as nsys then does."""
    from nsight_magic.run import run_nsys

    real = shutil.which("nsys")
    front = tmp_path / "bin" / "nsys"
    front.parent.mkdir()
    front.write_text(f"""#!{sys.executable}
import os, shutil, sys
out = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--output=")]
if sys.argv[1:2] == ["profile"] and out:
    shutil.rmtree(os.path.dirname(out[0]))
    sys.exit(1)
os.execv({real!r}, [{real!r}, *sys.argv[1:]])
""")
    front.chmod(0o755)
    monkeypatch.setenv("NSIGHT_MAGIC_NSYS", str(front))
    r = run_nsys("pass\n", NsysOptions(name="gone", directory=str(tmp_path / "p"), fresh=True, render=False,
                                       quiet=True, trace="nvtx"), namespace={})
    assert r.sqlite is None
    assert [m for m in r.messages if "nsys" in m] == [m for m in r.messages if "was deleted before nsys" in m] != []


def test_long_template_names_are_searched_and_shown_by_their_start(tmp_path):
    """300 kernels with distinct 60 kB template names (a report seen with 3,000 of them gave no answer for 10
    minutes): patterns read a name's first 1,000 characters, the page shows as much, with an ellipsis."""
    from nsight_magic.views.report_view import NsysView

    db, con = _altered_export(tmp_path)
    cols = [c[1] for c in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    rows = con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    top = con.execute("SELECT max(id) FROM StringIds").fetchone()[0]
    name_cols = [cols.index(c) for c in ("shortName", "demangledName", "mangledName") if c in cols]
    new = []
    for k in range(300):
        con.execute("INSERT INTO StringIds(id, value) VALUES (?, ?)",
                    (top + 1 + k, f"void kern_{k}<" + ",".join(f"T{j}_{k}" for j in range(6000))[:60000] + ">()"))
        r = list(rows[k % len(rows)])
        for i in name_cols:
            r[i] = top + 1 + k
        new.append(r)
    con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * len(cols))})", new)
    con.commit()
    con.close()
    rep = open_report(db)
    try:
        assert rep.findings() is not None
        page = NsysView(rep).html_page()
        assert len(page) < 5_000_000, len(page)  # 300 x 60 kB of names would be 18 MB, twice over
        assert "kern_7&lt;T0_7" in page and "T5999_7" not in page
    finally:
        rep.close()


def test_kernels_without_a_start_or_of_absurd_length_are_zero_long(tmp_path):
    import warnings

    from nsight_magic.errors import ReportWarning

    db, con = _altered_export(tmp_path, "CUPTI_ACTIVITY_KIND_KERNEL")  # without its NOT NULL constraints
    ids = [r[0] for r in con.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 4")]
    con.execute(f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = NULL WHERE rowid = {ids[0]}")
    for i in ids[1:]:
        con.execute(f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET [end] = start + {2 ** 59} WHERE rowid = {i}")
    con.commit()
    con.close()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        rep = open_report(db)
        k = rep.kernels
    try:
        assert (k["duration_ns"] >= 0).all() and k["duration_ns"].max() < 10 ** 12
        total = rep.kernel_summary()["total_ns"]
        assert (total >= 0).all() and total.sum() < 10 ** 12
        assert any(issubclass(w.category, ReportWarning) and "longer than 13 days" in str(w.message) for w in got)
    finally:
        rep.close()


def test_a_merged_timeline_names_the_ranks_it_could_not_hold(tmp_path):
    import warnings

    from conftest import DATA
    from nsight_magic.errors import ReportWarning
    from nsight_magic.jobs.job import Job
    from nsight_magic.jobs.rank_task import RankResult

    job = Job([RankResult(0, str(DATA / "nsys_h100_a_cuda_nvtx.sqlite")),
               RankResult(1, str(tmp_path / "report.1.sqlite"), error="the report holds a trigger; refused")])
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        rep = job.timeline_report([0, 1])
    rep.close()
    said = [str(w.message) for w in got if issubclass(w.category, ReportWarning)]
    assert said == ["not in the merged timeline: rank 1 (the report holds a trigger; refused)"], said


@pytest.mark.parametrize("table,value", [("StringIds", "'abc'"), ("StringIds", "1e30"),
                                         ("ENUM_CUDA_MEMCPY_OPER", "'x'"), ("ENUM_CUDA_MEMCPY_OPER", "1e30")])
def test_a_lookup_id_that_is_not_an_integer_is_left_out_and_said(tmp_path, table, value):
    import warnings

    from nsight_magic.errors import ReportWarning
    from nsight_magic.views.report_view import NsysView

    db, con = _altered_export(tmp_path, table)  # without its INTEGER PRIMARY KEY
    top = con.execute(f"SELECT max(id) FROM {table}").fetchone()[0]
    con.execute(f"UPDATE {table} SET id = {value} WHERE id = {top}")
    con.commit()
    con.close()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        rep = open_report(db)
        try:
            assert "Timeline" in NsysView(rep).html_page() and rep.findings() is not None
        finally:
            rep.close()
    assert any(issubclass(w.category, ReportWarning) and f"{table}: 1 row(s) whose id is not an integer"
               in str(w.message) for w in got), [str(w.message) for w in got]


@requires_nsys
def test_an_unknown_nsys_switch_is_refused_before_any_attempt(tmp_path):
    from nsight_magic.run import run_nsys

    with pytest.raises(OptionError, match="--bogus-flag is not a switch of this nsys"):
        run_nsys("x = 1\n", NsysOptions(name="t", directory=str(tmp_path), fresh=True,
                                       nsys_args=("--bogus-flag=1",)), namespace={})
    assert not any(tmp_path.iterdir())


def test_a_rank_that_is_a_pipe_is_listed_not_dropped(tmp_path):
    import os

    from nsight_magic.jobs.discover import find_rank_reports

    (tmp_path / "report.0.sqlite").write_bytes(b"")
    os.mkfifo(tmp_path / "report.1.sqlite")
    files = find_rank_reports(tmp_path)
    assert [f.rank for f in files] == [0, 1]
    from nsight_magic.readers.nsys import open_nsys_report  # what each rank's task opens it with

    with pytest.raises(ReportError, match="not a regular file"):
        open_nsys_report(files[1].path)


@requires_nsys
@pytest.mark.nsys
def test_a_fresh_cell_that_leaves_a_thread_running_is_told_why_the_report_waits(tmp_path):
    """A non-daemon thread keeps the process alive after the cell (Python waits for it at exit) and nsys writes
    only after that: the status names the thread, not "the profiler is writing its report", and a note says so."""
    from nsight_magic.run import run_nsys

    cell = "import threading, time\nthreading.Thread(target=time.sleep, args=(4,), name='uploader').start()\n"
    said = []
    r = run_nsys(cell, NsysOptions(name="thr", directory=str(tmp_path), fresh=True, render=False, quiet=True,
                                   trace="nvtx"), namespace={}, on_status=lambda text, t: said.append(text))
    assert r.ok, r.messages
    assert any("waits for its thread uploader" in s for s in said), said
    assert any("thread uploader running" in n for n in r.notes), r.notes


@requires_nsys
@pytest.mark.nsys
def test_the_profiles_folder_deleted_while_a_warm_profile_finishes_does_not_hold_up_the_session(tmp_path):
    """The finish stage wrote nsys's answer to the vanished folder and failed before it let go of the recording:
    `%nsys_session` said "finishing" for good and `%nsys_session --stop` waited 300 s."""
    import time

    with _kernel(tmp_path, "import nvtx") as k:
        # the report's export takes seconds: the next cell runs while the profile finishes
        k.kc.execute("%%nsys --name big\nfor i in range(30000):\n    nvtx.push_range('r'); nvtx.pop_range()",
                     allow_stdin=True)
        assert "removed" in k.run("import shutil; shutil.rmtree('nsight-profiles'); print('removed')")
        t0 = time.monotonic()
        stopped = k.run("%nsys_session --stop")
        took = time.monotonic() - t0
        assert "warm session stopped" in stopped or "was not running" in stopped, stopped
        assert took < 60, took  # the export's few seconds at most (it was 300 s)
        assert "nsys: ok" in k.run("%%nsys --name after\nprint('again')")  # a new session takes the next cell


@pytest.mark.parametrize("ddl, said", [
    ("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN big GENERATED ALWAYS AS (length(zeroblob(60000000) || demangledName)) "
     "VIRTUAL", "column 'big' of table 'CUPTI_ACTIVITY_KIND_KERNEL' is computed when read"),
    ("CREATE VIRTUAL TABLE extra USING rtree(id, a, b)", "table 'extra' is a virtual table"),
])
def test_a_table_computed_when_read_is_refused_at_once(tmp_path, ddl, said):
    """Round 4: a kernel table with a generated column computing 60 MB per row took 30 s to open and 25 s to answer
    Ctrl-C (one SQLite call); such a report is now refused before any row is read."""
    import time

    db, con = _altered_export(tmp_path)
    con.execute(ddl)
    con.commit()
    con.close()
    t0 = time.monotonic()
    with pytest.raises(ReportError, match=said):
        open_report(db)
    assert time.monotonic() - t0 < 5


@requires_nsys
@pytest.mark.nsys
def test_a_warm_cell_that_sigterms_its_own_process_group_is_said_and_the_next_cell_runs(tmp_path):
    """Round 4: once in three runs no reply for 120 s, then 'stopping the recording (0.0 s)' for good."""
    import time

    with _kernel(tmp_path, "import os, signal") as k:
        t0 = time.monotonic()
        out = k.run("%%nsys --name term\nos.killpg(os.getpgid(0), signal.SIGTERM)", timeout=150)
        assert time.monotonic() - t0 < 60
        assert "the profiled process was killed by SIGTERM" in out and "saved in" in out, out
        assert (next((tmp_path / "nb" / "nsight-profiles").glob("term-*")) / "report.sqlite").exists()
        assert "again" in k.run("%%nsys --name after\nprint('again')", timeout=150)


@requires_nsys
@pytest.mark.nsys
def test_a_setup_that_fails_only_in_the_worker_names_its_cell_and_line(tmp_path):
    """Round 4: the traceback cited the warm session's setup.py (deleted with it) at the joined setups' line."""
    with _kernel(tmp_path, "import os") as k:
        k.run("%%nsight_setup\nx = 1\nif 'NSIGHT_MAGIC_SESSION_ID' in os.environ:\n"
              "    raise RuntimeError('only in the worker')")
        out = k.run("%%nsys --name w\nprint(x)")
        assert 'File "<%%nsight_setup cell 2 of 2>", line 4' in out, out
        assert "raise RuntimeError('only in the worker')" in out and "nsight-magic-session-" not in out, out


def test_loading_a_large_report_says_so_before_the_wait(tmp_path):
    """Round 4: %nsys_load of an export with 3.15M NVTX ranges read for 46 s without a word."""
    from conftest import cell_text, run_notebook

    big = tmp_path / "big.sqlite"
    with open(big, "wb") as f:  # sparse: 300 MB that take no room; its pages are zeros (a damaged file)
        f.write(b"SQLite format 3\x00")
        f.truncate(300_000_000)
    nb = run_notebook(["%load_ext nsight_magic", f"%nsys_load {big}"], tmp_path)
    out = cell_text(nb.cells[1])
    assert "reading big.sqlite (0.3 GB): a report this large takes a while" in out, out
    assert "Traceback" not in out and out.count("nsight-magic:") == 2, out  # then the reader's one line


def test_a_loaded_report_leaves_no_freed_heap_in_the_kernel(tmp_path):
    """Round 4: %nsys_load of 3.15M NVTX ranges left the kernel at 1.6 GB, of which 0.4 GB were live: glibc kept
    the heap that the reading and drawing had grown.  After a load the kernel gives it back (heap.py): a trim of
    ours in the next cell finds next to nothing left to return (without it, 84 MB here)."""
    import sys

    from conftest import DATA, REPO, cell_text, run_notebook

    sys.path.insert(0, str(REPO / "benchmarks"))
    from load_memory import make_report  # the benchmark's report: 200,000 more NVTX ranges on the recorded thread

    big = tmp_path / "ranges.sqlite"
    make_report(DATA / "nsys_h100_a_cuda_nvtx.sqlite", big, 200_000)
    rss = "int(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS'))) // 1024"
    nb = run_notebook(["%load_ext nsight_magic", f"%nsys_load {big}",
                       f"import ctypes, gc\ngc.collect()\nbefore = {rss}\nctypes.CDLL(None).malloc_trim(0)\n"
                       f"print('returned_mb', before - {rss})"], tmp_path)
    assert "Traceback" not in cell_text(nb.cells[1]) and "nvtx" in cell_text(nb.cells[1]).lower()
    returned = int(cell_text(nb.cells[2]).split()[-1])
    assert returned < 30, f"{returned} MB of freed heap were still held after the load"
    # the first open of a report without the columnar cache wrote it: opening it again reads the cache alone
    from nsight_magic.report import open_report

    with open_report(big) as again:
        assert again.data.cached and len(again.nvtx) > 200_000


@pytest.mark.parametrize("plant", ["absent", "huge_start", "span", "odd_column"])
def test_a_planted_cache_beside_a_valid_export_is_not_trusted(tmp_path, plant):
    """Round 4: a cache with the export's key (size, mtime) but frames marked absent, starts of 2^62 or an odd
    span was taken as it was; the reader's checks now hold for it too, and the export is read instead.  A column
    of a type we never write (made into an array only when asked for, long after the open) is not taken either."""
    import json
    import shutil

    import numpy as np

    from conftest import DATA
    from nsight_magic.readers import nsys_cache
    from nsight_magic.readers.nsys import open_nsys_report

    p = tmp_path / "report.sqlite"
    shutil.copy(DATA / "nsys_h100_a_cuda_nvtx.sqlite", p)
    with open_nsys_report(p) as rep:
        kernels = len(rep.kernels)
        rep.write_cache()
    with open_nsys_report(p) as rep:
        assert rep.cached
    parts, extra = nsys_cache.load(p)
    if plant == "absent":
        parts = {k: None for k in parts}
    elif plant == "huge_start":
        parts["kernels"] = {**parts["kernels"], "start_ns": np.full(len(parts["kernels"]["start_ns"]), 1 << 62)}
    else:
        extra = {**extra, "event_span": ["a", 1 << 62]}
    shutil.rmtree(nsys_cache.cache_dir(p))  # a valid cache is kept by save(): the planted one replaces it
    nsys_cache.save(p, parts, extra)
    if plant == "odd_column":
        import pyarrow as pa
        from pyarrow import ipc

        f = nsys_cache.cache_dir(p) / "kernels.arrow"
        t = ipc.open_file(pa.py_buffer(f.read_bytes())).read_all()  # in memory: the file is written over
        t = t.set_column(t.schema.get_field_index("name"), "name", pa.array([[1]] * len(t), pa.list_(pa.int64())))
        with ipc.new_file(str(f), t.schema) as w:
            w.write_table(t)
        assert nsys_cache.load(p) is None
    key = json.loads((nsys_cache.cache_dir(p) / "key.json").read_text())
    assert {k: key[k] for k in nsys_cache._key(p)} == nsys_cache._key(p)  # it matches the export's key
    with open_nsys_report(p) as rep:
        assert not rep.cached and len(rep.kernels) == kernels and int(rep.kernel_summary()["count"].sum()) == kernels


@requires_nsys
@pytest.mark.nsys
def test_a_link_named_like_the_export_is_not_taken_for_it(tmp_path):
    """Round 4: run.sqlite, a link to another report's export beside run.nsys-rep, was shown as run's data."""
    import shutil

    from conftest import DATA
    from nsight_magic.readers.nsys import open_nsys_report
    from test_readers_nsys import record_cpu_report

    rep = record_cpu_report(tmp_path, "import nvtx\nwith nvtx.annotate('mine'):\n    pass\n", trace="nvtx")
    sqlite = rep.with_suffix(".sqlite")
    other = tmp_path / "other.sqlite"
    shutil.copy(DATA / "nsys_h100_a_cuda_nvtx.sqlite", other)  # an H100 report: 262 kernels
    sqlite.unlink(missing_ok=True)
    sqlite.symlink_to(other)  # newer than the .nsys-rep and complete: it passed for its export
    with open_nsys_report(rep) as r:
        assert len(r.kernels) == 0 and "mine" in set(r.nvtx["name"].astype(str))
    assert not sqlite.is_symlink() and other.stat().st_size == (DATA / "nsys_h100_a_cuda_nvtx.sqlite").stat().st_size
