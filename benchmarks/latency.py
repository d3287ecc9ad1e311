"""How long a profiled cell blocks the notebook, and when its profile is drawn.

    python benchmarks/latency.py [--workload cpu|torch] [--trace T] [--pause S] [--warm N] [--flags F] [--today]
                                 [--json F]

One notebook runs through a real kernel, driven as JupyterLab drives it (jupyter_client, allow_stdin=True): the
extension, a %%nsight_setup cell, a pause standing for the user writing the next cell, the cell run plainly, then
the same cell under %%nsys (the first one, then --warm more), each after a pause.  Per cell it prints:

    blocked  execute_input -> execute_reply: the time the notebook could run nothing else (kernel clock)
    drawn    execute_input -> the first update that put the profile's view in the cell's output (an nsys view's
             live part, before its saved copy is made)
    whole    execute_input -> the update that completed it (READY_KEY: its saved copy made, view.html written)

--today runs the same notebook a second time the way nsight-magic worked before the profile loaded in the
background: every %%nsys with --wait and no worker prepared ahead (NSIGHT_MAGIC_PREWARM=0).

Workloads: cpu, a 0.5 s Python cell in NVTX ranges with a 3 s setup (Debian's nsys on any machine); torch-cpu, the
torch cell on the CPU, 2 layers, a batch of 8 x 32 tokens (any machine); torch, a
transformer training cell of 16 steps on the GPU (needs CUDA and an nsys that traces it: the lent H100).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from jupyter_client.manager import KernelManager

READY_KEY = "application/vnd.nsight-magic+json"  # the update that completed the view (its saved copy made)
VIEW_MIME = "application/vnd.nsight-magic.view+json"  # an update that shows the view (its live part)

WORKLOADS = {
    "cpu": {
        "setup": """import time, nvtx
def work(ms):
    end = time.perf_counter() + ms / 1000
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x
time.sleep(3)        # imports and data of a real setup
""",
        "cell": """_t0 = time.perf_counter()
for i in range(10):
    with nvtx.annotate(f"step {i}"):
        work(50)
print(f"own run {time.perf_counter() - _t0:.4f} s")
""",
    },
    "torch": {
        "setup": """import time, torch, torch.nn as nn, nvtx
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True)
model = nn.TransformerEncoder(layer, num_layers=6).cuda()
head = nn.Linear(512, 1000).cuda()
opt = torch.optim.AdamW(list(model.parameters()) + list(head.parameters()), lr=1e-4)
x = torch.randn(32, 128, 512, device="cuda")
y = torch.randint(0, 1000, (32, 128), device="cuda")
for _ in range(3):
    loss = nn.functional.cross_entropy(head(model(x)).flatten(0, 1), y.flatten())
    opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
torch.cuda.synchronize()
""",
        "cell": """_t0 = time.perf_counter()
_steps = []
for i in range(16):
    with nvtx.annotate(f"step {i}"):
        loss = nn.functional.cross_entropy(head(model(x)).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    _steps.append(time.perf_counter() - _t0 - sum(_steps))
print(f"own run {time.perf_counter() - _t0:.4f} s")
print(f"first step {_steps[0] * 1e3:.1f} ms, the others {sorted(_steps[1:])[7] * 1e3:.1f} ms (median)")
""",
    },
}


# the same training cell on the CPU, smaller (the "CPU-bound PyTorch loop"): Debian's nsys on any machine
WORKLOADS["torch-cpu"] = {
    "setup": WORKLOADS["torch"]["setup"].replace('.cuda()', '').replace(', device="cuda"', '')
    .replace("num_layers=6", "num_layers=2").replace("(32, 128, 512)", "(8, 32, 512)").replace("(32, 128)", "(8, 32)")
    .replace("torch.cuda.synchronize()", ""),
    "cell": WORKLOADS["torch"]["cell"].replace("    torch.cuda.synchronize()\n", ""),
}


def _shows_view(m: dict) -> bool:
    """An update that puts the profile's view in the output: its live part first, or the whole view."""
    c = m["content"]
    return VIEW_MIME in c.get("data", {}) or READY_KEY in c.get("metadata", {}) and "text/html" in c.get("data", {})


def _date(msg) -> float:
    d = msg["header"]["date"]
    return d.timestamp() if hasattr(d, "timestamp") else time.time()


class Frontend:
    """A kernel driven like JupyterLab: every iopub message kept, displays followed by their display ids."""

    def __init__(self, cwd: Path, env: dict, kernel: str = "python3", kernels_dir: Path | None = None):
        self.km = KernelManager(kernel_name=kernel)
        if kernels_dir is not None:  # a kernelspec installed into a prefix of its own (the in-place kernel)
            self.km.kernel_spec_manager.kernel_dirs.insert(0, str(kernels_dir))
        self.km.start_kernel(cwd=str(cwd), env=env)
        self.kc = self.km.blocking_client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)
        self.pending: list[dict] = []   # iopub messages read while waiting for something else

    def run(self, code: str, draw_timeout: float = 0.0) -> dict:
        """Execute one cell; blocked and (with draw_timeout) drawn seconds, and what it printed."""
        msg_id = self.kc.execute(code, allow_stdin=True)
        started = reply = drawn = whole = None
        text, ids, idle = [], set(), False
        while reply is None or not idle:
            if reply is None:
                try:
                    r = self.kc.get_shell_msg(timeout=0.05)
                    if r["parent_header"].get("msg_id") == msg_id:
                        reply = r
                except Exception:  # noqa: BLE001 - queue.Empty
                    pass
            for m in self._iopub(0.05):
                if m["parent_header"].get("msg_id") != msg_id:
                    continue
                t = m["header"]["msg_type"]
                if t == "execute_input":
                    started = _date(m)
                elif t == "status" and m["content"]["execution_state"] == "idle":
                    idle = True
                elif t == "stream":
                    text.append(m["content"]["text"])
                elif t == "error":
                    text.append("\n".join(m["content"]["traceback"]))
                elif t in ("display_data", "update_display_data"):
                    did = m["content"].get("transient", {}).get("display_id")
                    if did:
                        ids.add(did)
                    if _shows_view(m) and drawn is None:  # drawn while the cell ran (--wait)
                        drawn = _date(m)
                    if READY_KEY in m["content"].get("metadata", {}):
                        whole = _date(m)
                    text.append(m["content"]["data"].get("text/plain", "")[:300] + "\n")
        out = {"blocked_s": _date(reply) - started, "text": "".join(text), "status": reply["content"]["status"]}
        if draw_timeout:
            if whole is None:
                drawn, whole = self._drawn(ids, drawn, draw_timeout)
            out["drawn_s"] = drawn - started if drawn is not None else None
            out["whole_s"] = whole - started if whole is not None else None
        return out

    def _drawn(self, ids: set, drawn: float | None, timeout: float) -> tuple[float | None, float | None]:
        """The times of the first update that showed the profile's view and of the one that completed it (None:
        not within `timeout`)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for m in self._iopub(0.1):
                c = m["content"]
                if m["header"]["msg_type"] not in ("display_data", "update_display_data") or \
                        c.get("transient", {}).get("display_id") not in ids:
                    continue
                if drawn is None and _shows_view(m):
                    drawn = _date(m)
                if READY_KEY in c.get("metadata", {}):
                    return drawn if drawn is not None else _date(m), _date(m)
        return drawn, None

    def _iopub(self, timeout: float) -> list[dict]:
        out, self.pending = self.pending, []
        try:
            out.append(self.kc.get_iopub_msg(timeout=timeout))
            while True:
                out.append(self.kc.get_iopub_msg(timeout=0))
        except Exception:  # noqa: BLE001 - queue.Empty
            pass
        return out

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)


def notebook(workload: str, trace: str | None, warm: int, wait: bool, extra: str = "") -> list[tuple[str, str]]:
    w = WORKLOADS[workload]
    flags = (f" -t {trace}" if trace else "") + (" --wait" if wait else "") + (f" {extra}" if extra else "")
    setup_flags = f" --trace {trace}" if trace else ""
    cells = [("extension", "%load_ext nsight_magic"), ("setup", f"%%nsight_setup{setup_flags}\n{w['setup']}"),
             ("plain cell", w["cell"]), ("first %%nsys", f"%%nsys --name first{flags}\n{w['cell']}")]
    for i in range(warm):  # the plain cell again between them: the machine's own spread, measured alike
        cells += [(f"warm %%nsys {i + 1}", f"%%nsys --name warm{flags}\n{w['cell']}"),
                  (f"plain cell {i + 2}", w["cell"])]
    return cells


def measure(args, today: bool) -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="nsight-latency-"))
    env = {**os.environ, "JPY_SESSION_NAME": str(work / "latency.ipynb")}
    if today:
        env["NSIGHT_MAGIC_PREWARM"] = "0"
    fe = Frontend(work, env)
    rows = []
    try:
        for label, code in notebook(args.workload, args.trace, args.warm, wait=today, extra=args.flags):
            if label not in ("extension", "setup"):
                time.sleep(args.pause)  # the user writes the next cell
            profiled = code.startswith("%%nsys")
            r = fe.run(code, draw_timeout=300 if profiled else 0)
            own = re.findall(r"own run ([0-9.]+) s", r["text"])  # the cell's code, timed by itself
            rows.append({"cell": label, "blocked_s": round(r["blocked_s"], 3), "own_s": float(own[-1]) if own else None,
                         "drawn_s": round(r["drawn_s"], 3) if r.get("drawn_s") is not None else None,
                         "whole_s": round(r["whole_s"], 3) if r.get("whole_s") is not None else None,
                         "status": r["status"]})
            how = [ln for ln in r["text"].splitlines() if "warm session" in ln or "fresh process" in ln]
            steps = re.findall(r"first step [0-9.]+ ms, the others [0-9.]+ ms \(median\)", r["text"])
            if steps:  # a fixed cost per cell shows in the first step, a cost per launch in every step
                rows[-1]["steps"] = steps[-1]
            print(f"  {label:<14} blocked {r['blocked_s']:7.3f} s" +
                  (f"   own {rows[-1]['own_s']:6.3f} s" if own else "") +
                  (f"   drawn {r['drawn_s']:7.3f} s" if r.get("drawn_s") is not None else
                   "   drawn   (none)" if profiled else "") +
                  (f"   whole {r['whole_s']:7.3f} s" if r.get("whole_s") is not None else "")
                  + (f"   {how[0][:90]}" if how else "")
                  + (f"\n      {rows[-1]['steps']}" if rows[-1].get("steps") else ""), flush=True)
            if profiled:  # where the finish stage spent the time to the view (the profile's timings.json)
                rows[-1]["timings"] = timings = _timings(work)
                if timings:
                    print("      finish: " + ", ".join(f"{k} {v:.2f}" for k, v in timings.items()
                                                    if isinstance(v, float)), flush=True)
            if r["status"] != "ok":
                print(r["text"][-2000:], file=sys.stderr)
    finally:
        fe.close()
    return rows


def _timings(work: Path) -> dict:
    """The timings.json of the newest profile folder (the cell just measured; its view is drawn, so it is written)."""
    folders = sorted((work / "nsight-profiles").glob("*/timings.json"), key=lambda f: f.stat().st_mtime)
    try:
        return json.loads(folders[-1].read_text()) if folders else {}
    except (OSError, ValueError):
        return {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="cpu")
    ap.add_argument("--trace", default=None, help="-t for every %%nsys (and %%nsight_setup --trace)")
    ap.add_argument("--pause", type=float, default=10.0, help="seconds the user takes to write the next cell")
    ap.add_argument("--warm", type=int, default=2, help="warm %%nsys cells after the first")
    ap.add_argument("--flags", default="", help="more %%nsys options for every profiled cell (--no-samples, ...)")
    ap.add_argument("--today", action="store_true", help="also measure with --wait and no prepared worker")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    print(f"workload {args.workload}, trace {args.trace or 'default'}{' ' + args.flags if args.flags else ''}, "
          f"pause {args.pause:g} s")
    print("now: the cell returns when its code has finished, the profile loads in the background")
    result = {"now": measure(args, today=False)}
    if args.today:
        print("before: every %%nsys with --wait, no worker prepared ahead")
        result["today"] = measure(args, today=True)
    # the plain cells' median: the first run of a cell can pay a warm-up (the CPU torch cell's took 4.2 s, the
    # others 1.3 s)
    plain = statistics.median(r["blocked_s"] for r in result["now"] if r["cell"].startswith("plain"))
    profiled = [r for r in result["now"] if r["cell"].startswith(("first", "warm"))]
    worst = max(r["blocked_s"] for r in profiled)
    print(f"plain cell {plain:.3f} s (median); profiled cells blocked at most {worst:.3f} s "
          f"(plain + {worst - plain:.3f} s); drawn after {statistics.median(r['drawn_s'] or float('nan') for r in profiled):.3f} s (median), "
          f"{statistics.median((r['drawn_s'] or float('nan')) - r['blocked_s'] for r in profiled):.3f} s after the "
          f"cell returned (median; goal <= 4 s on the GPU); whole (its saved copy made) "
          f"{statistics.median((r.get('whole_s') or float('nan')) - r['blocked_s'] for r in profiled):.3f} s after it")
    plain_runs = [r["own_s"] for r in result["now"] if r["cell"].startswith("plain") and r.get("own_s")]
    warm_own = [r["own_s"] for r in profiled[1:] if r.get("own_s")]
    if plain_runs and warm_own:  # the goal: the profiled cell's own run <= 1.15x the plain cell's (warm worker)
        plain_own = statistics.median(plain_runs)
        print(f"own run: plain {plain_own:.3f} s (median of {len(plain_runs)}: {min(plain_runs):.3f}-"
              f"{max(plain_runs):.3f}), profiled (warm, median of {len(warm_own)}) {statistics.median(warm_own):.3f} s "
              f"({min(warm_own):.3f}-{max(warm_own):.3f}), {statistics.median(warm_own) / plain_own:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"workload": args.workload, "trace": args.trace, "pause_s": args.pause,
                                         **result}, indent=1) + "\n")


if __name__ == "__main__":
    main()
