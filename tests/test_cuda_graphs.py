"""Kernels inside CUDA graphs (issue 66), from reports recorded on the lent H100 (tests/data/gpu_features/README.md):
20 replays of a captured 24-kernel MLP forward, each in an NVTX range, with --cuda-graph-trace=graph and =node."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import DATA, unxz
from nsight_magic.analysis.rules.common import api_of
from nsight_magic.profilers.extras import choose
from nsight_magic.report import open_report

HERE = DATA / "gpu_features"


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    root = tmp_path_factory.mktemp("graphs")
    got = {}
    for mode in ("graph", "node"):
        got[mode] = open_report(unxz(HERE / f"graph_{mode}.sqlite.xz", root / f"graph_{mode}.sqlite"))
    yield got
    for r in got.values():
        r.close()


def test_graph_mode_says_the_graphs_hide_their_kernels(graphs):
    rep = graphs["graph"]
    assert len(rep.graphs) == 20 and rep.kernels["graph_node_id"].isna().all()
    (f,) = [f for f in rep.findings() if f.rule == "cuda_graphs"]
    assert f.title.startswith("CUDA graphs hide their kernels: 20 graph launches") and f.severity == "low"
    assert "--cuda-graph-trace=node" in f.suggestion


def test_node_mode_lists_each_kernel_with_its_graph_launch_and_nvtx_range(graphs):
    rep = graphs["node"]
    k = rep.kernels
    nodes = k[k["graph_node_id"].notna()]
    assert len(nodes) == 480 and not [f for f in rep.findings() if f.rule == "cuda_graphs"]
    # each replayed kernel carries its graph launch's correlation id: 24 kernels per cudaGraphLaunch
    api = api_of(nodes, rep.cuda_api)
    assert api["api_name"].astype(str).str.startswith("cudaGraphLaunch").all()
    assert nodes.groupby("correlation_id").size().eq(24).all()
    # ... and through it the NVTX range that launched it: every replay's GPU projection spans its 24 kernels
    proj = rep.nvtx_gpu_projection()
    proj = proj[proj["name"].astype(str).str.startswith("replay ")]
    assert len(proj) == 20
    per = nodes.groupby("correlation_id").agg(first=("start_ns", "min"), last=("end_ns", "max")).sort_values("first")
    proj = proj.sort_values("proj_start_ns")
    a = proj["proj_start_ns"].to_numpy()
    b = a + proj["proj_duration_ns"].to_numpy()
    assert (a <= per["first"].to_numpy()).all() and (b >= per["last"].to_numpy().astype(np.int64)).all()
    assert (a[1:] >= per["last"].to_numpy()[:-1]).all()  # ... and no other replay's
    # a replayed kernel has no launch of its own: "shorter than its launch" counts only kernels launched one by one
    lb = [f for f in rep.findings() if f.rule == "launch_bound"]
    assert all("of 75 kernels" in f.title for f in lb if "shorter than their launch" in f.title)


def test_node_tracing_is_asked_of_nsys_by_default_where_it_traces_cuda():
    sw = frozenset({"--cuda-graph-trace"})
    assert "--cuda-graph-trace=node" in choose(None, None, "cuda,nvtx", sw).args
    assert "--cuda-graph-trace=node" not in choose(None, None, "nvtx,osrt", sw).args
    assert "--cuda-graph-trace=node" not in choose(None, None, "cuda,nvtx", sw, ("--cuda-graph-trace=graph",)).args
    assert "--cuda-graph-trace=node" not in choose(None, None, "cuda,nvtx", frozenset()).args
