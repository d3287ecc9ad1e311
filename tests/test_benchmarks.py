"""Every benchmark in benchmarks/ runs to its figures on a small size: the closing notes quote them, so a benchmark
that no longer runs (warm.py and overhead.py did not, after the record/finish split) must fail here, not on the GPU
machine.  The figures themselves are goals measured by hand, not checked here."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import FIXTURES, requires_nsys

ROOT = Path(__file__).resolve().parents[1]
H100 = ("nsys", "h100-2025.3", "a_cuda_nvtx.sqlite")  # the export the trace benchmarks replicate (their default)
needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (CPU build)")
# read at collection: FIXTURES itself, not fixture_path() (which skips, and would take the whole module with it)
needs_shared = pytest.mark.skipif(not FIXTURES.joinpath(*H100).exists(), reason="needs ../shared/fixtures")

# name, arguments ({w}: a folder of the test's own), the line that carries the figure, marks; -t nvtx where a
# benchmark takes it (tracing the OS runtime costs nsys 2 CPU-s more per run) and one page load: the figures are
# not checked
CASES = [
    ("analysis", ["--kernels", "3000", "--repeat", "1", "--workdir", "{w}", "--inputs", "--warm-memory", "0.05"],
     "then bottleneck() + findings()", [needs_shared]),
    ("analysis", ["--kernels", "9000", "--repeat", "1", "--workdir", "{w}", "--number-calls", "--src",
                  str(FIXTURES / "nsys" / "public-sqlite" / "nsysai_mfu_2gpu_before.sqlite")], "analysis / read",
     [needs_shared]),
    ("job", ["--ranks", "2", "--kernels", "3000", "--workers", "1", "--workdir", "{w}"], "open_job / that",
     [needs_shared]),
    ("read", ["--workdir", "{w}", "--repeat", "1", "--small", "3000", "--large", "6000"], "frames", [needs_shared]),
    ("merge", ["--kernels", "3000", "--ranks", "2"], "summary = 2 x single: True", [needs_shared]),
    ("view", ["--workdir", "{w}", "--sizes", "3000", "--paint-runs", "1"], "<- report_view.STATIC_EXACT",
     [needs_shared]),
    # one workload: tests/test_analysis_diagnosis.py checks them all
    ("diagnosis", ["--only", "gemm_dims_odd"], "gemm_alignment", []),
    # the default trace's measurement (issue 62): the export as -t cuda,nvtx writes it
    ("diagnosis", ["--only", "host_code", "--without", "osrt"], "host_code/high", []),
    ("memory", ["--events", "20000", "--history", "2000", "--repeat", "1"], "drawn on the track", []),
    ("load_memory", ["--ranges", "20000", "--workdir", "{w}", "--reopen"], "reopened with its columnar cache", []),
    ("reopen", ["--kernels", "3000", "--repeat", "1", "--workdir", "{w}"], "kept / analysed", [needs_shared]),
    ("kernel_memory", ["--profiles", "1", "--ranges", "2000", "--workdir", "{w}"], "kernel RSS after load",
     [requires_nsys]),
    ("warm", ["--workload", "cpu", "--repeat", "1", "--setup-s", "0.2", "--trace", "nvtx"], "ratio:", [requires_nsys]),
    ("overhead", ["--work-s", "0.2", "--repeat", "1", "--trace", "nvtx"], "ratio:", [requires_nsys]),
    ("call_overhead", ["--calls", "2000", "--repeat", "1", "--kinds", "nvtx"], "us/call", [requires_nsys]),
    ("inplace", ["--workload", "cpu", "--repeat", "1", "--pause", "0.2", "--trace", "nvtx"], "not recording:",
     [requires_nsys]),
    ("warm_stop", ["--workload", "cpu", "--repeat", "1", "--variants", "default", "--trace", "nvtx"], "launch+setup",
     [requires_nsys]),
    ("sampler_waits", ["--steps", "20", "--repeat", "1", "--variants", "on"], "ours", [requires_nsys, needs_torch]),
    ("sampler_cost", ["--workload", "cpu", "--steps", "2", "--rounds", "1"], "% vs plain", [needs_torch]),
    ("session_cost", ["--steps", "3", "--repeat", "1", "--device", "cpu", "--trace", "nvtx", "--workload", "mlp",
                      "--batch", "4", "--variants", "plain,launch,launch@--wait=all"], "launch@--wait=all before",
     [requires_nsys, needs_torch]),
    ("ops", ["--steps", "2", "--repeat", "1", "--batch", "2", "--layers", "1", "--device", "cpu", "--trace", "nvtx"],
     "ratio",
     [requires_nsys, needs_torch]),
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name,args,figure", [
    pytest.param(n, a, f, marks=m, id=n if [c[0] for c in CASES].count(n) == 1 else f"{n}-{i}")
    for i, (n, a, f, m) in enumerate(CASES)])
def test_the_benchmark_runs_to_its_figures(name, args, figure, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    # its temporary files (reports, profiles) in a folder of its own, removed after it: a short path under the
    # system's temporary folder, since Chromium's socket path there must stay short (view.py); a benchmark that
    # starts Jupyter-side code gets its own config folder
    tmp = Path(tempfile.mkdtemp(prefix="nm-bench-"))
    env = {**os.environ, "TMPDIR": str(tmp), "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config")}
    try:
        p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{name}.py"),
                            *[a.format(w=work) for a in args]], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=280, stdin=subprocess.DEVNULL)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert figure in p.stdout, out[-3000:]


@needs_shared
def test_a_big_trace_numbers_every_operator_call_as_a_real_run_does(tmp_path):
    """bigtrace --number-calls: each emit_nvtx range of the copies gets an op_id of its own, its name otherwise as
    the source's (the analysis benchmark's realistic --pytorch trace)."""
    import sqlite3

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bigtrace import make_big_trace

    src = FIXTURES / "nsys" / "public-sqlite" / "nsysai_mfu_2gpu_before.sqlite"
    big = make_big_trace(src, tmp_path / "big.sqlite", 9000, number_calls=True)
    con = sqlite3.connect(big)
    texts = [r[0] for r in con.execute("SELECT text FROM NVTX_EVENTS WHERE text LIKE '%, op_id = %'")]
    base = sqlite3.connect(src).execute("SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE '%, op_id = %'").fetchone()
    assert len(texts) > 2 * base[0] and len(set(texts)) == len(texts)
    ops = {t.split(", op_id = ")[0] for t in texts}
    assert "aten::empty_strided" in ops and all(t.split(", op_id = ")[1].split(",")[0].isdigit() for t in texts)
