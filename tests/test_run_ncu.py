"""%%ncu's runner with a real ncu process (Debian's 2022.3 here: no GPU, so no kernel can be profiled)."""
from __future__ import annotations

import pytest

from conftest import requires_ncu
from nsight_magic.tools.ncu import NcuOptions
from nsight_magic.options import RunOptions
from nsight_magic.run import RunFailed, run_ncu
from nsight_magic.tools import gpu_visible

pytestmark = [pytest.mark.timeout(180)]


@requires_ncu
def test_cell_without_kernels_says_no_kernel_was_profiled(tmp_path):
    out = []
    r = run_ncu("x = 6 * 7\nprint('cell ran', x)", RunOptions(name="k", directory=str(tmp_path), return_vars=("x",)),
                NcuOptions(), on_output=lambda s, t: out.append(t))
    assert "cell ran 42" in "".join(out)
    assert r.returned == {"x": 42}
    assert r.report_file is None
    msg = " ".join(r.messages)
    # without a GPU, that is the first thing to know (issue 24 #8); with one, the filters matched nothing
    expected = "no kernels were profiled" if gpu_visible() else "no GPU is visible on this machine"
    assert msg.startswith(expected) and str(r.folder.path) in msg, msg
    # only the cell's own kernels by default: the NVTX range the child pushes around the cell
    argv = r.folder.command.read_text()
    assert f"--nvtx-include nsight-magic@{r.folder.path.name}/" in argv
    assert "--section MemoryWorkloadAnalysis" in argv and "--set basic" in argv


@requires_ncu
def test_module_filter_replaces_the_cell_filter(tmp_path):
    r = run_ncu("pass", RunOptions(name="m", directory=str(tmp_path)), NcuOptions(module="encoder.layer"))
    argv = r.folder.command.read_text()
    assert "--nvtx-include encoder.layer/" in argv and "nsight-magic@" not in argv


def test_missing_ncu_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("NSIGHT_MAGIC_NCU", str(tmp_path / "nope"))
    with pytest.raises(RunFailed, match=r"NSIGHT_MAGIC_NCU=.*install Nsight Compute.*kept in"):
        run_ncu("pass", RunOptions(directory=str(tmp_path)), NcuOptions())


@pytest.mark.skipif(gpu_visible(), reason="a GPU is visible: %%ncu runs the cell")
def test_ncu_magic_without_a_gpu_says_so_before_the_cell_runs(tmp_path, monkeypatch, capsys):
    """No GPU, no kernel to profile: one line at once, and the cell does not run (it used to run whole first)."""
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NSIGHT_MAGIC_PREWARM", "0")
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nsight_magic")
    result = shell.run_cell("%%ncu\nopen('ran', 'w').write('the cell ran')")
    err = capsys.readouterr()
    assert not (tmp_path / "ran").exists() and not (tmp_path / "nsight-profiles").exists()
    assert "no NVIDIA GPU is visible to this kernel" in err.out + err.err and "%%nsys" in err.out + err.err
    assert result.error_in_exec is None or type(result.error_in_exec).__name__ == "UsageError"


def test_a_profiler_that_fails_after_the_cell_ended_well_is_not_the_cells_exception():
    """Seen in a loaded full run: ncu could not attach ("Failed to connect to process 15") and exited 1 after the
    cell had run; 1 is also the child's status for a cell that raised, so the run said "the cell raised an
    exception".  The cell's own cell-done record decides: the failure is the profiler's."""
    from nsight_magic.inside.marks import EXIT_CELL_ERROR
    from nsight_magic.profilers.process import status_from

    done = ["importing", "running", "cell-done", "finished"]
    assert status_from(EXIT_CELL_ERROR, done, cell_status=0) == "failed"
    assert status_from(EXIT_CELL_ERROR, done, cell_status=EXIT_CELL_ERROR) == "cell-error"
    assert status_from(0, done, cell_status=0) == "ok"
    assert status_from(EXIT_CELL_ERROR, ["importing", "running"]) == "failed"
