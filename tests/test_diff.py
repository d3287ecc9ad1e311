"""Comparing two profiles (nsight_magic.diff, %nsys_diff, nsight-magic diff): real nsys on CPU, the H100 reports,
Nsight Compute reports, and the page in real Chromium."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import BOKEH_IDLE, cell_text, fixture_path, requires_chromium, requires_nsys, run_notebook
from nsight_magic import diff
from nsight_magic.analysis.diff import DIFF_COLUMNS, kernel_key, nvtx_paths
from nsight_magic.cli import main as cli_main
from nsight_magic.errors import OptionError
from nsight_magic.options import NsysOptions
from nsight_magic.run import run_nsys

DATA = Path(__file__).parent / "data"

CELL = """
import time, nvtx
with nvtx.annotate("a"):
    time.sleep(0.1)
with nvtx.annotate("b"):
    time.sleep({b})
if {c}:
    with nvtx.annotate("c"):
        time.sleep(0.05)
"""


def _slept_as_asked(folder, b: float, c: bool) -> bool:
    """Whether the recorded ranges lasted what the cell slept, within 10 ms, and the capture held little else
    (30 ms): under the suite's three workers on two cores a 0.2 s sleep once took 0.27 s, and a capture once held
    0.19 s more than its sleeps (the cell's imports), and the comparison then measured the machine, not the diff.
    Range a (unchanged) within 2.5 ms: two runs' a then differ by less than the comparison's noise (5% of it)."""
    from nsight_magic import open_report

    rep = open_report(folder)
    try:
        got = rep.nvtx_summary().set_index("name")["total_ns"] / 1e9
        capture = rep.meta.duration_ns / 1e9
    finally:
        rep.close()
    slept = 0.1 + b + (0.05 if c else 0.0)
    return abs(got.get("a", 0) - 0.1) < 0.0025 and abs(got.get("b", 0) - b) < 0.01 and 0 <= capture - slept < 0.03


@pytest.fixture(scope="module")
def two_cpu_profiles(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("diff")
    out = []
    for name, b, c in (("first", 0.2, False), ("second", 0.4, True)):
        for _ in range(3):  # a run the machine slowed is recorded again (at most twice)
            r = run_nsys(CELL.format(b=b, c=c), NsysOptions(name=name, directory=str(tmp), trace="nvtx"))
            assert r.ok, r.messages
            if _slept_as_asked(r.folder.path, b, c):
                break
        out.append(r.folder.path)
    return out


@requires_nsys
@pytest.mark.nsys
@pytest.mark.timeout(300)
def test_a_slower_range_and_a_new_one(two_cpu_profiles):
    first, second = two_cpu_profiles
    d = diff(first, second)
    assert list(d.nvtx.columns) == DIFF_COLUMNS
    rows = d.nvtx.set_index("name")
    assert rows.loc["b", "status"] == "changed"
    assert abs(rows.loc["b", "delta_ns"] - 0.2e9) <= 0.02e9  # +0.2 s within 10%
    assert rows.loc["b", "ratio"] == pytest.approx(2.0, rel=0.1)
    assert rows.loc["c", "status"] == "new" and rows.loc["c", "count_before"] == 0
    assert rows.loc["a", "status"] == "same" and abs(rows.loc["a", "delta_ns"]) < 0.01e9
    assert d.headline["capture_after_ns"] - d.headline["capture_before_ns"] == pytest.approx(0.25e9, rel=0.2)
    assert d.top(1)["name"].iloc[0] == "b"
    assert d.before_label.startswith("first-") and d.after_label.startswith("second-")


@requires_nsys
@pytest.mark.nsys
def test_self_diff_is_all_zeros(two_cpu_profiles):
    d = diff(two_cpu_profiles[0], two_cpu_profiles[0])
    assert d.is_zero()
    for t in d.tables().values():
        assert (t["delta_ns"] == 0).all() and (t["status"] == "same").all()
        assert np.allclose(t["ratio"].dropna(), 1.0)


def test_self_diff_of_a_gpu_report_is_all_zeros():
    d = diff(DATA / "findings_bad.sqlite", DATA / "findings_bad.sqlite")
    assert d.is_zero() and not d.kernels.empty and not d.api.empty and not d.memcpy.empty
    assert (d.findings["status"] == "still").all()


def test_related_h100_workloads_give_sensible_kernel_deltas():
    a = fixture_path("nsys", "h100-2025.3", "a_cuda_nvtx.sqlite")
    b = fixture_path("nsys", "h100-2025.3", "b_cuda_nvtx_osrt.sqlite")
    if not a.exists():
        pytest.skip("fixture absent")
    d = diff(a, b)  # the same training step, traced without and with OS runtime calls
    k = d.kernels
    assert set(k["status"]) == {"same"} and (k["count_before"] == k["count_after"]).all()
    assert d.headline["gpu_busy_after_ns"] == pytest.approx(d.headline["gpu_busy_before_ns"], rel=0.05)
    # the fixed workload: bad -> good removes causes; its tiny kernels are gone and the findings with them
    fix = diff(DATA / "findings_bad.sqlite", DATA / "findings_good.sqlite")
    gone = fix.kernels[fix.kernels["status"] == "gone"]
    assert gone["count_before"].max() >= 4000  # the 4000 one-element adds of the launch-bound phase
    assert {"launch_bound", "gpu_gaps", "cuda_memcpy_sync"} <= set(fix.headline["findings_gone"])
    assert fix.headline["capture_after_ns"] < fix.headline["capture_before_ns"]
    rows = fix.nvtx.set_index("name")
    assert rows.loc["idle", "delta_ns"] < -0.6e9 and "input_wait/step 3" in rows.index


def test_matching_by_name_and_by_order():
    assert kernel_key("void gemm<128, 64>(float*, int)") == "gemm<128, 64>"
    assert kernel_key("gemm<128, 64>(half*, int)") == "gemm<128, 64>"
    assert kernel_key("f(a(b), c)") == "f"
    assert kernel_key("sm90_xmma_gemm_bf16") == "sm90_xmma_gemm_bf16"
    d = diff(DATA / "findings_bad.sqlite", DATA / "findings_good.sqlite", match="order")
    assert d.kernels["name"].str.contains(r" #\d+$").all()
    by_name = diff(DATA / "findings_bad.sqlite", DATA / "findings_good.sqlite")
    assert d.kernels["total_before_ns"].sum() == by_name.kernels["total_before_ns"].sum()


def test_nvtx_paths_follow_nesting():
    from nsight_magic import open_report

    with open_report(DATA / "findings_bad.sqlite") as r:
        p = nvtx_paths(r.nvtx)
    assert "input_wait/step 3" in set(p["path"]) and "input_wait" in set(p["path"])
    assert (p["duration_ns"] >= 0).all()


def test_ncu_reports_compare_kernels_and_metrics():
    rep = DATA / "ncu_h100_module0.ncu-rep"
    d = diff(rep, rep)
    assert d.is_zero() and len(d.kernels) == 2
    assert {"sm_throughput_pct_before", "sm_throughput_pct_after"} <= set(d.metrics.columns)
    with pytest.raises(OptionError, match="both must be"):
        diff(rep, DATA / "findings_bad.sqlite")


@requires_chromium
def test_cli_page_renders_in_chromium(browser, tmp_path, capsys):
    page = tmp_path / "diff.html"
    assert cli_main(["diff", str(DATA / "findings_bad.sqlite"), str(DATA / "findings_good.sqlite"),
                     "-o", str(page)]) == 0
    assert "Profile diff: findings_bad -> findings_good" in capsys.readouterr().out
    p = browser.new_page(viewport={"width": 1300, "height": 900})
    errors = []
    p.on("pageerror", lambda e: errors.append(str(e)))
    p.goto(page.as_uri())
    p.locator("canvas").first.wait_for(timeout=30_000)  # Bokeh draws in shadow roots: locators pierce them
    p.wait_for_function(BOKEH_IDLE, timeout=30_000)
    assert errors == []
    assert p.locator("canvas").count() >= 3  # the chart and the two timelines
    # the chart: one bar label per change shown, the slower one red
    assert p.get_by_text("Profile diff: findings_bad -> findings_good").count() == 1
    p.get_by_role("button", name="NVTX").click()
    assert p.locator("td", has_text="input_wait/step 3").count() >= 1
    Path("test-artifacts").mkdir(exist_ok=True)
    p.screenshot(path="test-artifacts/diff_page.png", full_page=True)
    p.close()


@requires_nsys
@pytest.mark.nsys
@pytest.mark.timeout(300)
def test_nsys_diff_magic_compares_the_last_two_cells(tmp_path):
    nb = run_notebook([
        "%load_ext nsight_magic",
        "%%nsys --no-render -t nvtx\nimport time, nvtx\nwith nvtx.annotate('b'):\n    time.sleep(0.05)",
        "%%nsys --no-render -t nvtx\nimport time, nvtx\nwith nvtx.annotate('b'):\n    time.sleep(0.25)",
        "%nsys_diff --no-render",
        "print(type(_nsys_diff).__name__, _nsys_diff.nvtx.set_index('name').loc['b', 'status'])",
        "%nsys_diff nothing-here also-not",
        "%nsys_diff --no-render --fail-above 20 --range b",
        "print(_nsys_gate.failed, [c.what for c in _nsys_gate.checks if c.failed])",
        "%nsys_diff --fail-above -3",
    ], tmp_path, allow_errors=True)
    shown = cell_text(nb.cells[3])
    assert shown.startswith("Profile diff: cell") and " -> cell" in shown
    first, second = shown.split("\n")[0].removeprefix("Profile diff: ").split(" -> ")
    assert first < second  # the older profile first
    assert "ProfileDiff changed" in cell_text(nb.cells[4])
    assert "nothing-here" in cell_text(nb.cells[5]) and "UsageError" in cell_text(nb.cells[5])
    # the gate says what `nsight-magic diff --fail-above` says: b took 0.05 s, then 0.25 s
    gated = cell_text(nb.cells[6]).splitlines()
    assert any(line.startswith("SLOWER range b: ") for line in gated), gated
    assert gated[-1].startswith("gate FAILED: fail above 20% slower")
    assert "True ['cell', 'range']" in cell_text(nb.cells[7])
    assert "give a percentage of 0 or more" in cell_text(nb.cells[8]) and "Profile diff" not in cell_text(nb.cells[8])


@requires_nsys
@pytest.mark.nsys
@pytest.mark.timeout(300)
def test_the_chart_draws_noise_grey_and_percentages_have_no_negative_zero(two_cpu_profiles):
    """Issue 24 #4: a change the table calls "same" (noise) is not drawn as "faster"; -0.01 % reads 0.0 %."""
    from nsight_magic.views.diff import FASTER, SAME, SLOWER, delta_chart
    from nsight_magic.views.tables import format_table

    d = diff(*two_cpu_profiles)
    data = delta_chart(d).renderers[0].data_source.data
    colour = {lab.split(": ", 1)[1]: (c, st) for lab, c, st in zip(data["label"], data["color"], data["status"])}
    assert colour["a"] == (SAME, "same") and colour["b"] == (SLOWER, "changed")
    assert all(c != FASTER for c, st in colour.values() if st == "same")
    shown = format_table(pd.DataFrame({"pct": [-0.01, 0.04, -0.06]}))["pct"].tolist()
    assert shown == ["0.0 %", "0.0 %", "-0.1 %"]


def test_nsys_diff_without_names_skips_failed_runs_and_ncu_profiles(tmp_path):
    """Issue 29: the last two *Nsight Systems* profiles with a report, whatever came after them."""
    import shutil

    from nsight_magic.frontend import Frontend

    def folder(name, files):
        d = tmp_path / name
        d.mkdir()
        for dst, src in files.items():
            shutil.copyfile(src, d / dst)
        return d

    data = Path(__file__).parent / "data"
    a = folder("cell1", {"report.sqlite": data / "nsys_h100_a_cuda_nvtx.sqlite"})
    b = folder("cell2", {"report.sqlite": data / "nsys_h100_c_range.sqlite"})
    failed = folder("cell3", {})
    (failed / "cell.py").write_text("raise SystemExit(3)")
    ncu = folder("cell4", {"report.ncu-rep": data / "ncu_h100_module0.ncu-rep"})
    fe = Frontend()
    fe.history = [a, b, failed, ncu]
    assert fe.last_two(tmp_path) == (a, b)
    fe.history = []  # a new kernel: from the folder listing, newest first
    got = fe.last_two(tmp_path)
    assert set(got) == {a, b}


def test_the_linked_timelines_names_fit_their_bars_at_the_shared_range():
    """Issue 65: the second timeline's names were fitted to its own, shorter range before the axes were linked, so
    on the page (x = 0 to the longer capture) they ran past their bars and over each other."""
    from nsight_magic.views.diff import stacked_timelines
    from nsight_magic.views.timeline import INITIAL_LABEL_PX

    d = diff(DATA / "findings_bad.sqlite", DATA / "findings_good.sqlite")
    views = stacked_timelines(d)
    assert views[0].figure.x_range.end == views[1].figure.x_range.end
    for v in views:
        x0, x1 = v.figure.x_range.start, v.figure.x_range.end
        px = min(v.width, INITIAL_LABEL_PX) / (x1 - x0)
        e, lab = v.exact_src.data, v.label_src.data
        assert lab["text"], "no name shown"
        left, right, y = (np.asarray(e[k], float) for k in ("left", "right", "y"))
        for x, row, text in zip(lab["x"], lab["y"], lab["text"]):
            under = (y == row) & (left <= x) & (right >= x)
            assert under.any() and x + len(text) * 6.2 / px <= right[under].max() + 1e-6, (text, x)
