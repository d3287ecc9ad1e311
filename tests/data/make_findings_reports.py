"""Record the GPU reports the findings tests read: tests/data/findings_bad.sqlite and findings_good.sqlite.

    python tests/data/make_findings_reports.py OUTDIR        # on a machine with a CUDA GPU, PyTorch and CuPy

It runs this file's two workloads under Nsight Systems (nsys on PATH, 2023 or newer: CUDA 13 needs 2025.x):
  nsys profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --capture-range=cudaProfilerApi
               --capture-range-end=stop -o OUTDIR/findings_<w> python make_findings_reports.py --workload <w>
then exports SQLite and scrubs environment strings from it (scrub_export), like ../shared's H100 fixtures.

bad: each phase (an NVTX range) has one cause a findings rule looks for:
  pageable        cudaMemcpyAsync of 16 MiB from pageable memory            cuda_memcpy_async
  sync_copy       cudaMemcpy (synchronous) device-to-host of 16 MiB         cuda_memcpy_sync
  sync_memset     cudaMemset on managed memory                              cuda_memset_sync
  sync_api        .item() and torch.cuda.synchronize() in a loop             cuda_api_sync
  idle            the GPU idle 0.7 s                                         gpu_gaps, gpu_time_util
  tiny_kernels    4000 launches of a one-element add                        launch_bound
  transpose       fp16 convolutions on NCHW tensors (cuDNN transposes)       layout_transpose
  undersized      a 16 blocks x 128 threads kernel on a 132-SM GPU           undersized_launch
  serialized      pinned 64 MiB copies on the compute stream between kernels serialized_copy
  input_wait      10 steps that "load data" 15 ms before their H2D copy      input_wait
  backward        loss.backward() inside an NVTX range on the main thread   nvtx_other_thread
good: the same work with the causes removed (pinned memory and non_blocking copies on a side stream, no host
synchronisation in the loop, no idle time, channels_last, batched work and batches of 256 instead of 32 (no kernel
shorter than its launch), full-size launches, prefetched input).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

UNDERSIZED_SRC = r"""
extern "C" __global__ void spin(float *x, int n, int iters) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i;
    for (int k = 0; k < iters; k++) v = v * 0.9999f + 1.0f;
    if (i < n) x[i] = v;
}
"""


def _range(name):
    import nvtx

    return nvtx.annotate(name)


def _model(torch, channels_last=False):
    nn = torch.nn
    m = nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).cuda()
    return m.to(memory_format=torch.channels_last) if channels_last else m


def workload(kind: str) -> None:
    import ctypes

    import cupy
    import torch

    bad = kind == "bad"
    dev = torch.device("cuda")
    cudart = ctypes.CDLL(_libcudart())
    spin = cupy.RawKernel(UNDERSIZED_SRC, "spin")
    model = _model(torch, channels_last=not bad)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    host = torch.randn(4, 1024, 1024)          # 16 MiB, pageable
    pinned = host.pin_memory()
    big_pinned = torch.randn(16, 1024, 1024).pin_memory()  # 64 MiB
    # the good run feeds the GPU batches big enough that no kernel is shorter than its launch (launch_bound)
    x = torch.randn(32 if bad else 256, 3, 64, 64)
    x_pinned = x.pin_memory()
    side = torch.cuda.Stream()

    def sync():
        """bad: cudaDeviceSynchronize; good: wait on an event (what nsys analyze suggests instead)."""
        if bad:
            torch.cuda.synchronize()
        else:
            e = torch.cuda.Event()
            e.record()
            e.synchronize()

    # warm-up outside the capture: cuDNN autotuning, module loading, CuPy compilation
    spin((132 * 4,), (256,), (cupy.zeros(132 * 4 * 256, cupy.float32), cupy.int32(132 * 4 * 256), cupy.int32(10)))
    with torch.autocast("cuda", dtype=torch.float16):
        model(x.cuda()).sum().backward()
    torch.cuda.synchronize()

    torch.cuda.profiler.start()
    with _range("pageable"):
        for _ in range(5):
            src = host if bad else pinned
            y = src.to(dev, non_blocking=True)
        sync()
    with _range("sync_copy"):
        g = torch.randn(4, 1024, 1024, device=dev)
        out = torch.empty(4, 1024, 1024).pin_memory()
        for _ in range(5):
            if bad:  # cudaMemcpy: blocks the host until the copy is done
                cudart.cudaMemcpy(ctypes.c_void_p(out.data_ptr()), ctypes.c_void_p(g.data_ptr()),
                                  ctypes.c_size_t(g.numel() * 4), 2)
            else:  # asynchronous, and on the side stream: the compute stream does not wait for it
                with torch.cuda.stream(side):
                    side.wait_stream(torch.cuda.current_stream())
                    out.copy_(g, non_blocking=True)
        torch.cuda.current_stream().wait_stream(side)
        sync()
    with _range("sync_memset"):
        ptr = ctypes.c_void_p()
        n = 16 << 20
        if bad:
            cudart.cudaMallocManaged(ctypes.byref(ptr), ctypes.c_size_t(n), 1)
            for _ in range(5):
                cudart.cudaMemset(ptr, 0, ctypes.c_size_t(n))
            cudart.cudaDeviceSynchronize()
            cudart.cudaFree(ptr)
        else:
            buf = torch.empty(n // 4, device=dev)
            for _ in range(5):
                buf.zero_()
    with _range("sync_api"):
        acc = torch.zeros((), device=dev)
        w = torch.randn(2048, 2048, device=dev)
        for _ in range(20):
            v = (w @ w).sum()
            if bad:
                acc += v.item()
                torch.cuda.synchronize()
            else:
                acc += v  # stays on the GPU: read once, after the capture
    with _range("idle"):
        w @ w
        if bad:
            time.sleep(0.7)
        w @ w
    with _range("tiny_kernels"):
        one = torch.zeros(1, device=dev)
        if bad:
            for _ in range(4000):
                one.add_(1)
        else:
            one.add_(torch.ones(4000, device=dev).sum())
    with _range("transpose"):
        if bad:
            xb = x_pinned.to(dev, non_blocking=True)
        else:  # even a pinned copy waits in line on the compute stream: the side stream
            with torch.cuda.stream(side):
                xb = x_pinned.to(dev, non_blocking=True)
            torch.cuda.current_stream().wait_stream(side)
        if not bad:
            xb = xb.to(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.float16):
            for _ in range(10):
                model(xb)
    with _range("undersized"):
        buf = cupy.zeros(132 * 8 * 256, cupy.float32)
        for _ in range(20):
            if bad:
                spin((16,), (128,), (buf, cupy.int32(16 * 128), cupy.int32(200_000)))
            else:
                spin((132 * 8,), (256,), (buf, cupy.int32(132 * 8 * 256), cupy.int32(200_000 * 16 * 128
                                                                                      // (132 * 8 * 256) + 1)))
        sync()
    with _range("serialized"):
        for _ in range(10):
            if bad:
                d = big_pinned.to(dev, non_blocking=True)
                (w @ w)
            else:
                with torch.cuda.stream(side):
                    d = big_pinned.to(dev, non_blocking=True)
                (w @ w)
        torch.cuda.current_stream().wait_stream(side)
        sync()
    with _range("input_wait"):
        nxt = None
        for step in range(10):
            with _range(f"step {step}"):
                if bad:
                    time.sleep(0.015)  # "data loading" on the critical path
                    xb = x.pin_memory().to(dev, non_blocking=True)
                else:
                    if nxt is None:
                        with torch.cuda.stream(side):
                            nxt = x_pinned.to(dev, non_blocking=True)
                        torch.cuda.current_stream().wait_stream(side)
                    xb = nxt
                    with torch.cuda.stream(side):
                        nxt = x_pinned.to(dev, non_blocking=True)  # the next batch while this one computes
                torch.cuda.current_stream().wait_stream(side)
                loss = model(xb).float().pow(2).mean()
                opt.zero_grad(set_to_none=True)
                if bad:
                    with _range("backward"):  # autograd runs it on its own thread
                        loss.backward()
                else:
                    loss.backward()
                opt.step()
    sync()
    torch.cuda.profiler.stop()
    print("workload", kind, "done", acc.item())


def _libcudart() -> str:
    import torch

    for d in (Path(torch.__file__).parent / "lib", *Path(torch.__file__).parents[1].glob("nvidia/cu*/lib"),
              *Path(torch.__file__).parents[1].glob("nvidia/cuda_runtime/lib")):
        for f in sorted(Path(d).glob("libcudart.so*")):
            return str(f)
    return "libcudart.so"


ENV_RX = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def scrub_export(sqlite_path: Path) -> int:
    """Replace environment strings (NAME=value) in an nsys export, as ../shared/fixtures' H100 exports were."""
    con = sqlite3.connect(sqlite_path)
    n = 0
    with con:
        for sid, value in con.execute("SELECT id, value FROM StringIds").fetchall():
            if isinstance(value, str) and ENV_RX.match(value):
                con.execute("UPDATE StringIds SET value = '[scrubbed]' WHERE id = ?", (sid,))
                n += 1
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "TARGET_INFO_SYSTEM_ENV" in tables:
            con.execute("DELETE FROM TARGET_INFO_SYSTEM_ENV")
    con.execute("VACUUM")
    con.close()
    return n


def record(outdir: Path) -> None:
    nsys = shutil.which("nsys")
    if not nsys:
        sys.exit("nsys is not on PATH")
    outdir.mkdir(parents=True, exist_ok=True)
    for kind in ("bad", "good"):
        base = outdir / f"findings_{kind}"
        for suffix in (".nsys-rep", ".sqlite", ".qdstrm"):
            base.with_suffix(suffix).unlink(missing_ok=True)
        argv = [nsys, "profile", "-t", "cuda,nvtx,osrt", "-s", "none", "--cpuctxsw=none",
                "--capture-range=cudaProfilerApi", "--capture-range-end=stop", "-o", str(base),
                sys.executable, str(Path(__file__).resolve()), "--workload", kind]
        t = time.time()
        subprocess.run(argv, check=True, timeout=600)
        subprocess.run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o",
                        str(base.with_suffix(".sqlite")), str(base.with_suffix(".nsys-rep"))], check=True, timeout=300)
        n = scrub_export(base.with_suffix(".sqlite"))
        base.with_suffix(".nsys-rep").unlink()  # it embeds the machine's environment; the export is what we keep
        print(f"{base}.sqlite: {time.time() - t:.1f} s, {n} environment strings scrubbed", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", nargs="?", type=Path)
    ap.add_argument("--workload", choices=("bad", "good"))
    a = ap.parse_args()
    if a.workload:
        os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
        workload(a.workload)
    else:
        record(a.outdir or Path(__file__).resolve().parent)
