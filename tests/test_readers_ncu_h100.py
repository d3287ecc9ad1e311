"""Our own H100 %%ncu report (tests/data/README.md): the .ncu-rep and the CSVs ncu printed from it agree."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from conftest import DATA, rules_of
from nsight_magic import open_report
from nsight_magic.errors import ReportError

pytest.importorskip("ncu_report")


def test_ncu_rep_and_its_csv_pages_agree_and_our_cell_range_is_left_out():
    rep = open_report(DATA / "ncu_h100_module0.ncu-rep")
    raw = open_report(DATA / "ncu_h100_module0_raw.csv")
    details = open_report(DATA / "ncu_h100_module0_details.csv")
    assert len(rep.kernels) == len(raw.kernels) == len(details.kernels) == 2
    # NVTX: the module range only; nsight-magic's own per-cell range (domain nsight-magic) is dropped
    assert list(rep.kernels["nvtx"]) == list(raw.kernels["nvtx"]) == ["0", "0"]
    # same kernels in the same order (ncu_report and the CSV demangle templates slightly differently)
    for part in ("implicit_gemm", "elementwise_kernel"):
        assert list(rep.kernels["name"].str.contains(part)) == list(raw.kernels["name"].str.contains(part))
    for col in ("duration_ns", "dram_bytes_read", "dram_bytes_write", "sm_throughput_pct", "registers_per_thread"):
        np.testing.assert_allclose(rep.kernels[col].astype(float), raw.kernels[col].astype(float), rtol=1e-3)
    # the details page carries the guided-analysis rules with estimated speedups
    assert len(details.rules) > 0 and details.rules["speedup_pct"].notna().any()
    assert set(details.rules["type"]) <= {"OPT", "INF", "WRN"}
    # ... the same rules, kernel by kernel, with the same estimates as ncu_report reads them (the CSV rounds to 0.01)
    assert rules_of(rep) == rules_of(details)


def test_profile_folder_reads_the_csv_pages(tmp_path):
    shutil.copy(DATA / "ncu_h100_module0_raw.csv", tmp_path / "report_raw.csv")
    shutil.copy(DATA / "ncu_h100_module0_details.csv", tmp_path / "report_details.csv")
    rep = open_report(tmp_path)
    assert rep.source == "csv-raw" and len(rep.kernels) == 2 and len(rep.rules) > 0 and len(rep.metrics) > 100


def test_ncu_rep_is_read_in_a_worker_and_a_broken_one_fails_in_one_line(tmp_path):
    bad = tmp_path / "broken.ncu-rep"
    bad.write_bytes((DATA / "ncu_h100_module0.ncu-rep").read_bytes()[:4000])
    with pytest.raises(ReportError) as e:
        open_report(bad)
    assert "\n" not in str(e.value) and "broken.ncu-rep" in str(e.value)
