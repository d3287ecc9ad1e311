"""Record the planted diagnosis suite: workloads with one known bottleneck each and a fixed twin.

    python tests/data/planted/make_planted_reports.py OUTDIR [--suite single|ddp|second|...|sixth]
                                                      [--only a,b] [--reps 2]

Run it on a machine with NVIDIA GPUs, PyTorch and Nsight Systems 2023+ on PATH (the lent H100 for `single`, two
GPUs for `ddp`; scripts/gpu-check.sh --only planted,planted_ddp sets that machine up).  For each workload and each
variant (`bad`: the planted cause, `fixed`: the same work without it) it

1. times the cell WITHOUT the profiler: a fresh `python` (or `torchrun` with --nproc) runs the setup code, then
   the cell, and prints the cell's wall time (CUDA synchronised at both ends); `--reps` fresh processes per
   variant, alternating bad and fixed, the minimum kept;
2. profiles the cell as `%%nsys` would (nsight_magic.run.run_nsys: setup outside the capture, the cell inside
   nsight-magic's range, default trace cuda,nvtx,osrt or NM_PLANTED_TRACE's list, a fresh process), exports
   SQLite and scrubs environment strings from it (as make_findings_reports.scrub_export);
3. writes OUTDIR/planted.json: per workload the expected verdict kind and first finding, the times of both
   variants and the measured gain (bad - fixed), and per report its file name.

The reports and planted.json are the fixtures of tests/test_analysis_diagnosis.py (tests/data/planted/).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # make_findings_reports (scrub_export)


SIDECARS = ("python_samples.json", "memory_snapshot.pickle", "run.json")


@dataclass(frozen=True)
class Planted:
    name: str
    cause: str          # what was planted, in words
    expect_kind: str    # report.bottleneck().kind of the bad variant
    expect_rule: str | None  # the first finding's rule on the bad variant (None: no finding >= medium expected)
    setup: str
    bad: str
    fixed: str | None   # None: the workload is its own clean case (GPU-bound)
    setup_fixed: str | None = None  # the fixed variant's setup, when it differs
    nproc: int | None = None
    ops: str | None = None  # profiled with %%nsys --ops (names / shapes): the advice names the operator
    reps: int | None = None  # fresh timing processes per variant, where the suite's default is too few for the gain
    expect_code: str | None = None    # a word the first finding's `code` (the Python samples' summary) must hold
    expect_memory: str | None = None  # the memory finding the bad variant must raise (issue 48)
    nsys_memory: bool = False         # recorded with --memory too (nsys's own device-memory record)
    expect_growth: str | None = None  # growing_steps's kind of growth: "work" (inputs grow) or "collection"


MODEL = """
import time, numpy as np, torch, torch.nn as nn, nvtx
torch.manual_seed(0)
"""
# TF32 on: the GEMMs use tensor cores, so that the only cause in a workload is the planted one (fp32_gemm has it
# off; the first single-GPU set was re-recorded with it, its fixed twins raised fp32_gemm before)
TF32 = MODEL + "torch.backends.cuda.matmul.allow_tf32 = True\ntorch.backends.cudnn.allow_tf32 = True\n"

INPUT_SETUP = TF32 + """
class SlowDataset(torch.utils.data.Dataset):
    '''Images "decoded and augmented" on the CPU, one sample at a time.'''
    def __len__(self):
        return 32 * 40
    def __getitem__(self, i):
        img = np.random.default_rng(i).standard_normal((3, 64, 64)).astype(np.float32)
        for _ in range(8):
            img = np.tanh(img * 1.01 + 0.1)
        return torch.from_numpy(img), i % 10
# enough GPU work per batch (about 4 ms; the data takes about 10) that with the data ready the loop is GPU-bound,
# not launch-bound; channels_last, so that cuDNN needs no layout transposes
model = nn.Sequential(nn.Conv2d(3, 192, 3, padding=1), nn.ReLU(), nn.Conv2d(192, 192, 3, padding=1), nn.ReLU(),
                      nn.Conv2d(192, 192, 3, padding=1), nn.ReLU(), nn.Conv2d(192, 192, 3, padding=1), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(192, 10)).cuda()
model = model.to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
model(torch.randn(32, 3, 64, 64, device="cuda").contiguous(memory_format=torch.channels_last)).sum().backward()
torch.cuda.synchronize()
"""

INPUT_LOOP = """
for i, (x, y) in enumerate(loader):
    with nvtx.annotate("train step"):
        x, y = x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)
        x = x.contiguous(memory_format=torch.channels_last)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i % 10 == 0:
            print(f"step {i}: loss {loss.item():.3f}")
torch.cuda.synchronize()
"""

PAGEABLE_SETUP = TF32 + """
w = [torch.randn(4096, 4096, device="cuda") / 64 for _ in range(3)]
host = [torch.randn(4096, 4096) for _ in range(2)]          # 64 MiB each, pageable
(host[0].cuda() @ w[0]).sum().item()
"""

PAGEABLE_FIXED_SETUP = PAGEABLE_SETUP + """
host = [h.pin_memory() for h in host]                        # pinned once
side = torch.cuda.Stream()
"""

PAGEABLE_BAD = """
for i in range(30):
    with nvtx.annotate("iteration"):
        x = host[i % 2].to("cuda", non_blocking=True)
        for m in w * 6:
            x = torch.relu(x @ m)
        s = x.sum()
torch.cuda.synchronize()
"""

PAGEABLE_FIXED = """
with torch.cuda.stream(side):
    nxt = host[0].to("cuda", non_blocking=True)
for i in range(30):
    with nvtx.annotate("iteration"):
        torch.cuda.current_stream().wait_stream(side)
        x = nxt
        x.record_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):                         # the next batch copies while this one computes
            nxt = host[(i + 1) % 2].to("cuda", non_blocking=True)
        for m in w * 6:
            x = torch.relu(x @ m)
        s = x.sum()
torch.cuda.synchronize()
"""

SMALL_MLP_SETUP = MODEL + """
model = nn.Sequential(*[layer for _ in range(12) for layer in (nn.Linear(256, 256), nn.ReLU())]).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(64, 256, device="cuda")
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""

SYNC_CPU_BAD = """
for i in range(300):
    with nvtx.annotate("batch"):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        last = loss.item()                  # planted: a host synchronisation every step
        torch.cuda.synchronize()
torch.cuda.synchronize()
"""

SYNC_CPU_FIXED = """
for i in range(300):
    with nvtx.annotate("batch"):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
torch.cuda.synchronize()
last = loss.item()
"""

SYNC_STALL_SETUP = TF32 + """
w = torch.randn(4096, 4096, device="cuda") / 64
def bookkeeping():
    '''CPU work of the step that does not need the GPU's results (schedules, logging, ...).'''
    s = 0.0
    for k in range(60000):
        s += k * 0.5
    return s
(w @ w).sum().item()
"""

SYNC_STALL_BAD = """
for i in range(40):
    with nvtx.annotate("step"):
        bookkeeping()
        y = w
        for _ in range(16):
            y = torch.tanh(y @ w)
        torch.cuda.synchronize()            # planted: the CPU waits for the GPU before its next bookkeeping
torch.cuda.synchronize()
"""

SYNC_STALL_FIXED = SYNC_STALL_BAD.replace(
    "        torch.cuda.synchronize()            # planted: the CPU waits for the GPU before its next bookkeeping\n",
    "")

LAUNCH_SETUP = MODEL + """
layers = nn.Sequential(*[nn.Linear(64, 64) for _ in range(100)]).cuda().eval()
x = torch.randn(8, 64, device="cuda")
with torch.no_grad():
    layers(x)
torch.cuda.synchronize()
"""

LAUNCH_FIXED_SETUP = LAUNCH_SETUP + """
static_x = x.clone()
graph = torch.cuda.CUDAGraph()
with torch.no_grad():
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            layers(static_x)
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        static_y = layers(static_x)
torch.cuda.synchronize()
"""

LAUNCH_BAD = """
with torch.no_grad():
    for i in range(300):
        y = layers(x)                       # 100 tiny matrix products, launched one by one
torch.cuda.synchronize()
"""

LAUNCH_FIXED = """
for i in range(300):
    graph.replay()                          # the same 100 kernels, launched as one CUDA graph
torch.cuda.synchronize()
"""

GPU_SETUP = MODEL + """
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
(a @ b).sum().item()
"""

GPU_BAD = """
for i in range(200):
    c = a @ b
torch.cuda.synchronize()                    # waits for useful GPU work: costs nothing
"""

DDP_CELL = """
import os, time, torch, torch.nn as nn, torch.distributed as dist, nvtx
rank = int(os.environ["RANK"])
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
dist.init_process_group("nccl")
torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = True   # as the single-GPU set: the planted straggler is the only cause
torch.backends.cudnn.allow_tf32 = True
model = nn.Sequential(nn.Linear(2048, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                      nn.Linear(4096, 2048)).cuda()
ddp = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
x = torch.randn(16384, 2048, device="cuda")  # enough compute (TF32) that the fixed twin hides its all-reduces
extra = torch.randn(4096, 4096, device="cuda") / 64
torch.cuda.synchronize()
_loop_t0 = time.perf_counter()
for i in range(30):
    with nvtx.annotate(f"iteration {i}"):
        SLOW_CPU
        SLOW_GPU
        loss = ddp(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
torch.cuda.synchronize()
_loop_s = time.perf_counter() - _loop_t0  # the loop alone: NCCL's start-up varies by seconds from run to run
dist.barrier()
dist.destroy_process_group()
"""


# ---- the second set (issue 28): causes outside the first rules, each with its fix ------------------------------

ALLOC_SETUP = TF32 + """
model = nn.Sequential(*[layer for _ in range(8) for layer in (nn.Linear(2048, 2048), nn.GELU())]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(4096, 2048, device="cuda")
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""

ALLOC_BAD = """
for i in range(60):
    with nvtx.annotate("step"):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.empty_cache()            # planted: the cached blocks go back to the driver, to be allocated again
torch.cuda.synchronize()
"""

FP32_SETUP = MODEL + """
model = nn.Sequential(nn.Linear(4096, 8192), nn.GELU(), nn.Linear(8192, 8192), nn.GELU(),
                      nn.Linear(8192, 4096)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(4096, 4096, device="cuda")
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""

FP32_FIXED_SETUP = MODEL + "torch.backends.cuda.matmul.allow_tf32 = True\n" + FP32_SETUP[len(MODEL):]

FP32_LOOP = """
for i in range(12):
    with nvtx.annotate("step"):
        loss = model(x).square().mean()     # fp32 matrix products without tensor cores (TF32 off, the default)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
torch.cuda.synchronize()
"""

MASK_SETUP = TF32 + """
model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
x = torch.randn(16384, 1024, device="cuda")
h = model(x); h[h > 0].mean().backward(); opt.step(); torch.cuda.synchronize()
"""

MASK_LOOP = """
for i in range(60):
    with nvtx.annotate("step"):
        h = model(x)
        LOSS
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
torch.cuda.synchronize()
"""
MASK_BAD = MASK_LOOP.replace("LOSS", "loss = h[h > 0].mean()              # planted: a boolean mask: its size is "
                                     "read back by the host")
MASK_FIXED = MASK_LOOP.replace("LOSS", "loss = torch.where(h > 0, h, 0.0).sum() / (h > 0).sum()")

ITEM_SETUP = TF32 + """
model = nn.Sequential(*[layer for _ in range(4) for layer in (nn.Linear(2048, 2048), nn.ReLU())]).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
x = torch.randn(16384, 2048, device="cuda")  # GPU work of a step (about 7 ms) well above the host's
def bookkeeping():
    # host work of a step that needs no GPU result (schedules, logging, the data loader's metrics ...)
    s = 0.0
    for k in range(25000):
        s += k * 0.5
    return s
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""

ITEM_LOOP = """
total = torch.zeros((), device="cuda")
for i in range(60):
    with nvtx.annotate("step"):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        CHECK
        bookkeeping()                       # host work of the step that needs no GPU result
torch.cuda.synchronize()
"""
ITEM_BAD = ITEM_LOOP.replace("CHECK", "if loss.item() > 1e6:               # planted: .item() waits for the GPU's step\n"
                                      "            print('diverged')")
ITEM_FIXED = ITEM_LOOP.replace("CHECK", "total += loss.detach()               # checked once, after the loop")

FOREACH_SETUP = TF32 + """
class Gated(nn.Module):
    # an MLP with 300 small per-feature gates (per-task or per-feature biases): many small parameters, each updated
    # on its own by a single-tensor optimizer
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(*[layer for _ in range(12) for layer in (nn.Linear(2048, 2048), nn.ReLU())])
        self.gates = nn.ParameterList([nn.Parameter(torch.zeros(2048)) for _ in range(300)])
        self.register_buffer("mix", torch.randn(300) / 300)
    def forward(self, x):
        return self.body(x) * (1 + self.mix @ torch.stack(list(self.gates)))
model = Gated().cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=FOREACH)
# 16k rows: about 21 ms of GPU work a step against 12.5 ms of host work with foreach (scripts/trace_phases.py on the
# H100); at 8k rows (11 ms) the fixed twin was itself paced by the host, with no room for what tracing adds
x = torch.randn(16384, 2048, device="cuda")
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""

TRAIN_LOOP = """
for i in range(STEPS):
    with nvtx.annotate("step"):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=NONE)
        loss.backward()
        opt.step()
torch.cuda.synchronize()
"""

HOSTCODE_SETUP = TF32 + """
import math
def lr_at(step, n=40, samples=150_000):
    '''A cosine schedule averaged over many points, in pure Python: tens of ms of the host per call.'''
    return 1e-4 * sum(0.5 * (1 + math.cos(math.pi * (step + i / samples) / n)) for i in range(samples)) / samples
# about 5 ms of TF32 matrix work a step: far less than the schedule's host time, so that the GPU waits
model = nn.Sequential(*[layer for _ in range(4) for layer in (nn.Linear(4096, 4096), nn.ReLU())]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(4096, 4096, device="cuda")
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""
HOSTCODE_FIXED_SETUP = HOSTCODE_SETUP + "LRS = [lr_at(s) for s in range(40)]  # once, before the loop\n"
HOSTCODE_LOOP = """
for step in range(40):
    with nvtx.annotate("step"):
        for g in opt.param_groups:
            g["lr"] = LR
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
torch.cuda.synchronize()
"""

ZERO_SETUP = TF32 + """
model = nn.Sequential(*[layer for _ in range(8) for layer in (nn.Linear(4096, 4096), nn.ReLU())]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-5)
x = torch.randn(2048, 4096, device="cuda")
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""

EXTRA_SETUP = TF32 + """
model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096)).cuda()
x = torch.randn(2048, 4096, device="cuda")
"""

EXTRA_LOOP = """
with torch.no_grad():
    for i in range(30):
        with nvtx.annotate("step"):
            MAKE
            y = model(x * scale)
torch.cuda.synchronize()
"""
EXTRA_BAD = EXTRA_LOOP.replace("MAKE", "scale = torch.full((2048, 4096), 0.5).to('cuda')   # planted: made on the "
                                       "CPU, then copied")
EXTRA_FIXED = EXTRA_LOOP.replace("MAKE", "scale = torch.full((2048, 4096), 0.5, device='cuda')")

PYLOOP_SETUP = TF32 + """
x = torch.randn(512, 65536, device="cuda")
torch.tanh(x).sum().item()
"""

# one operation per row, so that the fixed twin is one kernel a step (an elementwise chain would be fusion's cause)
PYLOOP_BAD = """
for step in range(20):
    with nvtx.annotate("step"):
        out = torch.empty_like(x)
        for i in range(x.shape[0]):         # planted: a Python loop over the rows, a tiny kernel (and a copy) each
            out[i] = torch.tanh(x[i])
torch.cuda.synchronize()
"""

PYLOOP_FIXED = """
for step in range(20):
    with nvtx.annotate("step"):
        out = torch.tanh(x)
torch.cuda.synchronize()
"""

CONV_SETUP = TF32 + """
torch.backends.cudnn.benchmark = True
model = nn.Sequential(*[m for _ in range(4) for m in (nn.Conv2d(128, 128, 3, padding=1, bias=BIAS),
                                                       nn.BatchNorm2d(128), nn.ReLU())]).cuda()
model = model.to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(64, 128, 56, 56, device="cuda").to(memory_format=torch.channels_last)
for _ in range(2):
    model(x).square().mean().backward(); opt.step()
torch.cuda.synchronize()
"""

ODD_SETUP = MODEL + """
d = DIM
model = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d), nn.GELU(), nn.Linear(d, d)).cuda().bfloat16()
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(8192, d, device="cuda", dtype=torch.bfloat16)
model(x).float().square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""


# ---- the third set: causes no rule was written for when they were planted (how the advice generalises) --------
FP64_SETUP = TF32 + """
data = np.random.default_rng(0).standard_normal((8192, 2048))   # numpy's default: float64
model = nn.Sequential(*[layer for _ in range(4) for layer in (nn.Linear(2048, 2048), nn.ReLU())]).cuda()
model = model.to(DTYPE)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.from_numpy(data).to("cuda", DTYPE)
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""

METRICS_SETUP = TF32 + """
import torch.nn.functional as F
model = nn.Sequential(*[layer for _ in range(4) for layer in (nn.Linear(2048, 2048), nn.ReLU())],
                      nn.Linear(2048, 1000)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
x = torch.randn(16384, 2048, device="cuda")
y = torch.randint(0, 1000, (16384,), device="cuda")
y_cpu = y.cpu()
def bookkeeping():
    # host work of a step that needs no GPU result (the loader's next batch, schedules ...)
    s = 0.0
    for k in range(25000):
        s += k * 0.5
    return s
F.cross_entropy(model(x), y).backward(); opt.step(); torch.cuda.synchronize()
"""
METRICS_LOOP = """
accs = []
for i in range(60):
    with nvtx.annotate("step"):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        ACC
        bookkeeping()
torch.cuda.synchronize()
"""
METRICS_BAD = METRICS_LOOP.replace("ACC", "accs.append((logits.argmax(1).cpu() == y_cpu).float().mean())  # planted: "
                                          "the predictions copied to the host every step")
METRICS_FIXED = METRICS_LOOP.replace("ACC", "accs.append((logits.argmax(1) == y).float().mean())")

ROUNDTRIP_SETUP = TF32 + """
model = nn.Sequential(*[layer for _ in range(4) for layer in (nn.Linear(2048, 2048), nn.ReLU())]).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
x = torch.randn(16384, 2048, device="cuda")
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""
ROUNDTRIP_LOOP = """
for i in range(40):
    with nvtx.annotate("step"):
        h = model(x)
        WEIGHTS
        loss = (h.square().mean(1) * w).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
torch.cuda.synchronize()
"""
ROUNDTRIP_BAD = ROUNDTRIP_LOOP.replace("WEIGHTS", "a = h.detach().cpu().numpy()           # planted: per-row weights "
                                                  "computed in numpy, then sent back\n"
                                                  "        w = torch.from_numpy(np.exp(-np.abs(a).mean(1))).to('cuda')")
ROUNDTRIP_FIXED = ROUNDTRIP_LOOP.replace("WEIGHTS", "w = torch.exp(-h.detach().abs().mean(1))")


RESPAWN_SETUP = TF32 + """
class Ready(torch.utils.data.Dataset):
    # samples that cost nothing to make: what is measured is the loader's workers, not the data
    def __len__(self):
        return 64 * 8
    def __getitem__(self, i):
        return torch.full((3, 64, 64), float(i % 7)), i % 10
model = nn.Sequential(nn.Conv2d(3, 192, 3, padding=1), nn.ReLU(), nn.Conv2d(192, 192, 3, padding=1), nn.ReLU(),
                      nn.Conv2d(192, 192, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(192, 10)).cuda().to(memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
model(torch.randn(64, 3, 64, 64, device="cuda").contiguous(memory_format=torch.channels_last)).sum().backward()
torch.cuda.synchronize()
"""
RESPAWN_LOOP = """
for epoch in range(6):
    for x, y in LOADER:
        with nvtx.annotate("train step"):
            x = x.to("cuda", non_blocking=True).contiguous(memory_format=torch.channels_last)
            loss = nn.functional.cross_entropy(model(x), y.to("cuda", non_blocking=True))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
torch.cuda.synchronize()
"""
RESPAWN_BAD = RESPAWN_LOOP.replace("LOADER", "torch.utils.data.DataLoader(Ready(), batch_size=64, num_workers=8, "
                                             "pin_memory=True)")  # planted: 8 new workers every epoch
RESPAWN_FIXED_SETUP = RESPAWN_SETUP + ("loader = torch.utils.data.DataLoader(Ready(), batch_size=64, num_workers=8, "
                                       "pin_memory=True, persistent_workers=True)\nnext(iter(loader))\n")

ATTN_SETUP = TF32 + """
import torch.nn.functional as F
B, H, S, D = 8, 16, 2048, 64
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
def attention(q, k, v):
    ATTN
attention(q, k, v).float().square().mean().backward(); torch.cuda.synchronize()
"""
ATTN_LOOP = """
for i in range(20):
    with nvtx.annotate("step"):
        attention(q, k, v).float().square().mean().backward()
torch.cuda.synchronize()
"""

ROWS_SETUP = TF32 + """
model = nn.Sequential(*[layer for _ in range(4) for layer in (nn.Linear(2048, 2048), nn.ReLU())],
                      nn.Linear(2048, 32)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
x = torch.randn(16384, 2048, device="cuda")
rows = [[float((i * 7 + j) % 13) for j in range(32)] for i in range(16384)]   # targets as Python lists
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""
ROWS_LOOP = """
for i in range(30):
    with nvtx.annotate("step"):
        TARGET
        loss = (model(x) - target).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
torch.cuda.synchronize()
"""

CKPT_SETUP = TF32 + """
import os, tempfile
model = nn.Sequential(*[layer for _ in range(8) for layer in (nn.Linear(2048, 2048), nn.ReLU())]).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
x = torch.randn(8192, 2048, device="cuda")
ckpt = os.path.join(tempfile.mkdtemp(), "model.pt")
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""
CKPT_LOOP = """
for step in range(30):
    with nvtx.annotate("step"):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        SAVE
torch.cuda.synchronize()
torch.save(model.state_dict(), ckpt)
"""

PERSAMPLE_SETUP = TF32 + """
model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 10)).cuda()
model.eval()
batch = torch.randn(256, 512, device="cuda")
with torch.no_grad():
    model(batch); model(batch[0:1])
torch.cuda.synchronize()
"""
PERSAMPLE_BAD = """
with torch.no_grad():
    for step in range(10):
        with nvtx.annotate("step"):
            out = torch.cat([model(batch[i:i + 1]) for i in range(len(batch))])   # planted: one sample at a time
torch.cuda.synchronize()
"""
PERSAMPLE_GRAPH_SETUP = PERSAMPLE_SETUP + """
static_batch = batch.clone()
graph = torch.cuda.CUDAGraph()
with torch.no_grad():
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            torch.cat([model(static_batch[i:i + 1]) for i in range(len(static_batch))])
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        static_out = torch.cat([model(static_batch[i:i + 1]) for i in range(len(static_batch))])
torch.cuda.synchronize()
"""
PERSAMPLE_GRAPH_FIXED = """
for step in range(10):
    with nvtx.annotate("step"):
        graph.replay()                  # the same 256 batch-1 passes, launched as one CUDA graph
torch.cuda.synchronize()
"""
PERSAMPLE_FIXED = """
with torch.no_grad():
    for step in range(10):
        with nvtx.annotate("step"):
            out = model(batch)
torch.cuda.synchronize()
"""


# ---- the fourth set: causes planted before any rule was looked at for them (expectations written first) ----------

SMI_SETUP = TF32 + """
import subprocess
# about 5 ms of TF32 matrix work a step
model = nn.Sequential(*[layer for _ in range(4) for layer in (nn.Linear(4096, 4096), nn.ReLU())]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(4096, 4096, device="cuda")
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""
SMI_LOOP = """
log = []
for step in range(20):
    with nvtx.annotate("step"):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        LOG
torch.cuda.synchronize()
"""
SMI_BAD = SMI_LOOP.replace("LOG", "log.append(subprocess.run(['nvidia-smi', '--query-gpu=memory.used', "
                                  "'--format=csv,noheader'], capture_output=True, text=True).stdout)  # planted")
SMI_FIXED = SMI_LOOP.replace("LOG", "log.append(torch.cuda.memory_allocated())")

CPULAYER_SETUP = TF32 + """
# about 4 ms of TF32 matrix work a step on the GPU (the fixed twin is GPU-bound)
model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 1024)).cuda()
head = nn.Linear(1024, 1024)   # DEVICE
opt = torch.optim.SGD(list(model.parameters()) + list(head.parameters()), lr=1e-4)
x = torch.randn(8192, 1024, device="cuda")
def forward():
    h = model(x)
    return HEAD
forward().square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""
CPULAYER_LOOP = """
for step in range(10):
    with nvtx.annotate("step"):
        loss = forward().square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
torch.cuda.synchronize()
"""

LAYERNORM_SETUP = MODEL + """
D = 4096
class ManualLN(nn.Module):
    def __init__(self):
        super().__init__()
        self.w, self.b = nn.Parameter(torch.ones(D)), nn.Parameter(torch.zeros(D))
    def forward(self, h):
        mu = h.mean(-1, keepdim=True)
        var = (h - mu).square().mean(-1, keepdim=True)
        return (h - mu) / torch.sqrt(var + 1e-5) * self.w + self.b
model = nn.Sequential(*[m for _ in range(4) for m in (NORM, nn.Linear(D, D), nn.GELU())]).cuda().to(torch.bfloat16)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(8192, D, device="cuda", dtype=torch.bfloat16)
model(x).float().square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""


GC_SETUP = TF32 + """
import gc
# a dataset's index kept in Python objects (2M records), as a notebook holds one: a full collection walks them all
meta = [{"id": i, "path": f"images/{i:08d}.jpg", "label": i % 1000} for i in range(2_000_000)]
# about 5 ms of TF32 matrix work a step
model = nn.Sequential(*[layer for _ in range(4) for layer in (nn.Linear(4096, 4096), nn.ReLU())]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(4096, 4096, device="cuda")
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""
GC_LOOP = """
for step in range(20):
    with nvtx.annotate("step"):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        COLLECT
torch.cuda.synchronize()
"""

LOAD_SETUP = TF32 + """
import os, tempfile
path = os.path.join(tempfile.mkdtemp(), "batch.npy")
np.save(path, np.random.default_rng(0).standard_normal((4096, 4096), dtype=np.float32))   # 64 MiB
model = nn.Sequential(*[layer for _ in range(4) for layer in (nn.Linear(4096, 4096), nn.ReLU())]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
X = torch.from_numpy(np.load(path)).cuda()
model(X).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""
LOAD_LOOP = """
for step in range(20):
    with nvtx.annotate("step"):
        BATCH
        loss = model(xb).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
torch.cuda.synchronize()
"""


# ---- the fifth set: causes planted before any rule was looked at for them (expectations written first) -----------

LAYOUT_SETUP = TF32 + """
torch.backends.cudnn.benchmark = True
# a ResNet-like stage trained under bf16 autocast (about 6 ms of GPU work a step in channels_last); FORMAT
model = nn.Sequential(*[m for _ in range(4) for m in (nn.Conv2d(128, 128, 3, padding=1, bias=False),
                                                       nn.BatchNorm2d(128), nn.ReLU())]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(128, 128, 56, 56, device="cuda")
LAYOUT
def train_step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).float().square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
for _ in range(2):
    train_step()
torch.cuda.synchronize()
"""
LAYOUT_LOOP = """
for i in range(12):
    with nvtx.annotate("step"):
        train_step()
torch.cuda.synchronize()
"""

GROWCAT_SETUP = TF32 + """
# evaluation of an 8-layer MLP over 80 batches (about 1 ms of TF32 work each), keeping every batch's outputs (4096 x
# 2048 fp32, 32 MiB each)
model = nn.Sequential(*[layer for _ in range(8) for layer in (nn.Linear(2048, 2048), nn.ReLU())]).cuda().eval()
x = torch.randn(4096, 2048, device="cuda")
with torch.no_grad():
    model(x)
torch.cuda.synchronize()
"""
GROWCAT_BAD = """
with torch.no_grad():
    outs = torch.empty(0, 2048, device="cuda")
    for i in range(80):
        with nvtx.annotate("step"):
            outs = torch.cat([outs, model(x)])      # planted: the whole history copied again every step
torch.cuda.synchronize()
"""
GROWCAT_FIXED = """
with torch.no_grad():
    outs = []
    for i in range(80):
        with nvtx.annotate("step"):
            outs.append(model(x))
    outs = torch.cat(outs)                          # once, after the loop
torch.cuda.synchronize()
"""


GIL_SETUP = TF32 + """
import threading, multiprocessing as mp
# about 5 ms of TF32 matrix work a step
model = nn.Sequential(*[layer for _ in range(4) for layer in (nn.Linear(4096, 4096), nn.ReLU())]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(4096, 4096, device="cuda")
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
def summarise(stop):
    # a metrics aggregator in pure Python, running beside the loop for as long as it runs
    acc = 0.0
    while not stop.is_set():
        for k in range(10_000):
            acc += k * 0.5
"""
GIL_LOOP = """
WORKER
worker.start()
for step in range(20):
    with nvtx.annotate("step"):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
torch.cuda.synchronize()
stop.set(); worker.join()
"""


SMALLCOPY_SETUP = TF32 + """
# about 2 ms of TF32 matrix work a step
model = nn.Sequential(*[layer for _ in range(4) for layer in (nn.Linear(2048, 2048), nn.ReLU())]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(8192, 2048, device="cuda")
# per-example side inputs kept on the CPU as 256 small tensors (8 KiB each)
feats = [torch.randn(2048) for _ in range(256)]
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""
SMALLCOPY_LOOP = """
for step in range(20):
    with nvtx.annotate("step"):
        FEATS
        loss = (model(x)[:256] * f).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
torch.cuda.synchronize()
"""


EMA_SETUP = FOREACH_SETUP.replace("FOREACH", "True") + """
import copy
# an exponential moving average of the weights (as diffusion and self-supervised training keep): 324 tensors
ema = copy.deepcopy(model).requires_grad_(False)
ema_params, params = list(ema.parameters()), list(model.parameters())
"""
EMA_LOOP = """
for i in range(30):
    with nvtx.annotate("step"):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            EMA
torch.cuda.synchronize()
"""


ANOMALY_SETUP = TF32 + """
# about 6 ms of TF32 matrix work a step
model = nn.Sequential(*[layer for _ in range(8) for layer in (nn.Linear(2048, 2048), nn.GELU())]).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(8192, 2048, device="cuda")
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""
ANOMALY_LOOP = """
ANOMALY
for step in range(20):
    with nvtx.annotate("step"):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
torch.cuda.synchronize()
torch.autograd.set_detect_anomaly(False)
"""


RECOMPILE_SETUP = TF32 + """
# an MLP block over token sequences of varying length (a language model's batches), compiled
model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
cmodel = torch.compile(model, dynamic=DYNAMIC)
# 8 lengths, cycled; 512 sequences a batch: about 4 ms of GPU work a step, so that the fixed twin is GPU-bound
xs = [torch.randn(512, 128 + 32 * (i % 8), 512, device="cuda") for i in range(24)]
cmodel(torch.randn(512, 64, 512, device="cuda")).square().mean().backward(); torch.cuda.synchronize()  # compiled
"""
RECOMPILE_LOOP = """
for x in xs:
    with nvtx.annotate("step"):
        loss = cmodel(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
torch.cuda.synchronize()
"""


def _ddp(cpu: str = "pass", gpu: str = "pass") -> str:
    return DDP_CELL.replace("SLOW_CPU", cpu).replace("SLOW_GPU", gpu)


WORKLOADS = [
    # the loaders are made before the cell, as a notebook keeps them across epochs; the fixed one's workers are
    # persistent and started (8 processes start in about 0.2 s, which a 40-step cell would otherwise pay each time)
    Planted("input_starved", "slow __getitem__ (CPU augmentation), DataLoader without workers; fixed: 8 persistent "
            "workers", "input", "input_wait",
            INPUT_SETUP + "loader = torch.utils.data.DataLoader(SlowDataset(), batch_size=32)\n", INPUT_LOOP,
            INPUT_LOOP, INPUT_SETUP + "loader = torch.utils.data.DataLoader(SlowDataset(), batch_size=32, "
            "num_workers=8, pin_memory=True, persistent_workers=True)\nnext(iter(loader))\n"),
    Planted("pageable_copy", "64 MiB host-to-device copy from pageable memory each step, on the compute stream",
            "copy", "cuda_memcpy_async", PAGEABLE_SETUP, PAGEABLE_BAD, PAGEABLE_FIXED, PAGEABLE_FIXED_SETUP),
    Planted("sync_cpu_bound", "loss.item() + torch.cuda.synchronize() every step of a CPU-bound loop", "cpu",
            None, SMALL_MLP_SETUP, SYNC_CPU_BAD, SYNC_CPU_FIXED),
    Planted("sync_stall", "torch.cuda.synchronize() every step between CPU bookkeeping and GPU work", "sync",
            "cuda_api_sync", SYNC_STALL_SETUP, SYNC_STALL_BAD, SYNC_STALL_FIXED),
    Planted("launch_bound", "100 tiny layers launched one by one (no CUDA graph)", "cpu", "launch_bound",
            LAUNCH_SETUP, LAUNCH_BAD, LAUNCH_FIXED, LAUNCH_FIXED_SETUP),
    Planted("gpu_bound", "bf16 matrix products, one synchronize at the end", "gpu", None, GPU_SETUP, GPU_BAD, None),
    Planted("ddp_cpu_straggler", "rank 0 sleeps 30 ms per step on the CPU (DDP, NCCL, model built in the cell)",
            "communication", "collective_wait", "", _ddp(cpu="if rank == 0: time.sleep(0.03)"), _ddp(), nproc=2),
    Planted("ddp_gpu_straggler", "rank 1 runs 24 extra 4096x4096 products per step on its GPU", "communication",
            "collective_wait", "",
            _ddp(gpu="if rank == 1:\n            for _ in range(24): extra = torch.tanh(extra @ extra)"),
            _ddp(), nproc=2),
]
WORKLOADS += [
    Planted("allocator_churn", "torch.cuda.empty_cache() every step: cudaFree waits for the GPU, cudaMalloc again",
            "cpu", "allocator_churn", ALLOC_SETUP, ALLOC_BAD, ALLOC_BAD.replace(
                "        torch.cuda.empty_cache()            # planted: the cached blocks go back to the driver, to be "
                "allocated again\n", "")),
    Planted("fp32_gemm", "fp32 matrix products without tensor cores (TF32 off), GPU-bound; fixed: TF32", "gpu",
            "fp32_gemm", FP32_SETUP, FP32_LOOP, FP32_LOOP, FP32_FIXED_SETUP),
    Planted("mask_sync", "boolean-mask indexing in the loss (h[h > 0]): the host waits for nonzero's size each step",
            "sync", "implicit_sync", MASK_SETUP, MASK_BAD, MASK_FIXED),
    Planted("item_sync", "`if loss.item() > ...` every step: the host waits for the step's GPU work before its own "
            "bookkeeping, which could have overlapped it", "sync", "implicit_sync", ITEM_SETUP, ITEM_BAD, ITEM_FIXED,
            reps=6),
    Planted("optimizer_single_tensor", "Adam(foreach=False) on 324 parameters (300 of them small gates): kernels "
            "per parameter", "cpu", "optimizer_single_tensor", FOREACH_SETUP.replace("FOREACH", "False"),
            TRAIN_LOOP.replace("STEPS", "30").replace("NONE", "True"),
            TRAIN_LOOP.replace("STEPS", "30").replace("NONE", "True"), FOREACH_SETUP.replace("FOREACH", "True")),
    Planted("zero_grad_not_none", "opt.zero_grad(set_to_none=False): 512 MB of gradients zeroed, then accumulated",
            "gpu", "zero_grad_not_none", ZERO_SETUP, TRAIN_LOOP.replace("STEPS", "40").replace("NONE", "False"),
            TRAIN_LOOP.replace("STEPS", "40").replace("NONE", "True")),
    Planted("extra_copy", "a 32 MiB tensor filled on the CPU each step, then copied to the GPU (--ops)", "copy",
            "extra_copy", EXTRA_SETUP, EXTRA_BAD, EXTRA_FIXED, ops="names"),
    Planted("python_loop", "a Python loop over a tensor's 512 rows, two small kernels each (tanh, the copy into "
            "out)", "cpu", "python_loop",
            PYLOOP_SETUP, PYLOOP_BAD, PYLOOP_FIXED),
    Planted("conv_bias_bn", "Conv2d(bias=True) before BatchNorm2d: a bias added, then normalised away", "gpu",
            "conv_bias_bn", CONV_SETUP.replace("BIAS", "True"), TRAIN_LOOP.replace("STEPS", "10").replace(
                "NONE", "True"), TRAIN_LOOP.replace("STEPS", "10").replace("NONE", "True"),
            CONV_SETUP.replace("BIAS", "False")),
    Planted("host_code", "a learning-rate schedule computed in pure Python every step (about 35 ms of host code on "
            "the H100's host that launches nothing); fixed: computed once before the loop", "cpu", "host_code",
            HOSTCODE_SETUP,
            HOSTCODE_LOOP.replace("LR", "lr_at(step)"), HOSTCODE_LOOP.replace("LR", "LRS[step]"),
            HOSTCODE_FIXED_SETUP),
    Planted("gemm_dims_odd", "bf16 Linear layers of width 4100 (not a multiple of 8); fixed: 4104", "gpu",
            "gemm_alignment", ODD_SETUP.replace("DIM", "4100"), TRAIN_LOOP.replace("STEPS", "30").replace(
                "NONE", "True").replace("model(x).square()", "model(x).float().square()"),
            TRAIN_LOOP.replace("STEPS", "30").replace("NONE", "True").replace("model(x).square()",
                                                                              "model(x).float().square()"),
            ODD_SETUP.replace("DIM", "4104")),
]
WORKLOADS += [
    Planted("fp64_compute", "a model and its inputs in float64 (the inputs came from numpy); fixed: float32 with "
            "TF32", "gpu", "fp64_compute", FP64_SETUP.replace("DTYPE", "torch.float64"),
            TRAIN_LOOP.replace("STEPS", "20").replace("NONE", "True"),
            TRAIN_LOOP.replace("STEPS", "20").replace("NONE", "True"), FP64_SETUP.replace("DTYPE", "torch.float32")),
    Planted("cpu_metrics", "accuracy computed on the host every step: 16k predictions copied to it, the host waits "
            "for the step before its own work", "sync", "implicit_sync", METRICS_SETUP, METRICS_BAD, METRICS_FIXED),
    Planted("numpy_roundtrip", "per-row loss weights computed in numpy every step: 128 MiB to the host and back, the "
            "host waits (first read as pageable copies, then implicit_sync: one round trip through the host, "
            "host_round_trip)", "copy", "host_round_trip", ROUNDTRIP_SETUP, ROUNDTRIP_BAD, ROUNDTRIP_FIXED),
    Planted("loader_respawn", "a DataLoader with 8 workers made anew every epoch (6 epochs of 8 batches): the "
            "workers start again each time; fixed: persistent workers, started before the cell", "input",
            "input_wait", RESPAWN_SETUP, RESPAWN_BAD, RESPAWN_LOOP.replace("LOADER", "loader"), RESPAWN_FIXED_SETUP),
    Planted("manual_attention", "attention written out (q @ k^T, softmax, @ v: a 2048 x 2048 score matrix per "
            "head); fixed: F.scaled_dot_product_attention", "gpu", "attention_unfused",
            ATTN_SETUP.replace("ATTN", "a = (q @ k.transpose(-2, -1)) * D ** -0.5\n    return a.softmax(-1) @ v"),
            ATTN_LOOP, ATTN_LOOP, ATTN_SETUP.replace("ATTN", "return F.scaled_dot_product_attention(q, k, v)")),
    Planted("rows_to_tensor", "targets built each step from Python lists (16k rows of 32 floats) with "
            "torch.tensor; fixed: built once (planted as host code; the host builds the data of a 2 MiB copy: input)",
            "input", "input_wait", ROWS_SETUP,
            ROWS_LOOP.replace("TARGET", "target = torch.tensor(rows, device='cuda')   # planted: from lists, every "
                                        "step"),
            ROWS_LOOP.replace("TARGET", "target = TARGET"),
            ROWS_SETUP + "TARGET = torch.tensor(rows, device='cuda')\n"),
    Planted("checkpoint_every_step", "torch.save of the model's state every step (8 layers of 2048 x 2048, 134 MB); "
            "fixed: once, after the loop (planted as implicit_sync: the copies of the state; most of the time is "
            "serialising and writing it)", "cpu", "host_code", CKPT_SETUP,
            CKPT_LOOP.replace("SAVE", "torch.save(model.state_dict(), ckpt)       # planted: a checkpoint every step"),
            CKPT_LOOP.replace("SAVE", "pass"), expect_code="save"),
    Planted("per_sample_loop", "inference one sample at a time (256 forward passes of batch 1 a step); fixed: the "
            "batch at once (planted as python_loop, whose loops are of elementwise kernels)", "cpu", "launch_bound",
            PERSAMPLE_SETUP, PERSAMPLE_BAD, PERSAMPLE_FIXED),
    Planted("per_sample_graphs", "inference one sample at a time, as per_sample_loop; fixed instead with a CUDA graph "
            "of the same 256 batch-1 passes (launch_bound's first advice: the launches go, the tiny kernels stay)",
            "cpu", "launch_bound", PERSAMPLE_SETUP, PERSAMPLE_BAD, PERSAMPLE_GRAPH_FIXED, PERSAMPLE_GRAPH_SETUP),
]
WORKLOADS += [
    Planted("smi_logging", "GPU memory logged by running nvidia-smi (a subprocess) every step; fixed: "
            "torch.cuda.memory_allocated()", "cpu", "host_wait", SMI_SETUP, SMI_BAD, SMI_FIXED),
    Planted("cpu_layer", "the model's last layer left on the CPU: activations to the host, an 8192 x 1024 x 1024 "
            "product and its backward there, and back, every step; fixed: the layer on the GPU (planted as host_code; "
            "on that host the two 32 MiB copies each way take about half the step: read first as input, then as "
            "pageable copies at 0.46x; the round trip is the cause)", "copy", "host_round_trip",
            CPULAYER_SETUP.replace("HEAD", "head(h.cpu()).cuda()").replace("# DEVICE", "# planted: never moved"),
            CPULAYER_LOOP, CPULAYER_LOOP,
            CPULAYER_SETUP.replace("HEAD", "head(h)").replace("   # DEVICE", ".cuda()")),
    Planted("manual_layernorm", "LayerNorm written out (mean, variance, subtract, divide, scale, shift) in a bf16 "
            "MLP of width 4096; fixed: nn.LayerNorm", "gpu", "elementwise_fusion",
            LAYERNORM_SETUP.replace("NORM", "ManualLN()"), TRAIN_LOOP.replace("STEPS", "30").replace("NONE", "True"),
            TRAIN_LOOP.replace("STEPS", "30").replace("NONE", "True"),
            LAYERNORM_SETUP.replace("NORM", "nn.LayerNorm(D)")),
    Planted("gc_every_step", "gc.collect() every step, with 2M Python records held (a dataset's index): a full "
            "collection walks them all; fixed: no explicit collection", "cpu", "host_code", GC_SETUP,
            GC_LOOP.replace("COLLECT", "gc.collect()                     # planted"), GC_LOOP.replace("COLLECT", "pass")),
    Planted("load_every_step", "the batch read from a .npy file every step in the main process (64 MiB, page cache), "
            "then copied to the GPU; fixed: read and copied once, before the loop", "input", "input_wait",
            LOAD_SETUP, LOAD_LOOP.replace("BATCH", "xb = torch.from_numpy(np.load(path)).cuda()   # planted"),
            LOAD_LOOP.replace("BATCH", "xb = X")),
]
WORKLOADS += [
    Planted("nchw_autocast", "a conv stage (4 x Conv-BN-ReLU, 128 channels, 56 x 56, batch 128) trained under bf16 "
            "autocast in the default NCHW layout; fixed: model and input in channels_last", "gpu", "layout_transpose",
            LAYOUT_SETUP.replace("FORMAT", "NCHW, the default").replace("LAYOUT", "pass"), LAYOUT_LOOP, LAYOUT_LOOP,
            LAYOUT_SETUP.replace("FORMAT", "channels_last").replace(
                "LAYOUT", "model = model.to(memory_format=torch.channels_last)\n"
                          "x = x.contiguous(memory_format=torch.channels_last)")),
    Planted("growing_cat", "an evaluation loop that grows its outputs with torch.cat every step (80 batches of 32 "
            "MiB: the whole history copied again each time, quadratic); fixed: a list, one torch.cat after the loop "
            "(planted as gpu-bound before any rule could name it, a kernel whose time grows step after step; the "
            "ever larger allocations keep the GPU waiting on cudaMalloc a quarter of the loop: cpu)", "cpu",
            "growing_steps", GROWCAT_SETUP, GROWCAT_BAD, GROWCAT_FIXED),
    Planted("gil_thread", "a metrics aggregator in pure Python run in a thread beside the loop: it holds the GIL, "
            "the loop's thread waits for it; fixed: the same aggregator in a process", "cpu", "host_wait", GIL_SETUP,
            GIL_LOOP.replace("WORKER", "stop = threading.Event()\nworker = threading.Thread(target=summarise, "
                                       "args=(stop,), daemon=True)   # planted"),
            GIL_LOOP.replace("WORKER", "stop = mp.get_context('fork').Event()\nworker = mp.get_context('fork')"
                                       ".Process(target=summarise, args=(stop,), daemon=True)")),
    Planted("small_copies", "256 per-example tensors of 8 KiB moved to the GPU one by one every step "
            "(torch.stack([t.cuda() for t in feats])); fixed: stacked on the CPU, pinned, one non_blocking copy "
            "(planted as cuda_memcpy_async, the copies being pageable; read as launch_bound, whose CUDA graphs would "
            "not help: the number of copies is the cause, pinned or not: small_copies)",
            "cpu", "small_copies", SMALLCOPY_SETUP,
            SMALLCOPY_LOOP.replace("FEATS", "f = torch.stack([t.cuda() for t in feats])   # planted: 256 copies"),
            SMALLCOPY_LOOP.replace("FEATS", "f = torch.stack(feats).pin_memory().cuda(non_blocking=True)")),
    Planted("ema_loop", "an EMA of the weights updated parameter by parameter in Python (pe.copy_(0.999 * pe + "
            "0.001 * p) for 324 tensors: four small kernels each); fixed: torch._foreach_lerp_ (planted as cpu: "
            "the loop's 1,300 tiny kernels keep the GPU 84% busy, over the 80% of a GPU-bound verdict, and are a "
            "third of the gain)", "gpu", "python_loop",
            EMA_SETUP,
            EMA_LOOP.replace("EMA", "for pe, p in zip(ema_params, params):   # planted\n"
                                    "                pe.copy_(0.999 * pe + 0.001 * p)"),
            EMA_LOOP.replace("EMA", "torch._foreach_lerp_(ema_params, params, 0.001)")),
    Planted("anomaly_mode", "torch.autograd.set_detect_anomaly(True) left on while training (a debugging switch: "
            "every backward node's output is checked for NaN); fixed: off", "sync", "implicit_sync", ANOMALY_SETUP,
            ANOMALY_LOOP.replace("ANOMALY", "torch.autograd.set_detect_anomaly(True)   # planted: left on"),
            ANOMALY_LOOP.replace("ANOMALY", "torch.autograd.set_detect_anomaly(False)")),
    Planted("recompile_shapes", "torch.compile(model, dynamic=False) fed sequences of 8 lengths: a recompilation for "
            "each new length inside the loop; fixed: dynamic=True (compiled once, before)", "cpu", "host_code",
            RECOMPILE_SETUP.replace("DYNAMIC", "False"), RECOMPILE_LOOP, RECOMPILE_LOOP,
            RECOMPILE_SETUP.replace("DYNAMIC", "True")),
]
METRICS_SETUP = TF32 + """
import json
model = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(1024, 2048, device="cuda")
history = {f"layer{i}.{k}": [] for i in range(100) for k in ("mean", "std", "norm", "grad")}
def log_metrics(step):
    # every metric of the run so far, serialised for a dashboard: pure Python, a few ms and growing
    for k, v in history.items():
        v.append(step * 0.5)
    return json.dumps(history)
model(x).sum().backward(); torch.cuda.synchronize()
"""
METRICS_LOOP = """
for step in range(40):
    with nvtx.annotate("step"):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        LOG
torch.cuda.synchronize()
"""

AUTOTUNE_SETUP = TF32 + """
torch.backends.cudnn.benchmark = BENCHMARK
model = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
                      nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(64, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
model(torch.randn(8, 3, 32, 32, device="cuda")).sum().backward(); torch.cuda.synchronize()
"""
AUTOTUNE_LOOP = """
for step in range(12):
    with nvtx.annotate("step"):
        side = 96 + 8 * step          # images of a new size every step (multi-scale training)
        xb = torch.randn(32, 3, side, side, device="cuda")
        loss = model(xb).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
torch.cuda.synchronize()
"""

PREFIX_SETUP = TF32 + """
mlp = nn.Sequential(nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 4096), nn.GELU(), nn.Linear(4096, 4096)).cuda()
seq = torch.randn(64, 512, 4096, device="cuda")
with torch.no_grad():
    mlp(seq[:, :8]); torch.cuda.synchronize()
"""
PREFIX_LOOP = """
outs = []
with torch.no_grad():
    for t in range(16, 513, 16):   # one new position every step, 32 steps
        with nvtx.annotate("step"):
            STEP
torch.cuda.synchronize()
"""

SMIGPU_SETUP = TF32 + """
import subprocess
w = [torch.randn(8192, 8192, device="cuda") / 90 for _ in range(4)]
x = torch.randn(8192, 8192, device="cuda")
for m in w:
    x = torch.tanh(x @ m)
torch.cuda.synchronize()
"""
SMIGPU_LOOP = """
log = []
h = x
for step in range(20):
    with nvtx.annotate("step"):
        for _ in range(4):                 # about 45 ms of GPU work queued per step
            for m in w:
                h = torch.tanh(h @ m)
        LOG
total = h.sum().item()
torch.cuda.synchronize()
"""

EVALGRAPH_SETUP = TF32 + """
model = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(4096, 4096), nn.ReLU())]).cuda()
batches = [torch.randn(2048, 4096, device="cuda") for _ in range(4)]
model(batches[0]).sum().backward(); model.zero_grad(set_to_none=True); torch.cuda.synchronize()
"""
EVALGRAPH_LOOP = """
outputs, _mem = [], []
GRAD
    for step in range(12):
        with nvtx.annotate("step"):
            outputs.append(model(batches[step % 4]))   # kept for the metrics after the loop
        _mem.append(torch.cuda.memory_allocated())
accuracy = sum(float(o.mean()) for o in outputs) / len(outputs)
torch.cuda.synchronize()
"""

OOM_SETUP = TF32 + """
model = nn.Sequential(nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 4096)).cuda()
x = torch.randn(4096, 4096, device="cuda")
model(x).sum().backward(); model.zero_grad(set_to_none=True); torch.cuda.synchronize()
"""
OOM_LOOP = """
cache, _mem = [], []
for step in range(1000):
    with nvtx.annotate("step"):
        y = model(x)
        KEEP
        _mem.append(torch.cuda.memory_allocated())
torch.cuda.synchronize()
"""

FRAG_SETUP = MODEL + """
SETTINGS
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
"""
FRAG_LOOP = """
_mem = []
keep = []
for step in range(24):
    with nvtx.annotate("step"):
        # activations of changing sizes, most freed at once: the caching allocator splits its segments and cannot
        # reuse the holes for the next, larger requests
        temps = [torch.empty((20 + 3 * ((step * 7 + i) % 11)) << 20, dtype=torch.uint8, device="cuda")
                 for i in range(24)]
        keep.append(temps[::6])
        del temps
        big = torch.empty((64 + 8 * step) << 20, dtype=torch.uint8, device="cuda")
        del big
        _mem.append(torch.cuda.memory_allocated())
torch.cuda.synchronize()
"""

JITTER_SETUP = TF32 + """
import random
model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(4096, 1024, device="cuda")
def jitter_scales(n):
    # a per-sample augmentation factor drawn in pure Python (eight small jitters each)
    out = []
    for _ in range(n):
        s = 1.0
        for _ in range(8):
            s *= 1.0 + (random.random() - 0.5) * 0.01
        out.append(s)
    return out
model(x).square().mean().backward(); torch.cuda.synchronize()
"""
JITTER_LOOP = """
for step in range(40):
    with nvtx.annotate("step"):
        SCALES
        loss = model(x * scales.unsqueeze(1)).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
torch.cuda.synchronize()
"""

WORKLOADS += [
    Planted("metrics_json", "every metric of the run serialised to JSON every step by a function of the setup "
            "(log_metrics: pure Python, a few ms, growing); fixed: every 10 steps", "cpu", "host_code",
            METRICS_SETUP, METRICS_LOOP.replace("LOG", "log_metrics(step)       # planted"),
            METRICS_LOOP.replace("LOG", "if step % 10 == 9:\n            log_metrics(step)"),
            expect_code="log_metrics"),
    Planted("python_jitter", "a per-sample augmentation factor drawn in pure Python every step by a function of "
            "the setup (jitter_scales: 4,096 x 8 random numbers); fixed: drawn on the GPU with torch.rand", "cpu",
            "host_code", JITTER_SETUP,
            JITTER_LOOP.replace("SCALES", "scales = torch.tensor(jitter_scales(4096), device='cuda')   # planted"),
            JITTER_LOOP.replace("SCALES", "scales = (1 + (torch.rand(4096, 8, device='cuda') - 0.5) * 0.01).prod(1)"),
            expect_code="jitter_scales"),
    Planted("cudnn_autotune", "torch.backends.cudnn.benchmark = True while the images change size every step: "
            "cuDNN tries every convolution algorithm again for each new shape, inside the loop; fixed: "
            "benchmark off", "sync", "autotune",
            AUTOTUNE_SETUP.replace("BENCHMARK", "True   # planted"), AUTOTUNE_LOOP, AUTOTUNE_LOOP,
            AUTOTUNE_SETUP.replace("BENCHMARK", "False")),
    Planted("growing_prefix", "a position-wise MLP run again over the whole growing prefix at every step to get "
            "the newest position's output (32 steps, 16 to 512 positions); fixed: the newest position only (the "
            "same outputs)", "gpu", "growing_steps", PREFIX_SETUP,
            PREFIX_LOOP.replace("STEP", "outs.append(mlp(seq[:, :t])[:, -1])   # planted"),
            PREFIX_LOOP.replace("STEP", "outs.append(mlp(seq[:, t - 1]))"), expect_growth="work"),
    Planted("smi_gpu_bound", "nvidia-smi run every step of a GPU-bound loop (about 45 ms of queued GPU work a "
            "step): the plain run hides it behind the queue, under nsys every spawned process is slowed; fixed: "
            "no nvidia-smi (the gain is small: no finding at medium or high is right)", "gpu", None,
            SMIGPU_SETUP, SMIGPU_LOOP.replace("LOG", "log.append(subprocess.run(['nvidia-smi', "
                                                     "'--query-gpu=memory.used', '--format=csv,noheader'], "
                                                     "capture_output=True, text=True).stdout)   # planted"),
            SMIGPU_LOOP.replace("LOG", "pass")),
    Planted("eval_keeps_graph", "an evaluation loop without torch.no_grad() that keeps each output: every output "
            "keeps its autograd graph (the activations of 8 layers), memory grows every step; fixed: under "
            "torch.no_grad()", "gpu", None, EVALGRAPH_SETUP,
            EVALGRAPH_LOOP.replace("GRAD", "if True:                 # planted: gradients recorded"),
            EVALGRAPH_LOOP.replace("GRAD", "with torch.no_grad():"),
            expect_memory="memory_growth", nsys_memory=True),
    Planted("oom_cell", "a cache of every step's output (64 MiB each) kept until the GPU is full: the cell fails "
            "with OutOfMemoryError; fixed: only the last output kept", "gpu", None, OOM_SETUP,
            OOM_LOOP.replace("KEEP", "cache.append(y)          # planted: never trimmed")
            .replace("range(1000)", "range(4000)"),   # 250 GiB asked: fails on any GPU lent
            OOM_LOOP.replace("KEEP", "cache = [y]").replace("range(1000)", "range(100)"),
            expect_memory="out_of_memory"),
    Planted("fragmentation", "tensors of changing sizes allocated and freed in bulk every step, a few kept, then a "
            "larger one: the caching allocator's segments fill with holes it cannot reuse (reserved far above "
            "allocated); fixed: expandable_segments:True", "cpu", None,
            FRAG_SETUP.replace("SETTINGS", "pass"), FRAG_LOOP, FRAG_LOOP,
            FRAG_SETUP.replace("SETTINGS", "torch.cuda.memory._set_allocator_settings('expandable_segments:True')"),
            expect_memory="memory_fragmentation"),
]
CONSTANT_SETUP = TF32 + """
model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 1024)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(8192, 1024, device="cuda")
table = torch.rand(8192, 2048)          # a constant per-position scale, made on the host once (64 MiB, pageable)
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""
CONSTANT_LOOP = """
HOIST
for step in range(40):
    with nvtx.annotate("step"):
        UPLOAD
        loss = (model(x) * scale[:, :1024]).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
torch.cuda.synchronize()
"""
CACHE_SETUP = TF32 + """
model = nn.Sequential(*[layer for _ in range(4) for layer in (nn.Linear(1024, 1024), nn.ReLU())]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(2048, 1024, device="cuda")
model(x).square().mean().backward(); opt.step(); torch.cuda.synchronize()
"""
CACHE_LOOP = """
for step in range(100):
    with nvtx.annotate("step"):
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        FREE
torch.cuda.synchronize()
"""

WORKLOADS += [
    Planted("constant_upload", "a constant host tensor (64 MiB, pageable) uploaded again every step with "
            ".to('cuda'); fixed: uploaded once before the loop (pinning it would save a fraction)", "copy",
            "cuda_memcpy_async", CONSTANT_SETUP,
            CONSTANT_LOOP.replace("HOIST\n", "").replace("UPLOAD", "scale = table.to('cuda')   # planted: every step"),
            CONSTANT_LOOP.replace("HOIST", "scale = table.to('cuda')").replace("        UPLOAD\n", "")),
    Planted("empty_cache_small", "torch.cuda.empty_cache() every step of a small MLP's training step (about 1 ms "
            "of GPU work): each cudaFree waits for the GPU, then the blocks are allocated again; fixed: no "
            "empty_cache", "cpu", "allocator_churn", CACHE_SETUP,
            CACHE_LOOP.replace("FREE", "torch.cuda.empty_cache()   # planted"),
            CACHE_LOOP.replace("        FREE\n", "")),
]
SEVENTH = ["constant_upload", "empty_cache_small", "mask_sync", "item_sync"]
SIXTH = ["metrics_json", "python_jitter", "cudnn_autotune", "growing_prefix", "smi_gpu_bound", "eval_keeps_graph",
         "oom_cell", "fragmentation"]
FIFTH = ["nchw_autocast", "growing_cat", "gil_thread", "small_copies", "ema_loop", "anomaly_mode",
         "recompile_shapes"]
FOURTH = ["smi_logging", "cpu_layer", "manual_layernorm", "gc_every_step", "load_every_step"]
THIRD = ["fp64_compute", "cpu_metrics", "numpy_roundtrip", "loader_respawn", "manual_attention", "rows_to_tensor",
         "checkpoint_every_step", "per_sample_loop", "per_sample_graphs"]
SECOND = ["allocator_churn", "fp32_gemm", "mask_sync", "item_sync", "optimizer_single_tensor", "zero_grad_not_none",
          "extra_copy", "python_loop", "conv_bias_bn", "gemm_dims_odd", "host_code"]
SUITES = {"single": [w.name for w in WORKLOADS
                      if not w.nproc and w.name not in SECOND + THIRD + FOURTH + FIFTH + SIXTH + SEVENTH],
          "ddp": [w.name for w in WORKLOADS if w.nproc], "second": SECOND, "third": THIRD, "fourth": FOURTH,
          "fifth": FIFTH, "sixth": SIXTH, "seventh": SEVENTH}
BY_NAME = {w.name: w for w in WORKLOADS}


def variant(w: Planted, which: str) -> tuple[str, str]:
    """(setup, cell) of a variant."""
    if which == "bad":
        return w.setup, w.bad
    return (w.setup_fixed or w.setup), w.fixed


# ---- timing without the profiler ----------------------------------------------------------------------------

def time_cell(name: str, which: str) -> None:
    """In a fresh process (or each torchrun rank): setup, then the cell; rank 0 prints {"cell_s": ...,
    "torch_memory": torch's own memory numbers (peaks, per step where the cell keeps `_mem`, out of memory)}."""
    import numpy as np
    import torch

    setup, cell = variant(BY_NAME[name], which)
    ns: dict = {"__name__": "__main__"}
    if setup.strip():  # (a DDP cell picks its GPU itself: touching one before would make a context on GPU 0)
        exec(compile(setup, "<setup>", "exec"), ns)
        torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    sampler = None
    if os.environ.get("NM_TIME_SAMPLER"):  # an experiment: the cell with our Python sampler beside it, no nsys
        import tempfile

        from nsight_magic.inside.python_samples import PythonSampler
        sampler = PythonSampler(Path(tempfile.mkdtemp()) / "samples.json",
                                interval=float(os.environ["NM_TIME_SAMPLER"])).start()
    t0 = time.perf_counter()
    oom = False
    try:
        exec(compile(cell, "<cell>", "exec"), ns)
    except torch.OutOfMemoryError:  # a planted out-of-memory cell: its time and memory up to the failure
        oom = True
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    if sampler is not None:
        sampler.remove()
    mem = ns.get("_mem") or []
    memory = {"peak_allocated": torch.cuda.max_memory_allocated(), "peak_reserved": torch.cuda.max_memory_reserved(),
              "allocated_after": torch.cuda.memory_allocated(), "reserved_after": torch.cuda.memory_reserved(),
              "per_step": [int(m) for m in mem], "oom": oom,
              "growth_per_step": (float(np.median(np.diff(mem))) if len(mem) > 2 else None),
              "capacity": torch.cuda.get_device_properties(0).total_memory}
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps({"cell_s": dt, "loop_s": ns.get("_loop_s"), "torch_memory": memory}), flush=True)


def measure(w: Planted, which: str) -> dict:
    me = [sys.executable, str(Path(__file__).resolve()), "--time", w.name, which]
    argv = ([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={w.nproc}",
             *me[1:]] if w.nproc else me)
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    for line in p.stdout.splitlines()[::-1]:
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"{w.name}/{which}: no timing (exit {p.returncode}): {p.stderr[-2000:]}")


# ---- profiling ----------------------------------------------------------------------------------------------

def profile(w: Planted, which: str, outdir: Path) -> Path:
    from make_findings_reports import scrub_export

    from nsight_magic.options import NsysOptions
    from nsight_magic.run import run_nsys

    setup, cell = variant(w, which)
    # NM_PLANTED_TRACE: record with another trace list (an experiment: what OS runtime tracing costs a workload)
    trace = {"trace": os.environ["NM_PLANTED_TRACE"]} if os.environ.get("NM_PLANTED_TRACE") else {}
    opts = NsysOptions(name=f"{w.name}-{which}", directory=str(outdir / "profiles"), fresh=True, nproc=w.nproc,
                       render=False, quiet=True, timeout=300, ops=w.ops, memory=True if w.nsys_memory else None,
                       **trace)
    r = run_nsys(cell, opts, setup_sources=[setup] if setup.strip() else [], namespace={})
    if r.sqlite is None:
        raise RuntimeError(f"{w.name}/{which}: no report ({r.status}; {r.messages})")
    dest = outdir / f"{w.name}_{which}.sqlite"
    shutil.copy(r.sqlite, dest)
    scrub_export(dest)
    # what the profiled process wrote beside the report (Python samples, torch's allocator history, run.json for
    # the cell's line numbers): kept under the report's name, put back beside it when the report is opened
    for side in SIDECARS:
        if (r.folder.path / side).exists():
            shutil.copy(r.folder.path / side, outdir / f"{w.name}_{which}.{side}")
    print(f"  profiled {w.name}/{which}: {r.status} in {r.wall_s:.1f} s -> {dest.name} "
          f"({dest.stat().st_size / 1e6:.1f} MB)", flush=True)
    return dest


def record(outdir: Path, names: list[str], reps: int, time_only: bool = False) -> dict:
    outdir.mkdir(parents=True, exist_ok=True)
    manifest_path = outdir / "planted.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for name in names:
        w = BY_NAME[name]
        variants = ["bad"] + (["fixed"] if w.fixed else [])
        times: dict[str, list[float]] = {v: [] for v in variants}
        loops: dict[str, list[float]] = {v: [] for v in variants}
        memory: dict[str, dict] = {}
        for _ in range(max(reps, w.reps or 0)):
            for v in variants:
                got = measure(w, v)
                times[v].append(got["cell_s"])
                memory[v] = got.get("torch_memory") or {}
                if got.get("loop_s") is not None:
                    loops[v].append(got["loop_s"])
        entry = {"cause": w.cause, "expect_kind": w.expect_kind, "expect_rule": w.expect_rule, "nproc": w.nproc,
                 "ops": w.ops,
                 **{k: getattr(w, k) for k in ("expect_code", "expect_memory", "expect_growth") if getattr(w, k)},
                 **({"torch_memory": memory} if w.expect_memory else {}),
                 "cell_s": {v: round(min(t), 4) for v, t in times.items()},
                 "cell_s_all": {v: [round(x, 4) for x in t] for v, t in times.items()}}
        # the gain: the cell's, or where the cell times its loop (DDP: NCCL's start-up varies by seconds), the loop's
        basis = loops if all(loops.values()) else times
        if basis is loops:
            entry["loop_s_all"] = {v: [round(x, 4) for x in t] for v, t in loops.items()}
        if w.fixed:
            entry["gain_s"] = round(min(basis["bad"]) - min(basis["fixed"]), 4)
            entry["gain_of"] = "loop" if basis is loops else "cell"
        print(f"{name}: " + ", ".join(f"{v} {t}" for v, t in (entry.get("loop_s_all") or entry["cell_s_all"]).items())
              + (f"; gain {entry['gain_s']:.3f} s ({entry['gain_of']})" if w.fixed else ""), flush=True)
        if time_only:
            old = manifest.get(name, {})
            manifest[name] = {**old, **entry, "reports": old.get("reports", {})}
            manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
            continue
        entry["reports"] = {v: profile(w, v, outdir).name for v in variants}
        manifest[name] = entry
        manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    try:
        import torch

        for e in manifest.values():
            e.setdefault("gpu", torch.cuda.get_device_name(0))
    except Exception:  # noqa: BLE001 - the manifest without the GPU's name
        pass
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    shutil.rmtree(outdir / "profiles", ignore_errors=True)  # reports with the machine's environment
    return manifest


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", nargs="?", type=Path)
    ap.add_argument("--suite", choices=sorted(SUITES), default="single")
    ap.add_argument("--only", default=None, help="comma-separated workload names")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--time-only", action="store_true", help="measure the gains again, keep the reports")
    ap.add_argument("--time", nargs=2, metavar=("NAME", "VARIANT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.time:
        time_cell(*a.time)
    else:
        chosen = a.only.split(",") if a.only else SUITES[a.suite]
        record(a.outdir or HERE, chosen, a.reps, a.time_only)
