"""Profile folders: never overwritten, summary.json, and the listing of a folder of profiles (%nsys_load FOLDER)."""
from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from conftest import DATA
from nsight_magic.errors import OptionError, ReportError
from nsight_magic.readers.nsys import open_nsys_report
from nsight_magic.readers.summary import write_summary
from nsight_magic.store import create_profile_folder, list_profiles, pick_profile


def _profile(root, name, when, report=True):
    folder = create_profile_folder(root, name, now=when)
    (folder / "cell.py").write_text("pass\n")
    if report:
        shutil.copy(DATA / "nsys_h100_a_cuda_nvtx.sqlite", folder / "report.sqlite")
        with open_nsys_report(folder / "report.sqlite") as rep:
            write_summary(folder, rep)
    return folder


def test_listing_is_newest_first_with_the_summary_figures(tmp_path):
    old = _profile(tmp_path, "baseline", 1_700_000_000)
    new = _profile(tmp_path, "pinned", 1_700_000_100)
    bare = _profile(tmp_path, "older-version", 1_600_000_000, report=False)  # no summary.json
    (tmp_path / "not-a-profile").mkdir()
    df = list_profiles(tmp_path)
    assert list(df["name"]) == [new.name, old.name]  # a run that left no report is no profile to show
    everything = list_profiles(tmp_path, include_failed=True)
    assert list(everything["name"]) == [new.name, old.name, bare.name]
    assert list(everything["has_report"]) == [True, True, False]
    row = df.iloc[0]
    summary = json.loads((new / "summary.json").read_text())
    assert row["tool"] == "nsys" and row["kernels"] == 262 and row["capture_ns"] == summary["capture_ns"] > 0
    assert row["top_kernel"].startswith("sm80_xmma_gemm") and 0 < row["top_kernel_pct"] <= 100
    assert row["top_range"] == "step 0"
    assert pd.isna(everything.iloc[2]["kernels"])  # no report: nothing invented


def test_pick_by_index_name_or_unique_part(tmp_path):
    a = _profile(tmp_path, "run-baseline", 1_700_000_000)
    b = _profile(tmp_path, "run-pinned", 1_700_000_100)
    df = list_profiles(tmp_path)
    assert pick_profile(df, None)["name"] == b.name
    assert pick_profile(df, "1")["name"] == a.name and pick_profile(df, "-1")["name"] == a.name
    assert pick_profile(df, "basel")["name"] == a.name
    with pytest.raises(OptionError, match="no profile of that name"):
        pick_profile(df, "zzz")
    with pytest.raises(OptionError, match="2 profiles match"):
        pick_profile(df, "run-")
    with pytest.raises(OptionError, match="there are 2 profiles"):
        pick_profile(df, "5")


def test_opening_a_folder_of_profiles_says_what_to_do(tmp_path):
    from nsight_magic import open_report

    _profile(tmp_path, "baseline", 1_700_000_000)
    with pytest.raises(ReportError, match="holds 1 profiles, not one report") as e:
        open_report(tmp_path)
    assert "%nsys_load" in str(e.value)


def test_a_copied_profile_is_its_own_profile_and_failed_runs_are_not_the_newest(tmp_path):
    from nsight_magic.store import find_profile

    two = _profile(tmp_path, "two", 1_700_000_000)
    copy = tmp_path / "two-copy"
    shutil.copytree(two, copy)  # its summary.json still says the original's name
    failed = _profile(tmp_path, "failed", 1_800_000_000, report=False)  # newer, but no report
    df = list_profiles(tmp_path)
    assert set(df["name"]) == {two.name, "two-copy"}
    assert find_profile("two-copy", tmp_path) == copy
    assert find_profile(two.name, tmp_path) == two
    assert pick_profile(df, None)["name"] != failed.name
    with pytest.raises(ReportError, match="left no report"):
        from nsight_magic import open_report

        open_report(failed)


def test_open_report_waits_for_a_profile_another_process_is_finishing(tmp_path, capsys):
    """A notebook's next cell reads the profile while its kernel still finishes it (Run All): open_report(folder)
    waits with a line, and reads it once finishing.json is gone; a folder whose owner ended is not waited for."""
    import subprocess
    import sys
    import time

    import nsight_magic
    from nsight_magic.store import FINISHING_FILE, finishing_state, mark_finishing

    folder = _profile(tmp_path, "loading", 1_700_000_000)
    # the owner: a live process that removes the mark after a second, as a kernel's finish stage does
    owner = subprocess.Popen([sys.executable, "-c", "import os, sys, time; time.sleep(1.5); os.remove(sys.argv[1])",
                              str(folder / FINISHING_FILE)])
    from nsight_magic.tools import process_identity

    (folder / FINISHING_FILE).write_text(json.dumps({**process_identity(owner.pid), "since": time.time()}))
    assert finishing_state(folder) == "finishing"
    t0 = time.monotonic()
    rep = nsight_magic.open_report(folder)
    waited = time.monotonic() - t0
    owner.wait(10)
    assert rep.kernel_summary()["count"].sum() > 0 and waited >= 1.0
    assert f"waiting for profile {folder.name} to finish loading" in capsys.readouterr().out
    # a mark left by a process that ended first: nothing to wait for, what is in the folder opens at once
    mark_finishing(folder)
    data = json.loads((folder / FINISHING_FILE).read_text())
    (folder / FINISHING_FILE).write_text(json.dumps({**data, "pid": owner.pid}))  # a process that is gone
    assert finishing_state(folder) == "interrupted"
    t0 = time.monotonic()
    nsight_magic.open_report(folder)
    assert time.monotonic() - t0 < 1.0 and "waiting" not in capsys.readouterr().out


def test_the_default_sort_passes_over_a_column_of_zeros():
    from nsight_magic.views.tables import default_sort

    cpu_only = pd.DataFrame({"op": ["a", "b"], "cpu_ns": [5, 9], "gpu_ns": [0, 0]})
    assert default_sort(cpu_only) == "cpu_ns"  # the Ops table of a CPU-only profile: by CPU time
    assert default_sort(cpu_only.assign(gpu_ns=[1, 0])) == "gpu_ns"
