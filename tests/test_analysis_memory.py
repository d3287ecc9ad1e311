"""Memory workload analysis: L2<->DRAM bytes and duration per kernel, per NVTX range and per module."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsight_magic.analysis.memory_workload import (NO_RANGE, RANGE_COLUMNS, kernel_transfers, module_scatter,
                                                   range_transfers)
from nsight_magic.readers.ncu import open_ncu_report

H100 = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "ncu" / "h100-2025.3" / \
    "full-set-40-kernels_details.csv"


def kernels(rows):
    df = pd.DataFrame(rows, columns=["id", "short_name", "nvtx", "duration_ns", "l2_dram_bytes"])
    df["dram_bytes_read"] = df["l2_dram_bytes"] * 0.75
    df["dram_bytes_write"] = df["l2_dram_bytes"] * 0.25
    return df


def test_ranges_sum_their_kernels_and_sort_by_bytes():
    k = kernels([
        (0, "gemm", "step 0/encoder/attn", 100.0, 1000.0),
        (1, "softmax", "step 0/encoder/attn", 50.0, 3000.0),
        (2, "gemm", "step 0/decoder", 200.0, 500.0),
        (3, "fill", "", 10.0, np.nan),
    ])
    r = range_transfers(k)
    assert list(r.columns) == list(RANGE_COLUMNS)
    assert r["nvtx"].tolist() == ["step 0/encoder/attn", "step 0/decoder", NO_RANGE]
    assert r["module"].tolist() == ["attn", "decoder", NO_RANGE]
    assert r["kernels"].tolist() == [2, 1, 1]
    assert r["l2_dram_bytes"].iloc[0] == 4000 and r["duration_ns"].iloc[0] == 150
    assert np.isnan(r["l2_dram_bytes"].iloc[2])  # all-missing stays missing, not 0
    assert r["dram_gbps"].iloc[0] == pytest.approx(4000 / 150)
    assert r["bytes_pct"].iloc[:2].sum() == pytest.approx(100)
    top = range_transfers(k, depth=2)
    assert top["nvtx"].tolist() == ["step 0/encoder", "step 0/decoder", NO_RANGE]
    assert module_scatter(k)["module"].tolist() == ["attn", "decoder"]  # the NaN-bytes range is not a point


def test_inclusive_ranges_count_nested_kernels():
    k = kernels([
        (0, "gemm", "step 0/encoder/encoder.attn", 100.0, 1000.0),
        (1, "add", "step 0/encoder", 10.0, 10.0),
        (2, "gemm", "step 0/decoder", 200.0, 500.0),
        (3, "fill", "", 1.0, 1.0),
    ])
    r = range_transfers(k, inclusive=True).set_index("nvtx")
    assert r.loc["step 0", "kernels"] == 3 and r.loc["step 0", "l2_dram_bytes"] == 1510
    assert r.loc["step 0/encoder", "kernels"] == 2 and r.loc["step 0/encoder", "duration_ns"] == 110
    assert r.loc["step 0/encoder/encoder.attn", "module"] == "encoder.attn"
    assert r.loc[NO_RANGE, "kernels"] == 1
    assert r.loc["step 0", "bytes_pct"] == pytest.approx(1510 / 1511 * 100)  # share of the whole report
    exclusive = range_transfers(k).set_index("nvtx")
    assert exclusive.loc["step 0/encoder", "kernels"] == 1


def test_per_kernel_rows_keep_ids_and_bandwidth():
    k = kernels([(7, "gemm", "a/b", 1000.0, 2e6), (8, "x", "a", 0.0, 5.0)])
    t = kernel_transfers(k)
    assert t["id"].tolist() == [7, 8] and t["module"].tolist() == ["b", "a"]
    assert t["dram_gbps"].iloc[0] == 2000 and np.isnan(t["dram_gbps"].iloc[1])  # zero duration: no bandwidth


def test_h100_modules_sum_to_the_whole_step():
    if not H100.exists():
        pytest.skip("shared fixture absent")
    k = open_ncu_report(H100).kernels
    per_module = range_transfers(k)
    whole = range_transfers(k, depth=1)
    assert whole["nvtx"].tolist() == ["step 3"] and whole["kernels"].iloc[0] == len(k) == 20
    assert per_module["l2_dram_bytes"].sum() == pytest.approx(whole["l2_dram_bytes"].iloc[0])
    assert per_module["duration_ns"].sum() == pytest.approx(k["duration_ns"].sum())
    assert set(per_module["module"]) == {"0", "1", "2", "3", "4", "5", "6", "8", "step 3"}
    assert len(module_scatter(k)) == len(per_module)


def test_a_million_kernels_aggregate_quickly():
    n = 1_000_000
    rng = np.random.default_rng(0)
    mods = np.array([f"step {s}/layer{m}/conv" for s in range(10) for m in range(100)])
    k = pd.DataFrame({"id": np.arange(n), "short_name": "k", "nvtx": mods[rng.integers(0, len(mods), n)],
                      "duration_ns": rng.random(n) * 1e4, "l2_dram_bytes": rng.random(n) * 1e6,
                      "dram_bytes_read": 1.0, "dram_bytes_write": 1.0})
    t0 = time.perf_counter()
    r = range_transfers(k)
    depth2 = range_transfers(k, depth=2)
    nested = range_transfers(k, inclusive=True)
    took = time.perf_counter() - t0
    assert len(r) == 1000 and len(depth2) == 1000 and r["kernels"].sum() == n
    assert len(nested) == 10 + 1000 + 1000 and nested["kernels"].sum() == 3 * n
    assert took < 10, f"{took:.1f} s"
