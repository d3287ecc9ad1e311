"""Which `ncu_report` reads .ncu-rep files, found and imported without numpy or pandas in the process.

Which: the one in `extras/python` next to the ncu we find (it matches the ncu that recorded the report) or the pip
package `ncu_report`; both read reports on a CPU-only machine.  When both exist the newer wins (ncu's own on a tie):
an older ncu_report cannot read newer reports, while a newer one reads older reports.  Only one is ever imported
into a process (two builds of the same C++ library in one process are asking for trouble).

Import it before numpy (readers/ncu_worker.py does): on the lent H100, ncu_report 2025.3.1 imported after numpy
2.5 (its bundled OpenBLAS and libgfortran) crashed with SIGSEGV in the first `metric.unit()`; imported first, it
reads the same report.
"""
from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

from ..errors import ReportError

INSTALL_HINT = "pip install -U ncu_report"


def _extras_candidates() -> list[tuple[Path, str]]:
    """extras/python folders next to an installed ncu, with that ncu's version."""
    from ..tools.ncu import find_ncu, ncu_install_roots, ncu_version  # lazy: ncu_tool runs nothing at import
    from ..errors import ToolNotFound

    try:
        ncu = find_ncu()
    except ToolNotFound:
        return []
    # /usr/local/cuda/bin/ncu may be a wrapper whose Nsight Compute lives under /opt/nvidia/nsight-compute/<ver>/
    roots = ncu_install_roots(ncu) + sorted(Path("/opt/nvidia/nsight-compute").glob("*"), reverse=True)
    found = [root / "extras" / "python" for root in roots]
    found = [d for d in found if (d / "ncu_report.py").is_file()]
    if not found:
        return []
    try:
        version = ncu_version(ncu)
    except Exception:  # a broken ncu still has a usable python module; treat its version as unknown
        version = ""
    return [(found[0], version)]


def _pip_version() -> str | None:
    try:
        return importlib.metadata.version("ncu_report")
    except importlib.metadata.PackageNotFoundError:
        return None


def choose_ncu_report(pip_version: str | None, extras: list[tuple[Path, str]]) -> tuple[str, Path | None, str]:
    """Pure policy: ('extras', folder, version) or ('pip', None, version); ReportError when there is neither."""
    from ..tools import version_tuple

    if extras and (pip_version is None or version_tuple(extras[0][1]) >= version_tuple(pip_version)):
        return "extras", extras[0][0], extras[0][1] or "unknown"
    if pip_version is None:
        raise ReportError(f"reading .ncu-rep files needs NVIDIA's ncu_report module: {INSTALL_HINT} "
                          "(or install Nsight Compute, whose extras/python folder has it)")
    return "pip", None, pip_version


@functools.lru_cache(maxsize=1)
def load_ncu_report_module():
    """Import ncu_report (see the module docstring for which) -> (module, version)."""
    kind, folder, version = choose_ncu_report(_pip_version(), _extras_candidates())
    try:
        if kind == "extras":
            return import_ncu_report_from(folder), version
        return importlib.import_module("ncu_report"), version
    except ImportError as exc:  # e.g. a wheel for another platform or Python
        where = folder or "the pip package"
        raise ReportError(f"ncu_report {version} ({where}) could not be imported ({exc}); {INSTALL_HINT}") from None


def import_ncu_report_from(folder: Path):
    """Import `ncu_report.py` from an Nsight Compute `extras/python` folder."""
    folder = Path(folder)
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    spec = importlib.util.spec_from_file_location("ncu_report", folder / "ncu_report.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["ncu_report"] = module
    spec.loader.exec_module(module)
    return module
