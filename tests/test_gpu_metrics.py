"""GPU metrics (issue 66): nsys's samples of the GPU's counters read, judged and drawn, from a report recorded on the
lent H100 (tests/data/gpu_features/README.md: 40 bf16 GEMMs in 'compute', 40 device copies of 512 MB in 'memory')."""
from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import pandas as pd
import pytest

from conftest import DATA, unxz
from nsight_magic.analysis.gpu_metrics import read_metrics
from nsight_magic.options import NsysOptions
from nsight_magic.profilers.extras import choose
from nsight_magic.readers.gpu_metrics import IN_USE, PERMISSION, metric_key
from nsight_magic.report import open_report
from nsight_magic.views.report_view import NsysView
from nsight_magic.views.timeline_prepare import prepare_timeline

HERE = DATA / "gpu_features"


@pytest.fixture(scope="module")
def gm(tmp_path_factory):
    rep = open_report(unxz(HERE / "gm.sqlite.xz", tmp_path_factory.mktemp("gm") / "gm.sqlite"))
    yield rep
    rep.close()


def test_every_sample_is_read_with_its_device_and_name(gm):
    g = gm.gpu_metrics
    con = sqlite3.connect(gm.sqlite_path)
    try:
        rows, metrics = con.execute("SELECT count(*), count(DISTINCT metricId) FROM GPU_METRICS").fetchone()
        mean = con.execute("SELECT avg(value) FROM GPU_METRICS g JOIN TARGET_INFO_GPU_METRICS t USING "
                           "(typeId, metricId) WHERE t.metricName LIKE 'SM Issue%'").fetchone()[0]
    finally:
        con.close()
    assert len(g.metrics) == rows == 449_614 and g.metrics["metric"].nunique() == metrics == 22
    assert set(g.metrics["device_id"]) == {0}  # typeId & 0xFF
    assert g.series(0, "sm_issue")["value"].mean() == pytest.approx(mean)
    assert g.metrics["start_ns"].is_monotonic_increasing
    keys = dict(zip(g.names["metric"], g.names["key"]))
    assert keys["Tensor Active [Throughput %]"] == "tensor_active" and pd.isna(keys["GR Active [Throughput %]"])


@pytest.mark.parametrize("name,key", [("SMs Active [Throughput %]", "sm_active"), ("SM Active", "sm_active"),
                                      ("Tensor Core Active [Throughput %]", "tensor_active"),
                                      ("DRAM Write Bandwidth [Throughput %]", "dram_write"),
                                      ("PCIe TX Throughput [Throughput %]", "pcie_tx"),
                                      ("GPC Clock Frequency [MHz]", None)])
def test_metric_names_of_other_gpus_and_versions_are_known_by_pattern(name, key):
    assert metric_key(name)[0] == key


def test_the_counters_say_what_bounds_each_phase(gm):
    nv = gm.nvtx
    said = {}
    for label in ("compute", "memory"):
        r = nv[nv["label"] == label].iloc[0]
        (m,) = read_metrics(gm, (int(r["start_ns"]), int(r["end_ns"])))
        said[label] = m
    # bf16 GEMMs of 8192^2: SMs full, tensor cores near their peak; device copies: DRAM read + write near its peak
    assert said["compute"].kind == "tensor" and said["compute"].means["tensor_active"] > 80
    assert said["memory"].kind == "memory" and said["memory"].means["dram"] > 80
    assert np.isclose(said["memory"].means["dram"],
                      said["memory"].means["dram_read"] + said["memory"].means["dram_write"])
    f = [f for f in gm.findings() if f.rule == "gpu_metrics"]
    assert len(f) == 1 and f[0].severity == "info"
    assert "'compute'" in f[0].explanation and "tensor-core-bound" in f[0].explanation
    assert "'memory'" in f[0].explanation and "memory-bound kernels" in f[0].explanation


def test_the_timeline_has_a_metrics_track_bounded_in_points(gm):
    d = prepare_timeline(gm)
    m = d.gpu_metrics
    assert set(m["series"]) == {"GPU 0 SMs active", "GPU 0 SM issue", "GPU 0 tensor cores", "GPU 0 DRAM read",
                                "GPU 0 DRAM write"}
    assert m.groupby("series").size().max() <= 2000 and m["pct"].between(0, 100).all()
    assert "GPU metrics (% of peak" in NsysView(gm).html_page()


def _diagnostics(path, texts):
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE DIAGNOSTIC_EVENT (timestamp INTEGER, timestampType INTEGER, source INTEGER, "
                "severity INTEGER, text TEXT, globalPid INTEGER)")
    con.executemany("INSERT INTO DIAGNOSTIC_EVENT VALUES (0, 1, 2, 3, ?, 0)", [(t,) for t in texts])
    con.commit()
    con.close()


@pytest.mark.parametrize("text,said", [
    ("GPU Metrics [0]: ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
     "Counters on the target device.", PERMISSION),
    ("GPU Metrics [0]: Failed to start: the GPU's counters are in use by another client (DCGM).", IN_USE),
])
def test_metrics_asked_for_but_refused_say_why(tmp_path, gm, text, said):
    """A report whose GPU metrics nsys could not sample: the note says why and what to do (the report is the H100
    one with its metrics tables dropped and nsys's words for each case added to its diagnostics)."""
    path = tmp_path / "refused.sqlite"
    shutil.copy(gm.sqlite_path, path)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE GPU_METRICS")
    con.execute("DROP TABLE DIAGNOSTIC_EVENT")
    con.commit()
    con.close()
    _diagnostics(path, [text])
    rep = open_report(path)
    try:
        assert rep.gpu_metrics.empty and rep.gpu_metrics.problem == said
        (f,) = [f for f in rep.findings() if f.rule == "gpu_metrics"]
        assert f.title == "GPU metrics were not sampled" and said.split(": ", 1)[1] in f.explanation
    finally:
        rep.close()


def test_gpu_metrics_is_asked_of_nsys_as_each_version_spells_it():
    new = choose(None, None, "cuda,nvtx", frozenset({"--gpu-metrics-devices"}), gpu_metrics=True,
                 help_text="--gpu-metrics-devices=<none|cuda-visible|all|<id>>")
    assert new.args == ("--gpu-metrics-devices=cuda-visible",) and new.gpu_metrics and new.config()["gpu_metrics"]
    old = choose(None, None, "cuda,nvtx", frozenset({"--gpu-metrics-device"}), gpu_metrics=True)
    assert old.args == ("--gpu-metrics-device=all",)
    cpu = choose(None, None, "nvtx,osrt", frozenset({"--gpu-metrics-device"}), gpu_metrics=True)
    assert cpu.args == () and not cpu.gpu_metrics and "no GPU is visible" in cpu.notes[0]
    mine = choose(None, None, "cuda,nvtx", frozenset({"--gpu-metrics-devices"}), ("--gpu-metrics-devices=0",),
                  gpu_metrics=True)
    assert mine.args == () and mine.gpu_metrics  # the user's own switch wins
    assert NsysOptions(gpu_metrics=True).gpu_metrics
