"""GPU memory (issue 48) read from reports recorded on the lent H100 with torch's allocator history beside them
(and nsys's --cuda-memory-usage for eval_keeps_graph): tests/data/gpu_memory, each with torch's own numbers taken
in a run without the profiler (tests/data/planted/make_planted_reports.py, suite sixth)."""
from __future__ import annotations

import json
import lzma
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import DATA
from nsight_magic.analysis.gpu_memory import memory_summary
from nsight_magic.errors import ReportError
from nsight_magic.report import open_report
from nsight_magic.readers.gpu_memory import load_snapshot
from nsight_magic.views.report_view import NsysView

HERE = DATA / "gpu_memory"
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
MANIFEST = json.loads((HERE / "gpu_memory.json").read_text())
ALARM = ("high", "medium")


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_memory")
    got = {}

    def get(name: str):
        if name not in got:
            folder = root / name
            folder.mkdir()
            for f in (HERE / name).iterdir():
                if f.suffix == ".xz":
                    with lzma.open(f) as a, open(folder / f.stem, "wb") as b:
                        shutil.copyfileobj(a, b)
                else:
                    shutil.copy(f, folder / f.name)
            got[name] = open_report(folder / "report.sqlite")
        return got[name]

    yield get
    for r in got.values():
        r.close()


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_peaks_and_growth_per_step_equal_torchs_own(name, opened):
    torch_says = MANIFEST[name]["torch_memory"]
    s = opened(name).memory_summary()  # the report's own method: analysis.gpu_memory.memory_summary
    d = s.devices.iloc[0]
    # torch's numbers come from a run without the profiler: the same program, the same allocations
    assert d["peak_allocated"] == pytest.approx(torch_says["peak_allocated"], rel=0.01)
    assert d["peak_reserved"] == pytest.approx(torch_says["peak_reserved"], rel=0.01)
    assert d["capacity"] == torch_says["capacity"]
    if torch_says["growth_per_step"]:
        assert d["growth_per_step"] == pytest.approx(torch_says["growth_per_step"], rel=0.10)


def test_the_timeline_holds_both_records_on_the_reports_clock(opened):
    rep = opened("eval_keeps_graph_bad")
    tl = rep.memory_timeline()
    assert set(tl["source"]) == {"torch", "nsys"}
    assert list(tl.columns) == ["start_ns", "device_id", "bytes", "allocated", "reserved", "source"]
    torch_rows = tl[tl["source"] == "torch"]
    a, b = rep.cell_range
    # the allocator's history, placed by the session's UTC start, falls inside the cell
    assert torch_rows["start_ns"].between(a, b).all()
    assert (torch_rows["allocated"] <= torch_rows["reserved"]).all()
    # nsys counts what the driver gave: never less than torch's reserved memory allocated during the capture
    assert tl[tl["source"] == "nsys"]["bytes"].max() >= 0.95 * torch_rows["reserved"].max() - \
        rep.gpu_memory.held_before[0]


def test_a_leak_is_named_with_its_pace_and_its_line_and_the_fixed_twin_is_no_alarm(opened):
    bad = [f for f in opened("eval_keeps_graph_bad").findings() if f.rule == "memory_growth"]
    assert len(bad) == 1 and bad[0].severity in ALARM
    assert "autograd graph" in bad[0].explanation and "torch.no_grad()" in bad[0].suggestion
    assert bad[0].code.startswith("line 6")  # outputs.append(model(...)) is line 6 of the cell
    assert "+0.27 GB a step over 12 steps" in bad[0].title
    fixed = [f for f in opened("eval_keeps_graph_fixed").findings() if f.rule == "memory_growth"]
    assert all(f.severity not in ALARM for f in fixed)  # it keeps one 32 MiB output a step: no alarm


@pytest.mark.parametrize("name", ["eval_keeps_graph_bad", "eval_keeps_graph_fixed"])
def test_growth_per_step_from_nsys_record_alone(name, opened, tmp_path):
    """Without torch's snapshot (`--cuda-memory-usage=true` only) the growth per step comes from the device
    memory nsys saw allocated: the leak raises the same alarm at torch's own pace, its fixed twin none."""
    src = Path(opened(name).path).parent
    for f in ("report.sqlite", "run.json", "python_samples.json"):
        shutil.copy(src / f, tmp_path / f)
    rep = open_report(tmp_path / "report.sqlite")
    try:
        d = rep.memory_summary().devices.iloc[0]
        assert d["source"] == "nsys"
        grows = [f for f in rep.findings() if f.rule == "memory_growth" and f.severity in ALARM]
        if MANIFEST[name]["expect_memory"] == "memory_growth":
            assert d["growth_per_step"] == pytest.approx(MANIFEST[name]["torch_memory"]["growth_per_step"], rel=0.10)
            assert len(grows) == 1 and "+0.27 GB a step over 12 steps" in grows[0].title, grows
        else:
            assert grows == []
    finally:
        rep.close()


def test_a_cell_that_ran_out_comes_first_with_what_was_live(opened):
    rep = opened("oom_cell_bad")
    first = rep.findings()[0]
    assert first.rule == "out_of_memory" and first.severity == "high"
    assert "asked for 64 MiB" in first.title
    s = memory_summary(rep)
    d = s.devices.iloc[0]
    assert np.isfinite(d["oom_ns"]) and d["oom_asked"] == 64 << 20
    top = s.live.iloc[0]
    assert top["line"] == 5 and top["bytes"] > 0.9 * d["peak_allocated"] - d["held_before"]


def test_a_failed_cells_verdict_says_it_failed_and_a_leak_that_fills_the_device_leads(opened):
    """An out-of-memory cell is not "CPU-bound" nor "GPU-bound": its verdict says it failed, then what it ran until
    then.  A leak that fills the device within a run's length (301 more steps) is the first finding, ahead of
    the launch gaps that have time at stake."""
    b = opened("oom_cell_bad").bottleneck()
    assert b.kind == "memory"
    assert b.summary.startswith("out of memory: the cell failed on GPU 0 asking for 64 MiB with 42 MiB free; "
                                "until then "), b.summary
    assert b.breakdown["pct"].sum() == pytest.approx(100.0, abs=0.5)
    first = opened("eval_keeps_graph_bad").findings()[0]
    assert first.rule == "memory_growth" and first.severity == "high", first
    assert "full in about 301 more steps" in first.title
    assert opened("eval_keeps_graph_fixed").bottleneck().kind == "gpu"


@pytest.mark.parametrize("name,fires", [("fragmentation_bad", True), ("fragmentation_fixed", False)])
def test_fragmentation_is_told_and_expandable_segments_is_not(name, fires, opened):
    found = [f for f in opened(name).findings() if f.rule == "memory_fragmentation"]
    assert bool(found) == fires, [str(f) for f in found]
    if fires:
        assert "expandable_segments:True" in found[0].suggestion


def test_the_view_has_a_memory_track_and_tab(opened):
    v = NsysView(opened("eval_keeps_graph_bad"))
    assert "GPU memory" in v.tabs
    html = v.html_page()
    assert "Live at the peak" in html and "GPU memory in use" in html
    assert set(v.data.memory["series"]) == {"device 0 reserved", "device 0 allocated", "device 0 (nsys)"}


def test_a_hostile_snapshot_runs_no_code(tmp_path):
    class Boom:
        def __reduce__(self):
            return (print, ("pwned",))

    p = tmp_path / "memory_snapshot.pickle"
    p.write_bytes(pickle.dumps({"segments": [], "device_traces": [[Boom()]]}))
    with pytest.raises(ReportError, match="not a readable torch memory snapshot"):
        load_snapshot(p)
    p.write_bytes(b"\x80\x05garbage")
    with pytest.raises(ReportError, match="not a readable torch memory snapshot"):
        load_snapshot(p)


def test_a_damaged_snapshot_beside_a_report_leaves_the_rest_of_the_profile(opened, tmp_path):
    src = opened("fragmentation_bad").path
    shutil.copy(src, tmp_path / "report.sqlite")
    (tmp_path / "memory_snapshot.pickle").write_bytes(b"not a pickle")
    rep = open_report(tmp_path / "report.sqlite")
    try:
        assert rep.findings()  # the time findings stand
        v = NsysView(rep)
        assert "the profile is shown without torch" in v.html_page()
    finally:
        rep.close()


@pytest.mark.browser
def test_the_memory_track_and_tab_draw_in_a_browser(opened, tmp_path, browser):
    """In Chromium: the saved page draws the memory track under the timeline (its steps up to the peak, sharing
    the timeline's x range), and the GPU memory tab shows the peak and what was live there."""
    page_file = tmp_path / "view.html"
    page_file.write_text(NsysView(opened("eval_keeps_graph_bad")).html_page(), encoding="utf-8")
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_file.as_uri())
    views = ("(() => { const i = Bokeh.index; const roots = (i && typeof i.values === 'function') ? [...i.values()]"
             " : Object.values(i || {}); const all = []; const walk = v => { all.push(v); "
             "for (const c of (v.child_views || [])) walk(c); }; roots.forEach(walk); return all; })()")
    page.wait_for_function(f"() => window.Bokeh && Bokeh.index && {views}.some(v => (v.model.name || '')"
                           ".endsWith('-memory') && v.frame)", timeout=30_000)
    got = page.evaluate(f"""() => {{
        const all = {views};
        const mem = all.find(v => (v.model.name || '').endsWith('-memory') && v.frame);
        const main = all.find(v => v.frame && mem.model.x_range === v.model.x_range && v !== mem);
        const peaks = Object.fromEntries(mem.model.renderers.map(r => [r.data_source.data.series[0],
                                                                      Math.max(...r.data_source.data.y)]));
        const ys = Object.values(peaks);
        const mb = mem.el.getBoundingClientRect(), tb = main.el.getBoundingClientRect();
        return {{peaks: peaks, lines: ys.length, shared: !!main, height: mb.height,
                 left: mem.frame.bbox.left + mb.left, mainLeft: main.frame.bbox.left + tb.left}};
    }}""")
    assert got["shared"] and got["lines"] == 3 and got["height"] > 80, got
    # GB: torch's own peak_reserved (3,995,074,560 bytes) and peak_allocated; nsys counts the driver's allocations,
    # cuBLAS's workspace too
    assert got["peaks"]["device 0 reserved"] == pytest.approx(3.995, abs=0.01), got
    assert got["peaks"]["device 0 allocated"] == pytest.approx(3.994, abs=0.01), got
    assert got["peaks"]["device 0 (nsys)"] >= got["peaks"]["device 0 reserved"] - 0.74  # less what was held before
    assert abs(got["left"] - got["mainLeft"]) <= 2, got  # x positions line up with the timeline's
    page.locator("text=GPU memory").first.click()
    live = page.locator("text=Live at the peak, by where it was allocated").first
    live.wait_for(state="visible", timeout=10_000)
    assert page.locator("td:visible", has_text="line 6 › forward (torch/nn/modules/container.py)").count() == 1
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "gpu_memory_tab.png"))
    assert not errors, errors
    page.close()


def test_nsys_diff_compares_the_peaks(opened):
    from nsight_magic import diff
    from nsight_magic.views.diff import diff_text

    d = diff(opened("eval_keeps_graph_bad"), opened("eval_keeps_graph_fixed"))
    before, after = d.headline["memory_peak_before"][0], d.headline["memory_peak_after"][0]
    assert before == pytest.approx(MANIFEST["eval_keeps_graph_bad"]["torch_memory"]["peak_allocated"], rel=0.01)
    assert after == pytest.approx(MANIFEST["eval_keeps_graph_fixed"]["torch_memory"]["peak_allocated"], rel=0.01)
    assert "GPU memory peak: device 0 3.99 GB -> 1.18 GB" in diff_text(d)


@pytest.mark.parametrize("snapshot", [
    {"segments": [], "device_traces": [5]},                                     # was "'int' object is not iterable"
    {"segments": [{"device": "x", "address": "y", "total_size": None,
                   "blocks": [{"size": "q", "state": "active_allocated", "frames": 5}]}], "device_traces": []},
    {"segments": [], "device_traces": [[{"action": "alloc", "size": 10 ** 40, "addr": 1, "time_us": 2}]]},  # Overflow
])
def test_a_snapshot_with_damaged_entries_is_left_out_in_one_line(opened, tmp_path, snapshot):
    """Entries of the wrong shape or size (an int where a trace is, a size beyond int64) leave the snapshot out with
    one line naming it; the report and its other tabs show."""
    import warnings

    from nsight_magic.errors import ReportWarning

    shutil.copy(opened("fragmentation_bad").path, tmp_path / "report.sqlite")
    (tmp_path / "memory_snapshot.pickle").write_bytes(pickle.dumps(snapshot))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rep = open_report(tmp_path / "report.sqlite")
        try:
            assert "memory_snapshot.pickle" in rep.gpu_memory.problem
            assert rep.findings() is not None and "the profile is shown without torch" in NsysView(rep).html_page()
        finally:
            rep.close()
    said = [str(w.message) for w in caught if issubclass(w.category, ReportWarning)]
    assert len(said) == 1 and "memory_snapshot.pickle" in said[0], said


def test_a_history_whose_stacks_were_left_out_says_from_when(opened, tmp_path):
    """The recorder leaves allocations' stacks out once the program runs a Python thread of its own (each stack
    would wait for the GIL: 3.5x the cell's time on the H200) and notes when in the snapshot; the memory tab
    says that the code behind the allocations from then on is not known, and the numbers stay."""
    src = Path(opened("eval_keeps_graph_bad").path).parent
    for f in ("report.sqlite", "run.json", "python_samples.json"):
        shutil.copy(src / f, tmp_path / f)
    snap = load_snapshot(src / "memory_snapshot.pickle")
    first_us = min(e["time_us"] for t in snap["device_traces"] for e in t if "time_us" in e)
    snap["nsight_magic"] = {"stacks_off_us": first_us + 1000}
    (tmp_path / "memory_snapshot.pickle").write_bytes(pickle.dumps(snap))
    rep = open_report(tmp_path / "report.sqlite")
    try:
        off = rep.gpu_memory.stacks_off_ns
        torch_rows = rep.memory_timeline().query("source == 'torch'")
        assert off == pytest.approx(torch_rows["start_ns"].min() + 1e6, abs=2e3)  # placed on the report's clock
        assert rep.memory_summary().devices.iloc[0]["peak_allocated"] == \
            memory_summary(opened("eval_keeps_graph_bad")).devices.iloc[0]["peak_allocated"]
        html = NsysView(rep).html_page()
        assert "shown without the code that made them: the program ran a Python thread of its own" in html
    finally:
        rep.close()
    assert opened("eval_keeps_graph_bad").gpu_memory.stacks_off_ns is None  # a history with its stacks says nothing


def test_a_snapshot_parsed_ahead_is_taken_once_and_never_when_the_file_changed(opened, tmp_path):
    """The finish stage parses torch's snapshot while nsys still writes (background.prefetch): the report's read
    takes that result (the same memory as a plain read), once; a snapshot rewritten after its prefetch is read
    again, not served stale."""
    from nsight_magic.readers import gpu_memory as gm

    src = Path(opened("eval_keeps_graph_bad").path).parent
    for f in ("report.sqlite", "run.json", "python_samples.json", "memory_snapshot.pickle"):
        shutil.copy(src / f, tmp_path / f)
    plain = opened("eval_keeps_graph_bad").gpu_memory
    assert gm.prefetch_snapshots(tmp_path) == 1
    key = gm._file_key(tmp_path / "memory_snapshot.pickle")
    assert key in gm._AHEAD
    rep = open_report(tmp_path / "report.sqlite")
    try:
        got = rep.gpu_memory
        assert key not in gm._AHEAD  # taken by the read
        assert got.stacks == plain.stacks and got.timeline.equals(plain.timeline) and got.blocks.equals(plain.blocks)
    finally:
        rep.close()
    # parsed ahead, then rewritten (a run that wrote it again): the read parses the new file
    assert gm.prefetch_snapshots(tmp_path) == 1
    snap = load_snapshot(tmp_path / "memory_snapshot.pickle")
    snap["device_traces"] = [[]]
    (tmp_path / "memory_snapshot.pickle").write_bytes(pickle.dumps(snap))
    rep = open_report(tmp_path / "report.sqlite")
    try:
        assert len(rep.gpu_memory.blocks) == 0  # the stale parse had every block of the first file
    finally:
        rep.close()
    gm._AHEAD.clear()
