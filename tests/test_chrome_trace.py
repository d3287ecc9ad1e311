"""The Chrome / Perfetto trace export (issue 66): written from a report recorded on the lent H100 (20 CUDA graph
replays with node tracing, in NVTX ranges: tests/data/gpu_features/README.md) and read back by Chrome DevTools'
trace engine (tests/trace_reader: a reader that is not ours; Perfetto's trace processor needs a binary these
machines cannot download, and Chromium 156 no longer serves chrome://tracing)."""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, unxz
from nsight_magic.report import open_report
from nsight_magic.views.chrome_trace import GPU_PID_BASE

READER = Path(__file__).resolve().parent / "trace_reader"
requires_reader = pytest.mark.skipif(
    not (READER / "node_modules" / "@paulirish" / "trace_engine").is_dir() or shutil.which("node") is None,
    reason="Chrome DevTools' trace engine is installed by scripts/setup.sh (npm ci --prefix tests/trace_reader)")


def read_with_devtools(path: Path) -> dict:
    """What Chrome DevTools' trace engine makes of a trace file: processes, threads, events, flows."""
    p = subprocess.run(["node", str(READER / "read_trace.mjs"), str(path)], capture_output=True, text=True,
                       timeout=120, cwd=READER)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def graph_report(tmp_path_factory):
    rep = open_report(unxz(DATA / "gpu_features" / "graph_node.sqlite.xz",
                           tmp_path_factory.mktemp("trace") / "graph_node.sqlite"))
    yield rep
    rep.close()


@requires_reader
def test_the_command_line_export_reads_back_in_chrome_devtools(graph_report, tmp_path):
    out = tmp_path / "trace.json.gz"
    p = subprocess.run([sys.executable, "-m", "nsight_magic.cli", "export", str(graph_report.sqlite_path),
                        "--perfetto", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "trace written to" in p.stdout, p.stderr
    with gzip.open(out, "rt") as f:
        events = json.load(f)["traceEvents"]
    got = read_with_devtools(out)
    rep = graph_report
    (pid,) = {int(x) for x in rep.cuda_api["pid"]}
    threads = got["processes"][str(pid)]["threads"]
    by_name = {t["name"]: t["entries"] for t in threads.values()}
    assert by_name[f"python3 [{pid}]"] == len(rep.cuda_api)        # every CUDA API call on its thread
    assert by_name[f"python3 [{pid}] · NVTX"] == 20                 # the replays' ranges beside it
    gpu = got["processes"][str(GPU_PID_BASE)]["threads"]
    per_stream = {t["name"]: t["entries"] for t in gpu.values()}
    want = {}
    for frame in (rep.kernels, rep.memcpy, rep.memset):
        for s, n in frame.groupby("stream_id").size().items():
            want[f"stream {s}"] = want.get(f"stream {s}", 0) + int(n)
    assert per_stream == want and sum(want.values()) == 555 + 12 + 138
    # a flow from every launch that queued GPU work (a graph launch: to its first kernel), bound by DevTools
    ops = {(int(p), int(c)) for fr in (rep.kernels, rep.memcpy, rep.memset)
           for p, c in zip(fr["pid"], fr["correlation_id"].dropna())}
    launches = {(int(p), int(c)) for p, c in zip(rep.cuda_api["pid"], rep.cuda_api["correlation_id"].dropna())}
    assert got["flows"] == len(ops & launches) == sum(1 for e in events if e.get("ph") == "s") > 100


def test_user_text_stays_text(tmp_path):
    """NVTX text and kernel names are the user's: JSON-encoded, never markup (a quote, a tag, a newline, unicode)."""
    from nsight_magic.views.chrome_trace import _encoded

    hostile = ['a"b', "</script><img onerror=alert(1)>", "line\nbreak", "ünï ✓", "\\"]
    enc = _encoded(hostile)
    assert [json.loads(e) for e in enc] == hostile
