"""The GPU tier: real cells profiled on a real GPU, with assertions (scripts/gpu_check.py records and prints; these
fail).  Skipped without an NVIDIA GPU; on the lent GPU: `bash scripts/gpu-check.sh --pytest`.

Each test runs a notebook in a real kernel (nbclient) with real nsys / ncu, then reads what it left."""
from __future__ import annotations

import subprocess
import sys

import nbformat
import numpy as np
import pandas as pd
import pytest
from nbclient import NotebookClient

from conftest import REPO, cell_text, parse_nsys_csv, requires_gpu, rules_agree, rules_of

sys.path.insert(0, str(REPO / "scripts"))
from gpu_check import NCU_CELLS, SETUP  # noqa: E402  the GPU check's workloads: one model for both

pytestmark = [requires_gpu, pytest.mark.gpu, pytest.mark.timeout(900)]


@pytest.fixture(autouse=True)
def users_trace(tmp_path, monkeypatch):
    """The kernels trace what a user's kernel traces (the default, cuda,nvtx): the CPU suite's IPython folder sets NVTX
    only (tests/conftest.py TEST_TRACE), and with it this tier recorded no CUDA kernel at all."""
    folder = tmp_path / "ipython"
    (folder / "profile_default").mkdir(parents=True)
    monkeypatch.setenv("IPYTHONDIR", str(folder))

TRAIN = """%%nsys --name gpu-e2e --return loss_value
x = torch.randn(64, 3, 64, 64).pin_memory()
y = torch.randint(0, 10, (64,))
for i in range(5):
    with nvtx.annotate(f"step {i}"):
        xb, yb = x.cuda(non_blocking=True), y.cuda()
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad(); loss.backward(); opt.step()
loss_value = loss.item()
"""


def _run(cells: list[str], cwd, timeout: int = 600):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def test_a_training_cell_is_profiled_with_its_setup_outside_and_numbers_equal_nsys_stats(tmp_path):
    from nsight_magic import open_report, tools

    nb = _run(["%load_ext nsight_magic", SETUP, TRAIN, "print('loss_value', loss_value)"], tmp_path)
    assert "nsys: ok" in cell_text(nb.cells[2]), cell_text(nb.cells[2])
    assert float(cell_text(nb.cells[3], "stdout").split()[-1]) > 0  # --return brought the value back
    folder = next((tmp_path / "nsight-profiles").glob("gpu-e2e-*"))
    rep = open_report(folder)
    names = set(rep.nvtx["name"].astype(str))
    assert {f"step {i}" for i in range(5)} <= names and "setup warmup" not in names
    assert len(rep.kernels) >= 5 * 10 and len(rep.memcpy) >= 5 and (rep.kernels["duration_ns"] > 0).all()
    assert int(rep.kernels["start_ns"].min()) >= rep.meta.start_ns  # the capture starts with the cell
    # the kernel table equals NVIDIA's own summary of the same export
    csv = subprocess.run([str(tools.find_nsys()), "stats", "--report", "cuda_gpu_kern_sum", "--format", "csv",
                          "--output", "-", str(folder / "report.sqlite")], capture_output=True, text=True,
                         timeout=300).stdout
    theirs = parse_nsys_csv(csv).set_index("Name")
    ours = rep.kernel_summary().set_index("name")
    assert int(theirs["Instances"].sum()) == len(rep.kernels)
    for name, row in theirs.iterrows():
        assert ours.loc[name, "count"] == row["Instances"] and ours.loc[name, "total_ns"] == row["Total Time (ns)"]
    # what the views and the advice read of it
    b = rep.bottleneck()
    assert b.kind in ("gpu", "cpu", "input", "copy", "sync", "communication")
    # the breakdown is the window split with interval unions: its GPU categories are the GPU's busy time there
    # (kernels and copies, a nanosecond once), all of it adds up to the window
    from nsight_magic.analysis import intervals as I

    a, e = b.window
    ops = pd.concat([rep.kernels[["start_ns", "end_ns"]], rep.memcpy[["start_ns", "end_ns"]],
                     rep.memset[["start_ns", "end_ns"]]])
    busy = I.total(I.clip(I.union(ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)), a, e))
    t = b.breakdown.set_index("category")["time_ns"]
    assert int(t[["compute", "communication", "copy"]].sum()) == busy and int(t.sum()) == e - a, (t, busy)
    assert all(f.rule != "error" for f in rep.findings())
    mem = rep.memory_summary().devices
    assert len(mem) == 1 and mem["peak_allocated"].iloc[0] > 0  # torch's allocator history, recorded by default
    ps = rep.python_samples
    assert not ps.empty and ps.placed  # the cell's Python stacks, on the report's clock
    # each synchronising operation at its own line (torch's sync-debug mode): `y.cuda()` from pageable memory
    # waits for its copy (line 6 of the editor, once a step), `loss.item()` (line 9) once
    from nsight_magic.analysis.python_code import sync_sites

    sites = sync_sites(ps).set_index("cell_line")["count"]
    assert sites.get(6) == 5 and sites.get(9) == 1, sites


NCU_SETUP = NCU_CELLS[1]

NCU_CELL = """%%ncu --name ncu-e2e --module 0 --count 5
with torch.no_grad():
    model(x)
torch.cuda.synchronize()
"""


def test_ncu_profiles_one_modules_kernels_and_both_readers_agree(tmp_path):
    from nsight_magic import open_report

    nb = _run(["%load_ext nsight_magic", NCU_SETUP, NCU_CELL], tmp_path, timeout=900)
    assert "ncu: ok" in cell_text(nb.cells[2]), cell_text(nb.cells[2])
    folder = next((tmp_path / "nsight-profiles").glob("ncu-e2e-*"))
    pages = open_report(folder)                      # the CSV pages ncu wrote beside the report
    rep = open_report(folder / "report.ncu-rep")     # ncu_report, in a worker process
    k = rep.kernels
    assert 1 <= len(k) <= 5 and (k["duration_ns"] > 0).all()
    assert (k["nvtx"].astype(str) == "0").all(), k["nvtx"].tolist()  # module 0's kernels only, our range left out
    # the same kernels in the same order (the CSV page prints ncu's shortened template arguments: names differ)
    assert len(pages.kernels) == len(k)
    pd.testing.assert_series_equal(pages.kernels["duration_ns"].astype(float), k["duration_ns"].astype(float),
                                   check_names=False, rtol=1e-6)
    # the guided-analysis rules as both readers of NVIDIA's output read them, and one finding per rule with an
    # estimated speedup, its time at stake the kernels' duration x that speedup
    assert len(rep.rules) > 0 and rules_agree(rep, pages), (rules_of(rep), rules_of(pages))
    r = rep.rules[rep.rules["type"].astype(str).isin(["OPT", "WRN"]) & (rep.rules["speedup_pct"].fillna(0) > 0)]
    fs = rep.findings()
    assert {f.rule for f in fs} == {f"ncu:{n}" for n in r["rule"]}
    dur = k.set_index("id")["duration_ns"].astype(float)
    for f in fs:
        mine = r[r["rule"] == f.rule[len("ncu:"):]]
        want = float((dur.loc[mine["kernel_id"]].to_numpy() * mine["speedup_pct"].to_numpy() / 100).sum())
        assert abs(f.time_at_stake_ns - want) <= 1, (f.rule, f.time_at_stake_ns, want)


FEATURES_SETUP = """%%nsight_setup
import torch, nvtx
torch.manual_seed(0)
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
mlp = torch.nn.Sequential(*[m for _ in range(6) for m in (torch.nn.Linear(1024, 1024), torch.nn.GELU())]).cuda()
static_x = torch.randn(64, 1024, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s), torch.no_grad():
    for _ in range(3):
        mlp(static_x)
torch.cuda.current_stream().wait_stream(s)
graph = torch.cuda.CUDAGraph()
with torch.no_grad(), torch.cuda.graph(graph):
    static_y = mlp(static_x)
torch.cuda.synchronize()
"""
FEATURES_CELL = """%%nsys --name features --gpu-metrics
with nvtx.annotate("gemm"):
    for _ in range(40):
        a @ a
    torch.cuda.synchronize()
for i in range(20):
    with nvtx.annotate(f"replay {i}"):
        graph.replay()
torch.cuda.synchronize()
"""


def test_gpu_metrics_and_the_kernels_inside_cuda_graphs(tmp_path):
    """%%nsys --gpu-metrics samples the GPU's counters (a bf16 GEMM phase reads tensor-core-bound) and the default
    node tracing lists every kernel a CUDA graph replays, with its graph launch's correlation id."""
    from nsight_magic import open_report
    from nsight_magic.analysis.gpu_metrics import read_metrics

    nb = _run(["%load_ext nsight_magic", FEATURES_SETUP, FEATURES_CELL], tmp_path)
    assert "nsys: ok" in cell_text(nb.cells[2]), cell_text(nb.cells[2])
    folder = next((tmp_path / "nsight-profiles").glob("features-*"))
    rep = open_report(folder)
    gm = rep.gpu_metrics
    assert not gm.empty, gm.problem
    r = rep.nvtx[rep.nvtx["name"].astype(str) == "gemm"].iloc[0]
    (m,) = read_metrics(rep, (int(r["start_ns"]), int(r["end_ns"])))
    assert m.kind == "tensor" and m.means["tensor_active"] > 50 and m.means["sm_active"] > 80, m
    assert any(f.rule == "gpu_metrics" for f in rep.findings())
    nodes = rep.kernels[rep.kernels["graph_node_id"].notna()]
    assert len(nodes) == 20 * 12 * 2 and nodes.groupby("correlation_id").size().eq(24).all(), len(nodes)
    assert not [f for f in rep.findings() if f.rule == "cuda_graphs"]


def test_a_loop_beside_a_pure_python_thread_runs_at_its_plain_pace_under_the_defaults(tmp_path):
    """The planted gil_thread loop (a metrics thread in pure Python holds the GIL beside it) ran 3.5x its plain
    time under %%nsys's defaults on the H200: torch's allocator history took each allocation's Python stack, and
    so waited for the GIL, inside every operation.  Its stacks are now left out once the program runs a thread of
    its own (the snapshot says so); the cell, timed by its range in the report, stays near its plain time."""
    import json
    import pickle
    import sqlite3

    sys.path.insert(0, str(REPO / "benchmarks"))
    from sampler_threads import timed

    from nsight_magic.options import NsysOptions
    from nsight_magic.run import run_nsys

    sys.path.insert(0, str(REPO / "tests" / "data" / "planted"))
    from make_planted_reports import BY_NAME, variant

    plain = min(timed("gil_thread", "bad", {}, None, tmp_path / "plain") for _ in range(2))
    setup, cell = variant(BY_NAME["gil_thread"], "bad")
    r = run_nsys(cell, NsysOptions(name="threads", directory=str(tmp_path), fresh=True, render=False, quiet=True,
                                   timeout=300), setup_sources=[setup], namespace={})
    assert r.ok, r.messages
    name = json.loads((r.folder.path / "run.json").read_text())["range_name"]
    with sqlite3.connect(r.sqlite) as db:
        (ns,) = db.execute('SELECT max(n."end" - n.start) FROM NVTX_EVENTS n LEFT JOIN StringIds s '
                           "ON s.id = n.textId WHERE coalesce(n.text, s.value) = ?", (name,)).fetchone()
    assert ns / 1e9 < 1.5 * plain, (ns / 1e9, plain)
    snap = pickle.loads((r.folder.path / "memory_snapshot.pickle").read_bytes())
    assert snap["nsight_magic"]["stacks_off_us"] > 0  # left out, and said so
    assert sum(len(t) for t in snap["device_traces"]) > 100  # the events themselves are still recorded
