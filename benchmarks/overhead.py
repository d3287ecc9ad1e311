"""Wall time of `%%nsys` against bare `nsys profile` on the same cell; goal: ratio <= 1.10.

    python benchmarks/overhead.py [--work-s 5] [--repeat 3] [--workload cpu|torch] [--trace T]

%%nsys runs through a real IPython shell (the magic, state transfer, export to SQLite, reading and rendering).
Bare is `nsys profile -t <same trace> -o R python cell.py`, plus QdstrmImporter when that nsys cannot import by
itself (Debian's 2022.4 layout), since without it there is no report to look at.  Both use --cpuctxsw=none -s none.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from IPython.core.interactiveshell import InteractiveShell

from nsight_magic import tools
from nsight_magic.options import DEFAULT_TRACE, trace_for_machine

CPU_CELL = """
import time, nvtx
t_end = time.perf_counter() + {work_s}
i = 0
while time.perf_counter() < t_end:
    with nvtx.annotate("step"):
        s = sum(range(20000))
    i += 1
print("steps", i)
"""

TORCH_CELL = """
import time, torch, nvtx
x = torch.randn(2048, 2048, device="cuda")
t_end = time.perf_counter() + {work_s}
i = 0
while time.perf_counter() < t_end:
    with nvtx.annotate("step"):
        for _ in range(10):
            x = torch.tanh(x @ x * 1e-3)
        torch.cuda.synchronize()
    i += 1
print("steps", i)
"""


def bare(cell_path: Path, trace: str, out: Path) -> float:
    nsys = tools.find_nsys()
    # in its own namespace, as %%nsys runs it: nsys's files in the machine's /dev/shm are shared with no other run
    argv, _ = tools.isolated_argv([str(nsys), "profile", f"--trace={trace}", "--sample=none", "--cpuctxsw=none",
                                   f"--output={out}", sys.executable, str(cell_path)], kernel_symbols=False)
    t0 = time.perf_counter()
    if subprocess.run(argv, capture_output=True).returncode != 0:
        # nsys 2022.4 sometimes fails at start-up: once more (as %%nsys does), timing only the run that worked,
        # so that a failure never makes bare nsys look slower
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
    qdstrm = out.with_suffix(".qdstrm")
    if not out.with_suffix(".nsys-rep").exists() and qdstrm.exists():
        tools.import_qdstrm(qdstrm, nsys)
    return time.perf_counter() - t0


def magic(shell: InteractiveShell, cell: str, trace: str, folder: Path, capture: str) -> float:
    t0 = time.perf_counter()
    shell.run_cell_magic("nsys", f"--trace {trace} --capture {capture} --quiet --dir {folder}", cell)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work-s", type=float, default=5.0, help="seconds of work in the cell")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workload", choices=("cpu", "torch"), default="cpu")
    ap.add_argument("--capture", choices=("cell", "all"), default="cell", help="%%nsys --capture")
    ap.add_argument("--trace", default=None, help="both runs' trace (default: %%nsys's on this machine)")
    args = ap.parse_args()
    trace = args.trace or trace_for_machine(DEFAULT_TRACE, tools.gpu_visible())[0]
    cell = (TORCH_CELL if args.workload == "torch" else CPU_CELL).format(work_s=args.work_s)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "nsight_magic")
    print(f"nsys {tools.nsys_version()}  trace={trace}  workload={args.workload}  work={args.work_s:g} s  "
          f"repeat={args.repeat}  %%nsys --capture {args.capture}")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cell_path = tmp / "cell.py"
        cell_path.write_text(cell)
        b, m = [], []
        for i in range(args.repeat):  # alternate so drifts in machine load hit both
            b.append(bare(cell_path, trace, tmp / f"bare{i}"))
            m.append(magic(shell, cell, trace, tmp / "profiles", args.capture))
            # the record stage's Recording; its finish() (run by the magic, which waits outside a notebook) has
            # the RunResult with every stage's timings
            t = shell.magics_manager.registry["NsightMagics"].frontend.last_result.finish().timings
            parts = "  ".join(f"{k} {v:.2f}" for k, v in t.items())
            print(f"  run {i}: bare {b[-1]:.2f} s   %%nsys {m[-1]:.2f} s  ({parts})")
    mb, mm = statistics.median(b), statistics.median(m)
    print(f"bare nsys profile: {mb:.2f} s (median)\n%%nsys:            {mm:.2f} s (median)\nratio:             "
          f"{mm / mb:.3f}  (goal <= 1.10)")


if __name__ == "__main__":
    main()
