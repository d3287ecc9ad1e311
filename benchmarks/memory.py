"""How long GPU memory takes to read and draw on a large record (issue 48).

    python benchmarks/memory.py [--events 1000000] [--history 100000] [--repeat 3] [--workdir DIR]

Takes the H100 report tests/data/gpu_memory/eval_keeps_graph_bad (nsys's --cuda-memory-usage and torch's
allocator history beside it), replicates nsys's CUDA_GPU_MEMORY_USAGE_EVENTS to --events rows (allocations and
frees of 1,000 live blocks, in time order) and torch's history to --history entries (the recorder keeps at most
100,000: inside/memory_history.MAX_ENTRIES) with the original stacks, then prints, median of --repeat fresh opens:
  read     report.gpu_memory (both records, on the report's clock)
  summary  analysis.gpu_memory.memory_summary (peak, live blocks by site, growth per step)
  track    views.timeline_prepare.memory_series (at most MEMORY_POINTS steps per line)
  rows     what the track draws (bounded whatever the record's size)
"""
from __future__ import annotations

import argparse
import lzma
import pickle
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SRC = ROOT / "tests" / "data" / "gpu_memory" / "eval_keeps_graph_bad"


def build(work: Path, events: int, history: int) -> Path:
    import numpy as np

    for f in SRC.iterdir():
        dst = work / (f.stem if f.suffix == ".xz" else f.name)
        if f.suffix == ".xz":
            with lzma.open(f) as a, open(dst, "wb") as b:
                shutil.copyfileobj(a, b)
        else:
            shutil.copy(f, dst)
    db = work / "report.sqlite"
    con = sqlite3.connect(db)
    t0, t1 = con.execute("SELECT min(start), max(start) FROM CUDA_GPU_MEMORY_USAGE_EVENTS").fetchone()
    row = con.execute("SELECT * FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memKind = 2 LIMIT 1").fetchone()
    cols = [c[1] for c in con.execute("PRAGMA table_info(CUDA_GPU_MEMORY_USAGE_EVENTS)")]
    rng = np.random.default_rng(0)
    n = events
    start = np.sort(rng.integers(t0, max(t1, t0 + 1), n))
    op = np.where(np.arange(n) % 2 == 0, 0, 1)  # alloc, free, alloc, free ...: 1,000 live at most
    addr = 140_000_000_000_000 + (np.arange(n) // 2 % 1000) * (1 << 21)
    size = (1 + np.arange(n) // 2 % 64) << 20
    base = dict(zip(cols, row))
    con.execute("DELETE FROM CUDA_GPU_MEMORY_USAGE_EVENTS")
    order = [base | {"start": int(s), "memoryOperationType": int(o), "address": int(a), "bytes": int(b)}
             for s, o, a, b in zip(start, op, addr, size)]
    con.executemany(f"INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS ({', '.join(cols)}) VALUES "
                    f"({', '.join(':' + c for c in cols)})", order)
    con.commit()
    con.close()
    snap_path = work / "memory_snapshot.pickle"
    snap = pickle.loads(snap_path.read_bytes())
    trace = snap["device_traces"][0]
    allocs = [e for e in trace if e["action"] == "alloc"]
    t_first, t_last = trace[0]["time_us"], trace[-1]["time_us"]
    out = []
    for i in range(history // 2):  # alloc/free pairs over the same span, with the recorded stacks
        e = allocs[i % len(allocs)]
        t = t_first + (t_last - t_first) * i / max(history // 2, 1)
        a = 1 << 40 | (i % 5000) << 21
        out.append({**e, "addr": a, "time_us": t})
        out.append({**e, "action": "free_completed", "addr": a, "time_us": t + 1})
    snap["device_traces"] = [out]
    snap_path.write_bytes(pickle.dumps(snap, protocol=pickle.HIGHEST_PROTOCOL))
    return db


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--history", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args()
    from nsight_magic.analysis.gpu_memory import memory_summary
    from nsight_magic.report import open_report
    from nsight_magic.views.timeline_prepare import memory_series

    with tempfile.TemporaryDirectory(dir=a.workdir) as tmp:
        t = time.perf_counter()
        db = build(Path(tmp), a.events, a.history)
        print(f"built {a.events:,} nsys memory events and {a.history:,} torch history entries in "
              f"{time.perf_counter() - t:.1f} s")
        times: dict[str, list[float]] = {"read": [], "summary": [], "track": []}
        rows = 0
        for _ in range(a.repeat):
            rep = open_report(db)
            t = time.perf_counter()
            mem = rep.gpu_memory
            times["read"].append(time.perf_counter() - t)
            t = time.perf_counter()
            memory_summary(rep)
            times["summary"].append(time.perf_counter() - t)
            t = time.perf_counter()
            rows = len(memory_series(rep, rep.cell_range[0]))
            times["track"].append(time.perf_counter() - t)
            n = len(mem.timeline)
            rep.close()
        for k, v in times.items():
            print(f"  {k:8s} median {statistics.median(v):6.2f} s  (runs: {', '.join(f'{x:.2f}' for x in v)})")
        print(f"  rows     {n:,} timeline rows read, {rows:,} drawn on the track")


if __name__ == "__main__":
    main()
