"""The CI gate (`nsight-magic diff --fail-above`) on every planted pair (tests/data/planted/).

    python benchmarks/gate.py [--fail-above PCT]

For each planted workload with a fixed twin: the gate from fixed to bad (the planted slowdown: should fail) and
from bad to fixed (the fix: should pass), with the checks that failed.  planted.json's cell_s are the cells'
times measured WITHOUT the profiler, so a pair whose recorded profiles disagree with them shows here.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
PLANTED = HERE.parent / "tests" / "data" / "planted"
sys.path.insert(0, str(PLANTED))


def main() -> None:
    from planted_files import unpack

    from nsight_magic import diff
    from nsight_magic.analysis.gate import gate

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fail-above", type=float, default=5.0)
    a = ap.parse_args()
    warnings.simplefilter("ignore")  # a report's own oddities are not what this measures
    manifest = json.loads((PLANTED / "planted.json").read_text())
    caught = passed = n = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, entry in manifest.items():
            if "fixed" not in entry["reports"]:
                continue
            fixed, bad = (unpack(entry, v, Path(tmp)) for v in ("fixed", "bad"))
            slower, faster = gate(diff(fixed, bad), a.fail_above), gate(diff(bad, fixed), a.fail_above)
            n, caught, passed = n + 1, caught + slower.failed, passed + (not faster.failed)
            why = [f"{c.what} {c.name[:50]} {c.change_pct:+.1f}% (noise ±{c.noise_pct:.1f}%)"
                   for c in faster.checks if c.failed]
            cell = entry.get("cell_s", {})
            print(f"{name:24} bad {cell.get('bad')} s, fixed {cell.get('fixed')} s | fixed->bad "
                  f"{'FAILED' if slower.failed else 'passed'} | bad->fixed {'FAILED' if faster.failed else 'passed'}"
                  f"{'  ' + '; '.join(why) if why else ''}")
    print(f"{n} pairs at --fail-above {a.fail_above:g}: the slowdown failed {caught}, the fix passed {passed}")


if __name__ == "__main__":
    main()
