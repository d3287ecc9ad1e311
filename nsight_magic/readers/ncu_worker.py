"""`python -m nsight_magic.readers.ncu_worker REPORT OUT`: read an .ncu-rep with NVIDIA's ncu_report in a process
of its own and pickle the finished NcuReport to OUT.

ncu_report loads native libraries that can clash with what the notebook's kernel already holds: on the lent H100,
reading a report in a kernel that had imported torch killed the kernel (DeadKernelError).  A crash here costs only
this process; the caller turns it into a one-line ReportError.
"""
from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

from ..errors import ReportError

ERROR_PREFIX = "nsight-magic-error: "


def read_in_worker(path: Path, timeout: float = 600):
    """The NcuReport of `path`, read by a worker process."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="nsight-magic-ncu-") as tmp:
        out = Path(tmp) / "report.pkl"
        try:
            proc = subprocess.run([sys.executable, "-m", "nsight_magic.readers.ncu_worker", str(path), str(out)],
                                  capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ReportError(f"{path.name}: reading took more than {timeout:.0f} s") from None
        if proc.returncode == 0 and out.exists():
            with open(out, "rb") as f:
                return pickle.load(f)
        errors = [ln[len(ERROR_PREFIX):] for ln in proc.stderr.splitlines() if ln.startswith(ERROR_PREFIX)]
        if errors:
            raise ReportError(errors[-1])
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
        last = (proc.stderr.strip().splitlines() or [""])[-1][:200]
        raise ReportError(f"ncu_report failed reading {path.name} ({how}{': ' + last if last else ''}); "
                          f"open its CSV pages instead (ncu --import {path.name} --csv --page raw)")


def main(argv: list[str]) -> int:
    from .ncu import open_ncu_report

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
