"""What recording Python call stacks and device memory costs (issues 45 and 48): whether they can be on by default.

    python benchmarks/recording_cost.py [--workloads gpu,cpu] [--variants base,samples,...] [--repeat R]
                                        [--steps N] [--keep DIR] [--json F]

Each workload runs N steps and prints each step's time (perf_counter, CUDA synchronised per step) and the moment its
loop ended; it runs plainly and under `nsys profile` in each variant (R runs each, alternating; the minimum median
step kept).  Per variant: the step's cost against the plain run and against `base`, the seconds nsys took after the
process ended (what a user waits for before the profile is drawn: the stop, the import), and the report's size.

    base          -t cuda,nvtx (nvtx,osrt without a GPU) --sample=none --cpuctxsw=none: nsight-magic's recording
    native        + --sample=process-tree: CPU samples with native call stacks (what nsys 2022.4 can)
    samples       + --sample=process-tree --python-sampling=true --python-sampling-frequency=1000: Python stacks
    samples_nosym samples + --resolve-symbols=false: native frames left unresolved (nsys's stop is shorter)
    backtrace     samples + --python-backtrace=cuda: the Python stack of each CUDA call
    memory        base + --cuda-memory-usage=true: every device allocation and free
    plain_history (no nsys) torch's allocator history alone, against plain
    sampler       (no nsys) nsight-magic's Python sampler in the process (inside/python_samples.py), against plain
    base_sampler  base, with nsight-magic's Python sampler
    history       memory, and torch's allocator history in the process (torch.cuda.memory._record_memory_history
                  with Python stacks, a snapshot pickled after the loop)
    all           samples + memory + history
    noevents      base + --cuda-event-trace=false: CUDA events (cudaEventRecord and their waits) not traced

Workloads: gpu, a transformer encoder's training step (6 layers of 512, batch 32 x 128); cpu, a pure-Python
step (a dict of 100k records summed and sorted: about 30 ms).  `--keep DIR` copies each variant's last report (SQLite,
environment scrubbed) and snapshot there.  Variants nsys refuses are reported as such (nsys 2022.4 has no Python
sampling).  `--probe` prints the lines of `nsys profile|launch|start --help` that name these switches.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "data"))
from nsight_magic.tools import isolation_prefix  # noqa: E402 - nsys in its own namespace, as %%nsys runs it

WORKLOAD = r'''
import json, os, pickle, sys, time
kind, steps, history = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
sampler = None
if len(sys.argv) > 4 and sys.argv[4] == "1":  # nsight-magic's Python sampler, as the profiled process runs it
    sys.path.insert(0, os.environ["NM_REPO"])
    from nsight_magic.inside.python_samples import PythonSampler
    sampler = PythonSampler(os.environ.get("NM_SAMPLES", "python_samples.json"))
times = []
if kind == "gpu":
    import torch, torch.nn as nn
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=6).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(32, 128, 512, device="cuda")
    def step():
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
        torch.cuda.synchronize()
    for _ in range(3):
        step()
    if history:
        torch.cuda.memory._record_memory_history(max_entries=200000, stacks="python")
else:
    records = {i: {"id": i, "score": (i * 7919) % 1000 / 7.0, "tags": [str(i % 13), str(i % 7)]} for i in range(100000)}
    def step():
        total = sum(r["score"] for r in records.values())
        top = sorted(records.values(), key=lambda r: r["score"])[-10:]
        return total, top
    step()
if sampler is not None:
    sampler.start()
for _ in range(steps):
    t = time.perf_counter()
    step()
    times.append(time.perf_counter() - t)
if sampler is not None:
    sampler.remove()
snap_s = None
if kind == "gpu" and history:
    t = time.perf_counter()
    with open(os.environ.get("NM_SNAPSHOT", "snapshot.pickle"), "wb") as f:
        pickle.dump(torch.cuda.memory._snapshot(), f)
    snap_s = time.perf_counter() - t
    torch.cuda.memory._record_memory_history(enabled=None)
print("STEPS", json.dumps({"times": times, "end": time.time(), "snapshot_s": snap_s}), flush=True)
'''

SAMPLES = ["--sample=process-tree", "--python-sampling=true", "--python-sampling-frequency=1000"]
VARIANTS = {
    "base": [], "native": ["--sample=process-tree"], "samples": SAMPLES,
    "samples_nosym": [*SAMPLES, "--resolve-symbols=false"],
    "backtrace": [*SAMPLES, "--python-backtrace=cuda"], "memory": ["--cuda-memory-usage=true"],
    "history": ["--cuda-memory-usage=true"], "all": [*SAMPLES, "--cuda-memory-usage=true"], "base_sampler": [],
    "noevents": ["--cuda-event-trace=false"],  # issue 62: what tracing CUDA events (nsys 2024.2+) costs the step
}
HISTORY = {"history", "all"}
SAMPLER = {"sampler", "base_sampler"}  # nsight-magic's own Python sampler in the process (no nsys / under base)


def _run(argv: list[str], env: dict, timeout: float = 240) -> tuple[dict | None, float, str]:
    """Run one variant in a process group of its own; a run past `timeout` (nsys 2022.4's agent can spin when
    sampling) is killed with its group and reported as hung."""
    import signal

    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                          start_new_session=True) as p:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            return None, 0.0, f"hung: no end after {timeout:.0f} s (killed)"
    done = time.time()
    for line in out.splitlines():
        if line.startswith("STEPS "):
            got = json.loads(line[6:])
            return got, done - got["end"], out
    return None, 0.0, out


def probe(nsys: str) -> None:
    for verb in ("profile", "launch", "start"):
        text = subprocess.run([nsys, verb, "--help"], capture_output=True, text=True).stdout
        lines = [ln.strip() for ln in text.splitlines()
                 if any(k in ln for k in ("python", "cuda-memory", "--sample", "backtrace"))]
        print(f"nsys {verb} --help:\n  " + "\n  ".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=None, help="default: gpu,cpu with a GPU, cpu without")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--keep", type=Path, default=None)
    ap.add_argument("--probe", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    from nsight_magic import tools

    nsys = str(tools.find_nsys())
    version = tools.nsys_version(nsys)
    gpu = tools.gpu_visible()
    if args.probe:
        probe(nsys)
    work = Path(tempfile.mkdtemp(prefix="nsight-recording-cost-"))
    script = work / "workload.py"
    script.write_text(WORKLOAD)
    env = {**os.environ, "NSYS_NVTX_PROFILER_REGISTER_ONLY": "0"}
    workloads = args.workloads.split(",") if args.workloads else (["gpu", "cpu"] if gpu else ["cpu"])
    variants = [v for v in args.variants.split(",") if v]
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    result = {"nsys": version, "steps": args.steps, "workloads": {}}
    print(f"nsys {version}; {args.steps} steps, minimum of {args.repeat} runs' median step")
    for wl in workloads:
        trace = "cuda,nvtx" if wl == "gpu" else "nvtx,osrt"
        rows: dict[str, dict] = {}
        plains = ["plain"] + (["plain_history"] if wl == "gpu" and HISTORY & set(variants) else []) + \
            (["sampler"] if "sampler" in variants else [])
        variants = [v for v in variants if v != "sampler"]
        medians: dict[str, list[float]] = {**{p: [] for p in plains}, **{v: [] for v in variants}}
        for r in range(args.repeat):
            for v in [*plains, *variants]:
                if rows.get(v, {}).get("refused"):
                    continue
                hist = "1" if (v in HISTORY or v == "plain_history") and wl == "gpu" else "0"
                run_env = {**env, "NM_SNAPSHOT": str(work / f"{wl}_{v}.pickle"), "NM_REPO": str(ROOT),
                           "NM_SAMPLES": str(work / f"{wl}_{v}.samples.json")}
                cmd = [sys.executable, str(script), wl, str(args.steps), hist, "1" if v in SAMPLER else "0"]
                if v in plains:
                    got, tail, out = _run(cmd, run_env)
                else:
                    base = work / f"{wl}_{v}"
                    argv = [*isolation_prefix()[0], nsys, "profile", f"--trace={trace}", "--cpuctxsw=none", "--force-overwrite=true",
                            f"--output={base}", *(["--sample=none"] if not any(a.startswith("--sample") for a in
                                                                              VARIANTS[v]) else []),
                            *VARIANTS[v], *cmd]
                    got, tail, out = _run(argv, run_env)
                    rep, raw = base.with_suffix(".nsys-rep"), base.with_suffix(".qdstrm")
                    if not rep.exists() and raw.exists():  # nsys 2022.4 in the namespace leaves the raw stream
                        rep = tools.import_qdstrm(raw, nsys)
                    if got is None and not rep.exists():
                        rows[v] = {"refused": out.strip().splitlines()[-3:]}
                        print(f"  {wl:<4} {v:<10} refused or failed: {rows[v]['refused']}", flush=True)
                        continue
                    row = rows.setdefault(v, {"after_exit_s": [], "report_mb": []})
                    row["after_exit_s"].append(round(tail, 2))
                    if rep.exists():
                        row["report_mb"].append(round(rep.stat().st_size / 1e6, 2))
                    if args.keep and r == args.repeat - 1 and rep.exists():
                        keep_report(rep, nsys, args.keep / f"{wl}_{v}.sqlite")
                        snap = work / f"{wl}_{v}.pickle"
                        if snap.exists():
                            shutil.copy(snap, args.keep / snap.name)
                if got is None:
                    raise RuntimeError(f"{wl}/{v}: no step times: {out[-2000:]}")
                medians[v].append(statistics.median(got["times"][2:]))
                if got.get("snapshot_s") is not None:
                    rows.setdefault(v, {}).setdefault("snapshot_s", []).append(round(got["snapshot_s"], 3))
        plain = min(medians["plain"])
        base = min(medians["base"]) if medians.get("base") else None
        print(f"  {wl:<4} plain      step {plain * 1e3:8.2f} ms")
        for v in [*plains[1:], *variants]:
            if not medians[v]:
                continue
            m = min(medians[v])
            row = rows.setdefault(v, {})
            row.update({"step_ms": round(m * 1e3, 3), "vs_plain_pct": round((m / plain - 1) * 100, 2),
                        "vs_base_pct": round((m / base - 1) * 100, 2) if base else None})
            print(f"  {wl:<4} {v:<10} step {m * 1e3:8.2f} ms  {row['vs_plain_pct']:+6.2f}% vs plain  "
                  f"{(row['vs_base_pct'] if row['vs_base_pct'] is not None else float('nan')):+6.2f}% vs base  "
                  f"after exit {row.get('after_exit_s')} s  report {row.get('report_mb')} MB"
                  + (f"  snapshot {row['snapshot_s']} s" if row.get("snapshot_s") else ""), flush=True)
        result["workloads"][wl] = {"plain_step_ms": round(plain * 1e3, 3), "variants": rows}
    shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


def keep_report(rep: Path, nsys: str, dest: Path) -> None:
    """The report exported to SQLite at `dest`, the recording machine's environment scrubbed from it."""
    from make_findings_reports import scrub_export

    from nsight_magic import tools

    sqlite = tools.export_sqlite(rep, nsys)
    shutil.copy(sqlite, dest)
    scrub_export(dest)


if __name__ == "__main__":
    main()
