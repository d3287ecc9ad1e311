"""`%%nsys --ops` against PyTorch Profiler on the same training step, on a GPU: GPU time per operator side by side.

    python scripts/ops_vs_profiler.py [--steps 10] [--out DIR]     # on a machine with a CUDA GPU and nsys 2023+

Ours: the step (benchmarks/ops.py's transformer) profiled by nsight_magic.run.run_nsys with --ops; per operator
the GPU time of the kernels, copies and memsets it launched (report.ops_summary()).  Theirs: the same step in this
process under torch.profiler with CUDA activity; per operator its self device time (key_averages()).  Operators
are compared where both see them at the top level (torch.profiler also lists composite and nested calls: aten::linear
around aten::addmm).  Also printed: the share of the step's kernels that belong to an operator.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    import pandas as pd
    import torch
    from ops import CELL, SETUP  # benchmarks/ops.py: one workload for both

    from nsight_magic.analysis.ops import attribute, op_ranges
    from nsight_magic.options import NsysOptions
    from nsight_magic.report import as_report
    from nsight_magic.run import run_nsys

    setup, cell = SETUP.format(device="cuda", batch=a.batch), CELL.format(steps=a.steps)
    root = Path(tempfile.mkdtemp(prefix="ops-vs-profiler-"))
    r = run_nsys(cell, NsysOptions(name="ops", directory=str(root), trace="cuda,nvtx", fresh=True, render=False,
                                   quiet=True, ops="names"), setup_sources=[setup], namespace={})
    if r.sqlite is None:
        sys.exit(f"no report: {r.status} {r.messages}")
    rep = as_report(r.open())
    ours = rep.ops_summary().set_index("op")
    g = attribute(rep, op_ranges(rep))
    kern = g[g["kind"] == "kernel"]
    attributed = float((kern["range"] >= 0).mean()) if len(kern) else 0.0

    ns: dict = {"__name__": "__main__"}
    exec(setup, ns)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        exec(cell, ns)
        torch.cuda.synchronize()
    theirs = {}
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = getattr(e, "self_cuda_time_total", 0)
        theirs[e.key] = (e.count, float(t) * 1e3)  # us -> ns
    rows = []
    for op, row in ours.iterrows():
        if op in theirs and theirs[op][1] > 0:
            rows.append({"op": op, "calls (ours)": int(row["calls"]), "calls (torch)": theirs[op][0],
                         "gpu ms (ours)": row["gpu_ns"] / 1e6, "gpu ms (torch)": theirs[op][1] / 1e6,
                         "ours / torch": row["gpu_ns"] / theirs[op][1]})
    df = pd.DataFrame(rows).sort_values("gpu ms (torch)", ascending=False)
    pd.set_option("display.width", 200)
    print(df.head(25).to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
    big = df[df["gpu ms (torch)"] >= 0.01 * df["gpu ms (torch)"].sum()]
    within = float(((big["ours / torch"] - 1).abs() <= 0.10).mean()) if len(big) else 0.0
    print(f"kernels of the step attributed to an operator: {100 * attributed:.1f}% of {len(kern)}")
    print(f"operators with >= 1% of the GPU time: {len(big)}; within 10% of torch.profiler: {100 * within:.0f}%")
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        df.to_csv(a.out / "ops_vs_profiler.csv", index=False)
        (a.out / "ops_vs_profiler.json").write_text(json.dumps({"attributed": attributed, "within_10pct": within,
                                                                "kernels": int(len(kern))}))


if __name__ == "__main__":
    main()
