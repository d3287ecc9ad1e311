"""What the advice costs next to reading: findings() + bottleneck() against a cold open (issues 28, 62).

    python benchmarks/analysis.py [--kernels 160000] [--src a_cuda_nvtx.sqlite] [--workdir DIR] [--repeat 3]
                                  [--profile] [--nsys-stats] [--number-calls] [--inputs] [--warm-memory GB]

Builds a `--kernels`-kernel trace from an H100 export (benchmarks/bigtrace.py), then, in a fresh child process each
time (no columnar cache beside the file): open_report + kernel_summary (the cold read), then bottleneck(), then
findings() (which reuses the diagnosis).  Prints the medians, the ratio analysis / read (goal <= 1) and the
process's peak RSS after the read and after the analysis (10M kernels: goal <= 3 GB).  --nsys-stats also times
`nsys stats --report gpukernsum` (2022.4's name of cuda_gpu_kern_sum) on the same file, alternated with the runs.
--profile prints the 25 functions with the most cumulative time of one analysis (cProfile).
--inputs splits the analysis in runs of their own: after the same cold read, the report's data that the analysis
reads (the frames and arrays that a timed run's analysis made it read, in threads as the analysis prefetches them),
then bottleneck() + findings() on them.  --warm-memory GB touches that much memory in a process of its own before
each run (give the analysis's peak at 10M kernels: where the machine's host takes freed memory back, paging it in
again costs the first run that grows into it seconds).
--src names another export to replicate; with --number-calls every emit_nvtx range of the copies gets an op_id of
its own, as a real run's: `--src ../shared/fixtures/nsys/public-sqlite/nsysai_mfu_2gpu_before.sqlite
--kernels 1000000 --number-calls` is a two-GPU training run with PyTorch's operator ranges (4.8M NVTX ranges of
4.7M distinct names at 1M kernels).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
DEFAULT_SRC = HERE.parents[1] / "shared" / "fixtures" / "nsys" / "h100-2025.3" / "a_cuda_nvtx.sqlite"

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[2])
def cpu():
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime
from nsight_magic import open_report
import nsight_magic.analysis  # imports are not what we measure
READS = ("kernels", "memcpy", "memset", "graphs", "cuda_api", "osrt", "sync", "overhead", "cublas", "cudnn",
         "nvtx_arrays", "nvtx", "python_samples", "gpu_metrics", "gpu_memory", "threads", "processes", "gpus")
t0, c0 = time.perf_counter(), cpu()
rep = open_report(sys.argv[1])
rep.kernel_summary()
t1, c1 = time.perf_counter(), cpu()
peak_read = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
if sys.argv[3] == "profile":
    import cProfile, pstats
    pr = cProfile.Profile(); pr.enable()
inputs_s, inputs_cpu_s, t_in, c_in = None, None, t1, c1
if sys.argv[3] == "inputs":  # what the analysis reads, read first (in threads where it prefetches them)
    reads = [f for f in sys.argv[4].split(",") if f]
    rep.prefetch(*reads)
    for f in reads:
        getattr(rep, f)
    t_in, c_in = time.perf_counter(), cpu()
    inputs_s, inputs_cpu_s = t_in - t1, c_in - c1
b = rep.bottleneck()
t2 = time.perf_counter()
fs = rep.findings()
t3, c3 = time.perf_counter(), cpu()
if sys.argv[3] == "profile":
    pr.disable(); pstats.Stats(pr, stream=sys.stderr).sort_stats(os.environ.get("NM_SORT", "cumulative")).print_stats(int(os.environ.get("NM_TOP", "25")))
# the report's data that the analysis made it read (its frames and arrays, held once read)
reads = [f for f in READS if f in rep.data.__dict__]
print(json.dumps({"read_s": t1 - t0, "inputs_s": inputs_s, "inputs_cpu_s": inputs_cpu_s, "reads": reads,
                  "read_cpu_s": c1 - c0, "analysis_cpu_s": c3 - c_in, "bottleneck_s": t2 - t_in,
                  "findings_s": t3 - t2, "kernels": len(rep.kernels), "verdict": b.kind, "findings": len(fs),
                  "peak_read_mb": peak_read, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


# Touches `GB` of memory and frees it: on a virtual machine whose host takes back the memory its guest freed (this
# 2-core machine: 3.2 GB touched in 6.7 s after 90 s idle, 0.2 s right after), a run that follows finds the memory
# backed and measures our code, not the host's paging.
WARM = "import numpy as np, sys; hold = [np.ones(10_000_000) for _ in range(int(float(sys.argv[1]) * 12.5))]"


def once(path: Path, mode: str, reads: list[str] | None = None, warm_gb: float = 0.0) -> dict:
    if warm_gb > 0:
        subprocess.run([sys.executable, "-c", WARM, str(warm_gb)], check=True, timeout=600)
    p = subprocess.run([sys.executable, "-c", CHILD, str(path), str(HERE.parent), mode, ",".join(reads or [])],
                       capture_output=True, text=True, timeout=3600)
    if mode == "profile":
        print(p.stderr[-40000:])
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    if not lines:
        sys.exit(p.stderr[-3000:])
    return json.loads(lines[-1])


def main() -> None:
    from bigtrace import make_big_trace

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=160_000)
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--nsys-stats", action="store_true")
    ap.add_argument("--warm-memory", type=float, default=0.0, metavar="GB",
                    help="touch this much memory before each run (a virtual machine's host paging it in costs seconds)")
    ap.add_argument("--inputs", action="store_true",
                    help="also split the analysis into reading its inputs and computing on them (another run each)")
    ap.add_argument("--number-calls", action="store_true",
                    help="number every emit_nvtx range of the copies (bigtrace.py): a real --pytorch run's NVTX names")
    a = ap.parse_args()
    root = a.workdir or Path(tempfile.gettempdir()) / "nsight-magic-analysis-bench"
    root.mkdir(parents=True, exist_ok=True)
    made_from = "" if a.src == DEFAULT_SRC else f"_{a.src.stem}"
    big = root / f"big{a.kernels}{made_from}{'_numbered' if a.number_calls else ''}.sqlite"
    if not big.exists():
        make_big_trace(a.src, big, a.kernels, number_calls=a.number_calls)
    shutil.rmtree(big.with_suffix(".nsight-cache"), ignore_errors=True)  # a columnar cache: not a cold read
    nsys = shutil.which("nsys") if a.nsys_stats else None
    runs, stats, split = [], [], []
    for _ in range(a.repeat):  # alternated, so that the machine's load hits both alike
        runs.append(once(big, "time", warm_gb=a.warm_memory))
        if a.inputs:  # the same, the data the last run's analysis read (runs[-1]["reads"]) read before it
            split.append(once(big, "inputs", runs[-1]["reads"], a.warm_memory))
        if nsys:
            t = time.perf_counter()
            subprocess.run([nsys, "stats", "--report", "gpukernsum", "--format", "csv", "--force-overwrite", "true",
                            "--output", str(root / "gpukernsum"), str(big)], capture_output=True, check=True,
                           timeout=3600)
            stats.append(time.perf_counter() - t)
    med = {k: statistics.median(r[k] for r in runs) for k in ("read_s", "bottleneck_s", "findings_s", "read_cpu_s",
                                                               "analysis_cpu_s", "peak_read_mb", "peak_mb")}
    analysis = med["bottleneck_s"] + med["findings_s"]
    print(f"{runs[0]['kernels']:,} kernels, verdict {runs[0]['verdict']}, {runs[0]['findings']} findings; "
          f"medians of {a.repeat} fresh processes:")
    print(f"  cold open_report + kernel_summary  {med['read_s']:.2f} s (CPU {med['read_cpu_s']:.2f} s)")
    print(f"  bottleneck()                       {med['bottleneck_s']:.2f} s")
    print(f"  findings() after it                {med['findings_s']:.2f} s")
    print(f"  bottleneck() + findings()          {analysis:.2f} s (CPU {med['analysis_cpu_s']:.2f} s)")
    print(f"  analysis / read                    {analysis / med['read_s']:.2f} (goal <= 1)")
    print(f"  peak RSS after the read            {med['peak_read_mb']:,.0f} MB")
    print(f"  peak RSS after the analysis        {med['peak_mb']:,.0f} MB")
    if split:
        sm = {k: statistics.median(r[k] for r in split) for k in ("read_s", "inputs_s", "inputs_cpu_s",
                                                                  "bottleneck_s", "findings_s")}
        compute = sm["bottleneck_s"] + sm["findings_s"]
        print(f"  the same, its inputs read first    (runs of their own, medians; read {sm['read_s']:.2f} s)")
        print(f"    reading them: {', '.join(split[0]['reads'])}")
        print(f"                                     {sm['inputs_s']:.2f} s (CPU {sm['inputs_cpu_s']:.2f} s); "
              f"/ read {sm['inputs_s'] / sm['read_s']:.2f}")
        print(f"    then bottleneck() + findings()   {compute:.2f} s; / read {compute / sm['read_s']:.2f}")
    if stats:
        st = statistics.median(stats)
        print(f"  nsys stats --report gpukernsum     {st:.2f} s; cold read / nsys stats {med['read_s'] / st:.2f} "
              "(goal <= 1)")
    if a.profile:
        once(big, "profile")


if __name__ == "__main__":
    main()
