"""The diagnosis against measured gains: one row per planted workload (tests/data/planted/).

    python benchmarks/diagnosis.py [--only NAME[,NAME...]] [--without osrt]

Each workload has one planted cause and a fixed twin, recorded on the lent GPUs; the gain is the cell's wall time
bad - fixed measured WITHOUT the profiler (planted.json).  Prints, for the bad report: the verdict's kind, the first
finding, its time at stake, and the ratio estimate / measured gain; for the fixed twin: the findings still at
medium or high severity (false alarms).  Goal: the kind and first rule as planted, ratio within 0.5-2.
--only: these workloads only (planted.json's names).  --without osrt: each export as `-t cuda,nvtx` would have
written it (its OS-runtime tables dropped), to decide the default trace on the recorded workloads (issue 62).
"""
from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
PLANTED = HERE.parent / "tests" / "data" / "planted"
sys.path.insert(0, str(PLANTED))


def without_osrt(path: Path) -> None:
    """Drop what `-t osrt` adds to an export (the calls and their stacks); CUDA, NVTX and samples stay."""
    with sqlite3.connect(path) as db:
        for table in ("OSRT_API", "OSRT_CALLCHAINS"):
            if db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone():
                db.execute(f"DROP TABLE {table}")
    db.close()


def main() -> None:
    from planted_files import unpack

    from nsight_magic.report import open_report

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="comma-separated workload names")
    ap.add_argument("--without", choices=["osrt"], default=None, help="drop this trace's tables first")
    a = ap.parse_args()
    manifest = json.loads((PLANTED / "planted.json").read_text())
    if a.only:
        names = a.only.split(",")
        unknown = [n for n in names if n not in manifest]
        if unknown:
            sys.exit(f"--only: no planted workload {', '.join(unknown)}; the names are in {PLANTED / 'planted.json'}")
        manifest = {n: manifest[n] for n in names}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        def opened(name, variant):
            path = unpack(manifest[name], variant, Path(tmp))
            if a.without:
                without_osrt(path)
            return open_report(path)

        for name, e in manifest.items():
            rep = opened(name, "bad")
            kind = rep.bottleneck().kind
            f = rep.findings()
            first = f[0] if f else None
            gain = e.get("gain_s")
            est = first.time_at_stake_ns / 1e9 if first else 0.0
            alarms = "-"
            if "fixed" in e["reports"]:
                twin = opened(name, "fixed")
                alarms = ",".join(x.rule for x in twin.findings() if x.severity in ("high", "medium")) or "none"
                twin.close()
            found = f"{first.rule}/{first.severity}" if first else "-"
            rows.append((name, f"{kind} ({e['expect_kind']})", f"{found} ({e['expect_rule'] or '-'})", f"{est:.3f}",
                         f"{gain:.3f}" if gain else "-", f"{est / gain:.2f}" if gain else "-", alarms))
            rep.close()
    head = ("workload", "verdict (planted)", "first finding (planted)", "est s", "gain s", "ratio",
            "fixed twin: medium/high")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
