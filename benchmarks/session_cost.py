"""What a training step costs while nsys records it, by how nsys was started: plain, `nsys profile`, and a session
(`nsys launch` ahead, `nsys start` / `nsys stop` around the steps, as a warm session and the in-place kernel record).
A variant's `_node` adds --cuda-graph-trace=node, as nsight-magic asks; `@FLAG` (repeatable) adds any nsys switch
to it: `launch@--cuda-event-trace=false` measures what one of nsys's own switches costs.

    python benchmarks/session_cost.py [--steps 40] [--repeat 3] [--variants plain,profile,launch] [--trace cuda,nvtx]
                                      [--workload transformer|mlp] [--batch 32] [--device cuda|cpu] [--json F]

The workload (the latency benchmark's transformer training step with its cross-entropy head, batch 32 x 128
tokens: launch-bound on an H200, 16 ms; --batch 256: 105 ms, the GPU the bound; or an MLP) runs its setup, then steps in
three phases: `before` (nothing recorded yet; under `nsys launch` the injection is loaded), `recorded` (the driver
has run `nsys start`; plain and `nsys profile` runs go straight on), `after` (`nsys stop` has returned).  Each step
is timed on the host clock with a synchronize.  Per variant: the median step of each phase (the minimum over the
runs), against plain.  A cost that shows in `before` as well comes from nsys's injection; one that shows only in
`recorded` from what the recording does.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORKLOAD = r'''
import json, sys, time
from pathlib import Path
import torch, torch.nn as nn
work, kind, steps, batch, dev = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
torch.manual_seed(0)
if kind == "transformer":
    layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, num_layers=6), nn.Linear(512, 1000)).to(dev)
    x = torch.randn(batch, 128, 512, device=dev)
    y = torch.randint(0, 1000, (batch * 128,), device=dev)
else:
    model = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(1024, 1024), nn.ReLU())]).to(dev)
    x = torch.randn(batch * 8, 1024, device=dev)
    y = torch.randint(0, 1024, (batch * 8,), device=dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

def step():
    loss = nn.functional.cross_entropy(model(x).flatten(0, -2), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if dev == "cuda":
        torch.cuda.synchronize()

def phase(n):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return times

def wait(name):
    while not (work / name).exists():
        time.sleep(0.01)

phase(5)
out = {"before": phase(steps)}
(work / "ready").touch()
wait("go")
out["recorded"] = phase(steps)
(work / "done").touch()
wait("stopped")
out["after"] = phase(steps)
print("STEPS " + json.dumps(out), flush=True)
'''


def _wait(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the workload ended before {path.name}: {proc.stdout.read()[-3000:]}")
        if time.monotonic() > end:
            raise TimeoutError(path.name)
        time.sleep(0.01)


def _end(nsys: str, session: str | None, proc: subprocess.Popen) -> None:
    """What a run that failed leaves: the workload, and the agent of its nsys session (nsys 2022.4's launch that
    ended with "End of file" left it running)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)
    if session is None:
        return
    subprocess.run([nsys, "shutdown", f"--session={session}", "--kill=sigkill"], capture_output=True, timeout=60)
    mark = f"--session-name={session}".encode()
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and mark in (d / "cmdline").read_bytes():
                os.kill(int(d.name), signal.SIGKILL)
        except OSError:
            pass


def run(variant: str, nsys: str, trace: str, work: Path, script: Path, kind: str, steps: int, batch: int,
        device: str) -> dict:
    for f in ("ready", "go", "done", "stopped"):
        (work / f).unlink(missing_ok=True)
    cmd = [sys.executable, str(script), str(work), kind, str(steps), str(batch), device]
    report = work / f"{variant}"
    session = f"nm-cost-{os.getpid()}-{time.monotonic_ns()}"
    base, *flags = variant.split("@")
    how, _, node = base.partition("_")
    more = (["--cuda-graph-trace=node"] if node == "node" else []) + flags  # node: as nsight-magic asks for graphs
    if how == "profile":
        cmd = [nsys, "profile", f"--trace={trace}", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true",
               f"--output={report}", *more, *cmd]
    elif how == "launch":
        cmd = [nsys, "launch", f"--session-new={session}", f"--trace={trace}", *more, *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait(work / "ready", proc)
        if how == "launch":
            subprocess.run([nsys, "start", f"--session={session}", "--sample=none", "--cpuctxsw=none",
                            "--force-overwrite=true", f"--output={report}"], check=True, capture_output=True)
        (work / "go").touch()
        _wait(work / "done", proc)
        if how == "launch":
            subprocess.run([nsys, "stop", f"--session={session}"], check=True, capture_output=True)
        (work / "stopped").touch()
        out, _ = proc.communicate(timeout=600)
    except BaseException:
        _end(nsys, session if how == "launch" else None, proc)
        raise
    for line in out.splitlines():
        if line.startswith("STEPS "):
            return json.loads(line[6:])
    raise RuntimeError(f"{variant}: no step times: {out[-3000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--variants", default="plain,profile,launch")
    ap.add_argument("--trace", default="cuda,nvtx")
    ap.add_argument("--workload", choices=("transformer", "mlp"), default="transformer")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: the benchmark's own test (-t nvtx)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    from nsight_magic import tools

    nsys = str(tools.find_nsys())
    work = Path(tempfile.mkdtemp(prefix="nsight-session-cost-"))
    script = work / "workload.py"
    script.write_text(WORKLOAD)
    variants = args.variants.split(",")
    best: dict[str, dict[str, float]] = {}
    print(f"nsys {tools.nsys_version(nsys)}; {args.workload} batch {args.batch} on {args.device}, {args.steps} steps "
          f"a phase, trace {args.trace}; "
          f"median step, minimum of {args.repeat} runs")
    for r in range(args.repeat):
        for v in variants:
            try:
                got = run(v, nsys, args.trace, work, script, args.workload, args.steps, args.batch, args.device)
            except RuntimeError as e:
                # nsys 2022.4's launch at times ends with "End of file" before the workload starts, on a loaded
                # machine (a test run beside others): nsys's, not the workload's (no traceback of it), run again
                if "Traceback" in str(e) or v.split("@")[0] == "plain":
                    raise
                print(f"  run {r + 1} {v:<8} nsys ended before the workload was ready ({str(e)[-200:].strip()}): "
                      "run again", flush=True)
                got = run(v, nsys, args.trace, work, script, args.workload, args.steps, args.batch, args.device)
            med = {ph: statistics.median(t) * 1e3 for ph, t in got.items()}
            print(f"  run {r + 1} {v:<8} " + "  ".join(f"{ph} {ms:7.2f} ms" for ph, ms in med.items()), flush=True)
            b = best.setdefault(v, med)
            for ph, ms in med.items():
                b[ph] = min(b[ph], ms)
    plain = best.get("plain", {})
    for v, med in best.items():
        print(f"{v:<8} " + "  ".join(f"{ph} {ms:7.2f} ms" + (f" ({ms / plain[ph]:.2f}x)" if plain else "")
                                     for ph, ms in med.items()))
    shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps({"workload": args.workload, "batch": args.batch, "trace": args.trace,
                                         "steps": args.steps,
                                         "median_step_ms": best}, indent=1) + "\n")


if __name__ == "__main__":
    main()
