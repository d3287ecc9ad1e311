"""Benchmark the Nsight Systems reader against `nsys stats` on large replicated traces (issue 3).

    python benchmarks/read.py [--src a_cuda_nvtx.sqlite] [--workdir DIR] [--repeat 5]

Builds a 160k-kernel and a 1.6M-kernel trace from an H100 export (benchmarks/bigtrace.py), then prints
  1. open + kernel/memcpy/cuda_api/nvtx summaries on the 160k trace, in a fresh child process each time, with no
     cache beside the file (cold), alternated with `nsys stats --report gpukernsum` on the same file (wall time),
     and the ratio of medians; then the same re-opened with the columnar cache that run.py writes beside a profile;
  2. peak RSS of a child process that opens the 1.6M trace (`--large`: 10M for issue 62's goal) and computes the
     four summaries, against `nsys stats --report gpukernsum` once, and of one that also builds the
     kernels/memcpy/memset/cuda_api/nvtx DataFrames.
Numbers are wall-clock on whatever machine runs it; other load on the machine shows up in them.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bigtrace import make_big_trace  # noqa: E402

DEFAULT_SRC = (Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "nsys" / "h100-2025.3"
               / "a_cuda_nvtx.sqlite")

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from nsight_magic.readers.nsys import open_nsys_report
t1 = time.perf_counter()
rep = open_nsys_report(sys.argv[1])
if sys.argv[2] == "write-cache":
    rep.kernel_summary(); print(json.dumps({"cache": str(rep.write_cache())})); sys.exit(0)
cached = rep.cached
rep.kernel_summary(by_launch=sys.argv[2] == "kernel")
if sys.argv[2] != "kernel":
    rep.memcpy_summary(); rep.cuda_api_summary(); rep.nvtx_summary()
t2 = time.perf_counter()
if sys.argv[2] == "frames":
    for f in ("kernels", "memcpy", "memset", "cuda_api", "nvtx"):
        getattr(rep, f)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "open_summaries_s": t2 - t1, "frames_s": t3 - t2, "cached": cached,
                  "kernels": len(rep.kernels) if sys.argv[2] == "frames" else None,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(argv, timeout=600) -> subprocess.CompletedProcess:
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise SystemExit(f"{argv[:3]} timed out after {timeout} s")
    if p.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed ({p.returncode}): {err[-500:]}")
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def child(path: Path, mode: str) -> dict:
    return json.loads(run([sys.executable, "-c", CHILD, str(path), mode]).stdout.strip().splitlines()[-1])


def nsys_stats_s(nsys: str, path: Path, out: Path) -> float:
    t = time.perf_counter()
    run([nsys, "stats", "--report", "gpukernsum", "--format", "csv", "--force-overwrite", "true",
         "--output", str(out), str(path)])
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--small", type=int, default=160_000)
    ap.add_argument("--large", type=int, default=1_600_000)
    args = ap.parse_args()
    nsys = shutil.which("nsys")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="nsight-magic-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"source: {args.src}  workdir: {work}  cpus: {os.cpu_count()}  load: {os.getloadavg()[0]:.2f}")

    traces = {}
    for n in (args.small, args.large):
        t = time.perf_counter()
        traces[n] = make_big_trace(args.src, work / f"big_{n}.sqlite", n)
        print(f"built {n:>9,} kernels: {traces[n].stat().st_size / 2**20:7.1f} MiB in {time.perf_counter() - t:5.2f} s")

    small = traces[args.small]
    shutil.rmtree(small.with_suffix(".nsight-cache"), ignore_errors=True)  # cold: no cache beside the file
    ours, kern, theirs = [], [], []
    for _ in range(args.repeat):  # alternate so that machine load hits all alike
        got = child(small, "summaries")
        assert not got["cached"]
        ours.append(got["open_summaries_s"])
        kern.append(child(small, "kernel")["open_summaries_s"])
        if nsys:
            theirs.append(nsys_stats_s(nsys, small, work / "gpukernsum"))
    mo, mk = statistics.median(ours), statistics.median(kern)
    print(f"\n{args.small:,} kernels, {args.repeat} runs each (median / min):")
    print(f"  nsight_magic open + kernel/memcpy/cuda_api/nvtx summaries: {mo:.3f} s / {min(ours):.3f} s")
    print(f"  nsight_magic open + kernel_summary(by_launch=True) only:   {mk:.3f} s / {min(kern):.3f} s")
    if theirs:
        mt = statistics.median(theirs)
        print(f"  nsys stats --report gpukernsum (whole command):          {mt:.3f} s / {min(theirs):.3f} s")
        print(f"  ratio, four summaries / nsys gpukernsum (medians): {mo / mt:.2f}   (goal <= 1.0)")
        print(f"  ratio, kernel summary / nsys gpukernsum (medians): {mk / mt:.2f}")
    else:
        print("  nsys not found: no comparison")
    child(small, "write-cache")  # what run.py does when a profile is made
    warm = []
    for _ in range(args.repeat):
        got = child(small, "summaries")
        assert got["cached"]
        warm.append(got["open_summaries_s"])
    mw = statistics.median(warm)
    print(f"  re-open with the columnar cache beside it (report.nsight-cache): {mw:.3f} s / {min(warm):.3f} s"
          + (f"   ratio to nsys gpukernsum {mw / statistics.median(theirs):.2f}" if theirs else ""))

    big = traces[args.large]
    s = child(big, "summaries")
    f = child(big, "frames")
    print(f"\n{args.large:,} kernels:")
    print(f"  open + 4 summaries: {s['open_summaries_s']:.2f} s, peak RSS {s['peak_rss_mb']:.0f} MB (goal at 1.6M: "
          "<= 1500; at 10M: <= 3 GB)")
    if nsys:
        st = nsys_stats_s(nsys, big, work / "gpukernsum")
        print(f"  nsys stats --report gpukernsum: {st:.2f} s; open + 4 summaries / nsys stats "
              f"{s['open_summaries_s'] / st:.2f} (goal <= 1)")
    print(f"  + kernels/memcpy/memset/cuda_api/nvtx frames ({f['kernels']:,} kernel rows): "
          f"{f['open_summaries_s'] + f['frames_s']:.2f} s, peak RSS {f['peak_rss_mb']:.0f} MB")
    if big.stat().st_size and args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
