"""Saved profiles: one folder per run beside the notebook, never overwritten."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from .options import safe_name

DEFAULT_DIR_NAME = "nsight-profiles"


def notebook_dir() -> Path:
    """The folder of the running notebook: JPY_SESSION_NAME's parent when it names a file, else the kernel's cwd."""
    session = os.environ.get("JPY_SESSION_NAME")
    if session:
        p = Path(session).expanduser()
        if p.suffix == ".ipynb" and p.parent.is_dir():
            return p.parent.resolve()
    return Path.cwd()


def profiles_root(directory: str | os.PathLike | None) -> Path:
    """Absolute: the profiler and the child run in the notebook's folder, which may not be the kernel's cwd."""
    return Path(directory).expanduser().resolve() if directory else notebook_dir() / DEFAULT_DIR_NAME


def create_profile_folder(root: Path, name: str, now: float | None = None) -> Path:
    """`<root>/<name>-<YYYYmmdd-HHMMSS>[-n]/`, created atomically so two runs never share a folder."""
    root.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    base = f"{safe_name(name)}-{stamp}"
    for n in range(1, 10_000):
        folder = root / (base if n == 1 else f"{base}-{n}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise OSError(f"could not create a new profile folder under {root}")


@dataclass(frozen=True)
class ProfileFolder:
    """The files of one saved profile (see README: what each file holds)."""

    path: Path

    cell = property(lambda self: self.path / "cell.py")
    setup = property(lambda self: self.path / "setup.py")
    run_config = property(lambda self: self.path / "run.json")
    vars_blob = property(lambda self: self.path / "vars.pkl")
    vars_manifest = property(lambda self: self.path / "vars.json")
    returns_blob = property(lambda self: self.path / "returns.pkl")
    stdout = property(lambda self: self.path / "stdout.txt")
    stderr = property(lambda self: self.path / "stderr.txt")
    progress = property(lambda self: self.path / "progress.jsonl")
    tool_log = property(lambda self: self.path / "tool-output.txt")
    command = property(lambda self: self.path / "command.txt")
    versions = property(lambda self: self.path / "versions.json")
    report_base = property(lambda self: self.path / "report")
    nsys_rep = property(lambda self: self.path / "report.nsys-rep")
    qdstrm = property(lambda self: self.path / "report.qdstrm")
    sqlite = property(lambda self: self.path / "report.sqlite")
    view_html = property(lambda self: self.path / "view.html")

    def write_json(self, path: Path, data) -> None:
        path.write_text(json.dumps(data, indent=2, default=str) + "\n")

    def files(self) -> list[Path]:
        return sorted(p for p in self.path.iterdir() if p.is_file())
