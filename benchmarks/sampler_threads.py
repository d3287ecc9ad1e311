"""What our instruments (the Python sampler, torch's allocator history, nsys) cost a program with a Python thread of
its own beside the loop (issue 62).

    python benchmarks/sampler_threads.py [--workload gil_thread:bad] [--repeat 3] [--intervals 0.005,0.02]
                                         [--nsys cuda,nvtx;cuda,nvtx,osrt] [--magic "default;--no-samples"]

The planted workload's cell (tests/data/planted/make_planted_reports.py --time: setup, then the cell, timed in
its own process) plain, with nsight-magic's sampler beside it at each interval (no nsys), under bare
`nsys profile` with each trace list (no sampler), and profiled by nsight-magic (`run_nsys`, a fresh process) with
each set of %%nsys options given (the cell's time: its range in the report), interleaved; prints each
configuration's times and its minimum against plain's.  The planted pure-Python thread holds the GIL, the loop's
thread waits for it at every operation: whatever else asks for the GIL (our sampler, torch's allocator history
taking a stack per allocation) can lengthen those waits.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLANTED = HERE.parent / "tests" / "data" / "planted" / "make_planted_reports.py"


def timed(name: str, variant: str, env: dict, nsys: str | None, out: Path) -> float | None:
    argv = [sys.executable, str(PLANTED), "--time", name, variant]
    if nsys:
        argv = ["nsys", "profile", f"--trace={nsys}", "--sample=none", "--cpuctxsw=none", "--stats=false",
                "--force-overwrite=true", "-o", str(out), *argv]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600, env={**os.environ, **env})
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    if not lines:
        print(f"  no timing: {(p.stdout + p.stderr)[-800:]}", file=sys.stderr)
        return None
    return json.loads(lines[-1])["cell_s"]


def magic(name: str, variant: str, options: str, out: Path) -> float | None:
    """The cell profiled by nsight-magic with `options` (%%nsys's words): its range's duration in the report."""
    import sqlite3

    sys.path.insert(0, str(PLANTED.parent))
    from make_planted_reports import BY_NAME
    from make_planted_reports import variant as sources

    from nsight_magic.options import NsysOptions
    from nsight_magic.run import run_nsys

    setup, cell = sources(BY_NAME[name], variant)
    words = options.split()
    trace = [w.split("=", 1)[1] for w in words if w.startswith("--trace=")]
    opts = NsysOptions(name="threads", directory=str(out), fresh=True, render=False, quiet=True, timeout=300,
                       samples=False if "--no-samples" in words else None,
                       memory=False if "--no-memory" in words else None, **({"trace": trace[0]} if trace else {}))
    r = run_nsys(cell, opts, setup_sources=[setup], namespace={})
    if r.sqlite is None:
        print(f"  {options}: no report ({r.status})", file=sys.stderr)
        return None
    rng = json.loads((r.folder.path / "run.json").read_text())["range_name"]
    with sqlite3.connect(r.sqlite) as db:
        row = db.execute('SELECT max(n."end" - n.start) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId '
                         "WHERE coalesce(n.text, s.value) = ?", (rng,)).fetchone()
    return row[0] / 1e9 if row and row[0] else None


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--workload", default="gil_thread:bad")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--intervals", default="0.005,0.02")
    ap.add_argument("--nsys", default="", help="';'-separated trace lists run under bare nsys (no sampler)")
    ap.add_argument("--magic", default="", help="';'-separated %%nsys option sets ('default' for none; --trace=T, "
                                                "--no-samples, --no-memory)")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    name, variant = a.workload.split(":")
    configs = {"plain": ({}, None)}
    configs.update({f"sampler {i}": ({"NM_TIME_SAMPLER": i}, None) for i in a.intervals.split(",") if i})
    configs.update({f"nsys -t {t}": ({}, t) for t in a.nsys.split(";") if t})
    configs.update({f"%%nsys {m}": ({}, "magic:" + m) for m in a.magic.split(";") if m})
    got: dict[str, list[float]] = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.repeat):
            for c, (env, nsys) in configs.items():
                t = (magic(name, variant, nsys[6:], Path(tmp)) if nsys and nsys.startswith("magic:")
                     else timed(name, variant, env, nsys, Path(tmp) / "r"))
                if t is not None:
                    got[c].append(t)
    base = min(got["plain"]) if got["plain"] else None
    print(f"{a.workload}: cell seconds, {a.repeat} runs each, interleaved")
    for c, ts in got.items():
        ratio = f"{min(ts) / base:.2f}x plain" if ts and base else "-"
        print(f"  {c:24s} min {min(ts) if ts else float('nan'):.3f}  {ratio:12s} all {[round(t, 3) for t in ts]}")
    if a.json:
        a.json.write_text(json.dumps({"workload": a.workload, "cell_s": got}, indent=1))


if __name__ == "__main__":
    main()
