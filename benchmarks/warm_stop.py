"""What `nsys stop` costs in a warm session, per `nsys launch` option (raw nsys, no nsight-magic in the loop).

    python benchmarks/warm_stop.py [--workload cpu|torch|torch-1step|torch-poll] [--trace T] [--repeat 3] [--variants a,b,...]

A worker is started once under `nsys launch --session-new=S <options>`, does its setup, then runs the same cell
per recording (`nsys start --session=S --sample=none --cpuctxsw=none -o repN`, cell, `nsys stop`).  Printed per
variant: cell time, `nsys stop` time, export time, and what the report holds (kernels, OS runtime calls, NVTX
ranges, backtraces), so that a cheaper option can be judged by what it drops.  Issue 13 left open whether OS
runtime tracing's long stop (7-8 s on the H100 against 3 s without osrt) can be cut by launch options.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = {
    "default": [],
    "resolve-symbols-false": ["--resolve-symbols=false"],
    "no-osrt-backtraces": ["--osrt-backtrace-threshold=1000000000"],  # only calls longer than 1 s
    "both": ["--resolve-symbols=false", "--osrt-backtrace-threshold=1000000000"],
    "osrt-threshold-10us": ["--osrt-threshold=10000"],
    # issue 62: what `nsys stop` waits for with the default trace cuda,nvtx (2.5-2.9 s on the H200)
    "no-cuda-event-trace": ["--cuda-event-trace=false"],
    "cuda-flush-100ms": ["--cuda-flush-interval=100"],
    "no-cudabacktrace": ["--cudabacktrace=none"],
    "no-graph-node-trace": ["--cuda-graph-trace=graph"],
}

WORKER = r'''
import os, sys, time
from pathlib import Path
d = Path(sys.argv[1]); workload = sys.argv[2]
if workload.startswith("torch"):
    import torch
    nvtx = torch.cuda.nvtx
    torch.manual_seed(0)
    layers = []
    for _ in range(8):
        layers += [torch.nn.Linear(1024, 1024), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.randn(256, 1024, device="cuda"); target = torch.randn(256, 1024, device="cuda")
    def cell():
        for step in range(1 if workload == "torch-1step" else 50):
            nvtx.range_push("step")
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(data), target)
            loss.backward(); opt.step()
            nvtx.range_pop()
        torch.cuda.synchronize()
else:
    import nvtx as _nvtx
    class nvtx:
        range_push = staticmethod(lambda n: _nvtx.push_range(n))
        range_pop = staticmethod(lambda: _nvtx.pop_range())
    def cell():
        for step in range(20):
            nvtx.range_push("step"); sum(range(200000)); time.sleep(0.01); nvtx.range_pop()
(d / "ready").touch()
n = 0
while True:
    go = d / f"go.{n}"
    while not go.exists():
        if (d / "quit").exists():
            sys.exit(0)
        if workload == "torch-poll":  # a CUDA call while idle: does nsys's stop wait for one?
            torch.cuda.synchronize()
        time.sleep(0.005)
    t0 = time.perf_counter(); cell()
    # whole or not at all: the benchmark reads done.N as soon as it exists
    (d / f"done.{n}.part").write_text(str(time.perf_counter() - t0)); os.replace(d / f"done.{n}.part", d / f"done.{n}")
    n += 1
'''


def wait_for(path: Path, launch: subprocess.Popen, timeout: float = 120) -> None:
    t0 = time.monotonic()
    while not path.exists():
        if launch.poll() is not None:
            raise RuntimeError(f"nsys launch exited ({launch.returncode}): {launch.stderr.read().strip()[-500:]}")
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(path)
        time.sleep(0.005)


def watch_files(proc: subprocess.Popen, t0: float, files: dict) -> dict:
    """Wait for proc, noting when each file first exists (seconds after t0; None when never seen)."""
    seen: dict = dict.fromkeys(files)
    while proc.poll() is None:
        for k, f in files.items():
            if seen[k] is None and f.exists():
                seen[k] = time.perf_counter() - t0
        time.sleep(0.005)
    proc.communicate()
    for k, f in files.items():
        if seen[k] is None and f.exists():
            seen[k] = time.perf_counter() - t0
    return seen


def _at(s) -> str:
    return "-" if s is None else f"{s:.2f}"


def counts(sqlite: Path) -> dict:
    con = sqlite3.connect(sqlite)
    tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    out = {}
    for key, table in (("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"), ("osrt", "OSRT_API"), ("nvtx", "NVTX_EVENTS"),
                       ("osrt_callchains", "OSRT_CALLCHAINS")):
        out[key] = con.execute(f"select count(*) from {table}").fetchone()[0] if table in tables else 0
    con.close()
    return out


def run_variant(nsys: str, name: str, extra: list[str], trace: str, workload: str, repeat: int, root: Path) -> None:
    d = root / name
    d.mkdir()
    (d / "worker.py").write_text(WORKER)
    t0 = time.perf_counter()
    # as the product's session host (inside/session_host.py): nsys 2022.4's `launch` at times exits at once
    # ("sem_open", seen under the test suite's parallel nsys runs): started again, up to 3 times
    for attempt in range(1, 4):
        session = f"stop-{name}-{os.getpid()}-{attempt}"
        launch = subprocess.Popen([nsys, "launch", f"--session-new={session}", f"--trace={trace}", *extra,
                                   sys.executable, str(d / "worker.py"), str(d), workload],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(d / "ready", launch)
            break
        except RuntimeError:
            if attempt == 3:
                raise
            time.sleep(0.2 * attempt)
    try:
        setup_s = time.perf_counter() - t0
        rows = []
        for n in range(repeat):
            rep = d / f"rep{n}"
            t = time.perf_counter()
            subprocess.run([nsys, "start", f"--session={session}", "--sample=none", "--cpuctxsw=none",
                            f"--output={rep}"], check=True, capture_output=True)
            start_s = time.perf_counter() - t
            (d / f"go.{n}").touch()
            wait_for(d / f"done.{n}", launch)
            cell_s = float((d / f"done.{n}").read_text())
            t = time.perf_counter()
            stop = subprocess.Popen([nsys, "stop", f"--session={session}"], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            seen = watch_files(stop, t, {"qdstrm": Path(f"{rep}.qdstrm"), "rep": Path(f"{rep}.nsys-rep")})
            if stop.returncode:
                raise subprocess.CalledProcessError(stop.returncode, stop.args)
            stop_s = time.perf_counter() - t
            t = time.perf_counter()
            if not Path(f"{rep}.nsys-rep").exists() and Path(f"{rep}.qdstrm").exists():
                from nsight_magic import tools  # Debian's 2022.4 leaves the raw stream to its importer
                tools.import_qdstrm(Path(f"{rep}.qdstrm"), Path(nsys))
            subprocess.run([nsys, "export", "--type=sqlite", f"--output={rep}.sqlite", f"{rep}.nsys-rep"],
                           check=True, capture_output=True)
            export_s = time.perf_counter() - t
            rows.append(dict(start=start_s, cell=cell_s, stop=stop_s, export=export_s, **seen,
                             **counts(Path(f"{rep}.sqlite"))))
            for f in d.glob(f"rep{n}*"):
                f.unlink()
        med = {k: statistics.median(r[k] for r in rows) for k in ("start", "cell", "stop", "export")}
        # when, after `nsys stop` began, the raw stream appeared and the report was there (- when never seen)
        stops = ", ".join(f"{r['stop']:.2f} [qdstrm {_at(r['qdstrm'])} rep {_at(r['rep'])}]" for r in rows)
        print(f"{name:24s} launch+setup {setup_s:5.2f} s | start {med['start']:.2f} cell {med['cell']:.2f} "
              f"stop {med['stop']:.2f} (all: {stops}) export "
              f"{med['export']:.2f} | last report: kernels {rows[-1]['kernels']} osrt {rows[-1]['osrt']} "
              f"nvtx {rows[-1]['nvtx']} backtraces {rows[-1]['osrt_callchains']}", flush=True)
    finally:
        (d / "quit").touch()
        subprocess.run([nsys, "shutdown", f"--session={session}"], capture_output=True)
        try:
            launch.wait(30)
        except subprocess.TimeoutExpired:
            launch.kill()


ISOLATED_ENV = "NM_WARM_STOP_ISOLATED"


def _in_own_namespace() -> None:
    """Run again inside a PID namespace with a private /dev/shm and /tmp/nvidia (tools.isolation_prefix), as %%nsys
    runs nsys: raw nsys sessions in the machine's shared files can collide with other runs ("Agent launcher
    failed")."""
    if os.environ.get(ISOLATED_ENV) == "1":
        return
    from nsight_magic.tools import isolation_prefix

    prefix = list(isolation_prefix()[0])
    if prefix:
        os.execve(prefix[0], [*prefix, sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]],
                  {**os.environ, ISOLATED_ENV: "1"})


def main() -> None:
    _in_own_namespace()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=("cpu", "torch", "torch-1step", "torch-poll"), default="torch")
    ap.add_argument("--trace", default="cuda,nvtx,osrt")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    nsys = shutil.which(os.environ.get("NSIGHT_MAGIC_NSYS", "nsys"))
    if nsys is None:
        sys.exit("nsys not found")
    print(subprocess.run([nsys, "--version"], capture_output=True, text=True).stdout.strip(), "| trace", args.trace)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.variants.split(","):
            try:
                run_variant(nsys, name, VARIANTS[name], args.trace, args.workload, args.repeat, Path(tmp))
            except (RuntimeError, TimeoutError, subprocess.CalledProcessError) as e:
                print(f"{name:24s} failed: {e}", flush=True)


if __name__ == "__main__":
    main()
