"""Which files of a folder are one job's per-rank reports, and which rank each one is.

`nsys profile -o report.%q{RANK}` (torchrun) or `-o prof/report.%q{SLURM_PROCID}` (Slurm) name each rank's report
after its rank: the rank is the last number in the file name's stem (report.12.nsys-rep, report.rank3.sqlite,
node07_rank12.nsys-rep).  Where a rank has both its .nsys-rep and the .sqlite exported from it, the export is read.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import OptionError

REPORT_SUFFIXES = (".nsys-rep", ".qdrep", ".sqlite", ".qdstrm")  # .qdstrm: nsys could not import it itself
_LAST_NUMBER = re.compile(r"(\d+)(?!.*\d)")


class RankClash(OptionError):
    """Two files claim one rank: the folder is a job whose ranks cannot be told apart."""


@dataclass(frozen=True)
class RankFile:
    rank: int
    path: Path       # what a task reads: the .sqlite when one is there, else the .nsys-rep (exported by the task)


def rank_of(path: Path) -> int | None:
    """The rank in a report's file name: the last number of its stem (None: no number)."""
    stem = path.name
    for s in REPORT_SUFFIXES:
        if stem.endswith(s):
            stem = stem[: -len(s)]
    m = _LAST_NUMBER.search(stem)
    return int(m.group(1)) if m else None


def find_rank_reports(source, pattern: str | None = None) -> list[RankFile]:
    """The per-rank reports of a job: a folder (its files matching `pattern`, a glob, default every
    .nsys-rep/.qdrep/.sqlite with a number in its name), or a list of report paths (ranks from their names, else
    their order).  Sorted by rank; a rank given twice is an error that names both files."""
    if isinstance(source, (str, Path)):
        folder = Path(source).expanduser()
        if not folder.is_dir():
            raise OptionError(f"{folder}: not a folder of per-rank reports")
        files = sorted(folder.glob(pattern)) if pattern else sorted(
            p for p in folder.iterdir() if p.name.endswith(REPORT_SUFFIXES))
        # a link to a missing file, or a pipe or socket under a report's name, is kept: its rank's task names it
        # instead of the rank vanishing without a word
        files = [p for p in files if (p.is_symlink() or (p.exists() and not p.is_dir()))
                 and not p.name.endswith((".part.sqlite",))]
        ranked = [(rank_of(p), p) for p in files]
        ranked = [(r, p) for r, p in ranked if r is not None]
        if not ranked:
            shown = ", ".join(p.name for p in files[:5]) or "nothing"
            raise OptionError(f"{folder} holds no per-rank reports (files whose names end in their rank, as "
                              f"report.%q{{RANK}} makes them; found {shown}); choose them with --pattern GLOB")
        _check_ranks(folder, ranked)
    else:
        paths = [Path(p).expanduser() for p in source]
        ranks = [rank_of(p) for p in paths]
        if None in ranks or len(set(ranks)) != len(ranks):
            ranks = list(range(len(paths)))
        ranked = list(zip(ranks, paths))
    by_rank: dict[int, dict[str, Path]] = {}
    for r, p in ranked:
        kind = {".sqlite": "sqlite", ".qdstrm": "raw"}.get(p.suffix, "rep")
        if kind in by_rank.setdefault(r, {}):
            raise RankClash(f"rank {r} twice: {by_rank[r][kind].name} and {p.name}; choose one set with --pattern")
        by_rank[r][kind] = p
    out = []
    for r in sorted(by_rank):
        f = by_rank[r]
        rep, sq = f.get("rep"), f.get("sqlite")
        use = sq if sq is not None and (rep is None or _mtime(sq) >= _mtime(rep)) else rep
        use = use or f["raw"]
        out.append(RankFile(r, use))
    return out


def _check_ranks(folder: Path, ranked: list) -> None:
    """The numbers read as ranks must look like a job's: more files than ranks missing below the highest (a date
    in a name, a version suffix or a stray number is no rank, and would make millions of missing ranks)."""
    ranks = {r for r, _ in ranked}
    top = max(ranks)
    gaps = top + 1 - len(ranks)
    if gaps > len(ranks):
        shown = ", ".join(p.name for _, p in sorted(ranked)[:3])
        raise OptionError(f"{folder}: the numbers in its report names ({shown}{', ...' if len(ranked) > 3 else ''}; "
                          f"highest {top:,}) are not a job's ranks: {len(ranks)} file(s) for ranks 0-{top:,}; "
                          "open a single report with its path, or choose a job's files with --pattern GLOB")


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:  # a dangling link
        return -1.0


def missing_ranks(files: list[RankFile]) -> list[int]:
    """Ranks below the highest one found that have no report (a rank that wrote none, a file deleted)."""
    have = {f.rank for f in files}
    return [r for r in range(max(have, default=-1) + 1) if r not in have]
