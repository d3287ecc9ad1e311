"""Nsight Systems: find nsys and its importer, read versions, import and export reports.

Everything here is an argv list (never a shell string).  Finding and argv building are pure;
`import_qdstrm` and `export_sqlite` run nsys's own programs with a timeout.
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
import secrets
import signal
import subprocess
import time
from importlib import metadata
from pathlib import Path

from ..errors import Interrupted, ReportError, ToolNotFound
from .cache import remembered
from .find import find_executable, version_tuple
from .injection import tool_environment
from .system import orphan_guard

NSYS_ENV = "NSIGHT_MAGIC_NSYS"
TOOL_ENV = "NSIGHT_MAGIC_TOOL_OF"  # in the environment of the tools' programs we run: the pid that ran them

NSYS_INSTALL_HINT = (
    "install Nsight Systems (https://developer.nvidia.com/nsight-systems; on Debian 12: "
    "scripts/install-nsys-debian.sh) or set NSIGHT_MAGIC_NSYS=/path/to/nsys"
)

# Where NVIDIA's installers put nsys when it is not on PATH; newest version first after sorting.
_NSYS_GLOBS = (
    "/usr/local/cuda/bin/nsys",
    "/usr/local/cuda-*/bin/nsys",
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
    # Nsight Compute ships a full Nsight Systems CLI.
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
)


def find_nsys() -> Path:
    """The nsys to use: $NSIGHT_MAGIC_NSYS, then PATH, then NVIDIA's usual install folders."""
    return find_executable("nsys", NSYS_ENV, _NSYS_GLOBS, NSYS_INSTALL_HINT)


def _said(argv: list[str]) -> str:
    """What a short question to a tool printed (stdout, then stderr)."""
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                         env=tool_environment())
    return out.stdout + out.stderr


_VERSION = re.compile(r"(\d{4}\.\d+(?:\.\d+)*)")


@functools.lru_cache(maxsize=16)
def _version_of(exe: str) -> str:
    try:
        text = remembered(exe, "--version", lambda: _said([exe, "--version"]), keep=_VERSION.search)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolNotFound(f"{exe} --version failed ({e}); check the installation") from None
    m = _VERSION.search(text)
    if not m:
        raise ToolNotFound(f"{exe} --version printed no version: {text.strip()[:200]}")
    return m.group(1)


def nsys_version(nsys: Path | str | None = None) -> str:
    """Version of nsys as 'YYYY.M.P[.B]', e.g. '2022.4.2.1'."""
    return _version_of(str(nsys or find_nsys()))


@functools.lru_cache(maxsize=32)
def _help_of(exe: str, verb: str) -> str:
    try:
        return remembered(exe, f"{verb} --help", lambda: _said([exe, verb, "--help"]))
    except (OSError, subprocess.TimeoutExpired):
        return ""


@functools.lru_cache(maxsize=32)
def _switches_of(exe: str, verb: str) -> frozenset[str]:
    found = set()
    for line in _help_of(exe, verb).splitlines():
        # an entry's own line ("  -s, --sample=", "\t--cuda-memory-usage="), not a mention in another's text, and
        # not one nsys 2025 lists as "(Deprecated)" for this verb (`launch` refuses --sample since 2021.5)
        m = re.match(r"\s*(?:-\w, )?(--[a-z][a-z0-9-]*)", line)
        if m and "(Deprecated)" not in line:
            found.add(m.group(1))
    return frozenset(found)


def nsys_switches(nsys: Path | str | None = None, verb: str = "profile") -> frozenset[str]:
    """The long switches `nsys VERB` takes, read from its --help: what this version can record (2022.4 has no
    --python-sampling; its --cuda-memory-usage is a switch of `launch`, not of `start`)."""
    return _switches_of(str(nsys or find_nsys()), verb)


def nsys_help(verb: str = "profile", nsys: Path | str | None = None) -> str:
    """`nsys VERB --help`'s text (read once per nsys)."""
    return _help_of(str(nsys or find_nsys()), verb)


def nsys_trace_values(nsys: Path | str | None = None) -> frozenset[str]:
    """The APIs `nsys profile --trace` takes, from its --help ("Possible values are 'cuda', 'nvtx', ... or
    'none'."); empty when the help does not say (then nothing is refused here and nsys says it)."""
    text = _help_of(str(nsys or find_nsys()), "profile")
    m = re.search(r"--trace=\s*\n(.*?)(?:\n\s*\n)", text, re.S)
    if not m:
        return frozenset()
    said = re.search(r"Possible values are (.*?)\.\s*(?:\n|$)", m.group(1), re.S)
    return frozenset(re.findall(r"'([^']+)'", said.group(1))) if said else frozenset()


def find_qdstrm_importer(nsys: Path | str | None = None) -> Path | None:
    """QdstrmImporter beside nsys.

    Layouts seen: `<root>/host-linux-x64/QdstrmImporter` next to `<root>/target-linux-x64/nsys`,
    `<root>/host/linux-desktop-glibc_*-x64/QdstrmImporter` (Nsight Compute's bundled nsys), and Debian's split of
    `/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys` vs `/usr/lib/nsight-systems/host-linux-x64/`.
    """
    nsys = Path(nsys or find_nsys())
    starts = [nsys.parent, nsys.resolve().parent]
    seen: set[Path] = set()
    for start in starts:
        for ancestor in [start, *list(start.parents)[:3]]:
            if ancestor in seen:
                continue
            seen.add(ancestor)
            for pattern in ("host-linux-x64", "linux-desktop-*", "*/host-linux-x64", "*/linux-desktop-*"):
                for d in sorted(ancestor.glob(pattern)):
                    exe = d / "QdstrmImporter"
                    if exe.is_file() and os.access(exe, os.X_OK):
                        return exe
    return None


def import_qdstrm(qdstrm: Path, nsys: Path | str | None = None, timeout: float = 600, cancel=None,
                  out: Path | None = None) -> Path:
    """Turn a raw `.qdstrm` (left when nsys's own import failed) into a `.nsys-rep` (default: beside it) with
    QdstrmImporter.  The report appears complete or not at all (written under another name, then renamed)."""
    importer = find_qdstrm_importer(nsys)
    if importer is None:
        raise ReportError(f"nsys left {qdstrm.name} but no QdstrmImporter was found beside {nsys or find_nsys()}")
    out = Path(out) if out is not None else qdstrm.with_suffix(".nsys-rep")
    with _partial(out) as tmp:
        proc = run_tool([str(importer), "-i", str(qdstrm), "-o", str(tmp), "-f"], timeout, "QdstrmImporter", cancel)
        # its exit status decides: on a full disk it leaves a truncated report (and exits 2)
        if proc.returncode != 0 or not tmp.exists():
            raise ReportError(f"QdstrmImporter could not import {qdstrm.name} (exit {proc.returncode}): "
                              f"{_last_line(proc)}")
        os.replace(tmp, out)
    return out


def export_sqlite(report: Path | str, nsys: Path | str | None = None, out: Path | str | None = None,
                  timeout: float = 600, cancel=None) -> Path:
    """`nsys export --type sqlite` of a .nsys-rep/.qdrep; returns the .sqlite path (raises ReportError).  The
    export appears complete or not at all (written beside under another name, then renamed)."""
    report = Path(report)
    out = Path(out) if out else report.with_suffix(".sqlite")
    nsys = str(nsys or find_nsys())
    with _partial(out) as tmp:
        argv = [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(tmp), str(report)]
        proc = run_tool(argv, timeout, "nsys export", cancel)
        if proc.returncode != 0 or not tmp.exists():
            raise ReportError(f"nsys {nsys_version(nsys)} could not export {report.name}: {_last_line(proc)}")
        os.replace(tmp, out)
    return out


@contextlib.contextmanager
def _partial(final: Path):
    """A name beside `final` to write to (hidden, random); removed unless it was renamed into place."""
    tmp = final.with_name(f".{final.stem}-{secrets.token_hex(6)}.partial{final.suffix}")
    try:
        yield tmp
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass


def run_tool(argv: list[str], timeout: float, what: str, cancel=None) -> subprocess.CompletedProcess:
    """Run one of the tools' programs to its end, its output captured; ReportError after `timeout` s, Interrupted
    when `cancel` (a threading.Event) is set meanwhile.  It dies with the notebook's kernel (orphan_guard)."""
    try:
        proc = subprocess.Popen([*orphan_guard(), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**tool_environment(), TOOL_ENV: str(os.getpid())})
    except OSError as e:
        raise ToolNotFound(f"{what} could not start: {e}") from None
    end = time.monotonic() + timeout
    try:
        while True:
            try:
                out, err = proc.communicate(timeout=0.05)
                return subprocess.CompletedProcess(argv, proc.returncode, out, err)
            except subprocess.TimeoutExpired:
                pass
            if cancel is not None and cancel.is_set():
                raise Interrupted(f"{what} was stopped (interrupted)")
            if time.monotonic() > end:
                raise ReportError(f"{what} did not finish within {timeout:.0f} s")
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
        raise


# what nsys's raw error text (a C++ exception from FileStream.cpp and the like) means, said plainly
_OS_WORDS = (("No space left on device", "the disk is full (No space left on device): free space or give --dir a "
                                         "folder on another disk"),
             ("Read-only file system", "the folder is read-only (Read-only file system): give --dir a writable "
                                       "folder"),
             ("Permission denied", "the folder is not writable (Permission denied): make it writable or give --dir "
                                   "another folder"))


def _last_line(proc: subprocess.CompletedProcess) -> str:
    # nsys draws progress bars with carriage returns; the useful message is the last real line.
    text = (proc.stderr or "") + "\n" + (proc.stdout or "")
    for phrase, words in _OS_WORDS:
        if phrase in text:
            return words
    lines = [ln.split("\r")[-1].strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith(("Processing [", "Exporting "))]
    errors = [ln for ln in lines if re.search(r"error|invalid|fail|unsupported", ln, re.I)]
    return (errors or lines or [f"exit status {proc.returncode}"])[-1][:300]


def nvtx_pitfall(nsys_version: str | None) -> str | None:
    """nsys older than 2023 silently drops ranges from nvtx>=0.2.11 (measured with 2022.4 and 0.2.17)."""
    try:
        nvtx_version = metadata.version("nvtx")
    except metadata.PackageNotFoundError:
        return None
    if nsys_version and version_tuple(nsys_version) < (2023,) and version_tuple(nvtx_version) >= (0, 2, 11):
        return (f"nsys {nsys_version} does not record ranges from nvtx {nvtx_version}: "
                f"pip install 'nvtx==0.2.10' or use a newer nsys")
    return None
