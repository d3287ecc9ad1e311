"""What a kernel holds after `%nsys_load` of a report with many NVTX ranges (issue 46: 3.15M ranges, 1.6 GB).

    python benchmarks/load_memory.py [--ranges 3150000] [--src FIXTURE.sqlite] [--workdir DIR] [--reopen]

Builds the report from a small export (pairs of nested push/pop ranges on its recorded thread, 1,037 names, in
SQL), loads it in a real kernel (nbclient) and prints the kernel's RSS before and after the load, its peak, the
seconds the load took, the cell output's bytes, and what a malloc_trim(0) in the next cell still returns (the freed
heap the load left held).  The first load is cold (no columnar cache); --reopen then writes the cache, as the finish
stage does for a profile, and loads the report again.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

DEFAULT_SRC = Path(__file__).resolve().parents[1] / "tests" / "data" / "nsys_h100_a_cuda_nvtx.sqlite"
STATUS = ("{l.split(':')[0]: int(l.split()[1]) // 1024 for l in open('/proc/self/status') "
          "if l.startswith(('VmRSS', 'VmHWM'))}")


def make_report(src: Path, dst: Path, ranges: int) -> None:
    shutil.copy(src, dst)
    with sqlite3.connect(dst) as con:
        tid, t0 = con.execute("SELECT globalTid, max(end) FROM NVTX_EVENTS WHERE eventType = 59").fetchone()
        con.execute(f"""WITH RECURSIVE r(k) AS (SELECT 0 UNION ALL SELECT k + 1 FROM r WHERE k < {ranges // 2 - 1})
            INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid)
            SELECT {t0} + k * 1000, {t0} + k * 1000 + 900, 59, 'step ' || (k % 1000), {tid} FROM r UNION ALL
            SELECT {t0} + k * 1000 + 100, {t0} + k * 1000 + 800, 59, 'op ' || (k % 37), {tid} FROM r""")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranges", type=int, default=3_150_000)
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--reopen", action="store_true", help="then write the columnar cache and load it again")
    a = ap.parse_args()
    work = a.workdir or Path(tempfile.mkdtemp(prefix="nsight-load-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    report = work / f"ranges_{a.ranges}.sqlite"
    if not report.exists():
        make_report(a.src, report, a.ranges)
    cache = report.with_suffix(".nsight-cache")
    shutil.rmtree(cache, ignore_errors=True)  # the first load is cold: no columnar cache beside the export
    print(f"{a.ranges:,} NVTX ranges ({report.stat().st_size / 1e6:.0f} MB export)")
    measure(report, work, "cold")
    if a.reopen:  # the cache the finish stage writes beside a profile's export, then the same load again
        from nsight_magic.report import open_report

        with open_report(report) as rep:
            rep.nvtx
            rep.data.write_cache()
        measure(report, work, "reopened with its columnar cache")


def measure(report: Path, work: Path, label: str) -> None:
    cells = ["%load_ext nsight_magic", f"import gc, time; gc.collect(); print({STATUS}); _t0 = time.perf_counter()",
             f"%nsys_load {report}", f"print('load_s', time.perf_counter() - _t0); gc.collect(); print({STATUS})",
             "import ctypes; _b = {STATUS}['VmRSS']; ctypes.CDLL(None).malloc_trim(0); "
             "print('returned_mb', _b - {STATUS}['VmRSS'])".replace("{STATUS}", STATUS)]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    t = time.perf_counter()
    NotebookClient(nb, timeout=3600, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()
    took = time.perf_counter() - t
    text = lambda i: "".join(o.get("text", "") for o in nb.cells[i].outputs if o.output_type == "stream")  # noqa
    load_s, after = text(3).split("\n", 1)
    before, after = eval(text(1)), eval(after)  # noqa: S307 - our own cells' dicts
    print(f"{label}: the load cell {float(load_s.split()[-1]):.1f} s, whole notebook {took:.1f} s")
    print(f"  kernel RSS before the load   {before['VmRSS']:>7,} MB")
    print(f"  kernel RSS after the load    {after['VmRSS']:>7,} MB   (peak {after['VmHWM']:,} MB)")
    print(f"  cell output                  {len(json.dumps(nb.cells[2].outputs)):>7,} bytes")
    print(f"  freed heap still held        {int(text(4).split()[-1]):>7,} MB   (a trim in the next cell returns it)")

if __name__ == "__main__":
    main()
