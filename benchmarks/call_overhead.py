"""What tracing costs per traced call: the correction the advice makes to its estimates (analysis/overhead.py).

    python benchmarks/call_overhead.py [--calls N] [--repeat R] [--kinds launch,nvtx,osrt] [--json F]

A loop of N calls of one kind is timed inside the process (perf_counter around the loop), plain and under
`nsys profile` with the trace that records that kind of call; (under nsys - plain) / N is what one traced call
costs.  The minimum of R runs is kept on each side.

    launch   a tiny CUDA kernel (torch's add_ on a one-element tensor): one cudaLaunchKernel, traced with -t cuda
    launch_default   the same, traced with nsight-magic's default -t cuda,nvtx,osrt
    sync     cudaStreamSynchronize after nothing (torch.cuda.synchronize), traced with -t cuda
    nvtx     an NVTX push/pop pair (torch.cuda.nvtx on a GPU, the nvtx package on a CPU), traced with -t nvtx
    osrt     a one-byte read() of /dev/zero (an OS runtime call nsys intercepts), traced with -t osrt
    spawn    a child process started and waited for (subprocess.run of `true`): nsys follows it, traced with
             nsight-magic's default trace (-t cuda,nvtx,osrt with a GPU, nvtx,osrt without); use --calls 100
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from nsight_magic.tools import isolated_argv  # noqa: E402 - nsys in its own namespace, as %%nsys runs it

LOOP = r'''
import os, sys, time
kind, n = sys.argv[1], int(sys.argv[2])
if kind in ("launch", "launch_default", "sync"):
    import torch
    x = torch.zeros(1, device="cuda")
    for _ in range(1000):
        x.add_(1)
    torch.cuda.synchronize()
    if kind != "sync":
        t = time.perf_counter()
        for _ in range(n):
            x.add_(1)
        torch.cuda.synchronize()
    else:
        t = time.perf_counter()
        for _ in range(n):
            torch.cuda.synchronize()
elif kind == "nvtx":
    try:
        import torch
        push, pop = (torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop) if torch.cuda.is_available() else (None, None)
    except ImportError:
        push = None
    if push is None:
        import nvtx
        push, pop = (lambda m: nvtx.push_range(m)), nvtx.pop_range
    t = time.perf_counter()
    for _ in range(n):
        push("r")
        pop()
elif kind == "spawn":
    import subprocess
    true = subprocess.run(["which", "true"], capture_output=True, text=True).stdout.strip()
    t = time.perf_counter()
    for _ in range(n):
        subprocess.run([true])
else:
    fd = os.open("/dev/zero", os.O_RDONLY)
    t = time.perf_counter()
    for _ in range(n):
        os.read(fd, 1)
print("LOOP_S", time.perf_counter() - t)
'''

TRACE = {"launch": "cuda", "launch_default": "cuda,nvtx,osrt", "sync": "cuda", "nvtx": "nvtx", "osrt": "osrt",
         "spawn": "cuda,nvtx,osrt" if os.path.exists("/dev/nvidia0") else "nvtx,osrt"}


def _loop_s(argv: list[str], attempts: int = 1) -> float:
    """The loop's time as the script printed it.  attempts > 1 (nsys runs): nsys 2022.4 sometimes fails at start-up
    before the loop runs (sem_open, "Local Endpoint is not available"), as the product's runs retry too."""
    for attempt in range(1, attempts + 1):
        p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        for line in p.stdout.splitlines():
            if line.startswith("LOOP_S"):
                return float(line.split()[1])
        if attempt < attempts:
            print(f"attempt {attempt} gave no timing (exit {p.returncode}), trying again: "
                  f"{(p.stdout + p.stderr).strip().splitlines()[-1:]}", file=sys.stderr)
    raise RuntimeError(f"{argv[:4]}: no timing (exit {p.returncode}): {(p.stdout + p.stderr)[-1500:]}")


def measure(kind: str, calls: int, repeat: int, nsys: str, work: Path) -> dict:
    script = work / "loop.py"
    script.write_text(LOOP)
    plain, traced = [], []
    for i in range(repeat):
        plain.append(_loop_s([sys.executable, str(script), kind, str(calls)]))
        # in its own namespace, as %%nsys runs nsys
        argv, _ = isolated_argv([nsys, "profile", f"--trace={TRACE[kind]}", "--sample=none", "--cpuctxsw=none",
                                 "--force-overwrite=true", "-o", str(work / f"{kind}{i}"), sys.executable, str(script),
                                 kind, str(calls)], kernel_symbols=False)
        traced.append(_loop_s(argv, attempts=2))
    p, t = min(plain), min(traced)
    return {"kind": kind, "trace": TRACE[kind], "calls": calls, "plain_s": round(p, 4), "traced_s": round(t, 4),
            "plain_us_per_call": round(p / calls * 1e6, 3), "traced_us_per_call": round(t / calls * 1e6, 3),
            "overhead_us_per_call": round((t - p) / calls * 1e6, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kinds", default=None, help="default: launch,launch_default,sync,nvtx,osrt with a GPU, nvtx,osrt "
                                                  "without")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    nsys = shutil.which("nsys")
    if not nsys:
        sys.exit("nsys not found")
    version = subprocess.run([nsys, "--version"], capture_output=True, text=True).stdout.strip()
    gpu = os.path.exists("/dev/nvidia0")
    kinds = args.kinds.split(",") if args.kinds else (["launch", "launch_default", "sync", "nvtx", "osrt"] if gpu
                                                      else ["nvtx", "osrt"])
    work = Path(tempfile.mkdtemp(prefix="nsight-overhead-"))
    rows = []
    print(f"{version}; {args.calls} calls per loop, minimum of {args.repeat} runs")
    for kind in kinds:
        r = measure(kind, args.calls, args.repeat, nsys, work)
        rows.append(r)
        print(f"  {kind:<14} -t {r['trace']:<14} plain {r['plain_us_per_call']:8.3f} us/call   traced "
              f"{r['traced_us_per_call']:8.3f} us/call   overhead {r['overhead_us_per_call']:8.3f} us/call", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"nsys": version, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
