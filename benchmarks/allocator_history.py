"""What torch's allocator history costs a training step, by what it records (needs a CUDA GPU).

    python benchmarks/allocator_history.py [--steps 16] [--repeat 5]

The transformer training step of benchmarks/latency.py (its setup code), timed on the host clock (one synchronize per loop) with no
history, then with `torch.cuda.memory._record_memory_history(stacks="python")` for each `context`: "all" (a stack
for every allocation and every free), "alloc" (for allocations only: what readers/gpu_memory.py reads) and None
(events without stacks).  Runs are interleaved and the median kept; it also prints the snapshot's pickling time and
size.  inside/memory_history.py records with the cheapest kind that keeps what the Memory tab shows.
"""
from __future__ import annotations

import argparse
import io
import pickle
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    import torch
    import torch.nn as nn

    from latency import WORKLOADS  # the same model and batch as the latency benchmark's training cell

    ns: dict = {}
    exec(compile(WORKLOADS["torch"]["setup"], "<setup>", "exec"), ns)
    model, head, opt, x, y = (ns[k] for k in ("model", "head", "opt", "x", "y"))

    def loop() -> float:
        t = time.perf_counter()
        for _ in range(a.steps):
            loss = nn.functional.cross_entropy(head(model(x)).flatten(0, 1), y.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        torch.cuda.synchronize()
        return time.perf_counter() - t

    loop()  # warm-up: kernels chosen, the optimizer's state made
    record = torch.cuda.memory._record_memory_history
    kinds = {"none": None, "context all": "all", "context alloc": "alloc", "no stacks": False}
    times: dict = {k: [] for k in kinds}
    snap: dict = {}
    for _ in range(a.repeat):
        for name, context in kinds.items():
            if context is not None:
                if context is False:
                    record(enabled="all", context=None, max_entries=100_000)
                else:
                    record(enabled="all", context=context, stacks="python", max_entries=100_000)
            times[name].append(loop())
            if context is not None:
                t = time.perf_counter()
                buf = io.BytesIO()
                pickle.dump(torch.cuda.memory._snapshot(), buf)
                snap[name] = (time.perf_counter() - t, buf.tell())
                record(enabled=None)
    base = statistics.median(times["none"])
    for name, got in times.items():
        m = statistics.median(got)
        extra = f"   snapshot {snap[name][0] * 1e3:6.1f} ms, {snap[name][1] / 1e6:5.2f} MB" if name in snap else ""
        print(f"{name:<14} {m * 1e3:8.1f} ms / {a.steps} steps  {m / base:5.2f}x{extra}")


if __name__ == "__main__":
    main()
