"""Python samples (issue 45) in a real profile: Debian's nsys 2022.4 records the cell on this CPU machine; the
profiled process samples its own Python stacks (inside/python_samples.py) and the report reads them back on its
clock: the functions, the cell's lines, a timeline row, the Python tab."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import TEST_TRACE, requires_nsys
from nsight_magic.analysis.python_code import cell_lines, code_in, functions, segments, stack_info
from nsight_magic.options import NsysOptions
from nsight_magic.report import open_report
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
def test_a_clock_mark_made_late_after_its_clock_reading_is_made_again(monkeypatch, tmp_path):
    """The reader places the samples as if the clock mark were made when its clock was read: a mark made long after
    (the first one creates nvtx's domain; a preempted thread) would place them late (a loaded full run: a sleep's
    samples inside the next line's range), so the sampler marks again and keeps the promptest reading."""
    import sys
    import time
    import types

    from nsight_magic.inside.python_samples import CLOCK_MARK, PythonSampler

    made = []

    def mark(message, domain=None):
        if not made:
            time.sleep(0.02)
        made.append((message, domain, time.monotonic_ns()))

    monkeypatch.setitem(sys.modules, "nvtx", types.SimpleNamespace(mark=mark))
    clock = PythonSampler(tmp_path / "s.json", domain="ours")._mark()
    assert len(made) >= 2 and {d for _, d, _ in made} == {"ours"}, made
    texts = [m for m, _, _ in made]
    assert f"{CLOCK_MARK}{clock}" in texts[1:], (clock, made)
    assert made[0][2] - int(texts[0][len(CLOCK_MARK):]) >= 20_000_000  # the slow one is not the clock


def test_samples_whose_first_clock_mark_was_dropped_are_placed_by_the_one_at_the_cells_end(sampled, tmp_path):
    """nsys 2025.3 drops the first milliseconds after `nsys start` in a process that has started CUDA (the in-place
    kernel's, a warm worker's): the sampler marks its clock again as the cell ends, and the reader places the
    samples by that mark where the first is missing, at the same times."""
    import shutil

    from nsight_magic.readers.python_samples import read_python_samples

    r, rep = sampled
    folder = Path(r.folder.path)
    raw = json.loads((folder / "python_samples.json").read_text())
    assert len(raw["clocks"]) == 1 and raw["clocks"][0] > raw["clock_ns"]  # the mark made as the cell ended
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(folder / "run.json", copy)
    # as if nsys had dropped the first mark: the file names a first clock no mark of the report carries
    raw["clock_ns"] -= 1
    raw["samples"]["t"] = [t + 1 for t in raw["samples"]["t"]]
    (copy / "python_samples.json").write_text(json.dumps(raw))
    _, marks = rep._own_rows()
    moved = read_python_samples(copy, marks)
    assert moved.placed and len(moved.samples) == len(rep.python_samples.samples)
    # within two sampling intervals (a misplaced file would be off by the cell's length): each mark is stamped a
    # little after its clock read (tens of microseconds on a quiet machine; 1.03 ms, 3.86 ms and 5.44 ms under the
    # suite's three workers, the thread descheduled between the two)
    gap = moved.samples["time_ns"].to_numpy() - rep.python_samples.samples["time_ns"].to_numpy()
    assert abs(gap).max() < 2 * rep.python_samples.interval_ns, abs(gap).max()


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
    # each line's time rests on a count of samples, shown beside it (the precision samples give)
    in_cell = stack_info(ps).cell_line[ps.samples["stack"].to_numpy()]
    assert lines["samples"].sum() == (in_cell >= 0).sum() and (lines["samples"] > 0).all()
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
    # "Python" under a thread's header row, or "MainThread [20] · Python" where the process has one thread
    assert data.rows["label"].astype(str).str.fullmatch(r"(.* · )?Python").any(), data.rows["label"].tolist()
    v = NsysView(rep)
    assert "Python" in v.tabs
    html = v.html_page()
    assert "log_metrics" in html and "Lines of the cell" in html
    # the GPU tabs of a CPU-only profile say why they are empty and what would fill them
    assert "No kernels: no GPU was visible to the profiled process" in html
    assert "No copies between host and device: no GPU was visible" in html


MEASURED_CELL = """
import nvtx
for step in range(30):
    time.sleep(0.004)                      # line 4: sampled only
    with nvtx.annotate("log"):
        log_metrics()                      # line 6: inside a range of its own, measured exactly
"""


def _measured_state(rep) -> str:
    """What a run that measured no line had (seen in two loaded full runs: an empty table)."""
    from nsight_magic.analysis.python_code import cell_lines, thread_roles

    ps = rep.python_samples
    return (f"samples {len(ps.samples)}, placed {ps.placed}, problem {ps.problem}, roles {thread_roles(ps)}, "
            f"lines {cell_lines(ps).to_dict('records') if not ps.samples.empty else []}, "
            f"NVTX {rep.nvtx.groupby(['domain', 'name'], observed=True).size().head(12).to_dict()}")


@requires_nsys
@pytest.mark.nsys
def test_a_line_an_nvtx_range_measured_shows_the_measurement_not_the_samples(tmp_path):
    """Issue 65: the Lines table printed a line's time from 4 samples beside an NVTX range that measured the same
    code (and disagreed). Where ranges of the cell's thread hold that line only, the table shows their time, says
    which range measured it, and the sampled lines say "samples"; --lines measures every line so."""
    from nsight_magic.views.report_view import _python

    rep, got, said = _measured_recording(tmp_path, "meas", lines=False)
    try:
        nv = rep.nvtx
        log = nv[nv["name"] == "log"]
        assert len(log) == 30
        # the sleep's line has no range of its own; the loop's lines none
        assert list(got.index) == [6], (got, said)
        assert got.loc[6, "measured_ns"] == (log["end_ns"] - log["start_ns"]).sum() and \
            got.loc[6, "measured_by"] == "log", got
        _, lines, _ = _python(rep)
        lines = lines.set_index("line")
        assert lines.loc[6, "measured_by"] == "NVTX 'log'" and lines.loc[4, "measured_by"] == "samples", lines
        assert lines.loc[6, "total_ns"] == got.loc[6, "measured_ns"], lines  # exact, not rounded to its samples
    finally:
        rep.close()
    # --lines: a range per line and per loop iteration; each line with samples is measured by its own
    rep, got, said = _measured_recording(tmp_path, "meas-lines", lines=True)
    try:
        assert {4, 6} <= set(got.index) and got.loc[4, "measured_by"].startswith("L4: "), (got, said)
        # line 6 sits in both 'log' and --lines' range of its `with` statement: the innermost measures it
        assert got.loc[6, "measured_by"] == "log", got
        assert got.loc[4, "measured_ns"] >= 30 * 4e6, got  # 30 sleeps of 4 ms
    finally:
        rep.close()


def _measured_recording(tmp_path, name: str, lines: bool):
    """MEASURED_CELL recorded, opened and its measured lines: (report, lines by line, what the recordings had).
    A recording that measured no line at all is made once more (twice in loaded full runs, not reproduced alone
    or under two CPU hogs); what the first had is kept for the assertion's message."""
    from nsight_magic.analysis.python_code import measured_lines
    from nsight_magic.run import run_nsys

    said = []
    for attempt in range(2):
        r = run_nsys(MEASURED_CELL, NsysOptions(name=f"{name}{attempt}", directory=str(tmp_path), fresh=True,
                                                render=False, quiet=True, lines=lines),
                     setup_sources=[SETUP], namespace={})
        assert r.ok, r.messages
        rep = open_report(r.sqlite)
        got = measured_lines(rep.python_samples, rep.nvtx).set_index("line")
        said.append(_measured_state(rep))
        if len(got) or attempt:
            return rep, got, said
        rep.close()


@requires_nsys
@pytest.mark.nsys
def test_no_samples_when_asked_for_none(tmp_path):
    from nsight_magic.run import run_nsys

    r = run_nsys("x = sum(range(1000))\n", NsysOptions(name="nos", directory=str(tmp_path), fresh=True, render=False,
                                                       trace=TEST_TRACE, quiet=True, samples=False), namespace={})
    assert r.ok, r.messages
    assert not (Path(r.folder.path) / "python_samples.json").exists()
    rep = open_report(r.sqlite)
    try:
        assert rep.python_samples.empty
        assert "Python" not in NsysView(rep).tabs
    finally:
        rep.close()


def test_samples_beside_an_nsys_2025_3_report_are_read_on_its_clock(tmp_path):
    """Recorded on the H100 with nsys 2025.3.1 (tests/data/planted: growing_prefix, its sidecars): the same file,
    placed by the same NVTX clock mark in a newer export."""
    import sys

    from conftest import DATA

    sys.path.insert(0, str(DATA / "planted"))
    from planted_files import unpack

    manifest = json.loads((DATA / "planted" / "planted.json").read_text())
    rep = open_report(unpack(manifest["growing_prefix"], "bad", tmp_path))
    try:
        assert rep.meta.nsys_version.startswith("2025.3")
        ps = rep.python_samples
        assert ps.placed and len(ps.samples) > 50
        a, b = rep.cell_range
        # the first sample comes one interval (at most two, the sampler waiting for the GIL) after the cell began
        # (this recording's sampler ran on through torch's allocator snapshot after the cell, since stopped first)
        assert a < ps.samples["time_ns"].min() < a + 3 * ps.interval_ns
        lines = cell_lines(ps).set_index("line")
        # a GPU-bound loop: the host queues the loop's body (line 6, the MLP's forward) and waits at the end
        # (line 7, torch.cuda.synchronize) for most of the cell
        assert "forward (torch/nn/modules/container.py)" in lines.loc[6, "top_call"]
        assert "synchronize (torch/cuda/__init__.py)" in lines.loc[7, "top_call"]
        assert lines.loc[7, "total_ns"] > lines.loc[6, "total_ns"]
    finally:
        rep.close()



GIL_SCRIPT = """
import json, sys, threading, time
from pathlib import Path
from nsight_magic.inside.python_samples import PythonSampler

def _busy(ms):
    end, s = time.perf_counter() + ms / 1e3, 0.0
    while time.perf_counter() < end:
        s += 1.0

def loop(n):
    seen = set()
    for _ in range(n):
        _busy(3.0)
        time.sleep(0.001)
        seen.add(sys.getswitchinterval())
    return seen

before = sys.getswitchinterval()
path = Path(sys.argv[1])
told = []   # when the sampler tells the allocator history (inside/memory_history.py) a thread runs Python
s = PythonSampler(path, on_busy_thread=[lambda: told.append(time.monotonic())]).start()
alone = loop(120)
split = time.monotonic_ns() - s.clock_ns   # the samples before it: the sampler alone beside the cell
other = threading.Thread(target=time.sleep, args=(0.5,))   # a thread of the program's own
other.start()
together = loop(60)
other.join()
told_while_waiting = len(told)   # a thread that only sleeps takes no GIL: nothing to tell
busy = threading.Thread(target=_busy, args=(300.0,))   # one that runs Python
t_busy = time.monotonic()
busy.start()
loop(40)
busy.join()
s.remove()
raw = json.loads(path.read_text())
busy = {i for i, f in enumerate(raw["frames"]) if f[1] == "_busy"}
me = threading.get_native_id()
mine = [st for t, st, tid in zip(raw["samples"]["t"], raw["samples"]["stack"], raw["samples"]["tid"])
        if tid == me and t < split]
share = sum(1 for st in mine if set(raw["stacks"][st][0::2]) & busy) / len(mine)
print(json.dumps({"before": before, "after": sys.getswitchinterval(), "alone": sorted(alone),
                  "together": sorted(together), "n": len(mine), "share": share, "told_while_waiting": told_while_waiting,
                  "told_after_busy_s": [t - t_busy for t in told]}))
"""


def test_pure_python_between_gil_releases_is_sampled(tmp_path):
    """A 3 ms pure-Python function between calls that release the GIL: at CPython's 5 ms switch interval the
    sampler got the GIL only at the releases (the samples all fell in sleep: share 0.0); with the sampler alone
    beside the cell the interval is 0.5 ms and the function is seen in most of its time.  Once the program has a
    thread of its own, its GIL hand-offs are as in a plain run: the interval is given back."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", GIL_SCRIPT, str(tmp_path / "s.json")], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["after"] == got["before"] == 0.005
    assert 0.0005 in got["alone"] and got["together"][-1] == 0.005, got
    # the allocator history is told once, when a thread of the program runs Python (not while one only sleeps)
    assert got["told_while_waiting"] == 0 and len(got["told_after_busy_s"]) == 1, got
    assert 0 <= got["told_after_busy_s"][0] < 0.3, got
    # the share of the samples taken while the sampler was alone that fell in _busy: 0.0 with the bug; about 0.7
    # on an idle machine, less on a loaded one (a 1 ms sleep then lasts longer), so the bound sits well below
    assert got["n"] > 40 and got["share"] > 0.15, got


FINISHING_SCRIPT = """
import contextvars, json, sys, threading, time
from pathlib import Path
from nsight_magic.inside.python_samples import PythonSampler

# the finishing thread's code made at run time (as dataclasses and namedtuple make it): no file of the cell's
GENERATED = compile("def finishing():\\n    end = time.perf_counter() + 0.4\\n    while time.perf_counter() < end:\\n"
                    "        pass\\n", "<string>", "exec")
ns = {"time": time}
exec(GENERATED, ns)

told = []
s = PythonSampler(Path(sys.argv[1]), on_busy_thread=[lambda: told.append(1)]).start()
# as background.ProfileJob's thread: its target contextvars' Context.run (no module), its name ours
t = threading.Thread(target=contextvars.copy_context().run, args=(ns["finishing"],), name="nsight-magic finish x")
t.start()
end = time.perf_counter() + 0.5
while time.perf_counter() < end:   # the cell's own work, in this file (cell.py)
    time.sleep(0.001)
t.join()
s.remove()
print(json.dumps({"told": len(told), "finisher": t.native_id, "me": threading.get_native_id()}))
"""


def test_our_finishing_thread_is_the_machinerys_whatever_code_it_runs(tmp_path):
    """A thread of ours (the previous profile's finish, the imports at load) that runs code made at run time
    (`<string>`: dataclasses, namedtuple) beside the cell is the machinery's: folded with the kernel's threads,
    never the program's (seen in place under load: a second program row), and never a reason to turn the
    allocator history's stacks off."""
    import subprocess
    import sys

    from nsight_magic.analysis.python_code import CELL as CELL_ROLE, KERNEL, thread_roles
    from nsight_magic.readers.python_samples import read_python_samples

    (tmp_path / "cell.py").write_text(FINISHING_SCRIPT)
    p = subprocess.run([sys.executable, str(tmp_path / "cell.py"), str(tmp_path / "python_samples.json")],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["told"] == 0, got
    ps = read_python_samples(tmp_path)
    roles = {tid: role for (_, tid), role in thread_roles(ps).items()}
    assert roles.get(got["finisher"]) == KERNEL and roles.get(got["me"]) == CELL_ROLE, (roles, got)


DAMAGES = {
    "a frame that is a list": lambda d: d["frames"].__setitem__(0, [["a"], "f", 1]),
    "a NaN time": lambda d: d["samples"]["t"].__setitem__(0, float("nan")),
    "a time of 1e30": lambda d: d["samples"]["t"].__setitem__(0, 1e30),
    "interval_ns 'abc'": lambda d: d.__setitem__("interval_ns", "abc"),
    "a negative interval": lambda d: d.__setitem__("interval_ns", -5_000_000),
    "pid 'x'": lambda d: d.__setitem__("pid", "x"),
    "a stack that is a string": lambda d: d["stacks"].__setitem__(0, "abc"),
    "a thread id that is a string": lambda d: d["samples"]["tid"].__setitem__(0, "q"),
    "passes of another length": lambda d: d.__setitem__("passes", {"t": [1, 2], "ns": [5]}),
    "a pass of -1 ns": lambda d: d.__setitem__("passes", {"t": [1], "ns": [-1]}),
    "syncs that are a list": lambda d: d.__setitem__("syncs", [1, 2]),
    "a sync naming an unknown stack": lambda d: d.__setitem__("syncs", {"t": [1], "tid": [1], "stack": [10**6]}),
    "a sync at NaN": lambda d: d.__setitem__("syncs", {"t": [float("nan")], "tid": [1], "stack": [0]}),
    "100,000 nested brackets": None,
}


def test_a_damaged_samples_file_is_left_out_in_one_line_and_the_rest_shows(tmp_path):
    """python_samples.json is optional: damaged (each way of DAMAGES), the profile opens and draws without it,
    saying why once (a warning; the Python tab says it), never a traceback through the reader."""
    import sys
    import warnings

    from conftest import DATA
    from nsight_magic.errors import ReportWarning

    sys.path.insert(0, str(DATA / "planted"))
    from planted_files import unpack

    manifest = json.loads((DATA / "planted" / "planted.json").read_text())
    report = unpack(manifest["growing_prefix"], "bad", tmp_path)
    path = Path(report).parent / "python_samples.json"
    good = path.read_text()
    for i, (damage, how) in enumerate(DAMAGES.items()):
        data = json.loads(good)
        if how is None:
            path.write_text("[" * 100_000 + "]" * 100_000)
        else:
            how(data)
            path.write_text(json.dumps(data))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rep = open_report(report)
            try:
                ps = rep.python_samples
                assert ps.empty and "python_samples.json" in ps.problem, damage
                assert rep.findings() and rep.bottleneck().kind  # the rest of the diagnosis stands
                if i == 0:  # the page: drawn once, the reader's handling is the same for every damage
                    html = NsysView(rep).html_page()
                    assert "the profile is shown without its Python samples" in html and "Advice" in html
            finally:
                rep.close()
        said = [str(w.message) for w in caught if issubclass(w.category, ReportWarning)]
        assert len(said) == 1 and "\n" not in said[0], (damage, said)
        for cache in Path(report).parent.glob("report.nsight-cache"):  # each damage read afresh
            import shutil

            shutil.rmtree(cache)


def test_the_command_line_draws_a_profile_whose_samples_are_damaged_with_one_line(tmp_path):
    import subprocess
    import sys

    from conftest import DATA

    sys.path.insert(0, str(DATA / "planted"))
    from planted_files import unpack

    manifest = json.loads((DATA / "planted" / "planted.json").read_text())
    folder = Path(unpack(manifest["growing_prefix"], "bad", tmp_path)).parent
    (folder / "python_samples.json").write_text("[" * 100_000 + "]" * 100_000)
    p = subprocess.run([sys.executable, "-m", "nsight_magic.cli", "view", str(folder), "-o", str(tmp_path / "v.html")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and (tmp_path / "v.html").stat().st_size > 10_000, p.stderr
    assert p.stderr.strip().splitlines() == [p.stderr.strip()] and "python_samples.json" in p.stderr, p.stderr
