"""The whole GPU check, in one call on the lent GPU machine (see scripts/gpu-check.sh, which sets the machine up).

Sections (pick with --only):
  nsys      a notebook with %%nsight_setup + %%nsys on a PyTorch model, executed by nbclient in a real kernel:
            kernels captured, setup code outside the capture, returned value, wall time
  capture   bare nsys on one script: no capture range vs --capture-range=nvtx vs cudaProfilerApi (wall, kernels)
  ncu       a notebook with %%ncu on the per-module NVTX workload, executed by nbclient
  notebook  executes notebooks/memory_workload.ipynb and saves it, outputs included, to $OUT
  findings  records tests/data/findings_{bad,good}.sqlite (tests/data/make_findings_reports.py), nsys 2025.3's
            stats/analyze output of them, and compares every twin rule with `nsys analyze` 2025.3 (all rows) on
            them and on the fixtures in .fixtures_sub/ (carried), rule by rule
  optimize  executes notebooks/optimizing_a_training_step.ipynb and saves it, outputs included, to $OUT
  warm      benchmarks/warm.py --workload torch: the second %%nsys (warm session) against bare nsys profile of
            setup + cell, each report's kernel count; figures in $OUT/warm.json
  ddp       (kind nvidia-h200-x2) %%nsys --nproc 2 on a DDP training cell (NCCL): kernels per device, NCCL
            kernels per collective and rank, the Ranks table, the straggler per step, the collective_wait finding
  ranks1gpu (any one GPU) %%nsys --nproc 2 on one GPU with gloo, one report and --per-rank-reports: kernels and
            steps per rank in both, how far apart the ranks leave each step (one clock after the merge)
  autonvtx  %%nsys --modules on a small transformer and %%nsys --lines on a training step (nbclient): the module
            table and the lines table
  planted   records the single-GPU planted diagnosis suite (tests/data/planted/make_planted_reports.py: each
            workload and its fixed twin timed without the profiler, then profiled): $OUT/planted_single.tar.xz
  planted_ddp  (kind nvidia-h200-x2) the same for the DDP stragglers: $OUT/planted_ddp.tar.xz
  planted_second  the second planted set (issue 28: allocator churn, fp32 GEMMs, implicit syncs, optimizer and
            PyTorch anti-patterns), NM_PLANTED_ONLY / NM_PLANTED_REPS / NM_PLANTED_TAG (/ NM_PLANTED_TRACE: another
            trace list, an experiment): $OUT/planted_second*.tar.xz
  planted_third  the third planted set (causes no rule was written for when they were planted: fp64, metrics on
            the host, a numpy round trip), same variables: $OUT/planted_third*.tar.xz
  planted_fourth  the fourth planted set (planted before any rule was looked at for them: nvidia-smi every step,
            a layer left on the CPU, LayerNorm written out, gc.collect() and a .npy read every step), same variables
  planted_fifth  the fifth planted set (expectations written first: a conv stage under autocast in NCHW, outputs
            grown with torch.cat every step, a pure-Python thread beside the loop, 256 small copies a step, an EMA
            updated tensor by tensor, anomaly detection left on, torch.compile recompiling for each new shape),
            same variables
  call_overhead   what one traced call costs under nsys (benchmarks/call_overhead.py): $OUT/call_overhead.json
  emit_nvtx torch's emit_nvtx ranges beside --ops's dispatch mode (scripts/emit_nvtx_samples.py): $OUT/emit_nvtx.tar.xz
  latency   benchmarks/latency.py on a PyTorch training cell, default trace and -t cuda,nvtx: $OUT/latency_*.json
  job       (two GPUs) a DDP job recorded as a cluster user would, one `nsys profile` per rank under torchrun
            (report.%q{RANK}), each exported, `nsys stats` of each, and `nsys recipe nccl_gpu_time_util_map`
            timed on them: $OUT/job.tar.xz
  jobbench  benchmarks/job.py on the host's cores (NM_JOB_RANKS ranks, NM_JOB_WORKERS=2[,8...] workers)
  analysis  benchmarks/analysis.py on the host's cores (160k and 1M kernels made from a planted report:
            NM_ANALYSIS_SRC, NM_ANALYSIS_KERNELS): the cold read against bottleneck() + findings(), and against
            the analysis's inputs read alone and its compute on them (--inputs)
  trace_cost  a planted cell (NM_TRACE_COST=name:variant) timed plain and under bare nsys with -t none, nvtx,
            cuda, cuda,nvtx and cuda,nvtx,osrt: what each part of the tracing costs it
  trace_phases  scripts/trace_phases.py (NM_TRACE_PHASES=name:variant,...): each phase of a planted step's host
            time plain, under -t cuda,nvtx and with --cuda-trace-all-apis=true, and the CUDA calls recorded in each
            phase: where tracing slows a step down
  ops_warm  the first operators under --ops's two ways (the dispatch mode, warmed or not, and emit_nvtx), in fresh
            processes without nsys: what torch loads on first use
  inplace   (issue 44) the in-place kernel: a transformer cell profiled in the kernel (nbclient), its kernels
            against nsys stats, then benchmarks/inplace.py --workload torch --big 0.65: $OUT/inplace_torch.json
  planted_sixth  the sixth planted set (issues 45, 48), with each report's Python samples and allocator history
  planted_seventh  the seventh planted set (issue 61): a constant uploaded every step, empty_cache in a small
            step, the mask and item syncs with their lines: $OUT/planted_seventh.tar.xz
  sampler_threads  benchmarks/sampler_threads.py (NM_SAMPLER_THREADS: its arguments): a planted cell with a Python
            thread of its own plain, beside our sampler at each interval, under bare nsys: $OUT/sampler_threads.json
  sampler_cost  nsight-magic's Python sampler on a GPU and a CPU-bound step, alone and under nsys
  kernel_life  (issue 46) the cuDNN-autotuning cell under %%nsys --fresh in new kernels (NM_KERNEL_LIFE_REPS):
            whether the notebook's kernel lives, its peak memory
  recording (issues 45, 48) nsys's switches, benchmarks/recording_cost.py (Python samples, device memory, torch's
            allocator history) on the GPU and CPU workloads, and a cell recorded with both fresh, in a warm session
            and in place: $OUT/recording.tar.xz
Results print as lines and go to $OUT/gpu_check.json; small reports are copied to $OUT.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

OUT = Path(os.environ.get("OUT", "gpu-check-out"))
RESULTS: dict = {}


def say(section: str, key: str, value) -> None:
    RESULTS.setdefault(section, {})[key] = value
    print(f"[{section}] {key}: {value}", flush=True)


def run_notebook(cells: list[str], cwd: Path, timeout: int = 600):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb, time.perf_counter() - t0


def cell_text(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.output_type == "stream":
            out.append(o.text)
        elif o.output_type == "error":
            out.append("\n".join(o.traceback))
        elif "text/plain" in o.get("data", {}):
            out.append(o.data["text/plain"])
    return "".join(out)


SETUP = """%%nsight_setup
import torch, torch.nn as nn, nvtx
model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                      nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(64, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
with nvtx.annotate("setup warmup"):
    for _ in range(3):  # these kernels must stay outside the capture
        model(torch.randn(8, 3, 32, 32, device="cuda")).sum().backward()
torch.cuda.synchronize()
"""

PROFILED = """%%nsys --name gpu-e2e --return loss_value
x = torch.randn(batch, 3, 64, 64).pin_memory()
y = torch.randint(0, 10, (batch,))
for i in range(steps):
    with nvtx.annotate(f"step {i}"):
        xb, yb = x.cuda(non_blocking=True), y.cuda()
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad(); loss.backward(); opt.step()
loss_value = loss.item()
"""


def check_nsys(work: Path) -> None:
    cells = ["%load_ext nsight_magic", SETUP, "batch, steps = 64, 5", PROFILED, "print('loss_value', loss_value)"]
    nb, wall = run_notebook(cells, work)
    say("nsys", "notebook_wall_s", round(wall, 2))
    say("nsys", "profiled_cell_output", cell_text(nb.cells[3])[-1500:])
    say("nsys", "returned", cell_text(nb.cells[4]).strip())
    folder = sorted((work / "nsight-profiles").glob("gpu-e2e-*"))[-1]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from nsight_magic import open_report

    rep = open_report(folder)
    say("nsys", "nsys_version", rep.meta.nsys_version)
    say("nsys", "kernels", len(rep.kernels))
    say("nsys", "memcpy", len(rep.memcpy))
    say("nsys", "cuda_api", len(rep.cuda_api))
    names = set(rep.nvtx["name"].astype(str))
    say("nsys", "nvtx_ranges", sorted(names))
    say("nsys", "setup_range_in_report", "setup warmup" in names)
    first_kernel = int(rep.kernels["start_ns"].min()) if len(rep.kernels) else None
    cap = rep.nvtx[rep.nvtx["name"].astype(str).str.contains(folder.name)]
    if len(cap) and first_kernel is not None:
        say("nsys", "first_kernel_after_capture_start", bool(first_kernel >= int(cap["start_ns"].min())))
    say("nsys", "top_kernels", rep.kernel_summary().head(5)[["name", "count", "total_ns"]].to_dict("records"))
    shutil.copy(folder / "report.sqlite", OUT / "gpu_e2e_report.sqlite")
    for f in ("command.txt", "versions.json", "stderr.txt"):
        say("nsys", f, (folder / f).read_text()[-800:])


CAPTURE_SCRIPT = """
import sys, time, torch, nvtx
t0 = time.perf_counter()
a = torch.randn(2048, 2048, device="cuda")
for _ in range(20):           # setup: must stay out of a capture
    a = torch.tanh(a @ a * 1e-3)
torch.cuda.synchronize()
mode = sys.argv[1]
if mode == "cudaProfilerApi":
    torch.cuda.cudart().cudaProfilerStart()
elif mode == "nvtx":
    nvtx.push_range("cell", domain="nsight-magic")
for _ in range(200):
    a = torch.tanh(a @ a * 1e-3)
torch.cuda.synchronize()
if mode == "cudaProfilerApi":
    torch.cuda.cudart().cudaProfilerStop()
elif mode == "nvtx":
    nvtx.pop_range(domain="nsight-magic")
"""


def check_capture(work: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from nsight_magic import open_report, tools

    nsys = str(tools.find_nsys())
    script = work / "capture.py"
    script.write_text(CAPTURE_SCRIPT)
    variants = {
        "none": [],
        "nvtx": ["--capture-range=nvtx", "--nvtx-capture=cell@nsight-magic", "--capture-range-end=stop"],
        "cudaProfilerApi": ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"],
    }
    env = {**os.environ, "NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
    for rep_i in range(2):
        for name, extra in variants.items():
            out = work / f"cap_{name}_{rep_i}"
            t0 = time.perf_counter()
            p = subprocess.run([nsys, "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none",
                                f"--output={out}", *extra, sys.executable, str(script), name],
                               capture_output=True, text=True, env=env, timeout=300)
            wall = time.perf_counter() - t0
            rep_file = out.with_suffix(".nsys-rep")
            kernels = None
            if rep_file.exists():
                kernels = len(open_report(tools.export_sqlite(rep_file, nsys)).kernels)
            say("capture", f"{name}_run{rep_i}", {"wall_s": round(wall, 2), "kernels": kernels, "rc": p.returncode})


NCU_CELLS = [
    "%load_ext nsight_magic",
    """%%nsight_setup
import torch, torch.nn as nn
model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                      nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(64, 10)).cuda().eval()
from nsight_magic import annotate_modules
annotate_modules(model)
x = torch.randn(32, 3, 64, 64, device="cuda")
""",
    """%%ncu --name ncu-e2e --module 0 --count 5
with torch.no_grad():
    model(x)
torch.cuda.synchronize()
""",
    """%%ncu --name ncu-all --count 40
with torch.no_grad():
    model(x)
torch.cuda.synchronize()
""",
]


def check_ncu(work: Path) -> None:
    nb, wall = run_notebook(NCU_CELLS, work, timeout=900)
    say("ncu", "notebook_wall_s", round(wall, 2))
    for i in (1, 2, 3):
        say("ncu", f"cell{i}_output", cell_text(nb.cells[i])[-2000:])
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from nsight_magic import open_report

    for name in ("ncu-e2e", "ncu-all"):
        folders = sorted((work / "nsight-profiles").glob(f"{name}-*"))
        if not folders:
            say("ncu", name, "no profile folder")
            continue
        folder = folders[-1]
        say("ncu", f"{name}_files", sorted(p.name for p in folder.iterdir()))
        log = (folder / "tool-output.txt").read_text(errors="replace").splitlines()
        say("ncu", f"{name}_passes", [ln for ln in log if "pass" in ln][:45])
        say("ncu", f"{name}_wall_from_status", cell_text(nb.cells[2 if name == "ncu-e2e" else 3]).split(",")[0])
        try:
            rep = open_report(folder)
            say("ncu", f"{name}_kernels", len(rep.kernels))
            say("ncu", f"{name}_kernel_rows", rep.kernels[["name", "nvtx", "duration_ns"]].head(8).to_dict("records"))
        except Exception as e:  # report what happened; this is a check script
            say("ncu", f"{name}_open_error", f"{type(e).__name__}: {e}")
        try:  # the .ncu-rep itself, read by ncu_report in a worker process
            t0 = time.perf_counter()
            rep2 = open_report(folder / "report.ncu-rep")
            say("ncu", f"{name}_ncu_rep", f"{rep2!r} in {time.perf_counter() - t0:.1f} s")
        except Exception as e:
            say("ncu", f"{name}_ncu_rep_error", f"{type(e).__name__}: {e}")
        for f in folder.glob("*.csv"):
            shutil.copy(f, OUT / f"{name}_{f.name}")
        rep_file = folder / "report.ncu-rep"
        if rep_file.exists() and rep_file.stat().st_size < 15 * 2**20:
            shutil.copy(rep_file, OUT / f"{name}.ncu-rep")
        elif rep_file.exists():
            say("ncu", f"{name}_rep_bytes", rep_file.stat().st_size)


def execute_repo_notebook(section: str, name: str, work: Path, tail: int) -> None:
    """Execute notebooks/NAME, say its wall time, errors and each code cell's output tail; save it to $OUT."""
    src = Path(__file__).resolve().parents[1] / "notebooks" / name
    nb = nbformat.read(src, as_version=4)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=900, kernel_name="python3", allow_errors=True, store_widget_state=False,
                   resources={"metadata": {"path": str(work)}}).execute()
    say(section, "wall_s", round(time.perf_counter() - t0, 1))
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    say(section, "errors", [f"{e.ename}: {e.evalue}" for e in errors])
    for i, c in enumerate(nb.cells):
        if c.cell_type == "code":
            say(section, f"cell{i}", cell_text(c)[-tail:])
    from ship_notebook import ship  # the outputs name nsight-profiles/..., not this run's temporary folder

    ship(nb)
    nbformat.write(nb, OUT / name)


def check_notebook(work: Path) -> None:
    execute_repo_notebook("notebook", "memory_workload.ipynb", work, tail=600)


def check_findings(work: Path) -> None:
    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo))
    sys.path.insert(0, str(repo / "tests"))
    from conftest import parse_nsys_csv
    from nsight_magic import open_report, tools
    from nsight_magic.analysis.findings import NSYS_ANALYZE_NAMES
    from test_analysis_findings import KEYS

    out = work / "findings"
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, str(repo / "tests" / "data" / "make_findings_reports.py"), str(out)],
                       capture_output=True, text=True, timeout=1200)
    say("findings", "record", {"rc": p.returncode, "wall_s": round(time.perf_counter() - t0, 1),
                               "tail": (p.stdout + p.stderr)[-2500:]})
    reports = sorted(out.glob("findings_*.sqlite"))
    for r in reports:
        shutil.copy(r, OUT / r.name)
    st = work / "stats"
    subprocess.run(["bash", str(repo / "scripts" / "record-nsys-stats.sh"), str(st), *map(str, reports)],
                   timeout=600)
    subprocess.run(["tar", "czf", str(OUT / "findings-stats-2025.3.tgz"), "-C", str(st), "."], timeout=120)
    nsys = str(tools.find_nsys())
    for r in reports + sorted((repo / ".fixtures_sub").glob("*.sqlite")):
        rep = open_report(r)
        fs = rep.findings()
        say("findings", f"{r.stem}_rules", [(f.rule, f.count, round(f.time_at_stake_ns / 1e6, 2)) for f in fs])
        for rule in NSYS_ANALYZE_NAMES:
            q = subprocess.run([nsys, "analyze", "-f", "csv", "-o", "-", "-r", f"{rule}:rows=-1", str(r)],
                               capture_output=True, text=True, timeout=300)
            text = q.stdout
            if "could not be analyzed due to missing" in text or "does not contain ENUM_" in text:
                say("findings", f"{r.stem}:{rule}", "nsys 2025.3 refuses this export (old schema)")
                continue
            ref = parse_nsys_csv(text)
            rk, ok = KEYS[rule]
            theirs = set() if ref is None else set(map(tuple, ref[rk].astype(float).round(1).to_numpy().tolist()))
            mine = [f for f in fs if f.rule == rule]
            ev = mine[0].evidence if mine else None
            ours = set() if ev is None else set(map(tuple, ev[ok].astype(float).round(1).to_numpy().tolist()))
            say("findings", f"{r.stem}:{rule}", f"nsys {len(theirs)} / ours {len(ours)} / same {theirs == ours}")


def check_optimize(work: Path) -> None:
    execute_repo_notebook("optimize", "optimizing_a_training_step.ipynb", work, tail=1500)


AUTONVTX_SETUP = """%%nsight_setup
import torch, torch.nn as nn
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024, batch_first=True)
model = nn.Sequential(nn.Linear(64, 256), nn.TransformerEncoder(layer, num_layers=2), nn.Linear(256, 10)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(32, 128, 64, device="cuda")
y = torch.randint(0, 10, (32,), device="cuda")
for _ in range(2):  # warm-up outside the capture
    model(x).mean(1).sum().backward()
torch.cuda.synchronize()
"""
AUTONVTX_MODULES = """%%nsys --name modules --modules 3
for _ in range(3):
    loss = nn.functional.cross_entropy(model(x).mean(1), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
"""
AUTONVTX_LINES = """%%nsys --name lines --lines
for step in range(5):
    out = model(x)
    loss = nn.functional.cross_entropy(out.mean(1), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    value = loss.item()
"""


def check_autonvtx(work: Path) -> None:
    nb, wall = run_notebook(["%load_ext nsight_magic", AUTONVTX_SETUP, AUTONVTX_MODULES, AUTONVTX_LINES], work)
    say("autonvtx", "wall_s", round(wall, 1))
    for i in (2, 3):
        say("autonvtx", f"cell{i}_text", cell_text(nb.cells[i])[-1200:])
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import pandas as pd
    from nsight_magic import open_report
    from nsight_magic.analysis.lines import lines_table, module_table

    pd.set_option("display.width", 250)
    folder = sorted((work / "nsight-profiles").glob("modules-*"))[-1]
    names = json.loads((folder / "annotations.json").read_text())["modules"]
    mods = module_table(open_report(folder), names)
    say("autonvtx", "module_table", "\n" + mods.to_string())
    folder = sorted((work / "nsight-profiles").glob("lines-*"))[-1]
    lines = lines_table(open_report(folder), (folder / "cell.py").read_text())
    say("autonvtx", "lines_table", "\n" + lines.drop(columns="top_kernels").to_string())
    say("autonvtx", "lines_top_kernels", lines[["line", "top_kernels"]].to_dict("records"))
    shutil.copy(folder / "view.html", OUT / "lines_view.html")


DDP_CELL = """%%nsys --name ddp --nproc 2 --no-render
import os, torch, nvtx
import torch.distributed as dist
import torch.nn as nn
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
torch.manual_seed(0)
model = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(2048, 2048), nn.ReLU())]).cuda()
ddp = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
x = torch.randn(256, 2048, device="cuda")
for step in range(20):
    with nvtx.annotate(f"step {step}"):
        if rank == 1:  # rank 1 does extra work each step: the straggler
            torch.cuda._sleep(2_000_000)
        opt.zero_grad(set_to_none=True)
        ddp(x).square().mean().backward()
        opt.step()
torch.cuda.synchronize()
dist.destroy_process_group()
"""


def check_ddp(work: Path) -> None:
    nb, wall = run_notebook(["%load_ext nsight_magic", DDP_CELL], work, timeout=900)
    say("ddp", "wall_s", round(wall, 1))
    say("ddp", "cell_text", cell_text(nb.cells[1])[-3000:])
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import pandas as pd
    from nsight_magic import open_report
    from nsight_magic.analysis.ranks import nccl_summary, ranks_table, stragglers_by_step

    pd.set_option("display.width", 250)
    folder = sorted((work / "nsight-profiles").glob("ddp-*"))[-1]
    r = open_report(folder)
    say("ddp", "processes", "\n" + r.processes.to_string())
    k = r.kernels
    say("ddp", "kernels_per_device", {int(a): int(b) for a, b in k.groupby("device_id").size().items()})
    say("ddp", "nccl_summary", "\n" + nccl_summary(r).to_string())
    say("ddp", "ranks_table", "\n" + ranks_table(r).to_string())
    say("ddp", "stragglers", "\n" + stragglers_by_step(r).to_string())
    say("ddp", "findings", [str(f) for f in r.findings()])
    shutil.copy(folder / "report.sqlite", OUT / "ddp_report.sqlite")
    from nsight_magic.views.report_view import write_view_html

    write_view_html(r, OUT / "ddp_view.html", folder)


RANKS_1GPU_CELL = """%%nsys --name {name} --nproc 2 --no-render {extra}
import os, torch, nvtx
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
a = torch.randn(1024, 1024, device="cuda")
for step in range(10):
    with nvtx.annotate(f"step {{step}}"):
        for _ in range(20 * (rank + 1)):   # rank 1 does twice the GPU work: the others wait for it
            a = torch.tanh(a @ a)
        s = a.sum().cpu().reshape(1)
        dist.all_reduce(s)
torch.cuda.synchronize()
dist.destroy_process_group()
"""


def check_ranks1gpu(work: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from nsight_magic import open_report

    cells = ["%load_ext nsight_magic", RANKS_1GPU_CELL.format(name="one", extra=""),
             RANKS_1GPU_CELL.format(name="perrank", extra="--per-rank-reports")]
    nb, wall = run_notebook(cells, work, timeout=900)
    say("ranks1gpu", "wall_s", round(wall, 1))
    for i, name in ((1, "one"), (2, "perrank")):
        say("ranks1gpu", f"{name}_text", cell_text(nb.cells[i])[-1500:])
        folder = sorted((work / "nsight-profiles").glob(f"{name}-*"))[-1]
        say("ranks1gpu", f"{name}_files", sorted(p.name for p in folder.iterdir() if p.is_file()))
        r = open_report(folder)
        ranks = r.processes.dropna(subset=["rank"]).set_index("pid")["rank"]
        k = r.kernels.assign(rank=lambda d: d["pid"].map(ranks))
        say("ranks1gpu", f"{name}_kernels_per_rank", {int(a): int(b) for a, b in k.groupby("rank").size().items()})
        nv = r.nvtx[r.nvtx["name"].str.startswith("step", na=False)]
        ends = nv.assign(rank=nv["pid"].map(ranks)).pivot_table(index="name", columns="rank", values="end_ns")
        say("ranks1gpu", f"{name}_steps_per_rank", {int(a): int(b) for a, b in ends.count().items()})
        say("ranks1gpu", f"{name}_step_end_gap_ms_max", round(float((ends[1] - ends[0]).abs().max() / 1e6), 3))
        say("ranks1gpu", f"{name}_kernel_summary_by_rank",
            "\n" + r.kernel_summary(by="rank")[["rank", "name", "count", "total_ns"]].head(6).to_string())
        r.close()


def check_warm(work: Path) -> None:
    repo = Path(__file__).resolve().parents[1]
    for trace, repeat in (("cuda,nvtx,osrt", 3), ("cuda,nvtx", 2)):
        tag = trace.replace(",", "_")
        p = subprocess.run([sys.executable, str(repo / "benchmarks" / "warm.py"), "--workload", "torch", "--repeat",
                            str(repeat), "--trace", trace, "--json", str(OUT / f"warm_{tag}.json"),
                            "--keep", str(OUT / f"warm_{tag}.sqlite")],
                           capture_output=True, text=True, timeout=900, cwd=work)
        lines = [x for x in (p.stdout + p.stderr).splitlines()
                 if x.startswith(("nsys ", "  first", "  run", "  %%nsys", "bare", "warm", "ratio", "Traceback"))
                 or "Error" in x]
        say("warm", f"{tag}_rc", p.returncode)
        say("warm", f"{tag}_lines", "\n" + "\n".join(lines))
        if p.returncode:
            say("warm", f"{tag}_tail", (p.stdout + p.stderr)[-3000:])


def _planted(work: Path, suite: str) -> None:
    repo = Path(__file__).resolve().parents[1]
    out = work / f"planted_{suite}"
    only = ["--only", os.environ["NM_PLANTED_ONLY"]] if os.environ.get("NM_PLANTED_ONLY") else []
    reps = os.environ.get("NM_PLANTED_REPS", "2" if suite == "ddp" else "3")
    # NM_PLANTED_TIMEOUT: stop there and keep what was recorded (the manifest is written after each workload)
    try:
        p = subprocess.run([sys.executable, str(repo / "tests" / "data" / "planted" / "make_planted_reports.py"),
                            str(out), "--suite", suite, "--reps", reps, *only], capture_output=True, text=True,
                           timeout=float(os.environ.get("NM_PLANTED_TIMEOUT", "1200")), cwd=work)
        rc, text = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, text = "timeout", (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
    say(f"planted_{suite}", "rc", rc)
    say(f"planted_{suite}", "output", "\n" + text[-6000:])
    if out.exists():
        tag = os.environ.get("NM_PLANTED_TAG", "")
        tar = OUT / f"planted_{suite}{tag}.tar.xz"
        subprocess.run(["tar", "-cJf", str(tar), "-C", str(out), *sorted(x.name for x in out.iterdir()
                                                                         if x.is_file())], check=True)
        say(f"planted_{suite}", "tar_bytes", tar.stat().st_size)


def check_planted(work: Path) -> None:
    _planted(work, "single")


def check_planted_ddp(work: Path) -> None:
    _planted(work, "ddp")


def check_planted_second(work: Path) -> None:
    """The second planted set (issue 28's causes); NM_PLANTED_ONLY picks some, NM_PLANTED_TAG names the tar."""
    _planted(work, "second")


def check_planted_third(work: Path) -> None:
    """The third planted set (causes no rule was written for when planted); NM_PLANTED_ONLY, NM_PLANTED_TAG."""
    _planted(work, "third")


def check_planted_fourth(work: Path) -> None:
    """The fourth planted set (causes planted before any rule was looked at for them); NM_PLANTED_ONLY, _TAG."""
    _planted(work, "fourth")


def check_planted_fifth(work: Path) -> None:
    """The fifth planted set (expectations written first: see the module docstring); NM_PLANTED_ONLY,
    NM_PLANTED_TAG."""
    _planted(work, "fifth")


def check_planted_sixth(work: Path) -> None:
    """The sixth planted set (issues 45 and 48: code the samples name, cuDNN autotuning, growth that is work, a
    stall nsys makes, GPU memory: a leak, out of memory, fragmentation), recorded with the Python samples and
    torch's allocator history beside each report; NM_PLANTED_ONLY, NM_PLANTED_TAG."""
    _planted(work, "sixth")


def check_planted_seventh(work: Path) -> None:
    """The seventh planted set (issue 61: a constant uploaded every step, empty_cache in a small step, and the
    mask and item syncs again, now with their operations' own lines in python_samples.json); NM_PLANTED_ONLY,
    NM_PLANTED_TAG."""
    _planted(work, "seventh")


def check_kernel_life(work: Path) -> None:
    """Issue 46: one of three `%%nsys --fresh` runs of the cuDNN-autotuning cell ended with the notebook's kernel
    dead.  NM_KERNEL_LIFE_REPS runs (default 3), each in a new kernel (nbclient, as then): whether the kernel
    lived, its peak memory (VmHWM), the kernel's exit signal when it died, and the cell's last output."""
    import re

    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo / "tests" / "data" / "planted"))
    from make_planted_reports import BY_NAME, variant  # noqa: E402

    setup, cell = variant(BY_NAME["cudnn_autotune"], "bad")
    for i in range(int(os.environ.get("NM_KERNEL_LIFE_REPS", "3"))):
        d = work / f"life{i}"
        d.mkdir()
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in (
            "%load_ext nsight_magic", "%%nsight_setup\nimport torch, torch.nn as nn, nvtx\n" + setup,
            f"%%nsys --fresh --name life{i}\n{cell}", "import os, resource; print('alive', os.getpid())")])
        client = NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                                resources={"metadata": {"path": str(d)}})
        t0 = time.perf_counter()
        peak, died = None, None
        try:
            with client.setup_kernel():
                pid = client.km.provisioner.process.pid
                for index, c in enumerate(nb.cells):
                    client.execute_cell(c, index)
                    try:
                        status = Path(f"/proc/{pid}/status").read_text()
                        peak = re.search(r"VmHWM:\s+(\d+)", status).group(1) + " kB"
                    except (OSError, AttributeError):
                        pass
        except Exception as e:  # DeadKernelError and the like: what this section looks for
            died = f"{type(e).__name__}: {str(e)[:300]}"
            try:
                died += f" (exit code {client.km.provisioner.process.poll()})"
            except Exception:
                pass
        say("kernel_life", f"run{i}", {"wall_s": round(time.perf_counter() - t0, 1), "died": died,
                                       "kernel_peak_rss": peak, "profiled_cell": cell_text(nb.cells[2])[-600:],
                                       "after": cell_text(nb.cells[3])[-200:]})
    try:
        dm = subprocess.run(["dmesg", "-T"], capture_output=True, text=True, timeout=10).stdout
        say("kernel_life", "dmesg_oom", [ln for ln in dm.splitlines() if "oom" in ln.lower() or "killed" in ln.lower()
                                         ][-10:])
    except Exception as e:
        say("kernel_life", "dmesg", f"{type(e).__name__}: {e}")


def check_sampler_cost(work: Path) -> None:
    """What nsight-magic's Python sampler costs a GPU training step and a CPU-bound step, alone and under nsys
    (benchmarks/recording_cost.py: $OUT/sampler_cost_*.json), and its parts on the GPU step
    (benchmarks/sampler_cost.py)."""
    repo = Path(__file__).resolve().parents[1]
    for wl in ("gpu", "cpu"):
        p = subprocess.run([sys.executable, str(repo / "benchmarks" / "recording_cost.py"), "--workloads", wl,
                            "--variants", "sampler,base,base_sampler", "--repeat", os.environ.get("NM_RC_REPEAT", "3"),
                            "--steps", "30", "--json", str(OUT / f"sampler_cost_{wl}.json")],
                           capture_output=True, text=True, timeout=400, cwd=work)
        say("sampler_cost", wl, "\n" + (p.stdout + p.stderr)[-2500:])
    # its parts, in one process, the variants taken in turn (fresh processes per variant differ by more than the
    # sampler costs: +8.8% once, +/-1% interleaved, the same day)
    p = subprocess.run([sys.executable, str(repo / "benchmarks" / "sampler_cost.py"), "--workload", "gpu"],
                       capture_output=True, text=True, timeout=300, cwd=work)
    say("sampler_cost", "parts", "\n" + "\n".join(x for x in (p.stdout + p.stderr).splitlines()
                                                 if "Warning" not in x and "set_sync_debug_mode" not in x)[-2500:])


def check_call_overhead(work: Path) -> None:
    """What a traced call costs under nsys (benchmarks/call_overhead.py): the advice's estimate correction."""
    repo = Path(__file__).resolve().parents[1]
    p = subprocess.run([sys.executable, str(repo / "benchmarks" / "call_overhead.py"), "--calls", "20000",
                        "--repeat", "3", "--json", str(OUT / "call_overhead.json")],
                       capture_output=True, text=True, timeout=500, cwd=work)
    say("call_overhead", "output", "\n" + (p.stdout + p.stderr)[-3000:])


def check_emit_nvtx(work: Path) -> None:
    """Operator ranges by torch's emit_nvtx and by --ops's dispatch mode (scripts/emit_nvtx_samples.py)."""
    repo = Path(__file__).resolve().parents[1]
    out = work / "emit_nvtx"
    p = subprocess.run([sys.executable, str(repo / "scripts" / "emit_nvtx_samples.py"), str(out)],
                       capture_output=True, text=True, timeout=500, cwd=work)
    say("emit_nvtx", "output", "\n" + (p.stdout + p.stderr)[-3000:])
    if out.exists():
        tar = OUT / "emit_nvtx.tar.xz"
        subprocess.run(["tar", "-cJf", str(tar), "-C", str(out), *sorted(x.name for x in out.iterdir()
                                                                         if x.is_file())], check=True)
        say("emit_nvtx", "tar_bytes", tar.stat().st_size)


def check_latency(work: Path) -> None:
    """How long a profiled PyTorch cell blocks the notebook and when its profile is drawn (benchmarks/latency.py),
    default trace and -t cuda,nvtx, each against the blocking behaviour of before (--today)."""
    repo = Path(__file__).resolve().parents[1]
    for trace in os.environ.get("NM_LATENCY_TRACES", "default;cuda,nvtx").split(";"):
        tag = trace.replace(",", "_")
        argv = [sys.executable, str(repo / "benchmarks" / "latency.py"), "--workload", "torch",
                "--pause", os.environ.get("NM_LATENCY_PAUSE", "10"), "--json", str(OUT / f"latency_{tag}.json")]
        if os.environ.get("NM_LATENCY_TODAY", "1") == "1":  # 0: without the blocking run of before (half the time)
            argv.append("--today")
        if trace != "default":
            argv += ["--trace", trace]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=560, cwd=work)
        say("latency", tag, "\n" + "\n".join(x for x in (p.stdout + p.stderr).splitlines()
                                              if "WARNING" not in x)[-4000:])


def check_sampler_threads(work: Path) -> None:
    """benchmarks/sampler_threads.py (NM_SAMPLER_THREADS: its arguments): a planted cell with a Python thread of its
    own, plain, beside our sampler and under bare nsys."""
    repo = Path(__file__).resolve().parents[1]
    extra = shlex.split(os.environ.get("NM_SAMPLER_THREADS", ""))
    p = subprocess.run([sys.executable, str(repo / "benchmarks" / "sampler_threads.py"), *extra, "--json",
                        str(OUT / "sampler_threads.json")], capture_output=True, text=True, timeout=580, cwd=work)
    say("sampler_threads", "output", "\n" + (p.stdout + p.stderr)[-4000:])


def check_planted_ddp_timing(work: Path) -> None:
    """The DDP pair's gains again, without profiling (loop times, 4 runs each): $OUT/planted_ddp_timing.json."""
    repo = Path(__file__).resolve().parents[1]
    out = work / "planted_ddp_timing"
    p = subprocess.run([sys.executable, str(repo / "tests" / "data" / "planted" / "make_planted_reports.py"), str(out),
                        "--suite", "ddp", "--reps", "4", "--time-only"], capture_output=True, text=True, timeout=900)
    say("planted_ddp_timing", "output", "\n" + (p.stdout + p.stderr)[-3000:])
    if (out / "planted.json").exists():
        shutil.copy(out / "planted.json", OUT / "planted_ddp_timing.json")


def check_trace_cost(work: Path) -> None:
    """What each part of the tracing costs a planted workload's cell (NM_TRACE_COST: name:variant, default the
    foreach optimizer's fixed twin): its in-process cell time plain and under bare `nsys profile` with growing trace
    lists (sampling and context switches off, as nsight-magic runs it), NM_TRACE_COST_REPS runs each, interleaved:
    $OUT/trace_cost.json."""
    repo = Path(__file__).resolve().parents[1]
    name, variant = os.environ.get("NM_TRACE_COST", "optimizer_single_tensor:fixed").split(":")
    timed = [sys.executable, str(repo / "tests" / "data" / "planted" / "make_planted_reports.py"), "--time", name,
             variant]
    configs = {"plain": None, "none": "none", "nvtx": "nvtx", "cuda": "cuda", "cuda,nvtx": "cuda,nvtx",
               "cuda,nvtx,osrt": "cuda,nvtx,osrt"}
    got: dict[str, list[float]] = {c: [] for c in configs}
    for i in range(int(os.environ.get("NM_TRACE_COST_REPS", "3"))):
        for c, trace in configs.items():
            argv = timed if trace is None else ["nsys", "profile", f"--trace={trace}", "--sample=none",
                                                "--cpuctxsw=none", "--stats=false", "--force-overwrite=true",
                                                "-o", str(work / f"trace_cost_{i}"), *timed]
            p = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=work)
            lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
            if not lines:
                say("trace_cost", f"{c}_error", (p.stdout + p.stderr)[-1500:])
                continue
            got[c].append(json.loads(lines[-1])["cell_s"])
    for c, t in got.items():
        say("trace_cost", c, f"min {min(t):.4f} s, all {[round(x, 4) for x in t]}" if t else "no run")
    (OUT / "trace_cost.json").write_text(json.dumps({"workload": f"{name}:{variant}", "cell_s": got}, indent=1))


PHASE_CALLS = """
SELECT n.phase, s.value AS name, count(*) AS calls, sum(r."end" - r.start) AS ns
FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
JOIN (SELECT coalesce(n.text, t.value) AS phase, n.start, n."end" FROM NVTX_EVENTS n
      LEFT JOIN StringIds t ON t.id = n.textId
      WHERE coalesce(n.text, t.value) IN ('forward', 'zero_grad', 'backward', 'step')) n
  ON r.start >= n.start AND r."end" <= n."end"
GROUP BY 1, 2 ORDER BY 1, 3 DESC"""


PHASE_STEPS = 30


def check_trace_phases(work: Path) -> None:
    """Each phase's host time per step (scripts/trace_phases.py), plain and traced, NM_TRACE_PHASES_REPS runs each
    interleaved (the minimum kept), and the CUDA calls each traced phase recorded per step: $OUT/trace_phases.json."""
    import sqlite3

    repo = Path(__file__).resolve().parents[1]
    helps = subprocess.run(["nsys", "profile", "--help"], capture_output=True, text=True).stdout
    configs = {"plain": None, "cuda,nvtx": ["--trace=cuda,nvtx"]}
    if "--cuda-trace-all-apis" in helps:
        configs["cuda,nvtx all apis"] = ["--trace=cuda,nvtx", "--cuda-trace-all-apis=true"]
    else:
        say("trace_phases", "all_apis", "this nsys has no --cuda-trace-all-apis")
    result: dict = {}
    for spec in os.environ.get("NM_TRACE_PHASES", "optimizer_single_tensor:fixed").split(","):
        name, variant = spec.split(":")
        timed = [sys.executable, str(repo / "scripts" / "trace_phases.py"), name, variant, "--steps", str(PHASE_STEPS)]
        got: dict = {c: [] for c in configs}
        calls: dict = {}
        for i in range(int(os.environ.get("NM_TRACE_PHASES_REPS", "2"))):
            for c, extra in configs.items():
                base = work / f"phases_{name}_{variant}_{len(got[c])}_{c.replace(',', '_').replace(' ', '_')}"
                argv = timed if extra is None else ["nsys", "profile", *extra, "--sample=none", "--cpuctxsw=none",
                                                    "--stats=false", "--force-overwrite=true", "-o", str(base),
                                                    *timed]
                p = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=work)
                lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
                if not lines:
                    say("trace_phases", f"{spec} {c} error", (p.stdout + p.stderr)[-1500:])
                    continue
                got[c].append(json.loads(lines[-1]))
                if extra is not None and c not in calls:  # the calls of one recording per config
                    subprocess.run(["nsys", "export", "--type=sqlite", "--force-overwrite=true",
                                    f"--output={base}.sqlite", f"{base}.nsys-rep"], capture_output=True, timeout=600)
                    con = sqlite3.connect(f"{base}.sqlite")
                    calls[c] = {}
                    for phase, api, n, ns in con.execute(PHASE_CALLS):
                        calls[c].setdefault(phase, []).append([api, round(n / PHASE_STEPS, 1), round(ns / n / 1e3, 2)])
                    con.close()
        best = {c: {"loop_s": min(r["loop_s"] for r in runs),
                    "host_ms": {k: min(r["host_ms"][k] for r in runs) for k in runs[0]["host_ms"]}}
                for c, runs in got.items() if runs}
        for c, b in best.items():
            say("trace_phases", f"{spec} {c}", b)
        for c, by_phase in calls.items():
            for phase, rows in by_phase.items():
                say("trace_phases", f"{spec} {c} calls/step in {phase}", rows[:8])
        result[spec] = {"best": best, "all": got, "calls_per_step": calls}
    (OUT / "trace_phases.json").write_text(json.dumps(result, indent=1))


OPS_FIRST = r"""
import json, sys, time
import torch
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
from nsight_magic.inside.ops import EmitNvtx, OpRanges
how = sys.argv[1]
ctx = EmitNvtx() if how == "emit_nvtx" else OpRanges()
t = time.perf_counter()
if how == "dispatch warmed":
    ctx.warm()
out = {"warm_s": round(time.perf_counter() - t, 4), "dynamo_before": "torch._dynamo" in sys.modules}
for i in range(3):
    t = time.perf_counter()
    with ctx:
        y = torch.full((256, 256), 0.5, device="cuda") * 2
    torch.cuda.synchronize()
    out[f"op{i}_s"] = round(time.perf_counter() - t, 4)
out["dynamo_after"] = "torch._dynamo" in sys.modules
print(json.dumps(out))
"""


def check_ops_warm(work: Path) -> None:
    """What the first operators cost under each --ops way, in a fresh process each (no nsys)."""
    for how in ("dispatch", "dispatch warmed", "emit_nvtx"):
        p = subprocess.run([sys.executable, "-c", OPS_FIRST, how], capture_output=True, text=True, timeout=300,
                           cwd=work)
        lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
        say("ops_warm", how, json.loads(lines[-1]) if lines else (p.stdout + p.stderr)[-1500:])


def check_job(work: Path) -> None:
    """One nsys per rank, as on a cluster: torchrun ... --no-python nsys profile -o report.%q{RANK} python3 job.py.
    NM_JOB_VARIANT: the DDP GPU straggler's bad cell (default) or its fixed twin (fixed: $OUT/job_fixed.tar.xz);
    NM_JOB_RECIPE=0 leaves out `nsys recipe`; NM_JOB_TAG is added to the tar's name."""
    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo / "tests" / "data" / "planted"))
    from make_planted_reports import BY_NAME

    variant = os.environ.get("NM_JOB_VARIANT", "bad")
    job = work / "job"
    job.mkdir()
    script = work / "ddp_job.py"
    script.write_text(getattr(BY_NAME["ddp_gpu_straggler"], variant))
    nsys = shutil.which("nsys")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        "--no-python", nsys, "profile", "-t", "cuda,nvtx", "-s", "none", "--cpuctxsw=none",
                        "-o", str(job / "report.%q{RANK}"), sys.executable, str(script)],
                       capture_output=True, text=True, timeout=600, cwd=work)
    say("job", "record_rc", p.returncode)
    say("job", "record_wall_s", round(time.perf_counter() - t0, 1))
    if p.returncode:
        say("job", "record_tail", (p.stdout + p.stderr)[-3000:])
    reps = sorted(job.glob("report.*.nsys-rep"))
    say("job", "reports", [r.name for r in reps])
    for r in reps:
        subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o",
                        str(r.with_suffix(".sqlite")), str(r)], capture_output=True, timeout=300)
        q = subprocess.run([nsys, "stats", "--report", "cuda_gpu_kern_sum", "--format", "csv", "--output", "-",
                            str(r.with_suffix(".sqlite"))], capture_output=True, text=True, timeout=300)
        (job / (r.stem + ".cuda_gpu_kern_sum.csv")).write_text(q.stdout)
    for mode in ("concurrent", "none") if os.environ.get("NM_JOB_RECIPE", "1") != "0" else ():
        t0 = time.perf_counter()
        q = subprocess.run([nsys, "recipe", "nccl_gpu_time_util_map", "--input", str(job), "--mode", mode,
                            "--output", str(work / f"recipe_{mode}")], capture_output=True, text=True,
                           timeout=600, cwd=work)
        say("job", f"recipe_{mode}_rc", q.returncode)
        say("job", f"recipe_{mode}_wall_s", round(time.perf_counter() - t0, 2))
        say("job", f"recipe_{mode}_tail", (q.stdout + q.stderr)[-1500:])
        files = sorted(x for x in (work / f"recipe_{mode}").rglob("*") if x.is_file()) \
            if (work / f"recipe_{mode}").exists() else []
        say("job", f"recipe_{mode}_files", [str(x.relative_to(work)) for x in files][:30])
    from make_findings_reports import scrub_export

    for s in job.glob("*.sqlite"):
        scrub_export(s)
    keep = [x for x in job.iterdir() if x.suffix in (".sqlite", ".csv")]
    if (work / "recipe_concurrent").exists():
        shutil.copytree(work / "recipe_concurrent", job / "recipe_concurrent")
        keep.append(job / "recipe_concurrent")
    tag = ("" if variant == "bad" else f"_{variant}") + os.environ.get("NM_JOB_TAG", "")
    tar = OUT / f"job{tag}.tar.xz"
    subprocess.run(["tar", "-cJf", str(tar), "-C", str(job), *sorted(x.name for x in keep)], check=True)
    say("job", "tar_bytes", tar.stat().st_size)


def check_ops(work: Path) -> None:
    """%%nsys --ops on a GPU: its overhead (benchmarks/ops.py) and its GPU time per operator against
    torch.profiler's (scripts/ops_vs_profiler.py)."""
    repo = Path(__file__).resolve().parents[1]
    for batch in os.environ.get("NM_OPS_BATCHES", "32").split(","):  # 32: CPU-bound steps, 256: GPU-bound ones
        p = subprocess.run([sys.executable, str(repo / "benchmarks" / "ops.py"), "--device", "cuda", "--steps", "20",
                            "--repeat", os.environ.get("NM_OPS_REPEAT", "3"), "--batch", batch],
                           capture_output=True, text=True, timeout=900, cwd=work)
        say("ops", f"overhead_batch{batch}", "\n" + (p.stdout + p.stderr)[-2500:])
    if os.environ.get("NM_OPS_COMPARE", "1") == "0":
        return
    p = subprocess.run([sys.executable, str(repo / "scripts" / "ops_vs_profiler.py"), "--out", str(OUT)],
                       capture_output=True, text=True, timeout=900, cwd=work)
    say("ops", "vs_profiler", "\n" + (p.stdout + p.stderr)[-5000:])


def check_jobtime(work: Path) -> None:
    """open_job on the 2-rank H200 job of tests/data/job (a LocalCluster here) and its wall time."""
    import lzma

    repo = Path(__file__).resolve().parents[1]
    job_dir = work / "job"
    job_dir.mkdir(exist_ok=True)
    for src in (repo / "tests" / "data" / "job").glob("report.*.sqlite.xz"):
        with lzma.open(src) as f:
            (job_dir / src.name[:-3]).write_bytes(f.read())
    code = ("import time, sys\nsys.path.insert(0, %r)\nfrom nsight_magic import open_job\n"
            "if __name__ == '__main__':\n    t = time.perf_counter(); job = open_job(%r)\n"
            "    print('open_job wall s', round(time.perf_counter() - t, 3))\n    print(job.ranks.to_string())\n"
            "    print(job.bottleneck())\n") % (str(repo), str(job_dir))
    script = work / "jobtime.py"
    script.write_text(code)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=work)
    say("jobtime", "output", "\n" + (p.stdout + p.stderr)[-3000:])


def check_jobbench(work: Path) -> None:
    """benchmarks/job.py on this machine's cores (NM_JOB_RANKS ranks of 160k kernels made from the H100 export in
    tests/data; NM_JOB_WORKERS, comma-separated, one run each): open_job against the serial loops."""
    repo = Path(__file__).resolve().parents[1]
    say("jobbench", "cores", len(os.sched_getaffinity(0)))
    for w in os.environ.get("NM_JOB_WORKERS", "2").split(","):
        p = subprocess.run([sys.executable, str(repo / "benchmarks" / "job.py"), "--ranks",
                            os.environ.get("NM_JOB_RANKS", "24"), "--workers", w, "--src",
                            str(repo / "tests" / "data" / "nsys_h100_a_cuda_nvtx.sqlite"), "--workdir",
                            str(work / "jobbench")], capture_output=True, text=True, timeout=1200, cwd=work)
        say("jobbench", f"workers_{w}", "\n" + (p.stdout + p.stderr)[-1500:])


def check_analysis(work: Path) -> None:
    """benchmarks/analysis.py on this machine's cores: the cold read against bottleneck() + findings(), on traces
    made from a planted H100 report (NM_ANALYSIS_SRC, default launch_bound's bad variant) of NM_ANALYSIS_KERNELS."""
    import lzma

    repo = Path(__file__).resolve().parents[1]
    name = os.environ.get("NM_ANALYSIS_SRC", "launch_bound_bad")
    src = work / f"{name}.sqlite"
    with lzma.open(repo / "tests" / "data" / "planted" / f"{name}.sqlite.xz") as f:
        src.write_bytes(f.read())
    say("analysis", "cores", len(os.sched_getaffinity(0)))
    for n in os.environ.get("NM_ANALYSIS_KERNELS", "160000,1000000").split(","):
        p = subprocess.run([sys.executable, str(repo / "benchmarks" / "analysis.py"), "--src", str(src), "--kernels",
                            n, "--repeat", "3", "--workdir", str(work / "analysis"), "--inputs"],
                           capture_output=True, text=True, timeout=900, cwd=work)
        say("analysis", f"kernels_{n}", "\n" + (p.stdout + p.stderr)[-1500:])


INPLACE_CELLS = [
    """import torch, torch.nn as nn, nvtx
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True)
model = nn.TransformerEncoder(layer, num_layers=6).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(32, 128, 512, device="cuda")
def step():
    loss = model(x).square().mean()
    opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
for _ in range(3):
    step()
torch.cuda.synchronize()
""",
    """%%nsys --name inplace-e2e
for i in range(10):
    with nvtx.annotate(f"step {i}"):
        step()
""",
    "print('adam_steps', int(opt.state[next(iter(model.parameters()))]['step']))",
]


def check_inplace(work: Path) -> None:
    """The in-place kernel (issues 44, 60): a transformer cell profiled in the kernel itself, executed by nbclient
    with the kernelspec `nsight-magic kernel install` writes; its kernels against `nsys stats` on the same report
    and the optimizer's step count after it; then benchmarks/inplace.py (blocked, drawn, not-recording cost, GPU
    memory by nvidia-smi, the big-model case and the subprocess guard, the processes left after shutdown, %%ncu in
    place against a fresh process): $OUT/inplace_torch.json.  NM_INPLACE_REPEAT, NM_INPLACE_BIG (0: no big case),
    NM_INPLACE_TIMEOUT."""
    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo))
    subprocess.run([sys.executable, "-m", "nsight_magic.cli", "kernel", "install", "--prefix", "/tmp/site"],
                   check=True, timeout=120)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in INPLACE_CELLS]
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="nsight-magic", allow_errors=True,
                   resources={"metadata": {"path": str(work)}}).execute()
    say("inplace", "notebook_wall_s", round(time.perf_counter() - t0, 1))
    say("inplace", "profiled_cell_output", cell_text(nb.cells[1])[-1200:])
    say("inplace", "after", cell_text(nb.cells[2]).strip())
    from nsight_magic import open_report

    folder = sorted((work / "nsight-profiles").glob("inplace-e2e-*"))[-1]
    rep = open_report(folder)
    ours = rep.kernel_summary()
    say("inplace", "kernels", len(rep.kernels))
    say("inplace", "timings", json.loads((folder / "timings.json").read_text()))
    p = subprocess.run(["nsys", "stats", "--report", "cuda_gpu_kern_sum", "--format", "csv", "--force-export=false",
                        "--output", "-", str(folder / "report.sqlite")], capture_output=True, text=True, timeout=300)
    import io

    import pandas as pd

    text = p.stdout[p.stdout.find("Time (%)"):] if "Time (%)" in p.stdout else ""
    stats = pd.read_csv(io.StringIO(text)) if text else pd.DataFrame()
    if len(stats):
        theirs = dict(zip(stats["Name"], stats["Instances"]))
        mine = dict(zip(ours["name"], ours["count"]))
        say("inplace", "stats_kernels", int(stats["Instances"].sum()))
        say("inplace", "stats_total_ns", int(stats["Total Time (ns)"].sum()))
        say("inplace", "our_total_ns", int(ours["total_ns"].sum()))
        say("inplace", "per_name_counts_equal", mine == theirs)
    else:
        say("inplace", "stats_output", (p.stdout + p.stderr)[-1500:])
    shutil.copy(folder / "report.sqlite", OUT / "inplace_e2e_report.sqlite")
    b = subprocess.run([sys.executable, str(repo / "benchmarks" / "inplace.py"), "--workload", "torch",
                        "--repeat", os.environ.get("NM_INPLACE_REPEAT", "3"),
                        "--big", os.environ.get("NM_INPLACE_BIG", "0.65"), "--ncu",
                        "--json", str(OUT / "inplace_torch.json")], capture_output=True, text=True,
                       timeout=int(os.environ.get("NM_INPLACE_TIMEOUT", "560")), cwd=work)
    say("inplace", "benchmark", "\n" + "\n".join(x for x in (b.stdout + b.stderr).splitlines()
                                                  if "WARNING" not in x)[-5000:])


RECORDING_SETUP = """import torch, torch.nn as nn, nvtx, json, os, tempfile
torch.manual_seed(0)
model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(2048, 2048), nn.ReLU())]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(512, 2048, device="cuda")
ckpt = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
def bookkeeping(step):
    stats = {f"w{i}": [float(v) for v in range(2000)] for i in range(40)}
    return len(json.dumps(stats))
model(x).sum().backward(); torch.cuda.synchronize()
"""
RECORDING_CELL = """kept = []
for step in range(12):
    with nvtx.annotate(f"step {step}"):
        out = model(x)
        loss = out.square().mean()
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
        kept.append(model(x))          # an output kept with its graph: memory grows
        bookkeeping(step)
        if step % 4 == 0:
            torch.save(model.state_dict(), ckpt)
torch.cuda.synchronize()
"""


def check_recording(work: Path) -> None:
    """What recording Python samples and device memory costs and what it holds (issues 45, 48): nsys's switches
    (--probe), benchmarks/recording_cost.py on the GPU and CPU workloads, then one cell recorded as %%nsys records
    it (fresh with and without native symbols, in a warm session by nbclient, in the in-place kernel):
    $OUT/recording.tar.xz (made whatever failed)."""
    repo = Path(__file__).resolve().parents[1]
    keep = work / "recording"
    keep.mkdir()
    sys.path.insert(0, str(repo))
    sys.path.insert(0, str(repo / "tests" / "data"))
    try:
        _recording_parts(work, keep, repo)
    except Exception as e:  # noqa: BLE001 - what was recorded still comes back
        say("recording", "error", f"{type(e).__name__}: {e}")
    finally:
        tar = OUT / "recording.tar.xz"
        subprocess.run(["tar", "-cJf", str(tar), "-C", str(work), "recording"], check=True)
        say("recording", "tar_bytes", tar.stat().st_size)


def _recording_parts(work: Path, keep: Path, repo: Path) -> None:
    from make_findings_reports import scrub_export

    from nsight_magic.options import NsysOptions
    from nsight_magic.run import run_nsys

    for wl, variants, probe in (("gpu", os.environ.get("NM_RC_GPU", "base,samples,samples_nosym,history"), []),
                                ("cpu", os.environ.get("NM_RC_CPU", "base,samples,samples_nosym"), [])):
        if not variants:
            continue
        p = subprocess.run([sys.executable, str(repo / "benchmarks" / "recording_cost.py"), *probe, "--workloads", wl,
                            "--variants", variants, "--repeat", os.environ.get("NM_RC_REPEAT", "2"), "--steps", "30",
                            "--keep", str(keep), "--json", str(keep / f"recording_cost_{wl}.json")],
                           capture_output=True, text=True, timeout=420, cwd=work)
        say("recording", f"cost_{wl}", "\n" + (p.stdout + p.stderr)[-3000:])
    for name, extra in (("fresh-recording", ()), ("fresh-nosym-recording", ("--resolve-symbols=false",))):
        r = run_nsys(RECORDING_CELL, NsysOptions(name=name, directory=str(work / "profiles"), fresh=True,
                                                 render=False, quiet=True, memory=True, nsys_args=extra),
                     setup_sources=[RECORDING_SETUP], namespace={})
        say("recording", name, {"status": r.status, "notes": r.notes, "messages": r.messages, "timings": r.timings})
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in
                ["%load_ext nsight_magic", "%%nsight_setup\n" + RECORDING_SETUP,
                 "%%nsys --name warm-recording --no-render\n" + RECORDING_CELL,
                 "%%nsys --name warm2-recording --no-render\n" + RECORDING_CELL,
                 "%%nsys --name warm-nosamples-recording --no-render --no-samples\n" + RECORDING_CELL]]
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(work / "profiles")}}).execute()
    for i in (2, 3, 4):
        say("recording", f"warm_output_{i}", cell_text(nb.cells[i])[-700:])
    subprocess.run([sys.executable, "-m", "nsight_magic.cli", "kernel", "install", "--prefix", "/tmp/site"],
                   check=True, timeout=120)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in
                [RECORDING_SETUP, "%%nsys --name inplace-recording --no-render\n" + RECORDING_CELL]]
    try:
        NotebookClient(nb, timeout=600, kernel_name="nsight-magic", allow_errors=True,
                       resources={"metadata": {"path": str(work / "profiles")}}).execute()
        say("recording", "inplace_output", cell_text(nb.cells[1])[-1500:])
    except Exception as e:  # noqa: BLE001
        say("recording", "inplace_error", f"{type(e).__name__}: {e}")
    roots = [work / "profiles" / "nsight-profiles", work / "profiles"]
    for folder in sorted(f for root in roots if root.exists() for f in root.iterdir() if f.is_dir()
                         and "recording" in f.name):
        dest = keep / folder.name
        dest.mkdir()
        for name in ("report.sqlite", "memory_snapshot.pickle", "run.json", "command.txt", "timings.json",
                     "tool-output.txt", "stderr.txt", "stdout.txt"):
            if (folder / name).exists():
                shutil.copy(folder / name, dest / name)
        if (dest / "report.sqlite").exists():
            scrub_export(dest / "report.sqlite")
        say("recording", folder.name, sorted(x.name for x in folder.iterdir()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="nsys,capture,ncu")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    for section in args.only.split(","):
        t0 = time.perf_counter()
        try:
            {"nsys": check_nsys, "capture": check_capture, "ncu": check_ncu, "notebook": check_notebook,
             "findings": check_findings, "optimize": check_optimize, "autonvtx": check_autonvtx,
             "warm": check_warm, "ddp": check_ddp, "ranks1gpu": check_ranks1gpu, "planted": check_planted,
             "planted_ddp": check_planted_ddp, "planted_ddp_timing": check_planted_ddp_timing,
             "planted_second": check_planted_second, "planted_third": check_planted_third,
             "planted_fourth": check_planted_fourth, "planted_fifth": check_planted_fifth,
             "call_overhead": check_call_overhead,
             "emit_nvtx": check_emit_nvtx, "latency": check_latency,
             "ops": check_ops, "jobtime": check_jobtime, "jobbench": check_jobbench, "analysis": check_analysis,
             "trace_cost": check_trace_cost, "trace_phases": check_trace_phases,
             "ops_warm": check_ops_warm, "inplace": check_inplace,
             "recording": check_recording, "planted_sixth": check_planted_sixth,
             "planted_seventh": check_planted_seventh,
             "sampler_cost": check_sampler_cost, "sampler_threads": check_sampler_threads,
             "kernel_life": check_kernel_life,
             "job": check_job}[section](work)
        except Exception as e:  # keep going: one broken section must not hide the others
            say(section, "error", f"{type(e).__name__}: {e}")
        say(section, "section_wall_s", round(time.perf_counter() - t0, 1))
        # after each section: a call cut short by its time limit still brings back what was done
        (OUT / "gpu_check.json").write_text(json.dumps(_str_keys(RESULTS), indent=2, default=str))


def _str_keys(value):
    """numpy keys (a groupby's) are not JSON keys: str() them rather than lose the whole file."""
    if isinstance(value, dict):
        return {k if isinstance(k, (str, int, float, bool)) else str(k): _str_keys(v) for k, v in value.items()}
    return value


if __name__ == "__main__":
    main()
