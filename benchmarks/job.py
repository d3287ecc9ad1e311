"""Opening a many-rank job: Dask against a serial loop, and the notebook process's memory.

    python benchmarks/job.py [--ranks 64] [--kernels 160000] [--workers 2] [--workdir DIR]

Makes one export of `--kernels` kernels from a real H100 export (benchmarks/bigtrace.py), copies it once per rank
(each copy on a clock of its own: its session start moved, as on another host), then times
  1. a serial loop of what open_job's tasks compute (jobs.rank_task.summarize_rank of every rank, then
     diagnose_rank of the ranks jobs.alike chooses), in this process, one after the other;
  2. nsight_magic.open_job on a LocalCluster of `--workers` single-threaded worker processes (started and closed
     inside the timing);
and prints both wall times, their ratio (goal <= 0.6 with 2 workers on a 2-core machine), and this process's peak
RSS during open_job measured in a fresh process (goal <= 1.5 GB, not growing with the ranks); then
  3. a serial loop of the plain read (open_report + kernel_summary), and open_job's ratio to it (goal <= 0.8);
  4. open_job once more after a first open wrote each rank's columnar cache (a job opened again), and the plain
     loop reading the same caches.
Each of 1-3 starts without any columnar cache beside the reports (a rank's first open writes one).
Each also prints its CPU time (this process and the workers it started: their forkserver is stopped before it is
counted): the serial loops use more than one core, as the reader scans its tables in threads; and open_job's phases:
the cluster's start, when the first task began and the last ended, open_job's return, the close, the busiest
worker's compute and the tasks' compute time by kind.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
DEFAULT_SRC = HERE.parents[1] / "shared" / "fixtures" / "nsys" / "h100-2025.3" / "a_cuda_nvtx.sqlite"

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[3])
from nsight_magic import open_job
def cpu_s():
    return sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF,
                                                                        resource.RUSAGE_CHILDREN)))
if __name__ == "__main__":
    t, cpu0 = time.perf_counter(), cpu_s()
    phases = None
    if sys.argv[2] == "serial":
        from nsight_magic.jobs.discover import find_rank_reports
        from nsight_magic.jobs.job import diagnose_groups
        from nsight_magic.jobs.rank_task import diagnose_rank, summarize_rank
        results = [summarize_rank(f.rank, str(f.path)) for f in find_rank_reports(sys.argv[1])]
        results = diagnose_groups(results, lambda jobs: [diagnose_rank(*j) for j in jobs])
        errors = [r.error for r in results if r.error]
    elif sys.argv[2] == "summary":  # the plain read a rank's task is compared with (issue 28)
        from nsight_magic import open_report
        from nsight_magic.jobs.discover import find_rank_reports
        for f in find_rank_reports(sys.argv[1]):
            with open_report(f.path) as rep:
                rep.kernel_summary()
        errors = []
    else:
        from nsight_magic.jobs.job import local_cluster
        cluster = local_cluster(int(sys.argv[2]))  # the LocalCluster open_job starts by itself (importing Dask)
        from distributed import Client, get_task_stream
        client = Client(cluster)
        up, up_wall = time.perf_counter(), time.time()
        with get_task_stream(client) as stream:
            job = open_job(sys.argv[1], client=client)
        loaded = time.perf_counter()
        errors = job.errors
        straggler = job.straggler()
        client.close(); cluster.close()
        # the workers were forked by multiprocessing's forkserver (jobs.job): ended, it has reaped them, and their
        # CPU time counts among this process's children
        import multiprocessing.forkserver
        multiprocessing.forkserver._forkserver._stop()
        # where the time went: the cluster's start, the tasks (when the first began, the busiest worker's
        # compute time, the sum over tasks by kind), what followed the last task, the close
        spans = [(x["key"], x["worker"], ss["start"], ss["stop"]) for x in stream.data for ss in x["startstops"]
                 if ss["action"] == "compute"]
        busy = {}
        for _, w, a, b in spans:
            busy[w] = busy.get(w, 0.0) + b - a
        kinds = {}
        for k, _, a, b in spans:
            kind = str(k).split("-")[2] if str(k).startswith("nsight-magic-") else "other"
            kinds[kind] = kinds.get(kind, 0.0) + b - a
        phases = {"start_s": up - t, "first_task_s": min(a for _, _, a, _ in spans) - up_wall,
                  "last_task_end_s": max(b for *_, b in spans) - up_wall, "open_job_s": loaded - up,
                  "busiest_worker_s": max(busy.values()), "task_s": kinds,
                  "close_s": time.perf_counter() - loaded}
    wall = time.perf_counter() - t
    # CPU time of this process and of the ended ones it started (the Dask workers, closed above)
    print(json.dumps({"wall_s": wall, "cpu_s": cpu_s() - cpu0, "phases": phases,
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "errors": errors}))
"""


def make_job(src: Path, root: Path, ranks: int, kernels: int) -> Path:
    from bigtrace import make_big_trace

    job = root / f"job{ranks}x{kernels}"
    if job.exists() and len(list(job.glob("report.*.sqlite"))) == ranks:
        return job
    shutil.rmtree(job, ignore_errors=True)
    job.mkdir(parents=True)
    base = make_big_trace(src, root / f"base{kernels}.sqlite", kernels)
    for r in range(ranks):
        dst = job / f"report.{r}.sqlite"
        shutil.copyfile(base, dst)
        con = sqlite3.connect(dst)
        with con:  # another host's clock: the same events, its session start elsewhere in UTC
            con.execute("UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + ?", (r * 1_000_000,))
        con.close()
    return job


def run(job: Path, mode: str, cold: bool = True) -> dict:
    if cold:  # no columnar cache beside any rank's report (a rank's first open writes one)
        for c in job.glob("*.nsight-cache"):
            shutil.rmtree(c)
    p = subprocess.run([sys.executable, "-c", CHILD, str(job), mode, str(HERE.parent)], capture_output=True,
                       text=True, timeout=7200)
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    if not lines:
        sys.exit(f"{mode}: {p.stderr[-2000:]}")
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--kernels", type=int, default=160_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC)
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args()
    root = a.workdir or Path(tempfile.gettempdir()) / "nsight-magic-job-bench"
    root.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    job = make_job(a.src, root, a.ranks, a.kernels)
    print(f"{a.ranks} ranks x {a.kernels:,} kernels in {job} (made in {time.perf_counter() - t:.1f} s)", flush=True)
    serial = run(job, "serial")
    print(f"serial loop of the tasks: {serial['wall_s']:.1f} s (CPU {serial['cpu_s']:.1f} s), peak RSS "
          f"{serial['rss_mb']:.0f} MB", flush=True)
    dask = run(job, str(a.workers))
    print(f"open_job on a {a.workers}-worker LocalCluster: {dask['wall_s']:.1f} s (CPU {dask['cpu_s']:.1f} s), "
          f"notebook process peak RSS "
          f"{dask['rss_mb']:.0f} MB, errors {len(dask['errors'])}")
    print(f"ratio {dask['wall_s'] / serial['wall_s']:.2f} (goal <= 0.6)")
    print(phases(dask))
    plain = run(job, "summary")
    print(f"serial loop of open_report + kernel_summary: {plain['wall_s']:.1f} s (CPU {plain['cpu_s']:.1f} s); "
          f"open_job / that "
          f"{dask['wall_s'] / plain['wall_s']:.2f} (goal <= 0.8)")
    run(job, str(a.workers))  # the job's first open: each rank's columnar cache written
    again = run(job, str(a.workers), cold=False)
    plain_again = run(job, "summary", cold=False)
    print(f"open_job again (the ranks' columnar caches written by its first open): {again['wall_s']:.1f} s "
          f"(CPU {again['cpu_s']:.1f} s); / the cold plain loop {again['wall_s'] / plain['wall_s']:.2f}, / the "
          f"plain loop reading the same caches ({plain_again['wall_s']:.1f} s) "
          f"{again['wall_s'] / plain_again['wall_s']:.2f}")
    print(phases(again))


def phases(r: dict) -> str:
    p = r["phases"]
    tasks = ", ".join(f"{k} {v:.1f}" for k, v in sorted(p["task_s"].items()))
    return (f"  phases: cluster start {p['start_s']:.2f} s, first task after {p['first_task_s']:.2f} s, last task "
            f"ended after {p['last_task_end_s']:.2f} s, open_job {p['open_job_s']:.2f} s, close {p['close_s']:.2f} s; "
            f"busiest worker computed {p['busiest_worker_s']:.2f} s; tasks' compute s: {tasks}")


if __name__ == "__main__":
    main()
