"""What nsight-magic's Python sampler costs a launch-heavy step, part by part (issue 62: the cell's own run).

    python benchmarks/sampler_cost.py [--workload gpu|cpu] [--steps 30] [--rounds 5] [--variants a,b,...]

One process runs the step (gpu: a transformer encoder's training step, as benchmarks/recording_cost.py; cpu: the
torch-cpu cell's step, 2 layers of 512, a batch of 8 x 32) in blocks of --steps, each block under one variant, the
variants taken in turn for --rounds rounds (the machine's drift hits all alike).  Per variant: the median step and
its cost against plain.

    plain       no sampler
    sampler     the sampler as the profiled process runs it (inside/python_samples.py)
    nosync      the sampler without its sync recorder (torch's sync-debug mode left off)
    noswitch    the sampler without the lowered switch interval
    slow        the sampler at twice its interval
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nsight_magic.inside import python_samples as ps  # noqa: E402

VARIANTS = ("plain", "sampler", "nosync", "noswitch", "slow")


def workload(kind: str):
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    dev = "cuda" if kind == "gpu" else "cpu"
    layers, shape = (6, (32, 128, 512)) if kind == "gpu" else (2, (8, 32, 512))
    layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True)
    model = nn.TransformerEncoder(layer, num_layers=layers).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(*shape, device=dev)

    def step():
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if dev == "cuda":
            torch.cuda.synchronize()
    for _ in range(3):
        step()
    return step


def block(step, variant: str, steps: int, folder: Path) -> list[float]:
    sampler = None
    if variant != "plain":
        sampler = ps.PythonSampler(folder / f"{variant}.json",
                                   interval=ps.INTERVAL_S * (2 if variant == "slow" else 1))
        if variant == "nosync":
            sampler.syncs.start = lambda: None
        switch = ps.SWITCH_S
        if variant == "noswitch":
            ps.SWITCH_S = 1.0  # never lower than CPython's own
        try:
            sampler.start()
        finally:
            ps.SWITCH_S = switch
    times = [_timed(step) for _ in range(steps)]
    if sampler is not None:
        sampler.remove()
    return times


def _timed(step) -> float:
    t = time.perf_counter()
    step()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=("gpu", "cpu"), default="gpu")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    a = ap.parse_args()
    variants = [v for v in a.variants.split(",") if v]
    step = workload(a.workload)
    got: dict[str, list[float]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.rounds):
            for v in variants:
                got[v] += block(step, v, a.steps, Path(tmp))
    base = statistics.median(got["plain"]) if "plain" in got else None
    print(f"{a.workload}: {a.rounds} rounds of {a.steps} steps per variant, median step")
    for v in variants:
        med = statistics.median(got[v])
        print(f"  {v:<9} {med * 1e3:8.2f} ms" + (f"   {100 * (med / base - 1):+6.2f}% vs plain" if base else ""))


if __name__ == "__main__":
    main()
