"""A planted report as it was recorded: its export in a folder of its own with what the profiled process wrote
beside it (Python samples, torch's allocator history, run.json), decompressed from this folder's .xz files."""
from __future__ import annotations

import lzma
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent


def unpack(entry: dict, variant: str, root: Path, planted: Path = HERE) -> Path:
    """The path of the decompressed export of `variant` ('bad' or 'fixed') of a planted.json `entry`."""
    report = entry["reports"][variant]
    stem = report[: -len(".sqlite")] if report.endswith(".sqlite") else report
    folder = Path(root) / stem
    folder.mkdir(parents=True, exist_ok=True)
    _unxz(planted / (report + ".xz"), folder / report)
    for side in (entry.get("sidecars") or {}).get(variant, ()):
        _unxz(planted / f"{stem}.{side}.xz", folder / side)
    return folder / report


def _unxz(src: Path, dst: Path) -> None:
    with lzma.open(src) as f, open(dst, "wb") as out:
        shutil.copyfileobj(f, out)
