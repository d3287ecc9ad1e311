"""The in-place kernels on a real GPU (issue 60): a transformer cell recorded by nsys in the kernel itself, and
measured by Nsight Compute in the kernel itself (`nsight-magic kernel install --ncu`), the model held once.
Skipped without an NVIDIA GPU; on the lent GPU: `bash scripts/gpu-check.sh --pytest`."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient

from conftest import cell_text, parse_nsys_csv, requires_gpu

pytestmark = [requires_gpu, pytest.mark.gpu, pytest.mark.timeout(900)]

SETUP = """import torch, torch.nn as nn, nvtx
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True)
model = nn.TransformerEncoder(layer, num_layers=2).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(16, 64, 256, device="cuda")
def step():
    loss = model(x).square().mean()
    opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
step(); torch.cuda.synchronize()
"""


@pytest.fixture(autouse=True)
def users_trace(tmp_path, monkeypatch):
    """The kernels' IPython folder of a user's (the CPU suite's sets NsightMagics.trace to NVTX only, which differs
    from the in-place kernel's cuda,nvtx and would send the cell to a fresh process)."""
    folder = tmp_path / "ipython"
    (folder / "profile_default").mkdir(parents=True)
    monkeypatch.setenv("IPYTHONDIR", str(folder))


def _install(tmp_path, *args) -> str:
    prefix = tmp_path / "prefix"
    subprocess.run([sys.executable, "-m", "nsight_magic.cli", "kernel", "install", "--prefix", str(prefix), *args],
                   check=True, capture_output=True, timeout=120)
    return str(prefix / "share" / "jupyter")


def _gpu_apps() -> int:
    """The processes nvidia-smi lists as holding the GPU (seen from here, outside the kernel's namespace)."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"], capture_output=True,
                         text=True, timeout=60).stdout
    return len(out.split())


def _run(cells, cwd, kernel: str, jupyter_path: str, monkeypatch) -> tuple:
    """The cells in a real kernel (nbclient); nvidia-smi's count of GPU processes after the last one, the kernel
    still running."""
    monkeypatch.setenv("JUPYTER_PATH", f"{jupyter_path}{os.pathsep}{os.environ.get('JUPYTER_PATH', '')}")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = NotebookClient(nb, timeout=900, kernel_name=kernel, allow_errors=True,
                            resources={"metadata": {"path": str(cwd)}})
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            client.execute_cell(cell, i)
        apps = _gpu_apps()
    return nb, apps


def test_nsys_in_place_records_the_training_cell_numbered_as_the_editor_shows_it(tmp_path, monkeypatch):
    from nsight_magic import open_report, tools
    from nsight_magic.analysis.python_code import cell_lines

    cell = "%%nsys --name inplace-gpu\nfor i in range(4):\n    with nvtx.annotate(f'step {i}'):\n        step()\n"
    nb, apps = _run([SETUP, cell, "print('steps', int(opt.state[next(iter(model.parameters()))]['step']))"],
                    tmp_path, "nsight-magic", _install(tmp_path), monkeypatch)
    out = cell_text(nb.cells[1])
    assert "profiled in place" in out and "profile ready" in out, out
    assert apps == 1  # the model is held once: no second process
    assert cell_text(nb.cells[2]).split()[-1] == "5"  # 1 step of setup + 4 profiled: the notebook's own state
    folder = next((tmp_path / "nsight-profiles").glob("inplace-gpu-*"))
    rep = open_report(folder)
    csv = subprocess.run([str(tools.find_nsys()), "stats", "--report", "cuda_gpu_kern_sum", "--format", "csv",
                          "--output", "-", str(folder / "report.sqlite")], capture_output=True, text=True,
                         timeout=300).stdout
    theirs = parse_nsys_csv(csv).set_index("Name")
    ours = rep.kernel_summary().set_index("name")
    assert int(theirs["Instances"].sum()) == len(rep.kernels) > 4 * 20
    for name, row in theirs.iterrows():
        assert ours.loc[name, "count"] == row["Instances"] and ours.loc[name, "total_ns"] == row["Total Time (ns)"]
    if os.environ.get("OUT"):  # the device run's files come back: the report, to look at when this fails
        import shutil

        shutil.copy(folder / "report.sqlite", os.path.join(os.environ["OUT"], "inplace_gpu_report.sqlite"))
    assert {f"step {i}" for i in range(4)} <= set(rep.nvtx["name"].astype(str)), \
        (rep.meta, rep.nvtx[["name", "start_ns", "end_ns"]].to_string())
    lines = cell_lines(rep.python_samples)
    assert not lines.empty and set(lines["line"]) <= {2, 3, 4}, lines  # the editor's lines, the magic's is 1
    assert "blocked in the OS 0%" not in rep.bottleneck().summary  # cuda,nvtx: no OS runtime traced


def test_ncu_in_place_measures_a_transformer_cell_as_ncu_itself_reads_it(tmp_path, monkeypatch):
    from nsight_magic import open_report

    cell = "%%ncu --name ncu-inplace --count 500\nwith torch.no_grad():\n    y = model(x)\ntorch.cuda.synchronize()\n"
    nb, apps = _run([SETUP, cell, "print('still', tuple(y.shape))"],
                    tmp_path, "nsight-magic-ncu", _install(tmp_path, "--ncu"), monkeypatch)
    out = cell_text(nb.cells[1])
    assert "measured in place" in out, out
    assert apps == 1  # the model is held once: no second process
    assert cell_text(nb.cells[2]).strip() == "still (16, 64, 256)"  # the cell's result stays in the notebook
    folder = next((tmp_path / "nsight-profiles").glob("ncu-inplace-*"))
    run = json.loads((folder / "run.json").read_text())
    assert run["mode"] == "in place"
    ours = open_report(folder).kernels
    assert 10 <= len(ours) <= 500 and (ours["duration_ns"] > 0).all()
    # NVIDIA's own reading of the kernel's report, by the cell's range
    p = subprocess.run(["ncu", "--import", run["report"], "--nvtx-include", f"{run['range']}/", "--csv", "--page",
                        "raw", "--print-units", "base"], capture_output=True, text=True, timeout=300)
    theirs = pd.read_csv(io.StringIO(p.stdout), skiprows=[1], thousands=",").sort_values("ID")
    ours = ours.sort_values("id")
    assert list(theirs["ID"].astype(int)) == list(ours["id"].astype(int))  # the same kernels, one by one
    pd.testing.assert_series_equal(theirs["gpu__time_duration.sum"].astype(float).reset_index(drop=True),
                                   ours["duration_ns"].astype(float).reset_index(drop=True), check_names=False,
                                   rtol=1e-9)
