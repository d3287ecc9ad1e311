"""Nsight Compute command lines: find ncu, build and validate argv lists, import CSVs, explain failures.

Pure where possible (argv building and validation, failure messages): the runner executes what we build.

NVTX filters (`--nvtx-include`, need `--nvtx`), as the ncu CLI documentation describes them:
  - "A/"        push/pop range A anywhere on the stack (the trailing slash is what makes it a push/pop filter);
  - "A/B"       B pushed directly inside A; "A/*/B" with any ranges between; "A/+/B" with exactly one;
  - "[A" / "A]" push/pop range A at the bottom / top of the stack;
  - "A"         (no slash) a start/end range; "A,B" inside both start/end ranges A and B;
  - "Domain@A/" the same in a named NVTX domain; "regex:..." makes the names regular expressions.
  Several --nvtx-include flags are OR'ed: a kernel is profiled when any of them matches.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import OptionError, ToolNotFound
from .argv import validate_passthrough
from .injection import tool_environment
from .find import find_executable

ENV_VAR = "NSIGHT_MAGIC_NCU"
INSTALL_HINT = (
    "install Nsight Compute (it comes with the CUDA toolkit: /usr/local/cuda/bin/ncu; or "
    "https://developer.nvidia.com/nsight-compute), or point NSIGHT_MAGIC_NCU at the ncu executable"
)
DEFAULT_SET = "basic"
DEFAULT_SECTIONS = ("MemoryWorkloadAnalysis",)
DEFAULT_COUNT = 50
REPLAY_MODES = ("kernel", "application", "range", "app-range")
# Flags we set ourselves: a user value would break the files we read or our output parsing.
# (--import-source, which only shares the prefix, stays allowed: it embeds source files in the report.)
_REPORT = "nsight-magic names the report inside the profile folder"
_CSV = "nsight-magic imports the CSV pages itself after the run"
OWNED_FLAGS = {
    "-o": _REPORT, "--export": _REPORT,
    "-f": "profile folders are never overwritten", "--force-overwrite": "profile folders are never overwritten",
    "--log-file": "nsight-magic keeps ncu's output in the profile folder",
    "--csv": _CSV, "--page": _CSV, "--print-units": _CSV,
    "-i": "open existing reports with %nsys_load or open_report()",
    "--import": "open existing reports with %nsys_load or open_report()",
    "--open-in-ui": "there is no UI to open in a notebook",
    # set from %%ncu's own options: passing them twice makes ncu refuse to start
    "--set": "use --set", "--section": "use --section", "--metrics": "use --metrics",
    "-k": "use --kernel", "--kernel-name": "use --kernel", "--kernel-name-base": "use --kernel",
    "--nvtx": "NVTX ranges are always recorded", "--nvtx-include": "use --nvtx-include or --module",
    "-c": "use --count", "--launch-count": "use --count", "-s": "use --skip", "--launch-skip": "use --skip",
    "--replay-mode": "use --replay", "--target-processes": "nsight-magic profiles the cell's process tree",
}


# Where ncu is when it is not on PATH (the CUDA toolkit's wrapper first).
NCU_GLOBS = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu")


def find_ncu() -> Path:
    """The ncu executable: $NSIGHT_MAGIC_NCU, PATH, /usr/local/cuda/bin, /opt/nvidia/nsight-compute/*/ (newest
    first); ToolNotFound saying how to install it and that NSIGHT_MAGIC_NCU may point at it."""
    return find_executable("ncu", ENV_VAR, NCU_GLOBS, INSTALL_HINT)


def ncu_install_roots(ncu: Path) -> list[Path]:
    """Folders that may hold extras/python for this ncu: its folder, its resolved folder, and the CUDA toolkit's
    nsight-compute-*/ folders (/usr/local/cuda/bin/ncu is a wrapper script that runs ../nsight-compute-X/ncu)."""
    ncu = Path(ncu)
    roots = [ncu.parent, ncu.resolve().parent]
    roots.extend(sorted(ncu.parent.parent.glob("nsight-compute*"), reverse=True))
    seen, out = set(), []
    for r in roots:
        if r not in seen:
            seen.add(r)
            out.append(r)
    return out


def parse_ncu_version(text: str) -> str:
    """`ncu --version` output -> '2025.3.1.0' (ValueError when absent)."""
    m = re.search(r"Version\s+(\d+\.\d+(?:\.\d+)*)", text)
    if not m:
        raise ValueError(f"no version in ncu output: {text.strip()[:80]!r}")
    return m.group(1)


def ncu_version(ncu: Path, timeout: float = 30) -> str:
    """Run `ncu --version` and return its version string (ToolNotFound when it does not answer with one)."""
    try:
        proc = subprocess.run([str(ncu), "--version"], capture_output=True, text=True, timeout=timeout,
                              env=tool_environment())
        return parse_ncu_version(proc.stdout + proc.stderr)
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        raise ToolNotFound(f"{ncu} --version failed ({e}); check the installation or NSIGHT_MAGIC_NCU") from None


@dataclass(frozen=True)
class NcuOptions:
    """What `%%ncu` profiles.  `module="encoder"` is shorthand for nvtx_include=("encoder/",)."""

    set: str | None = DEFAULT_SET
    sections: tuple[str, ...] = DEFAULT_SECTIONS
    metrics: tuple[str, ...] = ()
    kernel: str | None = None  # regex on the kernel's function name
    nvtx_include: tuple[str, ...] = ()
    module: str | None = None
    count: int | None = DEFAULT_COUNT
    skip: int = 0
    replay: str = "kernel"
    extra_args: tuple[str, ...] = field(default=())

    def __post_init__(self):
        if self.replay not in REPLAY_MODES:
            raise OptionError(f"--replay {self.replay!r}: use one of {', '.join(REPLAY_MODES)}")
        if self.count is not None and self.count < 1:
            raise OptionError(f"--count {self.count}: must be at least 1")
        if self.skip < 0:
            raise OptionError(f"--skip {self.skip}: must be 0 or more")
        if self.kernel:
            try:
                re.compile(self.kernel)
            except re.error as exc:
                raise OptionError(f"--kernel {self.kernel!r}: not a regular expression ({exc})") from None


def module_nvtx_filter(module: str) -> str:
    """`--module NAME` -> the push/pop include 'NAME/': kernels launched anywhere inside NAME's range.

    The per-module ranges are push/pop ranges (range_push in a forward pre-hook, range_pop in the forward hook),
    nested like the modules, so the trailing slash (push/pop syntax) is required: without it ncu looks for a
    start/end range of that name and profiles nothing.  `annotate_modules` names each range by the module's dotted
    path ('encoder.layer.3'), so NAME is that path; a range includes the ranges of its submodules."""
    name = module.strip().rstrip("/")
    if not name:
        raise OptionError("--module needs a module name (the NVTX range pushed around that module's forward)")
    return f"{name}/"


def validate_ncu_args(text: str) -> list[str]:
    """Split `--ncu-args "..."` like a shell and refuse the flags nsight-magic owns (OptionError, one line)."""
    return list(validate_passthrough(text, OWNED_FLAGS, "ncu"))


def build_ncu_argv(ncu, opts: NcuOptions, report_base, child_argv: list[str]) -> list[str]:
    """The ncu command line (argv list, never a shell string).  report_base is the path without .ncu-rep; no
    --force-overwrite: each run has a fresh profile folder, and ncu refusing to overwrite is the right failure."""
    argv = [str(ncu), "--export", str(report_base)]
    if opts.set:
        argv += ["--set", opts.set]
    for sec in opts.sections:
        argv += ["--section", sec]
    if opts.metrics:
        argv += ["--metrics", ",".join(opts.metrics)]
    includes = list(opts.nvtx_include)
    if opts.module:
        includes.append(module_nvtx_filter(opts.module))
    argv += ["--nvtx"]  # always: the kernels table shows each kernel's NVTX range path
    for inc in includes:
        argv += ["--nvtx-include", inc]
    if opts.kernel:
        argv += ["--kernel-name-base", "function", "--kernel-name", f"regex:{opts.kernel}"]
    if opts.count is not None:
        argv += ["--launch-count", str(opts.count)]
    if opts.skip:
        argv += ["--launch-skip", str(opts.skip)]
    argv += ["--replay-mode", opts.replay, "--target-processes", "all"]
    argv += list(opts.extra_args)
    return argv + [str(a) for a in child_argv]


def count_limit_note(opts: NcuOptions, kernels_profiled: int) -> str | None:
    """The message for when the bounded --count was reached (more matching kernels may have run)."""
    if opts.count is not None and kernels_profiled >= opts.count:
        return (f"stopped after {opts.count} kernels (--count {opts.count}); pass a larger --count, --skip N, "
                "--kernel REGEX or --module NAME to profile others")
    return None


def describe_filters(opts: NcuOptions) -> str:
    parts = []
    if opts.kernel:
        parts.append(f"--kernel {opts.kernel!r}")
    for inc in opts.nvtx_include:
        parts.append(f"--nvtx-include {inc!r}")
    if opts.module:
        parts.append(f"--module {opts.module!r} (NVTX include {module_nvtx_filter(opts.module)!r})")
    if opts.skip:
        parts.append(f"--skip {opts.skip}")
    return ", ".join(parts) or "no filters"


def explain_ncu_failure(stderr_text: str, returncode: int, opts: NcuOptions | None = None) -> str | None:
    """A one-line explanation for known ncu failures, or None when the output matches none of them.

    Pass stdout and stderr together: ncu prints its ==WARNING== / ==ERROR== lines (e.g. "No kernels were
    profiled", with exit status 0) on stdout."""
    text = stderr_text or ""
    if "ERR_NVGPUCTRPERM" in text:
        return ("ncu may not read the GPU performance counters (ERR_NVGPUCTRPERM): run as root, or set the driver "
                "option NVreg_RestrictProfilingToAdminUsers=0 (modprobe.d, then reload the driver or reboot), or in "
                "a container add --cap-add=SYS_ADMIN; see https://developer.nvidia.com/ERR_NVGPUCTRPERM")
    if "No kernels were profiled" in text:
        filters = describe_filters(opts) if opts is not None else "the kernel/NVTX filters"
        return (f"no kernels were profiled: the filters matched nothing ({filters}), or the cell launched no CUDA "
                "kernel; check NVTX range names (push/pop ranges need a trailing '/') and --kernel")
    if "Can't parse message" in text or "missing required fields" in text:
        return "the report is from a newer Nsight Compute than this ncu: install a newer ncu to import it"
    if "Failed to load report file" in text:
        return "ncu could not load the report file (missing, truncated or not an Nsight Compute report)"
    if re.search(r"No CUDA-capable device|no CUDA-capable|CUDA driver version is insufficient", text):
        return "no usable CUDA GPU for ncu here (ncu profiles only on a machine with an NVIDIA GPU and driver)"
    if returncode in (-9, 137):
        return "ncu was killed (out of memory or timeout); profile fewer kernels (--count) or fewer sections"
    return None


def import_csvs(ncu, report, timeout: float = 300) -> tuple[Path, Path]:
    """Write R_raw.csv and R_details.csv beside report R.ncu-rep with `ncu --import R --csv --page raw|details
    --print-units base`; RuntimeError (one line, explained where we can) when ncu fails or times out."""
    report = Path(report)
    out = []
    for page in ("raw", "details"):
        dest = report.with_name(f"{report.stem}_{page}.csv")
        argv = [str(ncu), "--import", str(report), "--csv", "--page", page, "--print-units", "base"]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=tool_environment())
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"ncu --import {report.name} --page {page} took more than {timeout:.0f} s") from None
        if proc.returncode != 0 or not proc.stdout.strip():
            why = explain_ncu_failure(proc.stderr + proc.stdout, proc.returncode)
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"ncu --import {report.name} --page {page} exited {proc.returncode}: {why or last}")
        dest.write_text(proc.stdout, encoding="utf-8")
        out.append(dest)
    return out[0], out[1]
