"""The diff that can fail CI (analysis/gate.py, `nsight-magic diff --fail-above`, --json, baselines by name) on
reports recorded on the H100: planted slowdowns and their fixed twins."""
from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from nsight_magic.analysis.gate import _check, _stats, range_durations
from nsight_magic.cli import main as cli_main

DATA = Path(__file__).parent / "data"
PLANTED = DATA / "planted"
sys.path.insert(0, str(PLANTED))
from planted_files import unpack  # noqa: E402 - beside the reports it opens

MANIFEST = json.loads((PLANTED / "planted.json").read_text())


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """(fixed, bad) report paths of two planted causes whose fix made the cell faster without the profiler."""
    root = tmp_path_factory.mktemp("planted")
    return {name: (unpack(MANIFEST[name], "fixed", root), unpack(MANIFEST[name], "bad", root))
            for name in ("fp32_gemm", "input_starved")}


def _gate(capsys, *argv) -> tuple[int, str, str]:
    rc = cli_main(["diff", *map(str, argv)])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("name", ["fp32_gemm", "input_starved"])
def test_a_planted_slowdown_fails_the_gate_and_its_fix_passes(pairs, name, capsys, tmp_path):
    fixed, bad = pairs[name]
    assert MANIFEST[name]["cell_s"]["bad"] > 1.5 * MANIFEST[name]["cell_s"]["fixed"]  # measured without nsys
    out_json = tmp_path / "gate.json"
    rc, out, _ = _gate(capsys, fixed, bad, "--fail-above", 5, "--json", out_json)
    assert rc == 1
    lines = out.splitlines()
    assert any(line.startswith("SLOWER cell capture") for line in lines), out
    assert lines[-1].startswith("gate FAILED: fail above 5% slower")
    got = json.loads(out_json.read_text())
    assert got["gate"]["failed"] is True and got["before"] == fixed.stem and got["after"] == bad.stem
    cell = next(c for c in got["gate"]["checks"] if c["what"] == "cell")
    assert cell["failed"] and cell["change_pct"] > 50
    assert cell["after_ns"] == got["headline"]["capture_after_ns"]
    assert 0 < len(got["top"]) <= 15 and {"what", "name", "delta_ns", "status"} <= set(got["top"][0])
    # the loop's step range is found in both and checked with its own noise
    ranges = [c for c in got["gate"]["checks"] if c["what"] == "range"]
    assert len(ranges) == 1 and ranges[0]["instances_before"] >= 10 and ranges[0]["noise_pct"] > 0

    rc, out, _ = _gate(capsys, bad, fixed, "--fail-above", 5)
    assert rc == 0 and out.splitlines()[-1].startswith("gate passed")
    rc, out, _ = _gate(capsys, bad, bad, "--fail-above", 0)  # a profile against itself: nothing changed
    assert rc == 0 and "SLOWER" not in out


def test_a_plain_diff_never_fails_and_gate_options_need_the_bound(pairs, capsys):
    fixed, bad = pairs["fp32_gemm"]
    assert _gate(capsys, fixed, bad)[0] == 0
    rc, _, err = _gate(capsys, fixed, bad, "--range", "step")
    assert rc == 2 and "add --fail-above PCT" in err
    rc, _, err = _gate(capsys, fixed, bad, "--fail-above", -1)
    assert rc == 2 and "--fail-above -1: give a percentage of 0 or more" in err
    rc, _, err = _gate(capsys, fixed, bad, "--fail-above", "nan")
    assert rc == 2 and "give a percentage" in err


def test_named_ranges_kernels_and_what_could_not_be_checked(pairs, capsys):
    fixed, bad = pairs["input_starved"]
    rc, out, _ = _gate(capsys, fixed, bad, "--fail-above", 5, "--range", "SGD.step [foreach]", "--range", "nowhere",
                       "--top-kernels", 2)
    lines = out.splitlines()
    step = [line for line in lines if " range " in line and not line.startswith("note")]
    assert len(step) == 1 and "range SGD.step [foreach]:" in step[0]  # the named range replaces the loop's
    assert "note: NVTX range 'nowhere' is not in both profiles" in lines
    assert sum(" kernel " in line for line in lines if not line.startswith("note")) <= 2
    rc, out, _ = _gate(capsys, fixed, bad, "--fail-above", 5, "--top-kernels", 0)
    assert not any(" kernel " in line for line in out.splitlines() if not line.startswith("note"))
    from nsight_magic import gate  # the same from Python

    result = gate(fixed, bad, 5, ranges=["SGD.step [foreach]", "nowhere"], top_kernels=2)
    assert result.failed and "\n".join(result.lines()) == "\n".join(lines[-len(result.lines()):])


def test_range_instances_are_matched_with_digits_as_one_name(tmp_path):
    from nsight_magic import open_report

    with open_report(unpack(MANIFEST["ddp_cpu_straggler"], "fixed", tmp_path)) as r:
        names = r.nvtx["name"].astype(str)
        steps = names.str.fullmatch(r"iteration \d+").sum()
        assert steps >= 10
        assert len(range_durations(r, "iteration 0")) == steps == len(range_durations(r, "iteration #"))
        assert (range_durations(r, "iteration 3") > 0).all()
        assert len(range_durations(r, "iteration")) == 0  # digits stand for digits, not for nothing


def test_noise_from_repetition_widens_the_bound():
    # the median of 10 instances, 10 ms with a 1 ms standard error, against 10.8 ms: +8%
    spread = _check("range", "step", (10e6, 1e6, 10), (10.8e6, 1e6, 10), 5.0)
    assert spread.change_pct == pytest.approx(8.0) and spread.noise_pct == pytest.approx(200 * 2 ** 0.5 / 10)
    assert not spread.failed  # within twice the noise of the difference
    exact = _check("range", "step", (10e6, 1e4, 10), (10.8e6, 1e4, 10), 5.0)
    assert exact.failed  # the same +8% when the instances hardly vary
    single = _check("cell", "capture", (10e6, 0.0, 1), (10.8e6, 0.0, 1), 5.0)
    assert single.noise_pct == 0 and single.failed  # one instance: the bound alone
    assert _check("range", "x", (math.nan, 0.0, 0), (1.0, 0.0, 1), 5.0) is None  # not in both: not a check


def test_one_warm_up_step_does_not_pass_for_noise():
    """A loop's first step often lasts 100 times the others (the planted reports' steps: 170 ms, then 0.3 ms);
    the spread that sets the noise must come from the steady steps."""
    rng = np.random.default_rng(0)
    steady = rng.normal(10e6, 0.2e6, 29)
    before, after = np.r_[170e6, steady], np.r_[175e6, steady * 1.3]
    value, se, n = _stats(before)
    assert n == 30 and value == pytest.approx(10e6, rel=0.02) and se < 0.1e6
    got = _check("range", "step", _stats(before), _stats(after), 5.0)
    assert got.failed and got.change_pct == pytest.approx(30, abs=3) and got.noise_pct < 5
    total, spread, _ = _stats(before, total=True)  # kernels and the cell: a sum, its noise spread * sqrt(n)
    assert total == pytest.approx(before.sum()) and spread == pytest.approx(0.2e6 * 30 ** 0.5, rel=0.4)
    assert _stats([5e6, 6e6]) == (5.5e6, 0.0, 2)  # two instances: no spread to speak of


def test_nsight_compute_reports_are_not_gated(capsys):
    rep = DATA / "ncu_h100_module0.ncu-rep"
    rc, _, err = _gate(capsys, rep, rep, "--fail-above", 5)
    assert rc == 2 and "--fail-above gates Nsight Systems profiles" in err


def _profile_folder(root: Path, name: str, report: Path) -> Path:
    d = root / name
    d.mkdir(parents=True)
    shutil.copyfile(report, d / "report.sqlite")
    return d


def test_baselines_by_name_are_kept_copies_in_the_profiles_folder(pairs, capsys, tmp_path):
    fixed, bad = pairs["fp32_gemm"]
    root = tmp_path / "nsight-profiles"
    main = _profile_folder(root, "train-20261128-100000", fixed)
    later = _profile_folder(root, "train-20261128-110000", bad)
    assert cli_main(["baseline", "main", main.name, "--dir", str(root)]) == 0
    assert "kept train-20261128-100000 as baseline 'main'" in capsys.readouterr().out
    shutil.rmtree(main)  # the baseline is a copy: it outlives the profile it was made from
    rc, out, _ = _gate(capsys, "baseline:main", later.name, "--dir", root, "--fail-above", 10)
    assert rc == 1 and out.startswith("Profile diff: main -> train-20261128-110000")
    # kept again under the same name: replaced whole; the listing says where each came from
    assert cli_main(["baseline", "main", later.name, "--dir", str(root)]) == 0
    capsys.readouterr()
    assert _gate(capsys, "baseline:main", later.name, "--dir", root, "--fail-above", 0)[0] == 0
    assert cli_main(["baseline", "--dir", str(root)]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 1 and listed[0].startswith("main\t") and listed[0].endswith(later.name)
    assert sorted(p.name for p in (root / "baselines").iterdir()) == ["main"]  # no temporary folder left
    # a baseline is not a profile of its own: the newest profile is still the newest run
    from nsight_magic.store import list_profiles

    assert list_profiles(root)["name"].tolist() == [later.name]

    rc, _, err = _gate(capsys, "baseline:release", later.name, "--dir", root)
    assert rc == 2 and "no such baseline" in err and "(there: main)" in err
    assert "nsight-magic baseline release PROFILE" in err
    assert cli_main(["baseline", "../up", later.name, "--dir", str(root)]) == 2
    assert "use letters, digits" in capsys.readouterr().err
    from nsight_magic import save_baseline

    assert save_baseline("v1.2", directory=root) == root / "baselines" / "v1.2"  # the newest profile, from Python
    assert (root / "baselines" / "v1.2" / "report.sqlite").read_bytes() == (later / "report.sqlite").read_bytes()
    assert cli_main(["baseline", "broken", str(fixed), "--dir", str(root)]) == 2
    assert "a baseline is a profile folder" in capsys.readouterr().err
