"""Reports are data, never code (issue 29): planted views and triggers are refused, a query is bounded in time and
stops on Ctrl-C, damaged columns are named, and nothing is written into a report we read."""
from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest

from nsight_magic import open_report
from nsight_magic.errors import ReportError, ReportWarning
from nsight_magic.readers.nsys_merge import merge_exports
from nsight_magic.readers.nsys_sql import open_ro

OURS = Path(__file__).parent / "data" / "nsys_h100_a_cuda_nvtx.sqlite"
ENDLESS = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r)"


def altered(tmp_path: Path, name: str, *sql: str) -> Path:
    p = tmp_path / f"{name}.sqlite"
    shutil.copyfile(OURS, p)
    with sqlite3.connect(p) as con:
        for s in sql:
            con.execute(s)
    con.close()
    return p


def test_an_endless_view_is_refused_at_once(tmp_path):
    p = altered(tmp_path, "view", "ALTER TABLE NVTX_EVENTS RENAME TO NVTX_REAL",
                f"CREATE VIEW NVTX_EVENTS AS {ENDLESS} SELECT NVTX_REAL.* FROM NVTX_REAL, r")
    t0 = time.monotonic()
    with pytest.raises(ReportError, match=r"holds view 'NVTX_EVENTS'.*tables only.*re-export") as e:
        open_report(p)
    assert time.monotonic() - t0 < 10 and "\n" not in str(e.value)


def test_the_cli_refuses_it_in_one_line(tmp_path):
    p = altered(tmp_path, "view", f"CREATE VIEW extra AS {ENDLESS} SELECT x FROM r")
    r = subprocess.run([sys.executable, "-m", "nsight_magic.cli", "view", str(p), "-o", str(tmp_path / "v.html")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "holds view 'extra'" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "v.html").exists()


def test_a_trigger_is_refused_and_a_merge_runs_none(tmp_path):
    trig = "CREATE TRIGGER wipe AFTER INSERT ON CUPTI_ACTIVITY_KIND_KERNEL BEGIN DELETE FROM " \
           "CUPTI_ACTIVITY_KIND_KERNEL; END"
    bad = altered(tmp_path, "trig", trig)
    with pytest.raises(ReportError, match="holds trigger 'wipe'"):
        open_report(bad)
    good = altered(tmp_path, "good")
    for order in ([good, bad], [bad, good]):
        out = tmp_path / "merged.sqlite"
        with pytest.raises(ReportError, match="holds trigger 'wipe'"):
            merge_exports(order, out)
        assert not out.exists() and not out.with_name("merged.sqlite.part").exists()
    # the sources were attached read-only: a clean merge leaves them byte for byte as they were
    before = good.read_bytes()
    merge_exports([good, altered(tmp_path, "other")], tmp_path / "ok.sqlite")
    assert good.read_bytes() == before
    n = sqlite3.connect(tmp_path / "ok.sqlite").execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    assert n[0] == 2 * len(open_report(good).kernels)


def test_a_connection_cannot_write_and_each_query_has_a_time_limit():
    con = open_ro(OURS)
    with pytest.raises(sqlite3.OperationalError, match="readonly|read-only|query_only"):
        con.execute("CREATE TABLE planted (a)")
    con.limit_s = 0.2
    t0 = time.monotonic()
    with pytest.raises(sqlite3.OperationalError) as e:
        con.execute(f"{ENDLESS} SELECT count(*) FROM r").fetchone()
    assert time.monotonic() - t0 < 5
    err = con.stopped(OURS, e.value)
    assert isinstance(err, ReportError) and "ran past 0.2 s" in str(err)


def test_ctrl_c_stops_a_query():
    con = open_ro(OURS)
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    t0 = time.monotonic()
    with pytest.raises(sqlite3.OperationalError) as e:
        con.execute(f"{ENDLESS} SELECT count(*) FROM r").fetchone()
    assert time.monotonic() - t0 < 5
    assert isinstance(con.stopped(OURS, e.value), KeyboardInterrupt)


@pytest.mark.parametrize("value,kind", [("'abc'", "text"), ("x'0102'", "blob"), ("1.5e30", "real")])
@pytest.mark.parametrize("table,col", [("CUPTI_ACTIVITY_KIND_KERNEL", "start"), ("CUPTI_ACTIVITY_KIND_KERNEL", "end"),
                                       ("NVTX_EVENTS", "start")])
def test_a_value_of_the_wrong_type_is_named(tmp_path, table, col, value, kind):
    p = altered(tmp_path, "typed", f'UPDATE {table} SET "{col}" = {value} WHERE rowid = 3')
    with pytest.raises(ReportError) as e:
        rep = open_report(p)
        rep.kernel_summary(), rep.nvtx_summary(), rep.findings()
    msg = str(e.value)
    assert f"{table}.{col} holds a {kind} value (row 3)" in msg and "re-export" in msg and "\n" not in msg


@pytest.mark.parametrize("table,col,value", [("CUPTI_ACTIVITY_KIND_KERNEL", "end", "9223372036854775807"),
                                             ("CUPTI_ACTIVITY_KIND_KERNEL", "start", "-9223372036854775808"),
                                             ("NVTX_EVENTS", "end", "9223372036854775807")])
def test_a_timestamp_beyond_any_clock_is_named(tmp_path, table, col, value):
    # int64's ends overflow every sum, difference and float conversion: named in one line, whichever read comes first
    p = altered(tmp_path, "far", f'UPDATE {table} SET "{col}" = {value} WHERE rowid = 3')
    for read in (lambda r: r.kernel_summary(), lambda r: r.nvtx_summary(), lambda r: r.time_span):
        with pytest.raises(ReportError) as e:
            read(open_report(p)), open_report(p).findings()
        msg = str(e.value)
        assert f"{table}.{col} holds {value} (row 3), beyond any recording's clock" in msg and "\n" not in msg


def test_a_string_id_given_twice_reads_its_first_text_with_a_warning(tmp_path):
    p = altered(tmp_path, "dup", "CREATE TABLE S2 AS SELECT * FROM StringIds", "DROP TABLE StringIds",
                "CREATE TABLE StringIds (id INTEGER, value TEXT)", "INSERT INTO StringIds SELECT * FROM S2",
                "INSERT INTO StringIds SELECT id, 'planted' FROM S2")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        rep = open_report(p)
        names = set(rep.kernel_summary()["name"])
    assert names == set(open_report(OURS).kernel_summary()["name"]) and "planted" not in names
    assert any(issubclass(w.category, ReportWarning) and "given more than once" in str(w.message) for w in got)
    assert len(rep.findings()) == len(open_report(OURS).findings())


def test_spans_that_end_before_they_start_read_as_zero_with_a_warning(tmp_path):
    p = altered(tmp_path, "neg", 'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 5000 WHERE rowid <= 4')
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        rep = open_report(p)
        k = rep.kernels
        s = rep.kernel_summary()
    assert (k["duration_ns"] >= 0).all() and (k["duration_ns"] == 0).sum() == 4
    assert (s["total_ns"] >= 0).all() and (s["min_ns"] >= 0).all()
    assert any(issubclass(w.category, ReportWarning) and "4 row(s) end before they start" in str(w.message)
               for w in got)


def test_a_name_that_is_not_utf8_reads_with_replacement(tmp_path):
    p = altered(tmp_path, "utf8", "UPDATE StringIds SET value = CAST(x'41ff42' AS TEXT) WHERE id = "
                "(SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid LIMIT 1)")
    rep = open_report(p)
    assert "A\ufffdB" in set(rep.kernel_summary()["name"])


def test_pages_are_never_written_through_a_link(tmp_path):
    from nsight_magic.views import write_view_html

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    page = tmp_path / "view.html"
    page.symlink_to(victim)
    write_view_html(open_report(OURS), page)
    assert victim.read_text() == "keep me" and not page.is_symlink() and "<html" in page.read_text()[:2000].lower()


def test_a_full_disk_leaves_no_half_page_and_one_line(tmp_path):
    """ENOSPC simulated with RLIMIT_FSIZE (the machine does not allow mounts): the write fails part way."""
    out = tmp_path / "v.html"
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000)); "
            "import signal; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "from nsight_magic.cli import main; sys.exit(main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "view", str(OURS), "-o", str(out)], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert "could not write" in r.stderr and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.glob(".v.html*"))


def test_a_folder_where_the_page_cannot_be_saved_still_shows_the_view(tmp_path):
    from nsight_magic.views.output import VIEW_MIME, profile_bundle

    (tmp_path / "view.html").mkdir()  # stands for a read-only folder (tests run as root, who may write anywhere)
    b = profile_bundle(open_report(OURS), tmp_path)
    assert b["text/plain"].splitlines()[0].startswith(f"view.html could not be saved in {tmp_path}")
    assert VIEW_MIME in b and "nm-messages" in b["text/html"]
    assert "application/vnd.jupyter.widget-view+json" not in b  # never "model not found" in a saved notebook


def test_a_20_mb_name_is_cut_and_the_output_stays_small(tmp_path):
    from nsight_magic.readers.nsys_sql import MAX_TEXT
    from nsight_magic.views.output import bundle_bytes, profile_bundle

    p = altered(tmp_path, "bigname", "UPDATE StringIds SET value = printf('%.*c', 20000000, 'k') WHERE id = "
                "(SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid LIMIT 1)",
                "UPDATE NVTX_EVENTS SET text = printf('%.*c', 5000000, 'n') WHERE rowid = "
                "(SELECT min(rowid) FROM NVTX_EVENTS WHERE text IS NOT NULL)")
    rep = open_report(p)
    names = rep.kernel_summary()["name"]
    cut = [n for n in names if n.startswith("kkkk")]
    assert len(cut) == 1 and cut[0].endswith(" ... [20000000 characters, cut]") and len(cut[0]) < MAX_TEXT + 40
    assert any(str(n).endswith("[5000000 characters, cut]") for n in rep.nvtx["name"].astype(str))
    folder = tmp_path / "profile"
    folder.mkdir()
    b = profile_bundle(rep, folder)
    assert bundle_bytes(b) < 4_000_000 and (folder / "view.html").stat().st_size < 6_000_000


def test_ctrl_c_while_a_report_is_shown_is_one_line_and_changes_no_file(tmp_path, monkeypatch, capsys):
    from nsight_magic import cell_display

    folder = tmp_path / "profile"
    folder.mkdir()
    rep = shutil.copyfile(OURS, folder / "report.sqlite")
    real = cell_display.display_report

    def interrupted(*a, **k):  # a real SIGINT, delivered while the real view is being built
        os.kill(os.getpid(), signal.SIGINT)
        return real(*a, **k)

    monkeypatch.setattr(cell_display, "display_report", interrupted)
    before = sorted(p.name for p in folder.iterdir())
    cell_display.show_report(rep, folder, render=False)
    err = capsys.readouterr().err
    assert "stopped loading report.sqlite (Ctrl-C)" in err and "Traceback" not in err and err.count("\n") == 1
    assert sorted(p.name for p in folder.iterdir()) == before


def test_frames_read_in_threads_are_the_frames_and_their_errors_the_same_line(tmp_path):
    # report.prefetch() reads frames in threads on connections of their own (the diagnosis asks for it)
    plain, early = open_report(OURS), open_report(OURS)
    names = ("kernels", "memcpy", "memset", "cuda_api", "osrt", "sync")
    early.prefetch(*names)
    assert set(early._frame_jobs) == {n for n in names if len(getattr(plain, n))}  # absent tables: nothing to read
    for n in names:
        pd.testing.assert_frame_equal(getattr(early, n), getattr(plain, n))
    assert not early._frame_jobs
    p = altered(tmp_path, "typed", "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET returnValue = 'abc' WHERE rowid = 5")
    want = "CUPTI_ACTIVITY_KIND_RUNTIME.returnValue holds a text value (row 5)"
    for prefetch in (False, True):
        rep = open_report(p)
        if prefetch:
            rep.prefetch("cuda_api")
        with pytest.raises(ReportError) as e:
            rep.cuda_api
        assert want in str(e.value) and "\n" not in str(e.value)


def test_the_query_limit_is_read_when_a_report_opens(monkeypatch):
    """Issue 64: NSIGHT_MAGIC_QUERY_LIMIT_S was read once, at import: set in a running kernel it changed nothing.
    It is read as each report opens; a value that is no positive number of seconds is ignored.  The setting
    (%config NsightMagics.query_limit_s) comes before the variable."""
    from traitlets import TraitError

    from nsight_magic import settings
    from nsight_magic.readers.nsys_sql import query_limit_s

    monkeypatch.setattr(settings, "_CURRENT", [])
    monkeypatch.setenv("NSIGHT_MAGIC_QUERY_LIMIT_S", "12.5")
    assert query_limit_s() == 12.5
    for bad in ("abc", "-1", "0", "nan", "inf", ""):
        monkeypatch.setenv("NSIGHT_MAGIC_QUERY_LIMIT_S", bad)
        assert query_limit_s() == settings.QUERY_LIMIT_S, bad
    chosen = settings.NsightSettings(query_limit_s=3.0)
    settings.use(chosen)
    assert query_limit_s() == 3.0
    chosen.query_limit_s = None  # unset: the variable again
    monkeypatch.setenv("NSIGHT_MAGIC_QUERY_LIMIT_S", "7")
    assert query_limit_s() == 7.0
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(TraitError, match="a number of seconds above 0"):
            chosen.query_limit_s = bad


@pytest.mark.parametrize("planted", ["none", "not utf-8", "a blob and a number"])
def test_nvtx_texts_encoded_in_arrow_read_as_the_joined_string_does(tmp_path, monkeypatch, planted):
    """Big NVTX tables have their texts encoded in Arrow (readers.nsys_sql.read_text_codes): the frame equals the
    one read through SQLite's joined string, also where a text is not UTF-8 (replaced) or not text at all."""
    from nsight_magic.readers import nsys_frames

    sql = {"none": [], "not utf-8": ["UPDATE NVTX_EVENTS SET text = CAST(x'41ff42' AS TEXT) WHERE rowid = "
                                     "(SELECT max(rowid) FROM NVTX_EVENTS WHERE text IS NOT NULL)"],
           "a blob and a number": ["UPDATE NVTX_EVENTS SET text = x'0102' WHERE rowid = (SELECT max(rowid) FROM "
                                   "NVTX_EVENTS WHERE text IS NOT NULL)",
                                   "UPDATE NVTX_EVENTS SET text = 42 WHERE rowid = (SELECT min(rowid) FROM "
                                   "NVTX_EVENTS WHERE text IS NOT NULL)"]}[planted]
    p = altered(tmp_path, "texts", *sql)
    encoded = []
    monkeypatch.setattr(nsys_frames, "read_text_codes",
                        lambda *a, _f=nsys_frames.read_text_codes: encoded.append(_f(*a)) or encoded[-1])
    frames = {}
    for rows in (10**9, 0):  # the joined string, then Arrow
        monkeypatch.setattr(nsys_frames, "TEXT_CODES_MIN_ROWS", rows)
        rep = open_report(p)
        frames[rows] = rep.nvtx.astype({"name": object, "domain": object, "label": object})
        rep.close()
    pd.testing.assert_frame_equal(frames[0], frames[10**9])
    assert frames[0]["name"].notna().sum() > 50
    # Arrow took the UTF-8 texts and left the others to the joined string (which replaces what is not UTF-8)
    assert [c is not None for c in encoded] == [planted == "none"]
    if planted == "not utf-8":
        assert "A\ufffdB" in set(frames[0]["name"])
