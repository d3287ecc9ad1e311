"""`python -m nsight_magic.readers.ncu_worker REPORT OUT`: read an .ncu-rep with NVIDIA's ncu_report in a process
of its own and pickle the finished NcuData to OUT (ncu.read_in_worker starts it).

ncu_report loads native libraries that clash with what a Python process may already hold: on the lent H100,
ncu_report 2025.3.1 imported after numpy crashed (SIGSEGV) at the first metric's unit, which killed the notebook's
kernel when it read a report itself.  Here it is imported first (readers/ncu_module.py); a crash still costs only
this process, and the caller turns it into a one-line ReportError.
"""
from __future__ import annotations

import pickle
import sys
from pathlib import Path

from ..errors import ReportError
from .ncu_module import load_ncu_report_module


def main(argv: list[str]) -> int:
    path, out = Path(argv[0]), Path(argv[1])
    try:
        load_ncu_report_module()  # before numpy and pandas (readers/ncu_module.py says why)
    except ReportError:
        pass  # open_ncu_report says it, in its words
    from .ncu import ERROR_PREFIX, open_ncu_report

    try:
        report = open_ncu_report(path, in_process=True)
        report.detach()
    except ReportError as e:
        print(f"{ERROR_PREFIX}{e}", file=sys.stderr)
        return 2
    with open(out, "wb") as f:
        pickle.dump(report, f, protocol=pickle.HIGHEST_PROTOCOL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
