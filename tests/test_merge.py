"""Merging exports of one machine (--per-rank-reports): real H100 exports of ours, merged with SQLite."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from nsight_magic import open_report
from nsight_magic.errors import ReportError
from nsight_magic.readers.nsys_merge import clock_offset_ns, merge_exports

DATA = Path(__file__).parent / "data"
BAD, GOOD = DATA / "findings_bad.sqlite", DATA / "findings_good.sqlite"


def _summary(path: Path, what: str) -> pd.DataFrame:
    with open_report(path) as r:
        return getattr(r, what)()


def _by_name(*frames: pd.DataFrame) -> pd.DataFrame:
    return pd.concat(frames).groupby("name")[["count", "total_ns"]].sum().sort_index()


def test_two_reports_merged_keep_every_event_and_name(tmp_path):
    merged = merge_exports([BAD, GOOD], tmp_path / "m.sqlite")
    for what in ("kernel_summary", "cuda_api_summary"):
        got = _summary(merged, what).set_index("name")[["count", "total_ns"]].sort_index()
        pd.testing.assert_frame_equal(got, _by_name(_summary(BAD, what), _summary(GOOD, what)), check_dtype=False)
    with open_report(merged) as m, open_report(GOOD) as g, open_report(BAD) as b:
        assert len(m.kernels) == len(b.kernels) + len(g.kernels)
        assert set(m.nvtx["name"].dropna()) == set(b.nvtx["name"].dropna()) | set(g.nvtx["name"].dropna())
        # the second report's events sit on the first's clock: shifted by the difference of their UTC starts
        con_b, con_g = sqlite3.connect(BAD), sqlite3.connect(GOOD)
        shift = clock_offset_ns(con_g) - clock_offset_ns(con_b)
        assert shift > 30e9  # good was recorded 33 s after bad
        gpid = int(g.kernels["pid"].iloc[0])
        mine = m.kernels[m.kernels["pid"] == gpid]["start_ns"].to_numpy()
        assert (mine == g.kernels["start_ns"].to_numpy() + shift).all()
        # machine-wide rows are not repeated: the one GPU stays one
        assert len(m.gpus) == len(b.gpus) == 1
        assert sorted(m.processes["pid"]) == sorted(set(b.processes["pid"]) | set(g.processes["pid"]))


def test_a_report_merged_with_itself_counts_twice(tmp_path):
    a = DATA / "nsys_h100_a_cuda_nvtx.sqlite"
    merged = merge_exports([a, a], tmp_path / "aa.sqlite")
    one, two = _summary(a, "kernel_summary"), _summary(merged, "kernel_summary")
    assert two["name"].tolist() == one["name"].tolist()
    assert (two["count"].to_numpy() == 2 * one["count"].to_numpy()).all()
    assert (two["total_ns"].to_numpy() == 2 * one["total_ns"].to_numpy()).all()
    with open_report(merged) as m, open_report(a) as r:
        assert (m.meta.start_ns, m.meta.end_ns) == (r.meta.start_ns, r.meta.end_ns)  # same clock, same span


def test_an_export_without_a_session_start_is_refused_and_nothing_is_written(tmp_path):
    broken = tmp_path / "broken.sqlite"
    shutil.copyfile(GOOD, broken)
    with sqlite3.connect(broken) as con:
        con.execute("DROP TABLE TARGET_INFO_SESSION_START_TIME")
    out = tmp_path / "m.sqlite"
    with pytest.raises(ReportError, match="session start"):
        merge_exports([GOOD, broken], out)
    assert not out.exists() and not list(tmp_path.glob("*.part"))
