"""Baselines by name: a profile kept under `<profiles folder>/baselines/<NAME>/` to compare later runs with
(`nsight-magic diff baseline:main 0 --fail-above 5`; 0 is the newest profile).

A baseline is a copy of the profile folder (a copy, not a link: it survives the original's deletion, and nothing
that rewrites the original reaches it); saving under a name that exists replaces it whole, never half.
"""
from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from pathlib import Path

from .errors import OptionError

BASELINES_DIR = "baselines"
SOURCE_FILE = "baseline.json"  # which profile a baseline copies, and when it was kept
PREFIX = "baseline:"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name or ""):
        raise OptionError(f"baseline name {name!r}: use letters, digits, '.', '_' and '-' (e.g. main, v1.2)")
    return name


def baselines(root: Path) -> dict[str, Path]:
    """The baselines saved under `root` (a profiles folder), by name."""
    where = Path(root) / BASELINES_DIR
    if not where.is_dir():
        return {}
    return {d.name: d for d in sorted(where.iterdir()) if d.is_dir() and _NAME.fullmatch(d.name)}


def find_baseline(name: str, root: Path) -> Path:
    """The folder of baseline `name` under `root`; an OptionError that lists the baselines there otherwise."""
    check_name(name)
    got = baselines(root)
    if name in got:
        return got[name]
    known = ", ".join(got) if got else "none yet"
    raise OptionError(f"{PREFIX}{name}: no such baseline in {Path(root) / BASELINES_DIR} (there: {known}); save one "
                      f"with: nsight-magic baseline {name} PROFILE")


def keep(src: Path, name: str, root: Path) -> Path:
    """Copy the finished profile folder `src` to baseline `name` under `root` (store.save_baseline finds `src`)."""
    check_name(name)
    where = Path(root) / BASELINES_DIR
    where.mkdir(parents=True, exist_ok=True)
    dst = where / name
    if dst.resolve() == src.resolve():
        return dst
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=where))
    try:
        shutil.copytree(src, tmp / "p", symlinks=False)
        (tmp / "p" / SOURCE_FILE).write_text(json.dumps({"source": str(src.resolve()), "saved": time.time()}))
        old = where / f".{name}.old"
        if dst.exists():
            shutil.rmtree(old, ignore_errors=True)
            dst.rename(old)   # a reader sees the old baseline, the new one or (for an instant) none; never half of one
        (tmp / "p").rename(dst)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dst


def source_of(baseline: Path) -> str:
    """The profile folder a baseline was copied from, as recorded when it was kept ('' when unknown)."""
    try:
        got = json.loads((Path(baseline) / SOURCE_FILE).read_text()).get("source")
    except (OSError, ValueError, AttributeError):
        return ""
    return got if isinstance(got, str) else ""
