"""Python samples (issue 45) in a real profile: Debian's nsys 2022.4 records the cell on this CPU machine; the
profiled process samples its own Python stacks (inside/python_samples.py) and the report reads them back on its
clock: the functions, the cell's lines, a timeline row, the Python tab."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import requires_nsys
from nsight_magic.analysis.python_code import cell_lines, code_in, functions, segments
from nsight_magic.options import NsysOptions
from nsight_magic.readers import open_report
from nsight_magic.views.report_view import NsysView
from nsight_magic.views.timeline_prepare import prepare_timeline

SETUP = """
import json, time
history = {f"metric{i}": [j * 0.5 for j in range(200)] for i in range(400)}
def log_metrics():
    return json.dumps(history)            # pure Python and C, holding the GIL: no I/O
"""
CELL = """
for step in range(30):
    time.sleep(0.004)                      # line 3: waiting (as for the GPU)
    log_metrics()                          # line 4: the host's own work
"""


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    from nsight_magic.run import run_nsys

    tmp = tmp_path_factory.mktemp("samples")
    r = run_nsys(CELL, NsysOptions(name="samp", directory=str(tmp), fresh=True, render=False, quiet=True),
                 setup_sources=[SETUP], namespace={})
    assert r.ok, r.messages
    rep = open_report(r.sqlite)
    yield r, rep
    rep.close()


@requires_nsys
@pytest.mark.nsys
def test_the_samples_are_written_and_placed_on_the_reports_clock(sampled):
    r, rep = sampled
    raw = json.loads((Path(r.folder.path) / "python_samples.json").read_text())
    assert raw["samples"]["t"] and raw["frames"]
    ps = rep.python_samples
    assert ps.placed and not ps.empty
    a, b = rep.cell_range
    # every sample of the cell's thread falls inside our cell range (the clock mark placed them)
    assert ps.samples["time_ns"].between(a - ps.interval_ns, b + ps.interval_ns).all()


@requires_nsys
@pytest.mark.nsys
def test_the_hottest_code_is_the_cells_own_function_and_line(sampled):
    _, rep = sampled
    ps = rep.python_samples
    fn = functions(ps)
    own = fn.set_index("function")
    assert "log_metrics" in own.index
    lines = cell_lines(ps).set_index("line")
    # line 4 (log_metrics) and line 3 (sleep) share the loop's time; both are sampled, each with its own call
    assert {3, 4} <= set(lines.index)
    assert "dumps" in lines.loc[4, "top_call"] or "log_metrics" in lines.loc[4, "top_call"]
    assert lines.loc[3, "top_call"] == "line 3"  # time.sleep is C: no Python frame below the line
    # a stretch of the cell names the code that ran in it
    seg = segments(ps)
    assert not seg.empty and seg["name"].str.contains("line 4").any()
    got, coverage = code_in(ps, seg["pid"], seg["tid"], seg["start_ns"], seg["end_ns"])
    assert coverage > 0.5 and not got.empty


@requires_nsys
@pytest.mark.nsys
def test_the_view_has_a_python_row_and_tab(sampled):
    _, rep = sampled
    data = prepare_timeline(rep)
    assert (data.rows["label"] == "Python").any()
    v = NsysView(rep)
    assert "Python" in v.tabs
    html = v.html_page()
    assert "log_metrics" in html and "Lines of the cell" in html


@requires_nsys
@pytest.mark.nsys
def test_no_samples_when_asked_for_none(tmp_path):
    from nsight_magic.run import run_nsys

    r = run_nsys("x = sum(range(1000))\n", NsysOptions(name="nos", directory=str(tmp_path), fresh=True, render=False,
                                                       quiet=True, samples=False), namespace={})
    assert r.ok, r.messages
    assert not (Path(r.folder.path) / "python_samples.json").exists()
    rep = open_report(r.sqlite)
    try:
        assert rep.python_samples.empty
        assert "Python" not in NsysView(rep).tabs
    finally:
        rep.close()
