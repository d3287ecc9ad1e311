"""Where the test suite's time goes: the machine's busy CPU seconds around each test, children included (kernels,
nsys, Chromium, Jupyter servers), with the suite run alone (no xdist), then per module and the costliest tests.

    python benchmarks/suite_cpu.py [PYTEST ARGS...]      # all of tests/, or e.g. tests/test_background.py

The suite is CPU-bound here (2 cores; scripts/test.sh runs three workers): its wall time is about its CPU
seconds over 2, plus the last module's tail.  Issue 49's budget is 10 minutes, so about 1,100 CPU seconds in all.
This file is also the pytest plugin that measures (`-p suite_cpu`, writing JSON lines to $SUITE_CPU_OUT).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT_ENV = "SUITE_CPU_OUT"


def busy_cpu_s() -> float:
    """Busy CPU seconds of the whole machine since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


# ---- the plugin (loaded in the pytest process) ----------------------------------------------------------------
try:
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        c0, t0 = busy_cpu_s(), time.monotonic()
        yield
        with open(os.environ[OUT_ENV], "a") as f:
            f.write(json.dumps({"id": item.nodeid, "cpu": round(busy_cpu_s() - c0, 2),
                                "wall": round(time.monotonic() - t0, 2)}) + "\n")
except ImportError:  # the report side needs no pytest
    pass


# ---- the report ---------------------------------------------------------------------------------------------------
def report(rows: list[dict], top: int = 25) -> str:
    per = defaultdict(lambda: [0, 0.0, 0.0])
    for r in rows:
        m = per[r["id"].split("::")[0]]
        m[0] += 1
        m[1] += r["cpu"]
        m[2] += r["wall"]
    cpu = sum(m[1] for m in per.values())
    lines = [f"{'CPU s':>8} {'wall s':>8} {'tests':>6}  module"]
    lines += [f"{m[1]:8.1f} {m[2]:8.1f} {m[0]:6d}  {k}" for k, m in sorted(per.items(), key=lambda x: -x[1][1])]
    lines += ["", f"the {top} costliest tests:"]
    lines += [f"{r['cpu']:8.1f} {r['wall']:8.1f}  {r['id']}" for r in sorted(rows, key=lambda r: -r["cpu"])[:top]]
    lines += ["", f"total: {cpu:.0f} CPU s in {len(rows)} tests; on 2 cores at least {cpu / 2 / 60:.1f} min "
                  f"(budget 10 min: about 1,100 CPU s)"]
    return "\n".join(lines)


def main() -> None:
    args = sys.argv[1:] or ["tests"]
    with tempfile.TemporaryDirectory(prefix="suite-cpu-") as d:
        out = Path(d) / "tests.jsonl"
        env = {**os.environ, OUT_ENV: str(out),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")]))}
        p = subprocess.run([sys.executable, "-m", "pytest", "-p", "suite_cpu", "-n", "0", "-q", "-p",
                            "no:cacheprovider", *args], cwd=ROOT, env=env)
        rows = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    print(report(rows))
    sys.exit(p.returncode)


if __name__ == "__main__":
    main()
