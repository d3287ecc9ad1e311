"""A report too large for the kernel's memory is not read (memory_room.py): the kernel lives, the files stay, one
line says how to load it anyway."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import cell_text, requires_nsys
from nsight_magic import memory_room
from nsight_magic.errors import NsightMagicError
from nsight_magic.readers.nsys_rows import EVENT_SPECS, event_rows
from nsight_magic.readers.nsys_sql import find_spec_table
from nsight_magic.report import open_report
from nsight_magic.settings import NsightSettings, use

DATA = Path(__file__).parent / "data"


def _counted(path: Path) -> int:
    """The event tables' rows, counted by a scan (what event_rows gets from the largest rowid)."""
    con = sqlite3.connect(path)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    names = [t for t in (find_spec_table(tables, s) for s in EVENT_SPECS) if t]
    n = sum(con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in names)
    con.close()
    return n


@pytest.mark.parametrize("name", ["nsys_h100_a_cuda_nvtx.sqlite", "findings_bad.sqlite"])
def test_events_are_counted_without_reading_them(name):
    path = DATA / name
    assert event_rows(path) == _counted(path) > 1000


def test_a_file_sqlite_cannot_read_counts_no_events(tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database at all" * 100)
    assert event_rows(bad) == 0


def test_the_memory_available_is_read_on_linux():
    got = memory_room.available_bytes()
    assert got is not None and 0 < got < 1 << 50


def test_a_report_over_the_limit_is_refused_in_one_line_and_closed(tmp_path):
    src = tmp_path / "report.sqlite"
    shutil.copy(DATA / "nsys_h100_a_cuda_nvtx.sqlite", src)
    settings = NsightSettings()
    use(settings)
    try:
        events = event_rows(src)
        settings.memory_limit_gb = memory_room.need_bytes(events) / 1e9 * 0.99
        report = open_report(src)
        with pytest.raises(memory_room.TooLarge) as got:
            memory_room.check_room(report, f"%nsys_load {src}")
        msg = str(got.value)
        assert "\n" not in msg and f"{events:,} events" in msg, msg
        assert f"%nsys_load {src} --force" in msg and "memory_limit_gb" in msg, msg
        with pytest.raises(NsightMagicError, match="closed"):
            report.kernel_summary()
        settings.memory_limit_gb = memory_room.need_bytes(events) / 1e9 * 1.01  # room enough: read as before
        report = open_report(src)
        memory_room.check_room(report, "unused")
        assert len(report.kernel_summary())
    finally:
        use(NsightSettings())


def test_the_limit_setting_takes_only_a_positive_number():
    with pytest.raises(Exception, match="memory_limit_gb is a number of GB above 0"):
        NsightSettings(memory_limit_gb=0.0)


@requires_nsys
@pytest.mark.nsys
@pytest.mark.timeout(600)
def test_a_profile_too_large_for_the_kernel_is_kept_unread_and_loads_when_forced(tmp_path):
    cells = (
        "%load_ext nsight_magic",
        "%config NsightMagics.memory_limit_gb = 0.1",  # below what any report needs: every one is too large
        "%%nsys --name big --fresh --wait\nimport nvtx\nwith nvtx.annotate('work'):\n    print('the cell ran')",
        "import glob\nfolder = glob.glob('nsight-profiles/big-*')[0]",
        "%nsys_load $folder",
        "%nsys_load $folder --force",
        "print('the kernel lives')",
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    folder = next((tmp_path / "nsight-profiles").glob("big-*"))
    ran = cell_text(nb.cells[2])
    assert "the cell ran" in ran, ran
    assert "events: reading and drawing it would take about" in ran and "memory_limit_gb" in ran, ran
    assert f"--force` loads it anyway" in ran, ran
    # nothing lost: the cell's script, its output and the report stay in the folder
    assert (folder / "cell.py").is_file() and "the cell ran" in (folder / "stdout.txt").read_text()
    assert any(folder.glob("*.nsys-rep")) or any(folder.glob("*.sqlite")), sorted(p.name for p in folder.iterdir())
    refused = cell_text(nb.cells[4])
    assert "was not loaded" in refused and "--force" in refused and refused.count("\n") <= 1, refused
    assert not any("text/html" in o.get("data", {}) for o in nb.cells[4].outputs)
    shown = nb.cells[5].outputs
    assert any("text/html" in o.get("data", {}) for o in shown), cell_text(nb.cells[5])
    assert "was not loaded" not in cell_text(nb.cells[5])
    assert "the kernel lives" in cell_text(nb.cells[6], "stdout")


def test_two_reports_compared_are_refused_when_both_do_not_fit_and_compared_when_forced(tmp_path):
    """%nsys_diff holds both reports at once: refused (one line, both closed, the kernel lives) where each alone
    would fit and both together would not; --force compares them; a real kernel."""
    a, b = tmp_path / "a" / "report.sqlite", tmp_path / "b" / "report.sqlite"
    for p, name in ((a, "nsys_h100_a_cuda_nvtx.sqlite"), (b, "findings_bad.sqlite")):
        p.parent.mkdir()
        shutil.copy(DATA / name, p)
    ea, eb = event_rows(a), event_rows(b)
    limit = max(memory_room.need_bytes(ea), memory_room.need_bytes(eb)) * 1.01  # one fits, not both together
    assert limit < memory_room.BASE_BYTES + memory_room.need_bytes(ea + eb)
    settings = NsightSettings()
    use(settings)
    try:
        settings.memory_limit_gb = limit / 1e9
        ra, rb = open_report(a), open_report(b)
        memory_room.check_room(ra, "one")  # each alone: loaded
        with pytest.raises(memory_room.TooLarge) as got:
            memory_room.check_room(ra, "%nsys_diff A B", rb)
        msg = str(got.value)
        assert "\n" not in msg and f"{ea + eb:,} events" in msg and "%nsys_diff A B --force" in msg, msg
        for r in (ra, rb):
            with pytest.raises(NsightMagicError, match="closed"):
                r.kernel_summary()
    finally:
        use(NsightSettings())
    cells = ("%load_ext nsight_magic", f"%config NsightMagics.memory_limit_gb = {limit / 1e9!r}",
             f"%nsys_diff {a.parent} {b.parent} --no-render",
             f"%nsys_diff {a.parent} {b.parent} --no-render --force",
             "print(type(_nsys_diff).__name__, 'the kernel lives')")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    refused = cell_text(nb.cells[2])
    assert "they were not loaded" in refused and f"%nsys_diff {a.parent} {b.parent} --force" in refused, refused
    assert "Traceback" not in refused and refused.count("\n") <= 1, refused
    compared = cell_text(nb.cells[3])
    assert "not loaded" not in compared and "Traceback" not in compared, compared
    assert "ProfileDiff the kernel lives" in cell_text(nb.cells[4], "stdout")
