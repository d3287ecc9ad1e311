"""Saved profiles: one folder per run beside the notebook, never overwritten."""
from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from .options import safe_name

if TYPE_CHECKING:
    import pandas as pd

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


SUMMARY_FILE = "summary.json"
# what a profile folder's listing shows; summary.json holds these (written when the profile is made)
SUMMARY_KEYS = ("name", "tool", "created", "capture_ns", "kernels", "top_kernel", "top_kernel_pct", "top_range",
                "top_range_pct", "error")  # error: finished with nothing to show (an empty capture), why


def write_summary_file(folder: Path, data: dict) -> dict:
    """summary.json in a profile folder: `data` (SUMMARY_KEYS, from readers.summary) with the folder's name and
    time; returns what was written."""
    folder = Path(folder)
    data = {"name": folder.name, "created": _created(folder), **data}
    try:
        (folder / SUMMARY_FILE).write_text(json.dumps(data, indent=2) + "\n")
    except OSError:
        pass
    return data


def _created(folder: Path) -> str:
    """When the profile was made: the stamp in its name (create_profile_folder), else the folder's time."""
    m = re.search(r"-(\d{4})(\d\d)(\d\d)-(\d\d)(\d\d)(\d\d)(?:-\d+)?$", folder.name)
    if m:
        y, mo, d, h, mi, sec = m.groups()
        return f"{y}-{mo}-{d} {h}:{mi}:{sec}"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(folder.stat().st_mtime))


REPORT_FILES = ("report.sqlite", "report.nsys-rep", "report.ncu-rep", "report_raw.csv", "report.qdstrm")


FINISHING_FILE = "finishing.json"  # a profile whose finish stage (export, view) runs: which kernel runs it


def mark_finishing(folder: Path) -> None:
    """The profile's finish stage begins (in this process): listings do not count it as finished yet.  The
    Jupyter kernel's id is there too: the Lab sidebar, which cannot see processes, asks the server for it."""
    from .tools import jupyter_kernel_id, process_identity

    try:
        (Path(folder) / FINISHING_FILE).write_text(json.dumps({**process_identity(), "since": time.time(),
                                                               "kernel_id": jupyter_kernel_id()}) + "\n")
    except OSError:  # the folder went away or became read-only (the cell's doing): the finish stage says so
        pass


def mark_interrupted(folder: Path) -> None:
    """The kernel ends before the profile's finish stage did: its finishing.json says so (a restarted kernel keeps
    its id, so the sidebar cannot tell from the running kernels alone)."""
    p = Path(folder) / FINISHING_FILE
    try:
        data = json.loads(p.read_text())
        p.write_text(json.dumps({**(data if isinstance(data, dict) else {}), "interrupted": True}) + "\n")
    except (OSError, ValueError):
        pass


def clear_finishing(folder: Path) -> None:
    try:
        (Path(folder) / FINISHING_FILE).unlink()
    except OSError:
        pass


def finishing_state(p: Path) -> str | None:
    """None: the profile is finished (or never had a finish stage); "finishing": a live kernel is finishing it;
    "interrupted": the kernel that was finishing it ended first (what the profiler wrote is in the folder)."""
    from .tools import identity_alive

    try:
        owner = json.loads((Path(p) / FINISHING_FILE).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        owner = None
    if not isinstance(owner, dict) or owner.get("interrupted"):
        return "interrupted"
    return "finishing" if identity_alive(owner) else "interrupted"


def is_profile_folder(p: Path) -> bool:
    return p.is_dir() and any((p / f).exists() for f in (*REPORT_FILES, "cell.py", SUMMARY_FILE))


def has_report(p: Path) -> bool:
    """A finished profile folder whose run left a report (a failed run keeps its cell and output, but no report; a
    profile still being finished, or whose finishing was cut short, is not counted)."""
    return any((p / f).exists() for f in REPORT_FILES) and finishing_state(p) is None


def folder_tool(p: Path) -> str | None:
    """Which profiler a profile folder is for: from its report, else from run.json / command.txt."""
    if (p / "report.ncu-rep").exists() or (p / "report_raw.csv").exists():
        return "ncu"
    if any((p / f).exists() for f in ("report.sqlite", "report.nsys-rep", "report.qdstrm")):
        return "nsys"
    try:
        tool = json.loads((p / "run.json").read_text()).get("tool")
        if tool in ("nsys", "ncu"):
            return tool
    except (OSError, ValueError, AttributeError):
        pass
    try:
        cmd = (p / "command.txt").read_text()
        return "ncu" if "ncu" in cmd.split(" ", 1)[0] else "nsys"
    except OSError:
        pass
    try:
        return json.loads((p / "versions.json").read_text()).get("ncu") and "ncu" or "nsys"
    except (OSError, ValueError, AttributeError):
        return None


def describe_reportless(folder: Path) -> str:
    """One line for a folder without a report: what it holds and where the reason is."""
    files = sorted(f.name for f in folder.iterdir() if f.is_file()) if folder.is_dir() else []
    state = finishing_state(folder) if FINISHING_FILE in files else None
    if state == "finishing":
        return (f"{folder.name} is still being loaded by the kernel that made it; nsight_magic.open_report and "
                f"%nsys_load wait for it")
    if not files:
        return f"{folder}: an empty folder, no report (looked for report.sqlite, report.nsys-rep, report.ncu-rep)"
    tool = folder_tool(folder) or "the profiler"
    why = [f for f in ("stderr.txt", "tool-output.txt") if f in files]
    where = f"; why is in {' and '.join(why)}" if why else ""
    shown = ", ".join(files[:8]) + (", ..." if len(files) > 8 else "")
    return (f"{folder.name}: this {tool} run left no report (it failed or was stopped before {tool} wrote one)"
            f"{where}; the folder holds {shown}")


def list_profiles(root: Path, include_failed: bool = False):
    """The profile folders under `root` (one level), newest first, as a DataFrame with SUMMARY_KEYS + folder +
    has_report + state (finished, failed, finishing: being loaded by a kernel, interrupted: its loading was cut
    short).  A profile's name is its folder's name (a copied folder is a profile of its own).

    summary.json gives the figures; a folder without one (made by an older version, or whose report could not be
    read) still gets a row with what its files say.  Folders of failed, finishing or interrupted runs are left out
    unless `include_failed`."""
    import pandas as pd

    rows = []
    for d in Path(root).iterdir() if Path(root).is_dir() else ():
        if not is_profile_folder(d):
            continue
        ok = has_report(d)
        if not ok and not include_failed:
            continue
        data = _summary_of(d)
        rows.append({**{k: data.get(k) for k in SUMMARY_KEYS}, "folder": str(d), "has_report": ok,
                     "state": "finished" if ok else (finishing_state(d) or "failed")})
    df = pd.DataFrame(rows, columns=[*SUMMARY_KEYS, "folder", "has_report", "state"])
    # newest first; folders made in the same second by their -n suffix (name order)
    return df.sort_values(["created", "folder"], ascending=False, kind="stable").reset_index(drop=True)


_NUMBERS = ("capture_ns", "kernels", "top_kernel_pct", "top_range_pct")
_TEXTS = ("tool", "created", "top_kernel", "top_range", "error")


def _summary_of(d: Path) -> dict:
    """A folder's summary.json as SUMMARY_KEYS, each of its type (a number where numbers go, text where text goes)
    or None: a damaged or hand-edited file must not break the listing of every profile."""
    try:
        data = json.loads((d / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict):
        data = {"created": _created(d), "tool": folder_tool(d)}
    out = {"name": d.name}
    for k in _NUMBERS:
        v = data.get(k)
        out[k] = v if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None
    for k in _TEXTS:
        v = data.get(k)
        out[k] = v if isinstance(v, str) else None
    if out["created"] is None:
        out["created"] = _created(d)
    return out


def pick_profile(profiles, key: str | None) -> dict:
    """One row of list_profiles(): the newest by default, else by index (0 = newest) or by name (the folder's
    name, or a part of it that only one profile has).  Raises OptionError naming the choices."""
    from .errors import OptionError

    if profiles.empty:
        raise OptionError("no profiles to pick from")
    if key is None or key == "":
        return profiles.iloc[0].to_dict()
    names = profiles["name"].astype(str).tolist()
    if str(key).lstrip("-").isdigit():
        i = int(key)
        if not -len(names) <= i < len(names):
            raise OptionError(f"--pick {key}: there are {len(names)} profiles (0 = newest .. {len(names) - 1})")
        return profiles.iloc[i].to_dict()
    exact = [i for i, n in enumerate(names) if n == key]
    hits = exact or [i for i, n in enumerate(names) if key in n]
    if len(hits) == 1:
        return profiles.iloc[hits[0]].to_dict()
    shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    if not hits:
        raise OptionError(f"--pick {key}: no profile of that name; there are: {shown}")
    raise OptionError(f"--pick {key}: {len(hits)} profiles match ({', '.join(names[i] for i in hits[:8])}); "
                      f"give the whole name or an index")


def dangling_link(p: Path) -> str | None:
    """What a path that does not exist is when it is a symbolic link (exists() follows links): a loop, or a link
    to nothing; None otherwise."""
    if not p.is_symlink() or p.exists():
        return None
    try:
        p.resolve(strict=True)
    except RuntimeError:  # Python's word for a link loop
        return "a symbolic link loop"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symbolic link loop"
    return f"a symbolic link to {os.readlink(p)}, which does not exist"


def find_profile(spec: str, root: Path | None = None) -> Path:
    """A profile given by the user: an existing folder or report file, else a profile's name (or a part of it
    only one has, or an index, 0 = newest) among the profile folders of `root` (default: nsight-profiles beside
    the notebook), or `baseline:NAME`, a baseline kept there (baselines.py).  Raises OptionError saying what
    exists."""
    from .baselines import PREFIX, find_baseline
    from .errors import OptionError

    p = Path(spec).expanduser()
    if p.exists():
        return p
    dangling = dangling_link(p)
    if dangling:
        raise OptionError(f"{p}: {dangling}; pass the report itself")
    root = Path(root) if root is not None else profiles_root(None)
    if str(spec).startswith(PREFIX):
        return find_baseline(str(spec)[len(PREFIX):], root)
    profiles = list_profiles(root)
    if profiles.empty:
        raise OptionError(f"{spec}: no such file or folder, and {root} holds no profiles")
    try:
        return Path(pick_profile(profiles, spec)["folder"])
    except OptionError as e:
        raise OptionError(str(e).replace("--pick ", "")) from None


def save_baseline(name: str, profile: str | os.PathLike | None, root: Path) -> Path:
    """Keep profile `profile` (a folder, a name in `root` or an index; None: the newest) as baseline `name`
    (baselines.py); returns the baseline's folder."""
    from .baselines import check_name, keep
    from .errors import OptionError

    check_name(name)
    if profile is None:
        found = list_profiles(root)
        if found.empty:
            raise OptionError(f"{root} holds no finished profile to keep as baseline {name!r}; give one")
        src = Path(found.iloc[0]["folder"])
    else:
        src = find_profile(str(profile), root)
    if src.is_file():
        raise OptionError(f"{src}: a baseline is a profile folder; give the folder that holds this report")
    if not has_report(src):
        raise OptionError(f"{src}: not a finished profile (no report in it, or still being loaded)")
    return keep(src, name, root)


# ---- what the views show of a profile's folder, and the pages they are saved as ----------------------------------
# The views read no file and write none (tests/test_layout.py): they get these from here.

def folder_files(folder) -> pd.DataFrame:
    """The Files tab: every file under folder (relative path, bytes), sorted; no rows when folder is None.
    A folder that is not a directory is a one-line ReportError."""
    import pandas as pd

    from .errors import ReportError

    if folder is None:
        return pd.DataFrame(columns=["file", "bytes"])
    p = Path(folder)
    if not p.is_dir():
        raise ReportError(f"{p}: not a folder; pass the profile folder that holds the report")
    files = sorted(f for f in p.rglob("*") if f.is_file() and f.name != FINISHING_FILE)  # gone once it is drawn
    return pd.DataFrame({"file": [str(f.relative_to(p)) for f in files], "bytes": [f.stat().st_size for f in files]})


def files_of(folder, report_path) -> pd.DataFrame:
    """The profile folder's files, or just the report file when it is not in one."""
    import pandas as pd

    if folder is not None and Path(folder).is_dir():
        return folder_files(folder)
    path = Path(report_path)
    return pd.DataFrame({"file": [str(path)], "bytes": [path.stat().st_size if path.exists() else 0]})


@dataclass(frozen=True)
class CellFacts:
    """What a profile folder says of its cell: its source (cell.py), the editor's number of its first line
    (run.json) and what --modules annotated (annotations.json: checked, never trusted)."""
    source: str | None = None
    first_line: int = 1
    annotations: dict | None = None


def cell_facts(folder) -> CellFacts:
    if folder is None:
        return CellFacts()
    folder = Path(folder)
    cell = folder / "cell.py"
    source = cell.read_text() if cell.is_file() else None
    try:  # under a %%nsys line the editor numbers the cell's first line 2
        first = int(json.loads((folder / "run.json").read_text()).get("cell_first_line", 1))
    except (OSError, ValueError, TypeError, AttributeError):
        first = 1
    made = None
    try:
        made = json.loads((folder / "annotations.json").read_text())
    except (OSError, ValueError):
        pass
    return CellFacts(source, first, made if isinstance(made, dict) else None)


def notebook_relative(folder) -> str | None:
    """A folder relative to the notebook's (the frontend reads it through the contents API); None on another
    drive."""
    try:
        return Path(os.path.relpath(Path(folder).resolve(), notebook_dir())).as_posix()
    except ValueError:  # another drive
        return None


def write_page(path: Path, html: str) -> Path:
    """Write an HTML page (view.html, diff and ncu pages) whole or not at all (`writing`)."""
    with writing(path) as f:
        f.write(html)
    return Path(path)


@contextlib.contextmanager
def writing(path: str | Path, compress: bool = False) -> Iterator[IO[str]]:
    """A text file written whole or not at all: into a new file beside `path`, renamed over it when the block
    ends without an error (a symbolic link at `path` is replaced, never written through); gzip with `compress`."""
    import gzip
    import secrets

    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.partial")
    try:
        with (gzip.open(tmp, "xt", encoding="utf-8") if compress else open(tmp, "x", encoding="utf-8")) as f:
            yield f
        os.replace(tmp, path)
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass
