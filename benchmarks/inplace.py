"""Profile in place (issue 44): what the in-place kernel costs and what it holds.

    python benchmarks/inplace.py [--workload cpu|torch] [--trace T] [--repeat N] [--pause S] [--big F] [--json F]

Two real kernels driven as JupyterLab drives them (benchmarks/latency.py's Frontend): the plain `python3` kernel and
the in-place kernel (`nsight-magic kernel install --prefix TMP --trace T`, so nothing of the user's is touched).
Both run the workload's setup (the plain kernel as %%nsight_setup, which its worker runs again), then:

    step      the workload's cell run plainly, timed inside the cell, --repeat times in each kernel: what the
              in-place kernel costs while nothing is recorded (its process runs under `nsys launch`)
    blocked   %%nsys in place: execute_input -> execute_reply, against the plain cell in the same kernel
    drawn     execute_input -> the update that drew the profile, against nsys stop (the profile's timings.json)
    memory    (a GPU) the compute processes nvidia-smi lists and the memory they hold, polled every 0.2 s while
              the profiled cells run: in place against %%nsys in the plain kernel (a worker of its own)
    big       (a GPU, --big F) a tensor of F of the GPU's memory made in the notebook: %%nsys profiles a cell in
              place, and the plain kernel's %%nsight_setup + %%nsys say at once that a copy cannot fit
    left      after the in-place kernel is shut down: seconds until no process of its session is left (nsys, its
              agent, the kernel), and what is left after 10 s
    ncu       (a GPU, --ncu) a cell of 30 kernels under %%ncu: in the Nsight Compute kernel (`kernel install
              --ncu`, measured in place) against the plain kernel's %%ncu (a fresh process that runs the setup
              again): blocked, drawn, the kernels each measured

Workloads are latency.py's: cpu (10 x 50 ms in NVTX ranges; Debian's nsys on any machine) and torch (a 6-layer
transformer encoder, 16 AdamW steps on the GPU).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from latency import WORKLOADS, Frontend  # noqa: E402

TIMED = "import time as _t\n_t0 = _t.perf_counter()\n{cell}\nprint('cell_s', _t.perf_counter() - _t0)\n"


class GpuApps:
    """nvidia-smi's compute processes, polled in a thread: the most processes and memory seen while on."""

    def __init__(self):
        self.smi = shutil.which("nvidia-smi")
        self.on = False
        self.most_apps, self.most_mib = 0, 0
        self._stop = threading.Event()
        if self.smi:
            threading.Thread(target=self._poll, daemon=True).start()

    def snapshot(self) -> tuple[int, int]:
        out = subprocess.run([self.smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout
        rows = [r.split(",") for r in out.strip().splitlines() if r.strip()]
        return len(rows), sum(int(r[1]) for r in rows if r[1].strip().isdigit())

    def _poll(self) -> None:
        while not self._stop.is_set():
            if self.on:
                apps, mib = self.snapshot()
                self.most_apps, self.most_mib = max(self.most_apps, apps), max(self.most_mib, mib)
            time.sleep(0.2)

    def window(self):
        """Start a fresh maximum; the caller reads most_apps / most_mib after `.on = False`."""
        self.most_apps, self.most_mib, self.on = 0, 0, True
        return self

    def close(self) -> None:
        self._stop.set()


def install_kernel(prefix: Path, trace: str) -> Path:
    subprocess.run([sys.executable, "-m", "nsight_magic.cli", "kernel", "install", "--prefix", str(prefix),
                    "--trace", trace], check=True, capture_output=True, timeout=120)
    return prefix / "share" / "jupyter" / "kernels"


def cell_seconds(text: str) -> float:
    m = re.findall(r"^cell_s ([0-9.e-]+)$", text, re.M)
    if not m:
        raise RuntimeError(f"the cell printed no time: {text[-1500:]}")
    return float(m[-1])


def timings(work: Path, name: str) -> dict:
    """The newest profile named `name`'s timings.json (nsys_stop_s, read_s, draw_s, ...), once it is written."""
    folders = sorted((work / "nsight-profiles").glob(f"{name}-*"), key=lambda p: p.stat().st_mtime)
    for _ in range(100):
        if folders and (folders[-1] / "timings.json").exists():
            return json.loads((folders[-1] / "timings.json").read_text())
        time.sleep(0.1)
    return {}


def measure(args, kernels: Path, gpu: GpuApps) -> dict:
    w = WORKLOADS[args.workload]
    out: dict = {"plain": {}, "inplace": {}}
    for which in ("plain", "inplace"):
        work = Path(tempfile.mkdtemp(prefix=f"nsight-inplace-{which}-"))
        env = {**os.environ, "JPY_SESSION_NAME": str(work / "bench.ipynb"), "NSIGHT_MAGIC_PREWARM": "0"}
        fe = Frontend(work, env, *(("nsight-magic", kernels) if which == "inplace" else ("python3", None)))
        r = out[which]
        try:
            fe.run("%load_ext nsight_magic" if which == "plain" else "pass")
            # the plain kernel's %%nsys needs the setup as %%nsight_setup (its worker runs it again); in place not
            setup = fe.run(("%%nsight_setup\n" if which == "plain" else "") + w["setup"])
            if setup["status"] != "ok":
                raise RuntimeError(setup["text"][-2000:])
            r["steps_s"] = [cell_seconds(fe.run(TIMED.format(cell=w["cell"]))["text"]) for _ in range(args.repeat)]
            if gpu.smi:
                r["after_setup"] = dict(zip(("apps", "mib"), gpu.snapshot()))
            cells = []
            gpu.window()
            for i in range(args.repeat):
                time.sleep(args.pause)  # the user writes the next cell
                name = f"{which}{i}"
                res = fe.run(f"%%nsys --name {name}\n" + TIMED.format(cell=w["cell"]), draw_timeout=300)
                if res["status"] != "ok" or res.get("drawn_s") is None or \
                        (which == "inplace") != ("profiled in place" in res["text"]):
                    raise RuntimeError(f"{which} %%nsys: {res['text'][-2000:]}")
                t = timings(work, name)
                cells.append({"blocked_s": round(res["blocked_s"], 3), "drawn_s": round(res["drawn_s"], 3),
                              "cell_s": round(cell_seconds(res["text"]), 3),
                              "nsys_stop_s": t.get("nsys_stop_s"), "read_s": t.get("read_s"),
                              "draw_s": t.get("draw_s"), "in_place": "profiled in place" in res["text"]})
            gpu.on = False
            if gpu.smi:
                r["while_profiling"] = {"most_apps": gpu.most_apps, "most_mib": gpu.most_mib}
            r["profiled"] = cells
            if args.big and gpu.smi:
                r["big"] = big_case(fe, args.big, which)
            session = json.loads(fe.run("import os; print(os.environ.get('NSIGHT_MAGIC_INPLACE', '{}'))")["text"]
                                 or "{}").get("session") if which == "inplace" else None
        finally:
            fe.close()
        if which == "inplace":
            r["left"] = left_after_shutdown(session)
    return out


def session_processes(session: str | None) -> list[str]:
    """The machine's processes whose command line names the session (nsys launch, its agent)."""
    out = []
    for d in Path("/proc").iterdir():
        if session and d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if session in cmd and "/proc/" not in cmd:
                out.append(f"{d.name} {cmd[:120]}")
    return out


def left_after_shutdown(session: str | None, limit_s: float = 10.0) -> dict:
    """Seconds from the kernel's shutdown (its client's return) until no process of its session is left."""
    t0 = time.monotonic()
    while session_processes(session) and time.monotonic() - t0 < limit_s:
        time.sleep(0.05)
    return {"session": session, "gone_s": round(time.monotonic() - t0, 2), "left": session_processes(session)}


NCU_SETUP = "import torch\nw = torch.randn(2048, 2048, device='cuda')\ntorch.cuda.synchronize()\n"
NCU_CELL = "for _ in range(10):\n    y = torch.relu(w @ w) + 1\ntorch.cuda.synchronize()\n"  # 30 kernels


def ncu_case(repeat: int) -> dict:
    """%%ncu of a 30-kernel cell: in place (the Nsight Compute kernel) against the plain kernel's fresh process."""
    prefix = Path(tempfile.mkdtemp(prefix="nsight-inplace-ncu-kernel-"))
    subprocess.run([sys.executable, "-m", "nsight_magic.cli", "kernel", "install", "--prefix", str(prefix), "--ncu"],
                   check=True, capture_output=True, timeout=120)
    kernels = prefix / "share" / "jupyter" / "kernels"
    out = {}
    try:
        for which in ("plain", "inplace"):
            work = Path(tempfile.mkdtemp(prefix=f"nsight-ncu-{which}-"))
            env = {**os.environ, "JPY_SESSION_NAME": str(work / "bench.ipynb"), "NSIGHT_MAGIC_PREWARM": "0"}
            fe = Frontend(work, env, *(("nsight-magic-ncu", kernels) if which == "inplace" else ("python3", None)))
            cells = []
            try:
                fe.run("%load_ext nsight_magic" if which == "plain" else "pass")
                setup = fe.run(("%%nsight_setup\n" if which == "plain" else "") + NCU_SETUP)
                if setup["status"] != "ok":
                    raise RuntimeError(setup["text"][-2000:])
                for i in range(repeat):
                    name = f"ncu{which}{i}"
                    res = fe.run(f"%%ncu --name {name}\n{NCU_CELL}", draw_timeout=600)
                    folder = sorted((work / "nsight-profiles").glob(f"{name}-*"))[-1]
                    raw = folder / "report_raw.csv"
                    ids = sum(1 for ln in raw.read_text().splitlines()[2:] if ln.strip()) if raw.exists() else 0
                    cells.append({"blocked_s": round(res["blocked_s"], 3),
                                  "drawn_s": round(res["drawn_s"], 3) if res.get("drawn_s") else None,
                                  "kernels": ids, "in_place": "measured in place" in res["text"]})
            finally:
                fe.close()
            out[which] = cells
    finally:
        shutil.rmtree(prefix, ignore_errors=True)
    return out


BIG_SETUP = """import torch
_free, _total = torch.cuda.mem_get_info()
big = torch.empty(int(_total * {fraction}), dtype=torch.uint8, device="cuda")
w = torch.randn(4096, 4096, device="cuda")
print("held_gb", torch.cuda.memory_reserved() / 1e9, "of", _total / 1e9)
"""
BIG_CELL = "for _ in range(20):\n    y = w @ w\ntorch.cuda.synchronize()\n"


def big_case(fe: Frontend, fraction: float, which: str) -> dict:
    """The notebook holds `fraction` of the GPU; a cell on it profiled in place, or refused at once in a copy."""
    if which == "inplace":
        fe.run("del x, y, model, head, opt\nimport gc; gc.collect(); torch.cuda.empty_cache()")
        held = fe.run(BIG_SETUP.format(fraction=fraction))["text"]
        t0 = time.monotonic()
        res = fe.run(f"%%nsys --name big\n{BIG_CELL}", draw_timeout=300)
        return {"held": held.strip(), "status": res["status"], "drawn": res.get("drawn_s") is not None,
                "in_place": "profiled in place" in res["text"], "seconds": round(time.monotonic() - t0, 2)}
    fe.run("del x, y, model, head, opt\nimport gc; gc.collect(); torch.cuda.empty_cache()")
    held = fe.run("%%nsight_setup\n" + BIG_SETUP.format(fraction=fraction))["text"]
    t0 = time.monotonic()
    res = fe.run(f"%%nsys --name big\n{BIG_CELL}")
    said = [ln for ln in res["text"].splitlines() if "a profiled copy needs as much" in ln]
    return {"held": held.strip()[-200:], "status": res["status"], "guard": said[0] if said else None,
            "seconds": round(time.monotonic() - t0, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="cpu")
    ap.add_argument("--trace", default=None, help="the in-place kernel's trace (default: nvtx,osrt on a CPU "
                                                  "workload, cuda,nvtx on torch)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pause", type=float, default=2.0, help="seconds the user takes to write the next cell")
    ap.add_argument("--big", type=float, default=0.0, help="with a GPU: the notebook holds this share of it "
                                                           "(e.g. 0.65) for the big-model case")
    ap.add_argument("--ncu", action="store_true", help="with a GPU: %%%%ncu of a 30-kernel cell, in place against "
                                                       "a fresh process")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    trace = args.trace or ("cuda,nvtx" if args.workload == "torch" else "nvtx,osrt")
    prefix = Path(tempfile.mkdtemp(prefix="nsight-inplace-kernel-"))
    gpu = GpuApps()
    try:
        result = measure(args, install_kernel(prefix, trace), gpu)
        if args.ncu:
            result["ncu"] = ncu_case(args.repeat)
    finally:
        gpu.close()
        shutil.rmtree(prefix, ignore_errors=True)
    plain, inp = result["plain"], result["inplace"]
    step_plain, step_inp = statistics.median(plain["steps_s"]), statistics.median(inp["steps_s"])
    cost = (step_inp - step_plain) / step_plain * 100
    cells = inp["profiled"]
    print(f"workload {args.workload}, in-place kernel tracing {trace}, {args.repeat} runs")
    print(f"  plain cell        python3 kernel {step_plain:.4f} s, in-place kernel {step_inp:.4f} s "
          f"(not recording: {cost:+.2f}%)")
    for i, c in enumerate(cells):
        print(f"  in place %%nsys {i}  blocked {c['blocked_s']:.3f} s (cell {c['cell_s']:.3f} s: plain + "
              f"{c['blocked_s'] - step_inp:.3f} s)  drawn {c['drawn_s']:.3f} s (nsys stop {c['nsys_stop_s']} s, "
              f"+{c['drawn_s'] - c['blocked_s'] - (c['nsys_stop_s'] or 0):.3f} s after it: read {c['read_s']} s, "
              f"draw {c['draw_s']} s)")
    for c in plain["profiled"]:
        print(f"  worker %%nsys     blocked {c['blocked_s']:.3f} s  drawn {c['drawn_s']:.3f} s")
    for which in ("inplace", "plain"):
        r = result[which]
        if "while_profiling" in r:
            print(f"  GPU {which:<8} after setup {r['after_setup']['apps']} process(es) {r['after_setup']['mib']} MiB;"
                  f" while profiling at most {r['while_profiling']['most_apps']} process(es) "
                  f"{r['while_profiling']['most_mib']} MiB")
        if "big" in r:
            print(f"  big {which:<8} {r['big']}")
    left = inp["left"]
    print(f"  shutdown          no process of session {left['session']} after {left['gone_s']:.2f} s; left after "
          f"10 s: {len(left['left'])}")
    for which, cells in result.get("ncu", {}).items():
        for c in cells:
            print(f"  %%ncu {which:<8} blocked {c['blocked_s']:.3f} s  drawn {c['drawn_s']} s  kernels {c['kernels']}"
                  f"  in place {c['in_place']}")
    if args.json:
        args.json.write_text(json.dumps({"workload": args.workload, "trace": trace, "repeat": args.repeat,
                                         "not_recording_cost_pct": round(cost, 2), **result}, indent=1) + "\n")


if __name__ == "__main__":
    main()
