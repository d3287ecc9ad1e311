"""The reopen of a profile already seen (issue 62's goal: a drawn view <= 0.2 s after `%nsys_load` at 1M kernels).

    python benchmarks/reopen.py [--src a_cuda_nvtx.sqlite] [--kernels 1000000] [--repeat 3] [--workdir DIR]

Builds a KERNELS-kernel export from an H100 one (benchmarks/bigtrace.py) and opens it once as a finished profile
does: the columnar cache written, the view made, its verdict, findings, prepared timeline and static page kept
(saved_analysis.py).  Then, in fresh processes, alternating:
- "kept", as `%nsys_load` does: the view drawn from its kept page (open, kept_page, kept_bundle: "drawn"), then the
  whole view made around it (the kept verdict, findings and timeline restored, views.report_view.NsysView, its
  static HTML, and its live widget where jupyter_bokeh is installed: "whole");
- "analysed": the view analysed, prepared and drawn again (open, NsysView, static HTML: "drawn" and "whole").
Medians of `--repeat`; wall time on whatever machine runs it, other load included; imports not counted.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bigtrace import make_big_trace  # noqa: E402
from read import DEFAULT_SRC  # noqa: E402 - the H100 export the trace benchmarks replicate

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from nsight_magic import open_report, saved_analysis
from nsight_magic.views.output import kept_bundle
from nsight_magic.views.profile_view import ProfileView
from nsight_magic.views.report_view import NsysView
t1 = time.perf_counter()
rep = open_report(sys.argv[1])
t2 = time.perf_counter()
if sys.argv[2] == "first":
    rep.data.write_cache()
page = saved_analysis.kept_page(rep.data) if sys.argv[2] == "kept" else None
drawn = page is not None and kept_bundle(rep, page) is not None
t3 = time.perf_counter()
kept = page is not None and saved_analysis.restore(rep.data, timeline=True)
t4 = time.perf_counter()
view = NsysView(rep.data, page=page)
t5 = time.perf_counter()
shown = ProfileView(view)
shown.bundle(live=False)
t6 = time.perf_counter()
try:
    import jupyter_bokeh  # noqa: F401 - the live part, as a watched kernel makes it
    live = shown.live is not None
except ImportError:
    live = False
t7 = time.perf_counter()
if sys.argv[2] == "first":
    assert saved_analysis.save(rep.data) and saved_analysis.kept_page(rep.data) is not None, "nothing kept"
print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "page_s": t3 - t2, "restore_s": t4 - t3,
                  "view_s": t5 - t4, "html_s": t6 - t5, "live_s": t7 - t6, "drawn_s": (t3 if drawn else t6) - t1,
                  "whole_s": t7 - t1, "kept": kept and drawn, "live": live, "kernels": len(rep.kernels)}))
"""


def child(path: Path, mode: str) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, str(path), mode], capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"{mode}: failed ({p.returncode}): {p.stderr[-800:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC)
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args()
    if not a.src.is_file():
        raise SystemExit(f"{a.src}: no such export (give --src)")
    work = Path(a.workdir or tempfile.mkdtemp(prefix="nm-reopen-"))
    work.mkdir(parents=True, exist_ok=True)
    big = work / "report.sqlite"
    make_big_trace(a.src, big, a.kernels)
    first = child(big, "first")
    print(f"first open ({first['kernels']:,} kernels; the columnar cache written, verdict, findings and page "
          f"kept): {first['whole_s']:.2f} s")
    runs: dict[str, list[dict]] = {"kept": [], "analysed": []}
    for _ in range(a.repeat):
        for mode in runs:
            runs[mode].append(child(big, mode))
    if not all(r["kept"] for r in runs["kept"]):
        raise SystemExit("the kept page, verdict and findings were not taken")
    for mode, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("open_s", "page_s", "restore_s", "view_s", "html_s",
                                                                  "live_s", "drawn_s", "whole_s")}
        print(f"{mode:9s} drawn {med['drawn_s']:.2f} s, whole {med['whole_s']:.2f} s (open {med['open_s']:.2f}, "
              f"page {med['page_s']:.2f}, restore {med['restore_s']:.2f}, view {med['view_s']:.2f}, "
              f"html {med['html_s']:.2f}, live {med['live_s']:.2f}{'' if rs[0]['live'] else ' (no jupyter_bokeh)'}"
              f"; medians of {len(rs)})")
    for k in ("drawn_s", "whole_s"):
        ratio = (statistics.median(r[k] for r in runs["kept"]) / statistics.median(r[k] for r in runs["analysed"]))
        print(f"kept / analysed, {k[:-2]}: {ratio:.2f}")

if __name__ == "__main__":
    main()
