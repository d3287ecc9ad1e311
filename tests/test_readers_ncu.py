"""Nsight Compute reader: every shared fixture (.ncu-rep through the pip ncu_report, CSV raw/details pages in base
and auto-scaled units), values equal across sources, clear errors on bad input."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import fixture_path
import nsight_magic
from nsight_magic.errors import ReportError
from nsight_magic.readers.ncu import NcuData, open_ncu_report
from nsight_magic.readers.ncu_spec import KERNEL_FRAME_COLUMNS, METRIC_FRAME_COLUMNS, RULE_FRAME_COLUMNS
from nsight_magic.readers.ncu_units import base_unit
from nsight_magic.report import NcuReport

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "ncu"
REP = FIXTURES / "public-rep"
CSV = FIXTURES / "public-csv"
DEBIAN_NCU_REPORT = Path("/usr/lib/python3/dist-packages/ncu_report.py")  # Debian's nsight-compute 2022.3


def fixture(*parts: str) -> Path:
    return fixture_path("ncu", *parts)


needs_ncu_report = pytest.mark.skipif(
    __import__("importlib").util.find_spec("ncu_report") is None, reason="pip package ncu_report not installed")

# Kernel counts: what ncu_report and ncu --import report for each file.
REP_KERNELS = {
    "armleth_report": 1, "cs599k_rms-norm-pytorch": 1, "cs599k_silu-2025-04-19-v1": 3,
    "gpupower_PS1_100_profile": 6, "montecarlo_profile": 2, "spyinfer_report": 105,
}


@needs_ncu_report
@pytest.mark.parametrize("name", sorted(REP_KERNELS))
def test_every_public_ncu_rep_opens_with_the_issue_columns(name):
    rep = nsight_magic.open_report(fixture("public-rep", f"{name}.ncu-rep"))
    assert isinstance(rep, NcuReport) and isinstance(rep.data, NcuData) and rep.tool == "ncu"
    assert rep.source == "ncu-rep"
    assert list(rep.kernels.columns) == list(KERNEL_FRAME_COLUMNS)
    assert list(rep.metrics.columns) == list(METRIC_FRAME_COLUMNS)
    assert list(rep.rules.columns) == list(RULE_FRAME_COLUMNS)
    assert len(rep.kernels) == REP_KERNELS[name]
    assert rep.kernels["id"].tolist() == list(range(REP_KERNELS[name]))
    assert (rep.kernels["name"].str.len() > 0).all() and (rep.kernels["short_name"].str.len() > 0).all()
    assert set(rep.metrics["kernel_id"]) == set(rep.kernels["id"])


@needs_ncu_report
def test_the_reader_process_imports_ncu_report_before_numpy(tmp_path):
    """ncu_report 2025.3.1 imported after numpy crashed (SIGSEGV) in metric.unit() on the lent H100 (every .ncu-rep
    failed there; tests/gpu caught it): the worker process loads it first."""
    out = tmp_path / "r.pkl"
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "nsight_magic.readers.ncu_worker",
                        str(fixture("public-rep", "montecarlo_profile.ncu-rep")), str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and out.exists(), p.stderr[-2000:]
    done = [ln.rsplit("|", 1)[-1].strip() for ln in p.stderr.splitlines() if ln.startswith("import time:")]
    first_numpy = next(i for i, name in enumerate(done) if name.split(".")[0] == "numpy")
    # its native library (_ncu_report: the extension of ncu's extras/python or of the pip package) is loaded first
    assert any(n.split(".")[-1] == "_ncu_report" for n in done[:first_numpy]), [n for n in done if "ncu" in n]


@pytest.mark.parametrize("path", sorted(p.name for p in CSV.glob("*.csv")) if CSV.exists() else ["absent"])
def test_every_public_csv_opens(path):
    rep = open_ncu_report(fixture("public-csv", path))
    assert rep.source in ("csv-raw", "csv-details")
    assert ("_details" in path) == (rep.source == "csv-details")
    assert list(rep.kernels.columns) == list(KERNEL_FRAME_COLUMNS)
    assert rep.kernels["duration_ns"].gt(0).all()
    assert rep.kernels["block_size"].notna().all()
    # every metric row has a section: the details page's own, '' on the raw page (which has none)
    assert rep.metrics["section"].notna().all()
    if rep.source == "csv-raw":
        assert (rep.metrics["section"] == "").all()


# (report, CSV printed from it by another ncu): every metric both contain must be equal.
PAIRS = [
    ("montecarlo_profile", "GEN_montecarlo_profile_raw_ncu2024.1.csv"),
    ("montecarlo_profile", "GEN_ncu2022.3_montecarlo_raw_baseunits.csv"),
    ("montecarlo_profile", "GEN_ncu2022.3_montecarlo_raw.csv"),
    ("armleth_report", "GEN_armleth_report_raw_ncu2024.1.csv"),
    ("armleth_report", "GEN_armleth_report_raw_ncu2024.1_autounits.csv"),
    ("spyinfer_report", "GEN_spyinfer_report_raw_ncu2024.1.csv"),
]


def _csv_units(path: Path) -> dict[str, str]:
    """The raw page's unit row, straight from the file (to know how many digits auto-scaling kept)."""
    import csv

    lines = [ln for ln in path.read_text().splitlines() if ln.startswith('"')]
    rows = list(csv.reader(lines[:2]))
    return dict(zip(rows[0], rows[1]))


@needs_ncu_report
@pytest.mark.parametrize("rep_name,csv_name", PAIRS)
def test_ncu_rep_values_equal_the_csv_ncu_printed(rep_name, csv_name):
    a = open_ncu_report(fixture("public-rep", f"{rep_name}.ncu-rep")).metrics
    csv_path = fixture("public-csv", csv_name)
    b = open_ncu_report(csv_path).metrics
    j = a.merge(b, on=["kernel_id", "metric"], suffixes=("_rep", "_csv")).dropna(subset=["value_rep", "value_csv"])
    assert len(j) > 1000
    # What rounding the CSV allows: 2 decimals in base units (and for unitless values); auto-scaled values keep
    # 6 decimals of the scaled number, in the unit of the column (a small value in a large unit keeps few digits).
    factor = j["metric"].map({m: base_unit(u)[1] for m, u in _csv_units(csv_path).items()}).fillna(1.0)
    tol = np.maximum(0.005, 0.5e-6 * factor) + 1e-12 * j["value_csv"].abs()
    diff = (j["value_rep"] - j["value_csv"]).abs()
    bad = j[diff.to_numpy() > tol]
    assert bad.empty, bad[["kernel_id", "metric", "value_rep", "value_csv"]].head().to_string()
    # string metrics (device names...) too
    t = a.merge(b, on=["kernel_id", "metric"], suffixes=("_rep", "_csv")).dropna(subset=["text_rep", "text_csv"])
    assert (t["text_rep"] == t["text_csv"]).all()


@needs_ncu_report
def test_kernels_table_from_rep_equals_the_base_unit_csv():
    a = open_ncu_report(fixture("public-rep", "montecarlo_profile.ncu-rep")).kernels
    b = open_ncu_report(fixture("public-csv", "GEN_ncu2022.3_montecarlo_raw_baseunits.csv")).kernels
    assert a["duration_ns"].tolist() == b["duration_ns"].tolist() == [77686368.0, 7597056.0]
    assert a["dram_bytes_read"].tolist() == b["dram_bytes_read"].tolist() == [2249523584.0, 7975040.0]
    assert a["l2_dram_bytes"].tolist() == [2249523584.0 + 987958016.0, 7975040.0 + 44477952.0]
    for col in ("sm_throughput_pct", "achieved_occupancy_pct", "l2_hit_pct"):
        np.testing.assert_allclose(a[col], b[col], atol=0.005)
    assert a["short_name"].tolist() == b["short_name"].tolist() == ["initRNG", "computeValue"]


def test_auto_scaled_units_parse_to_the_same_base_values():
    auto = open_ncu_report(fixture("public-csv", "GEN_ncu2022.3_montecarlo_raw.csv")).metrics
    base = open_ncu_report(fixture("public-csv", "GEN_ncu2022.3_montecarlo_raw_baseunits.csv")).metrics
    j = auto.merge(base, on=["kernel_id", "metric"], suffixes=("_a", "_b"))
    row = j[(j.metric == "gpu__time_duration.sum") & (j.kernel_id == 0)].iloc[0]
    assert row.unit_a == row.unit_b == "ns" and row.value_a == row.value_b == 77686368  # "77.686368 msecond"
    row = j[(j.metric == "dram__bytes_read.sum") & (j.kernel_id == 0)].iloc[0]
    assert row.unit_a == "byte" and abs(row.value_a - 2249523584) <= 500  # "2.249524 Gbyte"
    assert set(auto["unit"]) >= {"ns", "byte", "byte/s", "%", "cycle/s"}


def test_thousands_separators_and_hz_units():
    rep = open_ncu_report(fixture("public-csv", "nsightful_copy_blocked_ncu_details.csv"))
    k = rep.kernels.iloc[0]
    assert k["duration_ns"] == 21058944  # "21,058,944" ns
    assert k["grid_size"] == 1024 and k["block_size"] == 256
    m = rep.metrics.set_index("metric")
    assert m.loc["DRAM Frequency", "value"] == pytest.approx(4963609951.19)  # "4,963,609,951.19" hz
    assert m.loc["DRAM Frequency", "unit"] == "cycle/s"
    # details page: bytes = DRAM byte rate x duration
    assert k["l2_dram_bytes"] == pytest.approx(196456177859.63 * 21058944e-9)


def test_details_and_raw_pages_of_one_report_agree():
    d = open_ncu_report(fixture("public-csv", "GEN_montecarlo_profile_details_ncu2024.1.csv")).kernels
    r = open_ncu_report(fixture("public-csv", "GEN_montecarlo_profile_raw_ncu2024.1.csv")).kernels
    for col in ("duration_ns", "grid_size", "block_size", "registers_per_thread", "achieved_occupancy_pct",
                "theoretical_occupancy_pct", "sm_throughput_pct", "memory_throughput_pct", "l2_hit_pct"):
        np.testing.assert_allclose(d[col].astype(float), r[col].astype(float), rtol=1e-3, err_msg=col)
    # derived from the byte rate (printed with 2 decimals of GB/s) vs measured bytes
    np.testing.assert_allclose(d["l2_dram_bytes"], r["l2_dram_bytes"], rtol=1e-3)


def test_h100_details_csv_nvtx_paths_and_rules_with_speedups():
    rep = open_ncu_report(fixture("h100-2025.3", "full-set-40-kernels_details.csv"))
    k = rep.kernels
    assert len(k) == k["id"].nunique() == 20
    assert k["nvtx"].str.startswith("step 3").all()
    assert k.loc[0, "nvtx"] == "step 3/0" and k.loc[16, "nvtx"] == "step 3"
    assert k.loc[0, "duration_ns"] == 48450  # "48.45 us"
    assert k.loc[0, "shared_mem_bytes"] == 16900  # "16.90 Kbyte/block" dynamic + 0 static
    r = rep.rules
    assert set(r["type"]) <= {"OPT", "INF", "WRN", "ERR"} and len(r) == 255
    assert r["speedup_pct"].notna().sum() == 177 and r["speedup_pct"].max() <= 100
    assert set(r.loc[r["speedup_pct"].notna(), "speedup_type"]) == {"local", "global"}
    first = r[r.kernel_id == 0]
    assert first["speedup_pct"].iloc[0] == first["speedup_pct"].max()  # sorted by speedup within a kernel


@needs_ncu_report
def test_rules_from_rep_equal_the_details_page():
    a = open_ncu_report(fixture("public-rep", "armleth_report.ncu-rep")).rules
    b = open_ncu_report(fixture("public-csv", "GEN_armleth_report_details_ncu2024.1.csv")).rules
    key = ["section", "rule", "message"]
    a, b = a.sort_values(key).reset_index(drop=True), b.sort_values(key).reset_index(drop=True)
    assert a[key + ["type", "speedup_type"]].equals(b[key + ["type", "speedup_type"]])
    np.testing.assert_allclose(a["speedup_pct"], b["speedup_pct"], rtol=1e-3)
    assert "@section:" not in "".join(a["message"])  # the UI's link markup is turned into text


@needs_ncu_report
def test_launch_metrics_only_report_leaves_metric_columns_empty():
    rep = open_ncu_report(fixture("public-rep", "cs599k_silu-2025-04-19-v1.ncu-rep"))
    assert rep.kernels["duration_ns"].isna().all() and rep.kernels["grid_size"].notna().all()
    assert rep.rules.empty


# ---- bad input -----------------------------------------------------------------------------------------

def test_missing_file(tmp_path):
    with pytest.raises(ReportError, match="no such file"):
        open_ncu_report(tmp_path / "nope.ncu-rep")


def test_not_an_ncu_report(tmp_path):
    p = tmp_path / "x.ncu-rep"
    p.write_text("hello\n")
    with pytest.raises(ReportError, match="not an Nsight Compute report") as e:
        open_ncu_report(p)
    assert "\n" not in str(e.value)


@needs_ncu_report
def test_truncated_report_says_no_kernels(tmp_path):
    p = tmp_path / "t.ncu-rep"
    p.write_bytes(fixture("public-rep", "armleth_report.ncu-rep").read_bytes()[:100])
    with pytest.raises(ReportError, match="no profiled kernels"):
        open_ncu_report(p)


@pytest.mark.parametrize("text,match", [
    ("a,b\n1,2\n", "not an Nsight Compute CSV"),
    ("", "not an Nsight Compute CSV"),
    ('==ERROR== Failed to load report file\n', "not an Nsight Compute CSV"),
    ('"ID","Kernel Name"\n', "without kernel rows"),
])
def test_bad_csv_gives_one_line_error(tmp_path, text, match):
    p = tmp_path / "r.csv"
    p.write_text(text)
    with pytest.raises(ReportError, match=match) as e:
        open_ncu_report(p)
    assert "\n" not in str(e.value)


@pytest.mark.skipif(not DEBIAN_NCU_REPORT.exists(), reason="Debian's nsight-compute (scripts/install-ncu-debian.sh)")
def test_report_newer_than_ncu_report_says_pip_install(tmp_path):
    """Debian's ncu_report 2022.3 is a real older reader: on a 2024.2 report it prints a protobuf error and returns
    nothing.  Run in a child process so two ncu_report builds never share one process."""
    ok_rep, new_rep = fixture("public-rep", "montecarlo_profile.ncu-rep"), fixture("public-rep", "armleth_report.ncu-rep")
    code = textwrap.dedent(f"""
        from pathlib import Path
        from nsight_magic.readers import ncu_module
        from nsight_magic.readers.ncu import open_ncu_report
        mod = ncu_module.import_ncu_report_from(Path({str(DEBIAN_NCU_REPORT.parent)!r}))
        ok = open_ncu_report({str(ok_rep)!r}, ncu_report_module=(mod, "2022.3.0"))
        print("OK", ok.kernels["duration_ns"].tolist())
        try:
            open_ncu_report({str(new_rep)!r}, ncu_report_module=(mod, "2022.3.0"))
        except Exception as exc:
            print("ERR", type(exc).__name__, exc)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(nsight_magic.__file__).parents[1])})
    assert "OK [77686368.0, 7597056.0]" in proc.stdout, proc.stderr
    assert ("ERR ReportError " in proc.stdout and "report from a newer ncu than the installed ncu_report "
            "(version 2022.3.0): pip install -U ncu_report" in proc.stdout), proc.stdout + proc.stderr


@pytest.mark.skipif(not DEBIAN_NCU_REPORT.exists() or not Path("/usr/bin/ncu").exists(),
                    reason="Debian's nsight-compute (scripts/install-ncu-debian.sh)")
def test_extras_python_next_to_the_found_ncu_is_seen_with_its_version(tmp_path, monkeypatch):
    """An Nsight Compute layout (ncu + extras/python/ncu_report.py) made of links to Debian's real files."""
    from nsight_magic.readers.ncu_module import _extras_candidates, _pip_version, choose_ncu_report

    (tmp_path / "extras" / "python").mkdir(parents=True)
    for f in ("ncu_report.py", "_ncu_report.so"):
        (tmp_path / "extras" / "python" / f).symlink_to(DEBIAN_NCU_REPORT.parent / f)
    (tmp_path / "ncu").symlink_to("/usr/bin/ncu")
    monkeypatch.setenv("NSIGHT_MAGIC_NCU", str(tmp_path / "ncu"))
    found = _extras_candidates()
    assert found == [(tmp_path / "extras" / "python", found[0][1])] and found[0][1].startswith("2022.3")
    if _pip_version():  # pip's 2026.3 is newer than Debian's 2022.3: it wins
        assert choose_ncu_report(_pip_version(), found)[0] == "pip"
    monkeypatch.setenv("NSIGHT_MAGIC_NCU", "/usr/bin/ncu")  # Debian's layout has no extras/python folder
    assert _extras_candidates() == []


def test_choice_of_ncu_report_prefers_the_newer_one():
    from nsight_magic.readers.ncu_module import choose_ncu_report

    extras = [(Path("/opt/nvidia/nsight-compute/2025.3.1/extras/python"), "2025.3.1.0")]
    assert choose_ncu_report("2026.3.1", extras)[0] == "pip"
    assert choose_ncu_report("2025.3.1", extras)[0] == "extras"  # a tie: ncu's own
    assert choose_ncu_report(None, extras)[:2] == ("extras", extras[0][0])
    assert choose_ncu_report("2026.3.1", []) == ("pip", None, "2026.3.1")
    with pytest.raises(ReportError, match="pip install -U ncu_report"):
        choose_ncu_report(None, [])


def test_metrics_and_rules_are_empty_frames_with_columns_when_absent():
    rep = open_ncu_report(fixture("public-csv", "GEN_armleth_report_raw_ncu2024.1.csv"))
    assert rep.rules.empty and list(rep.rules.columns) == list(RULE_FRAME_COLUMNS)
    assert isinstance(rep.metrics, pd.DataFrame) and not rep.metrics.empty
