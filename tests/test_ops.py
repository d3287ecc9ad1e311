"""--ops: every PyTorch operator in an NVTX range, and the time per operator (analysis.ops), with real nsys on CPU
and PyTorch's CPU build; compared with torch.profiler on the same code."""
from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from conftest import requires_nsys

torch_missing = importlib.util.find_spec("torch") is None
pytestmark = pytest.mark.skipif(torch_missing, reason="needs torch (CPU build)")

SETUP = """import torch, torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 64)
"""
CELL = """for _ in range(5):
    loss = model(x).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""
# operators both see at the top level (torch.profiler also counts the calls nested inside other operators)
COMPARED = ("aten::addmm", "aten::mm", "aten::relu", "aten::threshold_backward", "aten::mean")


def _profile(tmp_path, ops="names", **kw):
    from nsight_magic.options import NsysOptions
    from nsight_magic.run import run_nsys

    r = run_nsys(CELL, NsysOptions(name="ops", directory=str(tmp_path), trace="nvtx,osrt", ops=ops, **kw),
                 setup_sources=[SETUP])
    assert r.ok, r.messages
    return r


@requires_nsys
@pytest.mark.nsys
@pytest.mark.timeout(300)
def test_call_counts_equal_torch_profilers(tmp_path):
    rep = _profile(tmp_path).open()
    ours = rep.ops_summary().set_index("op")["calls"]
    ns: dict = {}
    exec(SETUP, ns)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        exec(CELL, ns)
    theirs = {e.key: e.count for e in prof.key_averages()}
    for op in COMPARED:
        assert ours[op] == theirs[op], (op, ours[op], theirs.get(op))
    s = rep.ops_summary()
    assert (s["cpu_ns"] > 0).all() and set(s.columns) >= {"op", "calls", "cpu_ns", "gpu_ns", "kernels", "top_kernel"}
    # backward operators carry the forward operator they belong to
    assert "aten::relu" in s.set_index("op").loc["aten::threshold_backward", "backward_of"]
    assert "aten::addmm" in s.set_index("op").loc["aten::mm", "backward_of"]


@requires_nsys
@pytest.mark.nsys
@pytest.mark.timeout(300)
def test_shapes_and_modules_split_the_rows(tmp_path):
    rep = _profile(tmp_path, ops="shapes", modules=0).open()
    by_shape = rep.ops_summary(by="shape")
    addmm = by_shape[by_shape["op"] == "aten::addmm"]
    assert set(addmm["shapes"]) == {"128, 32x64, 64x128", "10, 32x128, 128x10"}
    assert addmm["calls"].tolist() == [5, 5]
    by_module = rep.ops_summary(by="module").set_index(["module", "op"])
    assert by_module.loc[("0", "aten::addmm"), "calls"] == 5 and by_module.loc[("1", "aten::relu"), "calls"] == 5
    assert by_module.loc[("1 [backward]", "aten::threshold_backward"), "calls"] == 5
    from nsight_magic.errors import OptionError

    with pytest.raises(OptionError, match="--ops shapes"):
        _profile(tmp_path / "names").open().ops_summary(by="shape")


@requires_nsys
@pytest.mark.nsys
@pytest.mark.timeout(300)
def test_the_ops_tab_lists_them(tmp_path):
    from nsight_magic.views.report_view import NsysView

    r = _profile(tmp_path)
    view = NsysView(r.open(), r.folder.path)
    assert "Ops" in view.tabs
    page = view.html_page()
    assert "aten::threshold_backward" in page and 'data-tab="5"' in page


def test_outputs_and_gradients_are_bit_identical_with_and_without_ops():
    import torch
    import torch.nn as nn

    from nsight_magic.inside.ops import OpRanges

    def run(with_ops: bool):
        torch.manual_seed(1)
        m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(inplace=True), nn.Flatten(),
                          nn.Linear(8 * 14 * 14, 4))
        x = torch.randn(5, 3, 16, 16, requires_grad=True)
        ctx = OpRanges(shapes=True) if with_ops else None
        if ctx:
            ctx.__enter__()
        try:
            out = m(x)
            out.square().sum().backward()
        finally:
            if ctx:
                ctx.__exit__(None, None, None)
        return out.detach(), x.grad, [p.grad for p in m.parameters()]

    a, b = run(False), run(True)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert all(torch.equal(p, q) for p, q in zip(a[2], b[2]))


def test_a_compiled_model_is_refused_with_a_message():
    import torch

    from nsight_magic.inside.ops import OpsError, check_not_compiled

    with pytest.raises(OpsError, match="torch.compile'd"):
        check_not_compiled({"model": torch.compile(torch.nn.Linear(2, 2))})
    check_not_compiled({"model": torch.nn.Linear(2, 2)})


def test_backward_nodes_name_their_forward_operator():
    from nsight_magic.inside.ops import forward_op_of

    assert forward_op_of("AddmmBackward0") == "aten::addmm"
    assert forward_op_of("NativeLayerNormBackward0") == "aten::native_layer_norm"
    assert forward_op_of("torch::autograd::AccumulateGrad") is None


def test_kernels_belong_to_the_operator_open_on_their_launching_thread():
    """Synthetic frames: two forward ops on the main thread, one backward op on autograd's thread; a kernel
    launched inside each, one launched outside every op, and one that runs long after its launch."""
    from nsight_magic.analysis.ops import attribute, ops_summary

    nv = pd.DataFrame({
        "start_ns": [100, 300, 500], "end_ns": pd.array([200, 400, 600], dtype="Int64"),
        "name": ["aten::addmm", "aten::relu", "aten::mm [backward of aten::addmm]"],
        "domain": "nsight-magic ops", "kind": "push_pop", "pid": 1, "tid": [10, 10, 11]})
    api = pd.DataFrame({"start_ns": [150, 350, 550, 450], "end_ns": [160, 360, 560, 460], "pid": 1,
                        "tid": [10, 10, 11, 10], "correlation_id": pd.array([1, 2, 3, 4], dtype="Int64"),
                        "name": "cudaLaunchKernel"})
    k = pd.DataFrame({"start_ns": [5_000, 5_100, 5_200, 5_300], "end_ns": [5_050, 5_130, 5_290, 5_310],
                      "pid": 1, "device_id": 0, "correlation_id": pd.array([1, 2, 3, 4], dtype="Int64"),
                      "name": ["gemm", "relu_k", "gemm_bw", "stray"]})
    none = pd.DataFrame(columns=["start_ns", "end_ns", "pid", "device_id", "correlation_id", "kind", "bytes"])
    rep = SimpleNamespace(nvtx=nv, cuda_api=api, kernels=k, memcpy=none, memset=none)
    g = attribute(rep)
    assert g.sort_values("start_ns")["range"].tolist() == [0, 1, 2, -1]
    s = ops_summary(rep).set_index("op")
    assert s.loc["aten::mm", "gpu_ns"] == 90 and s.loc["aten::mm", "top_kernel"] == "gemm_bw"
    assert s.loc["aten::addmm", "gpu_ns"] == 50 and s.loc["aten::relu", "kernels"] == 1
    assert int(s["gpu_ns"].sum()) == 170  # the stray kernel (launched outside every operator) belongs to none
    assert np.all(s.index.to_numpy() == ["aten::mm", "aten::addmm", "aten::relu"])
