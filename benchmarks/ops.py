"""What `%%nsys --ops` costs: the cell's own wall time with and without operator ranges, both under nsys.

    python benchmarks/ops.py [--steps 20] [--repeat 3] [--device cpu|cuda] [--layers 4]

The cell is a training step of a small transformer encoder (what "a typical model" means here); its time is read
from the profiled process's own progress records (from the cell's start to its end), so nsys's start-up and the
export are not in it.  Prints each run, then the median ratio (goal: below 1.5).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SETUP = """import torch, torch.nn as nn
torch.manual_seed(0)
dev = "{device}"
layer = nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024, batch_first=True)
model = nn.Sequential(nn.Linear(64, 256), nn.TransformerEncoder(layer, num_layers={layers}), nn.Linear(256, 10)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn({batch}, 128, 64, device=dev)
y = torch.randint(0, 10, ({batch},), device=dev)
for _ in range(2):  # warm-up outside the capture
    nn.functional.cross_entropy(model(x).mean(1), y).backward()
if dev == "cuda":
    torch.cuda.synchronize()
"""
CELL = """for _ in range({steps}):
    loss = nn.functional.cross_entropy(model(x).mean(1), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
if dev == "cuda":
    torch.cuda.synchronize()
"""


def cell_seconds(folder: Path) -> float:
    """From the profiled process's progress records: the cell's start ("running") to its end ("cell-done")."""
    recs = [json.loads(x) for x in (folder / "progress.jsonl").read_text().splitlines() if x.strip()]
    t = {r["phase"]: r["t"] for r in recs}
    return t["cell-done"] - t["running"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--layers", type=int, default=4, help="encoder layers (tests/test_benchmarks.py: 1)")
    ap.add_argument("--trace", default=None)
    a = ap.parse_args()
    from nsight_magic.options import NsysOptions
    from nsight_magic.run import run_nsys

    trace = a.trace or ("cuda,nvtx,osrt" if a.device == "cuda" else "nvtx,osrt")
    setup = SETUP.format(device=a.device, batch=a.batch, layers=a.layers)
    cell = CELL.format(steps=a.steps)
    root = Path(tempfile.mkdtemp(prefix="nsight-magic-ops-bench-"))
    times: dict[str, list[float]] = {"plain": [], "ops": []}
    for i in range(a.repeat):
        for mode in ("plain", "ops"):
            r = run_nsys(cell, NsysOptions(name=f"{mode}{i}", directory=str(root), trace=trace, fresh=True,
                                           render=False, quiet=True, ops="names" if mode == "ops" else None),
                         setup_sources=[setup], namespace={})
            if not r.ok:
                sys.exit(f"{mode}: {r.status} {r.messages}")
            times[mode].append(cell_seconds(r.folder.path))
            print(f"run {i} {mode:5s} cell {times[mode][-1]:.3f} s", flush=True)
    plain, ops = statistics.median(times["plain"]), statistics.median(times["ops"])
    print(f"cell without --ops {plain:.3f} s, with --ops {ops:.3f} s (medians of {a.repeat}, {a.device}, "
          f"{a.steps} steps of a {a.layers}-layer transformer encoder)")
    print(f"ratio {ops / plain:.2f} (goal < 1.5)")


if __name__ == "__main__":
    main()
