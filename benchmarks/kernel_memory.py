"""What a notebook's kernel keeps over many profiles (issue 63: +28 MB per warm cell of 60k NVTX ranges).

    python benchmarks/kernel_memory.py [--profiles 10] [--ranges 60000] [--trace nvtx] [--workdir DIR] [--watched]
                                       [--inplace]

A real kernel (nbclient; with --watched, driven as JupyterLab drives it, so each view has its live part; with
--inplace, the in-place kernel, `nsight-magic kernel install`, driven so, each cell recorded in it) loads the
extension, then runs --profiles `%%nsys` cells (the default warm worker), each
marking --ranges NVTX ranges; after each, a cell collects garbage, trims the heap (malloc_trim: freed memory given
back, so what stays is what is held) and prints the kernel's RSS and its live Python objects by type.  Prints RSS
per profile, the growth per profile after the second (a least-squares slope) and the object types that grew most
between the second profile and the last.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import numpy as np
from nbclient import NotebookClient

MEASURE = """
import gc, ctypes, collections, json
gc.collect(); ctypes.CDLL(None).malloc_trim(0)
_rss = [int(l.split()[1]) // 1024 for l in open('/proc/self/status') if l.startswith('VmRSS')][0]
_types = collections.Counter(f'{type(o).__module__!s}.{type(o).__qualname__!s}' for o in gc.get_objects())
print('MEASURE', json.dumps({'rss_mb': _rss, 'types': dict(_types.most_common(400))}))
del _types
"""


def cell(i: int, ranges: int, trace: str) -> str:
    return (f"%%nsys --name mem{i} -t {trace}\nimport nvtx\nfor k in range({ranges}):\n"
            "    nvtx.push_range('r'); nvtx.pop_range()\n")


def run_headless(cells: list[str], work: Path) -> list[str]:
    """nbclient, as papermill and nbconvert run a notebook: views saved, with no live part."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=3600, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()
    return [o.get("text", "") for c in nb.cells for o in c.outputs]


def run_watched(cells: list[str], work: Path, inplace_trace: str | None = None) -> list[str]:
    """A kernel driven as JupyterLab drives it (the in-place kernel tracing `inplace_trace`, installed into a
    prefix of the work folder); each profile's view waited for until it is whole."""
    import subprocess

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from latency import Frontend

    if inplace_trace:
        prefix = work / "prefix"
        subprocess.run([sys.executable, "-m", "nsight_magic.cli", "kernel", "install", "--prefix", str(prefix),
                        "--trace", inplace_trace], check=True, capture_output=True, timeout=60)
        kernels = prefix / "share" / "jupyter" / "kernels"
        fe = Frontend(work, dict(os.environ), kernel="nsight-magic", kernels_dir=kernels)
    else:
        fe = Frontend(work, dict(os.environ))
    try:
        return [fe.run(c, draw_timeout=600.0 if c.startswith("%%nsys") else 0.0)["text"] for c in cells]
    finally:
        fe.close()


def main() -> None:
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", type=int, default=10)
    ap.add_argument("--ranges", type=int, default=60_000)
    ap.add_argument("--trace", default="nvtx")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--watched", action="store_true",
                    help="drive the kernel as JupyterLab does (allow_stdin): views with their live timeline")
    ap.add_argument("--inplace", action="store_true", help="the in-place kernel (tracing --trace), watched")
    a = ap.parse_args()
    work = a.workdir or Path(tempfile.mkdtemp(prefix="nsight-kernel-memory-"))
    work.mkdir(parents=True, exist_ok=True)
    cells = ["%load_ext nsight_magic", MEASURE]
    for i in range(a.profiles):
        cells += [cell(i, a.ranges, a.trace), MEASURE]
    t = time.perf_counter()
    if a.inplace:
        texts = run_watched(cells, work, inplace_trace=a.trace)
    else:
        texts = run_watched(cells, work) if a.watched else run_headless(cells, work)
    took = time.perf_counter() - t
    got = [json.loads(line[len("MEASURE "):]) for text in texts for line in text.splitlines()
           if line.startswith("MEASURE ")]
    rss = [g["rss_mb"] for g in got]
    print(f"{a.profiles} profiles of {a.ranges:,} NVTX ranges (-t {a.trace}), whole notebook {took:.1f} s")
    print("kernel RSS after load and each profile (MB, after gc and malloc_trim):", " ".join(map(str, rss)))
    if len(rss) >= 4:
        y = np.asarray(rss[2:], float)
        slope = np.polyfit(np.arange(len(y)), y, 1)[0]
        print(f"growth per profile after the second: {slope:+.1f} MB")
        first, last = got[2]["types"], got[-1]["types"]
        grew = sorted(((last.get(k, 0) - first.get(k, 0), k) for k in set(first) | set(last)), reverse=True)[:12]
        print("objects that grew most (second profile -> last):",
              "; ".join(f"{k} +{n:,}" for n, k in grew if n > 0) or "none")


if __name__ == "__main__":
    main()
