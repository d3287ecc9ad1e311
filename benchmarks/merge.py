"""Time to merge per-rank exports (--per-rank-reports) into one, for large traces.

    python benchmarks/merge.py [--src a_cuda_nvtx.sqlite] [--kernels 160000,1000000] [--ranks 2]

Each size builds one large export from a real H100 report (benchmarks/bigtrace.py) and merges `--ranks` copies of
it, as if each rank had recorded it; printed: the merge time, the merged file's size, and whether its kernel
summary is `--ranks` times the single one (the check that nothing was lost or doubled by the merge itself).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bigtrace import make_big_trace

from nsight_magic import open_report
from nsight_magic.readers.nsys_merge import merge_exports

DEFAULT_SRC = Path(__file__).resolve().parents[1] / "tests" / "data" / "nsys_h100_a_cuda_nvtx.sqlite"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC)
    ap.add_argument("--kernels", default="160000,1000000")
    ap.add_argument("--ranks", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.kernels.split(",")):
            big = make_big_trace(args.src, Path(tmp) / f"big_{n}.sqlite", n)
            out = Path(tmp) / f"merged_{n}.sqlite"
            t0 = time.perf_counter()
            merge_exports([big] * args.ranks, out)
            merge_s = time.perf_counter() - t0
            with open_report(big) as one, open_report(out) as merged:
                a, b = one.kernel_summary(), merged.kernel_summary()
                ok = (b["count"].to_numpy() == args.ranks * a["count"].to_numpy()).all() and \
                     (b["total_ns"].to_numpy() == args.ranks * a["total_ns"].to_numpy()).all()
                kernels = int(b["count"].sum())
            print(f"{args.ranks} x {n} kernels: merge {merge_s:.2f} s, {out.stat().st_size / 2**20:.0f} MB, "
                  f"{kernels} kernels in the merged export, summary = {args.ranks} x single: {ok}", flush=True)
            big.unlink()
            out.unlink()


if __name__ == "__main__":
    main()
