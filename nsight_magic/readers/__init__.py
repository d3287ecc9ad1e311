"""Readers: report files -> DataFrames (`NsysData`, `NcuData`).  They know nothing of analysis, views or Jupyter:
what can be done with a report (`.findings()`, `.show()`) is the facade one floor up, nsight_magic.report."""
from __future__ import annotations

from pathlib import Path

from ..errors import ReportError
from ..store import dangling_link

NSYS_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep", ".qdstrm")
NCU_SUFFIXES = (".ncu-rep", ".csv")


def report_and_label(x) -> tuple:
    """A report to compare and its name in the comparison: opened from a path (a folder: its name; report.*: its
    folder's name; another file: its stem), or an opened report as it is (its folder's name)."""
    if isinstance(x, (str, Path)):
        p = Path(x)
        return read_report(p), (p.name if p.is_dir() else p.parent.name if p.stem == "report" else p.stem)
    return x, report_label(x)


def report_label(report) -> str:
    """An opened report's name in a comparison: its profile folder's name."""
    return Path(getattr(report, "path", "report")).parent.name or "report"


def read_report(path):
    """Read a report by its kind: nsys (.sqlite/.nsys-rep/.qdrep), ncu (.ncu-rep/.csv) or a profile folder."""
    if "\x00" in str(path):  # the OS refuses such a path (Python raises ValueError deep inside)
        raise ReportError(f"{str(path)!r}: a path cannot hold a NUL character; pass the report's path as it is on "
                          "disk")
    p = Path(path).expanduser()
    if not p.exists():
        dangling = dangling_link(p)
        if dangling:
            raise ReportError(f"{p}: {dangling}; pass the report itself")
        raise ReportError(f"{p}: no such file or folder; pass a .nsys-rep, .sqlite, .ncu-rep, .csv or a profile folder")
    if p.is_dir():
        return _open_folder(p)
    if not p.is_file():  # a FIFO or a device would block the reader forever
        raise ReportError(f"{p}: not a regular file (a pipe, socket or device); pass the report file itself")
    suffix = p.suffix.lower()
    if suffix in NSYS_SUFFIXES:
        from .nsys import open_nsys_report

        return open_nsys_report(p)
    if suffix in NCU_SUFFIXES:
        from .ncu import open_ncu_report

        return open_ncu_report(p)
    raise ReportError(
        f"{p}: unknown report type {suffix!r}; expected one of {', '.join(NSYS_SUFFIXES + NCU_SUFFIXES)}"
    )


def _open_folder(folder: Path):
    """A saved profile folder holds report.sqlite / report.nsys-rep (nsys) or report.ncu-rep and its CSV pages (ncu).

    The CSV pages come first for ncu: they hold the same numbers and need no native ncu_report library."""
    raw, details = folder / "report_raw.csv", folder / "report_details.csv"
    if raw.exists() and details.exists():
        from .ncu import open_ncu_pages

        return open_ncu_pages(raw, details)
    for name in ("report.sqlite", "report.nsys-rep", "report.ncu-rep", "report_raw.csv", "report_details.csv",
                 "report.qdstrm"):
        if (folder / name).exists():
            return read_report(folder / name)
    for pattern in ("*.sqlite", "*.nsys-rep", "*.qdrep", "*.ncu-rep", "*.qdstrm"):
        found = sorted(folder.glob(pattern))
        if found:
            return read_report(found[0])
    from ..store import list_profiles

    profiles = list_profiles(folder)
    if len(profiles):
        newest = profiles["folder"].iloc[0]
        raise ReportError(f"{folder} holds {len(profiles)} profiles, not one report: open one of them (the newest is "
                          f"{newest}), or list them with %nsys_load {folder}")
    from ..store import describe_reportless

    raise ReportError(describe_reportless(folder))
