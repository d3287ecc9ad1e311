"""Record a transformer's training steps with %%nsys --ops both ways, on a GPU: PyTorch's own emit_nvtx ranges (C++,
CUDA builds: what --ops uses there) and nsight-magic's TorchDispatchMode (NSIGHT_MAGIC_OPS_MODE=dispatch: what CPU
builds use); plus each cell's own time under nsys.  The exports are the data the --ops reader is tested against
(the operator table must be the same both ways).

    python scripts/emit_nvtx_samples.py OUTDIR [--steps 3] [--time-steps 20]

Writes OUTDIR/<variant>.sqlite (environment strings scrubbed) and OUTDIR/emit_nvtx.json (cell seconds per variant:
plain, emit_nvtx, emit_nvtx with shapes, dispatch mode, dispatch mode with shapes).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests" / "data"))

VARIANTS = {  # name: (--ops, NSIGHT_MAGIC_OPS_MODE)
    "plain": (None, None),
    "emit_nvtx": ("names", "emit_nvtx"),
    "emit_nvtx_shapes": ("shapes", "emit_nvtx"),
    "dispatch": ("names", "dispatch"),
    "dispatch_shapes": ("shapes", "dispatch"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--time-steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the plumbing (emit_nvtx needs CUDA)")
    a = ap.parse_args()
    from make_findings_reports import scrub_export
    from ops import CELL, SETUP, cell_seconds

    from nsight_magic.options import NsysOptions
    from nsight_magic.run import run_nsys

    a.outdir.mkdir(parents=True, exist_ok=True)
    work = a.outdir / "profiles"
    setup = SETUP.format(device=a.device, batch=a.batch)
    times = {}
    for name, (ops, mode) in VARIANTS.items():
        os.environ.pop("NSIGHT_MAGIC_OPS_MODE", None)
        if mode:
            os.environ["NSIGHT_MAGIC_OPS_MODE"] = mode
        for steps, keep in ((a.steps, True), (a.time_steps, False)):
            opts = NsysOptions(name=name, directory=str(work), trace="cuda,nvtx" if a.device == "cuda" else "nvtx",
                               fresh=True, render=False,
                               quiet=True, ops=ops)
            r = run_nsys(CELL.format(steps=steps), opts, setup_sources=[setup], namespace={})
            if r.sqlite is None:
                print(f"{name}: no report ({r.status}: {r.messages})", flush=True)
                continue
            if keep:
                dest = a.outdir / f"{name}.sqlite"
                shutil.copy(r.sqlite, dest)
                scrub_export(dest)
            else:
                times[name] = round(cell_seconds(r.folder.path), 4)
                print(f"{name}: {steps} steps in {times[name]:.3f} s under nsys", flush=True)
    (a.outdir / "emit_nvtx.json").write_text(json.dumps({"batch": a.batch, "steps": a.time_steps,
                                                         "cell_s_under_nsys": times}, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
