"""Benchmark of the inline views on large traces (a benchmark that prints figures, not a test).

For traces of 160k and 1.6M kernels (built with benchmarks/bigtrace.py from an H100 fixture) it prints:
cell output bytes (the display bundle as stored in the .ipynb, first output of a notebook = with BokehJS
inline, later outputs = without), standalone HTML bytes, render time in Python (prepare + build +
serialize, after the reader has loaded its frames), time to first paint in Debian's Chromium
(Bokeh's own "document idle" time, measured from navigation start, plus the browser's first contentful paint),
and what the static view's exact-zoom events cost (report_view.STATIC_EXACT): the timeline's bytes in the page
for several budgets, and how many events the page then holds.

    python benchmarks/view.py [--src FIXTURE.sqlite] [--workdir DIR] [--sizes 160000 1600000] [--paint-runs 3]
                              [--number-calls]   (a --pytorch run's NVTX names: analysis.py says more)
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bigtrace import make_big_trace  # noqa: E402

from nsight_magic import open_report  # noqa: E402
from nsight_magic.views.bokehjs import embed  # noqa: E402
from nsight_magic.views.output import bundle_bytes  # noqa: E402
from nsight_magic.views.profile_view import ProfileView  # noqa: E402
from nsight_magic.views.report_view import STATIC_BUDGET, STATIC_EXACT, NsysView  # noqa: E402
from nsight_magic.views.timeline import build_timeline  # noqa: E402
from nsight_magic.views.timeline_prepare import view_glyphs  # noqa: E402

DEFAULT_SRC = HERE.parents[1] / "shared" / "fixtures" / "nsys" / "h100-2025.3" / "a_cuda_nvtx.sqlite"
FRAMES = ("kernels", "memcpy", "memset", "cuda_api", "nvtx", "osrt", "cublas", "cudnn", "threads", "gpus")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def first_paint(html: Path) -> tuple[float, float]:
    """(Bokeh document idle ms, first contentful paint ms) for a fresh page load in Chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        idle = []
        page.on("console", lambda m: idle.extend(re.findall(r"document idle at (\d+) ms", m.text)))
        page.goto(html.as_uri())
        page.wait_for_function("() => document.querySelector('.nm-report') !== null", timeout=60_000)
        deadline = time.time() + 60
        while not idle and time.time() < deadline:
            page.wait_for_timeout(50)
        fcp = page.evaluate("() => (performance.getEntriesByName('first-contentful-paint')[0] || {}).startTime")
        b.close()
    return (float(idle[0]) if idle else float("nan")), float(fcp or float("nan"))


def measure(trace: Path, kernels: int, paint_runs: int = 3) -> None:
    t = time.perf_counter()
    rep = open_report(trace)
    for f in FRAMES:
        getattr(rep, f)
    for s in ("kernel_summary", "memcpy_summary", "cuda_api_summary", "nvtx_summary"):
        getattr(rep, s)()  # the tables use them; the reader caches or recomputes, we time it apart
    read_s = time.perf_counter() - t

    t = time.perf_counter()
    view = NsysView(rep)
    pv = ProfileView(view)
    html_part = pv.html()
    render_s = time.perf_counter() - t
    t = time.perf_counter()
    widget = pv.live
    widget_s = time.perf_counter() - t
    report_out = pv.bundle()
    first_cell = bundle_bytes(pv.bundle(loader=True))  # the first view of a notebook carries BokehJS
    assert html_part in report_out["text/html"]
    html = trace.with_suffix(".view.html")
    t = time.perf_counter()
    html.write_text(view.html_page(), encoding="utf-8")
    page_s = time.perf_counter() - t
    runs = ([first_paint(html) for _ in range(paint_runs)] if Path("/usr/bin/chromium").exists()
            else [(float("nan"),) * 2])
    idle_ms, fcp_ms = (statistics.median(r[i] for r in runs) for i in (0, 1))
    d = view.data
    print(f"--- {kernels:,} kernels ({d.total_events:,} timeline events, {len(d.rows)} rows) from {trace.name}")
    print(f"reader: open + frames + 4 summaries     {read_s:8.2f} s   (the reader's, not the view's)")
    print(f"render in Python (prepare+tables+html)  {render_s:8.2f} s")
    print(f"live widget build (the timeline)        {widget_s:8.2f} s   ({type(widget).__name__})")
    print(f"standalone page build + write           {page_s:8.2f} s")
    print(f"cell output, first in notebook          {first_cell:>10,} bytes (BokehJS inline, once per notebook)")
    print(f"cell output, later cells                {bundle_bytes(report_out):>10,} bytes")
    print(f"standalone HTML                         {html.stat().st_size:>10,} bytes")
    print(f"Chromium: Bokeh document idle           {idle_ms:8.0f} ms after navigation start (median of "
          f"{len(runs)}: {', '.join(f'{r[0]:.0f}' for r in runs)})")
    print(f"Chromium: first contentful paint        {fcp_ms:8.0f} ms (median)")
    g = view_glyphs(d, width_px=view.width, budget=STATIC_BUDGET)
    print(f"static view glyphs                      {len(g.exact) + len(g.agg):>10,} (budget {STATIC_BUDGET:,}): "
          f"{g.caption}")
    for budget in (0, 5_000, STATIC_EXACT, 20_000, 40_000):
        tv = build_timeline(d, width=view.width, budget=STATIC_BUDGET, embed=budget)
        _, script = embed({"timeline": tv.layout})
        held = len(tv.all_src.data["left"]) if budget else 0
        mark = "  <- report_view.STATIC_EXACT" if budget == STATIC_EXACT else ""
        print(f"static timeline, exact-zoom budget {budget:>6,}: {len(script):>10,} bytes, {held:>7,} events held "
              f"besides the first view's{mark}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--sizes", type=int, nargs="+", default=[160_000, 1_600_000])
    ap.add_argument("--paint-runs", type=int, default=3, help="page loads in Chromium per size (their median)")
    ap.add_argument("--number-calls", action="store_true",
                    help="number every emit_nvtx range of the copies (bigtrace.py): a real --pytorch run's NVTX names")
    a = ap.parse_args(argv)
    if not a.src.exists():
        sys.exit(f"{a.src}: no such fixture; pass --src")
    work = a.workdir or Path(tempfile.mkdtemp(prefix="nsight-view-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    for n in a.sizes:
        trace = work / f"big_{n}{'_numbered' if a.number_calls else ''}.sqlite"
        if not trace.exists():
            t = time.perf_counter()
            make_big_trace(a.src, trace, n, number_calls=a.number_calls)
            print(f"built {trace} in {time.perf_counter() - t:.1f} s")
        measure(trace, n, a.paint_runs)


if __name__ == "__main__":
    main()
