"""What our Python sampler makes the profiled program wait, and what of it the profile still charges to the program
(issue 61: our instruments' waits are never the user's; readers/instrument_waits.py).

A CPU training loop (a small MLP, PyTorch's quickstart shape, no DataLoader) profiled with `%%nsys`'s defaults
plus the OS runtime, with Python samples and with `--no-samples`; per run: the main thread's waits in the calls
CPython's GIL is made of (all of them, and those left to the program once the sampler's are taken out), and the
verdict's blocked share of the cell.

    python benchmarks/sampler_waits.py [--steps 200] [--repeat 2] [--variants on,off]
"""
from __future__ import annotations

import argparse
import tempfile

import pandas as pd

CELL = """
import torch, nvtx
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 784), torch.randint(0, 10, (64,))
for step in range({steps}):
    with nvtx.annotate("step"):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
"""


def gil_ms(df: pd.DataFrame) -> float:
    d = df[(df["tid"] == df["pid"]) & df["name"].astype(str).str.startswith(("pthread_cond", "pthread_mutex"))]
    return float((d["end_ns"] - d["start_ns"]).sum()) / 1e6


def main() -> None:
    from nsight_magic.options import NsysOptions
    from nsight_magic.report import open_report
    from nsight_magic.run import run_nsys

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--variants", default="on,off", help="with Python samples (on), without (off), or both")
    args = ap.parse_args()
    variants = [{"on": True, "off": False}[v] for v in args.variants.split(",")]
    with tempfile.TemporaryDirectory(prefix="nm-sampler-") as work:
        for i in range(args.repeat):
            for samples in variants:
                r = run_nsys(CELL.format(steps=args.steps),
                             NsysOptions(name="waits", directory=work, fresh=True, render=False, quiet=True,
                                         trace="nvtx,osrt", samples=samples))
                assert r.ok, r.messages
                rep = open_report(r.sqlite)
                try:
                    span = rep.capture
                    mine, ours = gil_ms(rep.osrt), gil_ms(rep.instrument_waits)
                    print(f"run {i} samples={'on ' if samples else 'off'} cell {span.duration_ns / 1e6:7.0f} ms: "
                          f"main thread's GIL-call waits {mine + ours:6.1f} ms, the program's {mine:6.1f} ms, "
                          f"ours {ours:6.1f} ms; verdict: {rep.bottleneck().summary}")
                finally:
                    rep.close()


if __name__ == "__main__":
    main()
