"""What a first-time user meets in a kernel (issue 24): the cell magics' help, profile names after the prompt, the
Lines tab in the editor's numbers, a word while the profiler is still writing after the cell."""
from __future__ import annotations

import pytest

from conftest import kernel_runner, requires_nsys
from nsight_magic.options import NsysOptions
from nsight_magic.run import run_nsys

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def kernel(tmp_path):
    """A real kernel in tmp_path; run(code) -> (shown text, pager text, execution count)."""
    km, kc, run = kernel_runner(tmp_path)
    yield run
    kc.stop_channels()
    km.shutdown_kernel(now=True)


def test_cell_magic_help_names_the_cell_magic(kernel):
    kernel("%load_ext nsight_magic")
    for name in ("nsys", "ncu"):
        _, page, _ = kernel(f"%%{name}?")
        usage = next(line for line in page.splitlines() if f"%{name}" in line)
        assert usage.lstrip().startswith(f"%%{name} ["), page[:400]
        assert "::" not in page.split("\n\n", 1)[0], page[:400]  # no stray RST marker before the usage


@requires_nsys
@pytest.mark.nsys
def test_a_profile_is_named_after_the_prompt_the_user_sees(kernel, tmp_path):
    kernel("%load_ext nsight_magic")
    kernel("x = 1")
    shown, _, count = kernel("%%nsys --no-render --fresh -t nvtx\ny = x + 1")
    assert "Verdict:" in shown, shown  # the text view of a profile
    (folder,) = (tmp_path / "nsight-profiles").iterdir()
    assert folder.name.startswith(f"cell{count}-"), (folder.name, count)


@requires_nsys
@pytest.mark.nsys
def test_the_lines_tab_numbers_lines_as_the_editor_does(kernel, tmp_path):
    kernel("%load_ext nsight_magic")
    shown, _, _ = kernel("%%nsys --lines --no-render --fresh -t nvtx\nimport time\ntime.sleep(0.05)\n"
                         "time.sleep(0.15)")
    assert "Verdict:" in shown, shown
    from nsight_magic import open_report
    from nsight_magic.views.report_view import _lines_and_modules

    (folder,) = (tmp_path / "nsight-profiles").iterdir()
    report = open_report(folder)
    lines, _ = _lines_and_modules(report, folder)  # what the Lines tab shows
    by_line = lines.set_index("line")
    # the editor numbers the %%nsys line 1: the cell's first line is 2, the 0.15 s sleep is line 4
    assert int(by_line["cpu_ns"].idxmax()) == 4 and 2 in by_line.index and 1 not in by_line.index
    assert by_line.loc[4, "source"] == "time.sleep(0.15)"
    # and the timeline's ranges say the same numbers
    assert "L4: time.sleep(0.15)" in set(report.nvtx["name"].astype(str))


@requires_nsys
@pytest.mark.nsys
def test_a_profiler_still_busy_after_the_cell_gets_a_status_line(tmp_path, monkeypatch):
    from nsight_magic.profilers import process

    monkeypatch.setattr(process, "FINALIZE_WARN_S", 1.0)  # 20 s in use; the cell's process lingers 4 s here
    seen = []
    cell = "import threading, time\nthreading.Thread(target=time.sleep, args=(4,)).start()\nprint('cell done')"
    r = run_nsys(cell, NsysOptions(name="lingers", directory=str(tmp_path), trace="nvtx"),
                 on_status=lambda text, t: seen.append(text))
    # the lingering thread keeps the process (and so nsys's writing) waiting: the status names it, with Ctrl-C
    words = [s for s in seen if "waits for its thread" in s]
    assert words and "Ctrl-C stops it and keeps what it wrote" in words[-1], seen
    assert r.report_file is not None
