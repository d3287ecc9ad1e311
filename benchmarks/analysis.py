"""What the advice costs next to reading: findings() + bottleneck() against a cold open (issues 28, 62).

    python benchmarks/analysis.py [--kernels 160000] [--src a_cuda_nvtx.sqlite] [--workdir DIR] [--repeat 3]
                                  [--profile] [--nsys-stats] [--number-calls]

Builds a `--kernels`-kernel trace from an H100 export (benchmarks/bigtrace.py), then, in a fresh child process each
time (no columnar cache beside the file): open_report + kernel_summary (the cold read), then bottleneck(), then
findings() (which reuses the diagnosis).  Prints the medians, the ratio analysis / read (goal <= 1) and the
process's peak RSS after the read and after the analysis (10M kernels: goal <= 3 GB).  --nsys-stats also times
`nsys stats --report gpukernsum` (2022.4's name of cuda_gpu_kern_sum) on the same file, alternated with the runs.
--profile prints the 25 functions with the most cumulative time of one analysis (cProfile).
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
t0, c0 = time.perf_counter(), cpu()
rep = open_report(sys.argv[1])
rep.kernel_summary()
t1, c1 = time.perf_counter(), cpu()
peak_read = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
if sys.argv[3] == "profile":
    import cProfile, pstats
    pr = cProfile.Profile(); pr.enable()
b = rep.bottleneck()
t2 = time.perf_counter()
fs = rep.findings()
t3, c3 = time.perf_counter(), cpu()
if sys.argv[3] == "profile":
    pr.disable(); pstats.Stats(pr, stream=sys.stderr).sort_stats(os.environ.get("NM_SORT", "cumulative")).print_stats(int(os.environ.get("NM_TOP", "25")))
print(json.dumps({"read_s": t1 - t0, "read_cpu_s": c1 - c0, "analysis_cpu_s": c3 - c1, "bottleneck_s": t2 - t1,
                  "findings_s": t3 - t2, "kernels": len(rep.kernels), "verdict": b.kind, "findings": len(fs),
                  "peak_read_mb": peak_read, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def once(path: Path, mode: str) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, str(path), str(HERE.parent), mode], capture_output=True,
                       text=True, timeout=3600)
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
    runs, stats = [], []
    for _ in range(a.repeat):  # alternated, so that the machine's load hits both alike
        runs.append(once(big, "time"))
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
    if stats:
        st = statistics.median(stats)
        print(f"  nsys stats --report gpukernsum     {st:.2f} s; cold read / nsys stats {med['read_s'] / st:.2f} "
              "(goal <= 1)")
    if a.profile:
        once(big, "profile")


if __name__ == "__main__":
    main()
