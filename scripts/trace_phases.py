"""Where tracing slows a planted training step down: the host time of each phase of a step, in the process.

    python scripts/trace_phases.py NAME VARIANT [--steps 30]

Runs a planted workload's setup (tests/data/planted/make_planted_reports.py; one whose cell is the shared training
loop: `model`, `opt`, `x`), then times, step by step on the host clock, the forward pass, zero_grad, backward() and
opt.step(), with one synchronize after the loop: plain, this is the host work each phase costs; under `nsys profile`
the difference is what tracing adds to that phase.  Each phase sits in an NVTX range ("forward", "zero_grad",
"backward", "step") so that a recording counts the CUDA calls made in each.  Prints one JSON line: the median host
ms per phase and the loop's wall time.  scripts/gpu_check.py --only trace_phases runs it plain and under nsys.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "data" / "planted"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name")
    ap.add_argument("variant", choices=("bad", "fixed"))
    ap.add_argument("--steps", type=int, default=30)
    a = ap.parse_args()
    import nvtx
    import torch
    from make_planted_reports import BY_NAME, variant

    setup, _ = variant(BY_NAME[a.name], a.variant)
    ns: dict = {"__name__": "__main__"}
    exec(compile(setup, "<setup>", "exec"), ns)
    torch.cuda.synchronize()
    model, opt, x = ns["model"], ns["opt"], ns["x"]
    phases = {"forward": [], "zero_grad": [], "backward": [], "step": []}
    clock = time.perf_counter
    t_loop = clock()
    with nvtx.annotate("loop"):
        for _ in range(a.steps):
            t0 = clock()
            with nvtx.annotate("forward"):
                loss = model(x).square().mean()
            t1 = clock()
            with nvtx.annotate("zero_grad"):
                opt.zero_grad(set_to_none=True)
            t2 = clock()
            with nvtx.annotate("backward"):
                loss.backward()
            t3 = clock()
            with nvtx.annotate("step"):
                opt.step()
            t4 = clock()
            for k, d in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                phases[k].append(d * 1e3)
        torch.cuda.synchronize()
    wall = clock() - t_loop
    print(json.dumps({"loop_s": round(wall, 4),
                      "host_ms": {k: round(statistics.median(v), 3) for k, v in phases.items()}}), flush=True)


if __name__ == "__main__":
    main()
