"""`python -m nsight_magic.readers.ncu_worker REPORT OUT`: read an .ncu-rep with NVIDIA's ncu_report in a process
of its own and pickle the finished NcuData to OUT (ncu.read_in_worker starts it).

ncu_report loads native libraries that can clash with what the notebook's kernel already holds: on the lent H100,
reading a report in a kernel that had imported torch killed the kernel (DeadKernelError).  A crash here costs only
this process; the caller turns it into a one-line ReportError.
"""
from __future__ import annotations

import pickle
import sys
from pathlib import Path

from ..errors import ReportError
from .ncu import ERROR_PREFIX, open_ncu_report


def main(argv: list[str]) -> int:
    path, out = Path(argv[0]), Path(argv[1])
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
