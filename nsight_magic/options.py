"""Options shared by %%nsys, %%ncu and the command line: frozen dataclasses and their validation."""
from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass

from .errors import OptionError
from .tools.argv import flag_name, validate_passthrough
from .tools.ncu import (DEFAULT_COUNT, DEFAULT_SECTIONS, DEFAULT_SET, REPLAY_MODES, NcuOptions,
                        validate_ncu_args)

# Without osrt (benchmarks/diagnosis.py --without osrt, issue 62): the verdict of each of the 47 planted workloads
# stays and 45 first findings; the OS waits (host_wait) read as host code, which the Python samples name.  With it,
# `nsys stop` takes 3x as long: the view of a 0.25 s cell came after 10.7 s instead of 5.2 s on the H200.  The advice
# asks for osrt where it cannot tell a wait from work.
DEFAULT_TRACE = "cuda,nvtx"

# Flags whose value the runner decides; passing them through would break the saved-profile contract.
NSYS_OWNED_FLAGS = {
    "-o": "the report name is chosen by nsight-magic (use --name / --dir)",
    "--output": "the report name is chosen by nsight-magic (use --name / --dir)",
    "-f": "reports are never overwritten",
    "--force-overwrite": "reports are never overwritten",
    "-x": "the profiled process always runs to its end",
    "--stop-on-exit": "the profiled process always runs to its end",
    "--session": "each cell runs in its own nsys session",
    "--session-new": "each cell runs in its own nsys session",
    "-c": "use --capture cell|all",
    "--capture-range": "use --capture cell|all",
    "--capture-range-end": "use --capture cell|all",
    "-p": "use --capture cell|all",
    "--nvtx-capture": "use --capture cell|all",
    "-t": "use --trace",
    "--trace": "use --trace",
    "--export": "nsight-magic exports report.sqlite itself",
    "--stats": "nsight-magic shows its own summaries",
}

# Our defaults that a user may replace through --nsys-args: (flag spellings, default argv).
NSYS_DEFAULTS = (
    (("-s", "--sample"), ["--sample=none"]),
    # Context-switch tracing made Debian's nsys 2022.4 hang in about 1 run of 4 (shared/nsys-on-cpu.md).
    (("--cpuctxsw",), ["--cpuctxsw=none"]),
)

SECRET_NAME_PATTERNS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "API_KEY", "APIKEY", "ACCESS_KEY",
                        "PRIVATE_KEY", "CREDENTIAL", "AUTH", "SESSION_KEY", "COOKIE", "PAT", "JWT", "BEARER", "DSN",
                        "WEBHOOK")


@dataclass(frozen=True)
class RunOptions:
    """What every profiled run shares (%%nsys and %%ncu); built once from the parsed arguments."""

    name: str = "cell"
    directory: str | None = None     # parent of the profile folders; None = nsight-profiles beside the notebook
    timeout: float | None = None
    send_vars: tuple[str, ...] | None = None   # None = automatic (free names of the cell)
    no_vars: bool = False
    return_vars: tuple[str, ...] = ()
    render: bool = True
    quiet: bool = False
    modules: int | None = None       # --modules [DEPTH]: None = off, 0 = every depth
    functions: tuple[str, ...] = ()  # --functions a.b,c.d: wrapped in NVTX ranges in the profiled process
    pass_env: tuple[str, ...] = ()   # --env A,B: environment variables passed beyond the allow-list (tools/environment)

    def __post_init__(self):
        if self.modules is not None and self.modules < 0:
            raise OptionError("--modules DEPTH must be 1 or more (or no number: every depth)")
        if self.timeout is not None and not (math.isfinite(self.timeout) and self.timeout > 0):
            raise OptionError(f"--timeout {self.timeout:g}: give a positive, finite number of seconds "
                              "(e.g. --timeout 600)")
        for n in (*self.return_vars, *(self.send_vars or ())):
            if not n.isidentifier():
                raise OptionError(f"{n!r} is not a Python variable name")


@dataclass(frozen=True)
class NsysOptions(RunOptions):
    """A %%nsys run: the shared options plus what nsys traces and captures."""

    trace: str = DEFAULT_TRACE
    capture: str = "cell"            # "cell": only the cell body; "all": the whole child process
    nsys_args: tuple[str, ...] = ()
    advice_thresholds: tuple[tuple[str, float], ...] = ()   # findings thresholds (thresholds.py)
    lines: bool = False              # --lines: each line of the cell in an NVTX range (the Lines tab)
    ops: str | None = None           # --ops [shapes]: every PyTorch operator in an NVTX range (the Ops tab)
    fresh: bool = False              # --fresh: a fresh process even when the notebook has a warm session
    nproc: int | None = None         # --nproc N: the cell in N ranks under torchrun (one report, every rank)
    return_all: bool = False         # --return-all: --return values of every rank (a list per name)
    per_rank_reports: bool = False   # --per-rank-reports: one nsys per rank, merged on one clock for the view
    samples: bool | None = None      # --samples / --no-samples: Python call stacks (None: on)
    memory: bool | None = None       # --memory / --no-memory: None: torch's allocator history; True: + nsys's
    gpu_metrics: bool = False        # --gpu-metrics: nsys samples the GPU's counters (SMs, tensor cores, DRAM)

    @property
    def thresholds(self) -> dict[str, float]:
        return dict(self.advice_thresholds)

    def __post_init__(self):
        super().__post_init__()
        if self.capture not in ("cell", "all"):
            raise OptionError(f"--capture must be 'cell' or 'all', not {self.capture!r}")
        if self.nproc is not None and not 1 <= self.nproc <= 64:
            raise OptionError("--nproc must be between 1 and 64 (processes on this machine)")
        if self.return_all and self.nproc is None:
            raise OptionError("--return-all collects --return values from every rank: it needs --nproc N")
        if self.per_rank_reports and self.nproc is None:
            raise OptionError("--per-rank-reports writes one report per rank: it needs --nproc N")
        if self.ops not in (None, "names", "shapes"):
            raise OptionError(f"--ops takes nothing or 'shapes' (input shapes in the names), not {self.ops!r}")


def split_names(text: str | None) -> tuple[str, ...]:
    """'a, b,c' -> ('a', 'b', 'c')."""
    if not text:
        return ()
    return tuple(n.strip() for n in text.split(",") if n.strip())


def safe_name(text: str) -> str:
    """A folder-safe profile name: letters, digits, '.', '_' and '-'."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "cell"
    return cleaned[:60]


def trace_for_machine(trace: str, gpu: bool) -> tuple[str, str | None]:
    """Drop `cuda` from the trace list when no GPU is visible; returns (trace, note)."""
    parts = [t.strip() for t in trace.split(",") if t.strip()]
    if not parts:
        raise OptionError("--trace is empty; use e.g. --trace cuda,nvtx,osrt")
    if not gpu and "cuda" in parts:
        parts = [t for t in parts if t not in ("cuda", "cublas", "cudnn", "cusparse", "cuda-hw")]
        rest = ",".join(parts) or "nvtx"
        return rest, f"no GPU visible: tracing {rest} only (CPU activity and NVTX ranges)"
    return ",".join(parts), None


def nsys_default_args(user_args: tuple[str, ...]) -> list[str]:
    """Our default nsys flags, minus those the user set through --nsys-args."""
    given = {flag_name(t) for t in user_args if t.startswith("-")}
    out: list[str] = []
    for spellings, argv in NSYS_DEFAULTS:
        if not given.intersection(spellings):
            out += argv
    return out


# switches (and any start of them nsys takes) under which nsys may record kernel frames: CPU samples, their
# backtraces, context switches, CPU core and OS events (newer nsys); with our defaults (--sample=none
# --cpuctxsw=none) it records none
KERNEL_FRAME_SWITCHES = ("-s", "-b", "--sa", "--ba", "--cpu", "--ev", "--os-ev")


def wants_kernel_symbols(user_args: tuple[str, ...]) -> bool:
    """Whether the user's --nsys-args may make nsys record kernel frames, which its kernel symbols name."""
    return any(flag_name(t).startswith(KERNEL_FRAME_SWITCHES) for t in user_args if t.startswith("-"))


SECRET_SUBSTRINGS = ("PASSWORD", "PASSWD", "SECRET")  # no word needs them except as a secret
SECRET_NAMES = ("SSH_CONNECTION", "SSH_CLIENT")            # the address of the user's machine


# Values that are secrets whatever their variable's name: a URL with a password (DATABASE_URL, PIP_INDEX_URL),
# a webhook URL (the URL is the key), a JSON web token, and the fixed prefixes of common API tokens.
SECRET_VALUE = re.compile(
    r"[a-z][a-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@"                      # scheme://user:password@host
    r"|hooks\.slack\.com/|discord(?:app)?\.com/api/webhooks/|webhook\.office\.com/"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\."                # JWT: base64url('{"') header.payload.
    r"|\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}|\bxox[abprs]-[A-Za-z0-9-]{10,}"
    r"|\bsk-[A-Za-z0-9_-]{20,}|\bhf_[A-Za-z0-9]{20,}|\bglpat-[A-Za-z0-9_-]{20,}|\bAKIA[0-9A-Z]{16}\b",
    re.IGNORECASE)


def is_secret(name: str, value: str, patterns=SECRET_NAME_PATTERNS) -> bool:
    """Whether an environment variable must not reach the profiled process (and so the report): by its name
    (is_secret_name) or by its value (SECRET_VALUE)."""
    return is_secret_name(name, patterns) or SECRET_VALUE.search(str(value)) is not None


def is_secret_name(name: str, patterns=SECRET_NAME_PATTERNS) -> bool:
    """Whether an environment variable's name looks secret: a pattern as a whole '_'-separated part (plural
    allowed), PASSWORD/PASSWD/SECRET anywhere, a name ending in _KEY or _PWD, or the SSH connection variables.
    So GITHUB_TOKEN, PGPASSWORD, KAGGLE_KEY and SSH_AUTH_SOCK match; TIKTOKEN_CACHE_DIR, GIT_AUTHOR_NAME and PWD
    do not."""
    upper = name.upper()
    return (upper in SECRET_NAMES or any(p in upper for p in SECRET_SUBSTRINGS)
            or re.search(r"_(?:KEY|PWD)$", upper) is not None
            or any(re.search(rf"(?:^|_){re.escape(p)}S?(?:_|$)", upper) for p in patterns))


# ---- argument specs shared by the magics and the command line (one copy, so they cannot drift) --------------
# Each entry is (flags, argparse keyword arguments).
COMMON_ARGS = (
    (("--name",), dict(default=None, help="name of the profile folder (default: cell<N> in a notebook, the "
                                           "script's name on the command line)")),
    (("--dir",), dict(default=None, help="where profile folders go (default: nsight-profiles beside the notebook)")),
    (("--timeout",), dict(type=float, default=None, metavar="SECONDS",
                          help="stop the run after this many seconds (the report so far is kept)")),
    (("--vars",), dict(default=None, metavar="A,B", help="send exactly these notebook variables "
                                                         "(default: the cell's free names found in the notebook)")),
    (("--no-vars",), dict(action="store_true", help="send no variables")),
    (("--return",), dict(dest="returns", default=None, metavar="A,B",
                         help="bring these variables back into the notebook after the run")),
    (("--no-render",), dict(action="store_true", help="print a text summary instead of the interactive view")),
    (("--quiet",), dict(action="store_true", help="no status line, no variable list, no streamed output "
                                                  "(all of it is still saved in the profile folder)")),
    (("--wait",), dict(action="store_true",
                       help="the cell returns once the profile is drawn, not as soon as its code has finished (the "
                            "profile then loads below while you go on); headless runs (nbclient, nbconvert, "
                            "papermill) always wait")),
    (("--modules",), dict(nargs="?", const=0, default=None, type=int, metavar="DEPTH",
                          help="give every torch.nn.Module of the sent variables and the setup code a forward and a "
                               "backward NVTX range per submodule (at most DEPTH levels deep; all without a number)")),
    (("--functions",), dict(default=None, metavar="A.B,C.D",
                            help="wrap these functions or methods (dotted paths, e.g. torch.optim.Optimizer.step) in "
                                 "NVTX ranges named after them")),
    (("--env",), dict(default=None, metavar="NAME,NAME",
                      help="pass these environment variables to the profiled process beyond the allow-list (what "
                           "Python, CUDA, NCCL, PyTorch and the locale need): a token a setup needs, say. A passed "
                           "variable is recorded in the report, as nsys records the profiled process's environment")),
)

NSYS_ARGS = (
    (("-t", "--trace"), dict(default=DEFAULT_TRACE, help=f"what nsys traces (default {DEFAULT_TRACE}; cuda is "
                                                         "dropped with a note when no GPU is visible)")),
    (("--capture",), dict(choices=("cell", "all"), default="cell",
                          help="cell: only the cell body (setup code and variable loading stay out); "
                               "all: the whole profiled process")),
    (("--ops",), dict(nargs="?", const="names", default=None, choices=("names", "shapes"), metavar="shapes",
                      help="put every PyTorch operator the cell runs (forward and backward) in an NVTX range: the Ops "
                           "tab and report.ops_summary() show calls, CPU and GPU time per operator (aten::addmm, "
                           "...); `--ops shapes` also splits them by input shapes")),
    (("--lines",), dict(action="store_true",
                        help="put each line of the cell (and of its top-level loops) in an NVTX range: the Lines tab "
                             "shows hits, CPU and GPU time per line, like a line profiler")),
    (("--samples",), dict(action=argparse.BooleanOptionalAction, default=None,
                          help="sample the Python call stacks of the profiled process's threads every 5 ms during "
                               "the cell (default: on): the Python tab, the timeline's Python rows and the advice "
                               "name the code the host ran; --no-samples leaves them out")),
    (("--memory",), dict(action=argparse.BooleanOptionalAction, default=None,
                         help="with torch, its caching allocator's history is recorded around the cell by default "
                              "(the memory track, the Memory tab and its advice); --memory adds nsys's record of every "
                              "device allocation (--cuda-memory-usage: GPU work about a third slower while "
                              "recording), --no-memory records neither")),
    (("--gpu-metrics",), dict(action="store_true",
                              help="nsys samples the GPU's own counters (SMs active, SM issue, tensor cores, DRAM "
                                   "and PCIe bandwidth) every 0.1 ms: rows under each GPU's kernels, and the advice "
                                   "says what bounds them (memory-, latency- or tensor-core-bound); needs access "
                                   "to the GPU's performance counters")),
    (("--fresh",), dict(action="store_true",
                        help="run in a fresh process instead of the notebook's warm session (the setup code runs "
                             "again; nothing of earlier cells is left)")),
    (("--nproc",), dict(type=int, default=None, metavar="N",
                        help="run the cell as N processes (ranks) with torchrun --standalone --nproc_per_node N, all "
                             "under one nsys: RANK, LOCAL_RANK and WORLD_SIZE are set, every rank gets the sent "
                             "variables, the view shows each rank's rows and a Ranks table")),
    (("--per-rank-reports",), dict(action="store_true",
                                   help="with --nproc: one nsys per rank (report.rankR.nsys-rep each, as "
                                        "`torchrun ... nsys profile ...` does), merged on one time axis for the view "
                                        "(report.sqlite)")),
    (("--return-all",), dict(action="store_true",
                             help="with --nproc: --return brings a list per name, one value per rank (default: "
                                  "rank 0's)")),
    (("--advice-threshold",), dict(action="append", default=None, metavar="RULE.KEY=VALUE",
                                   help="change a threshold of the Advice rules (repeatable), e.g. "
                                        "gpu_gaps.gap_ms=100; the keys are in nsight_magic/thresholds.py")),
    (("--nsys-args",), dict(default="", metavar='"..."',
                            help="more `nsys profile` flags, e.g. \"--sample=process-tree --cudabacktrace=all\"; "
                                 "flags nsight-magic owns (-o, --force-overwrite, -x, --session, the capture "
                                 "range, --trace, --export) are refused")),
)


PASSTHROUGH_OPTIONS = ("--nsys-args", "--ncu-args")


def join_passthrough(argv: list[str], parser=None) -> list[str]:
    """`--nsys-args --sample=cpu` as `--nsys-args=--sample=cpu`: argparse would take a value that starts with '-'
    for an option.  With `parser` (the command line's), joining stops at the first positional argument (the
    script), after which every word is the script's own."""
    out: list[str] = []
    words = iter(argv)
    for w in words:
        if w in PASSTHROUGH_OPTIONS:
            out.append(f"{w}={next(words, '')}")
            continue
        out.append(w)
        if parser is None:
            continue
        action = parser._option_string_actions.get(w)  # noqa: SLF001 (argparse's own table of options)
        if action is None and not w.startswith("-"):
            out.extend(words)  # the script: the rest is its own
            break
        if action is not None and action.nargs is None and "=" not in w:
            nxt = next(words, None)  # an option's value, whatever it looks like
            if nxt is not None:
                out.append(nxt)
    return out


def valid_names(names) -> tuple[str, ...]:
    """Names given with --env, checked: an environment variable's name, or a one-line OptionError."""
    for n in names:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n):
            raise OptionError(f"--env {n!r}: give the names of environment variables (letters, digits, _), "
                              "comma-separated; their values stay in the kernel's environment")
    return tuple(names)


def _common(args, default_name: str) -> dict:
    return dict(name=args.name or default_name, directory=args.dir, timeout=args.timeout,
                send_vars=split_names(args.vars) if args.vars is not None else None, no_vars=args.no_vars,
                return_vars=split_names(args.returns), render=not args.no_render, quiet=args.quiet,
                modules=getattr(args, "modules", None), functions=split_names(getattr(args, "functions", None)),
                pass_env=valid_names(split_names(getattr(args, "env", None))))


def nsys_options_from_args(args, default_name: str) -> NsysOptions:
    """NsysOptions from parsed COMMON_ARGS + NSYS_ARGS (magic or command line)."""
    from .thresholds import parse_assignments

    return NsysOptions(**_common(args, default_name), trace=args.trace, capture=args.capture,
                       nsys_args=validate_passthrough(args.nsys_args, NSYS_OWNED_FLAGS, "nsys"),
                       lines=bool(getattr(args, "lines", False)), fresh=bool(getattr(args, "fresh", False)),
                       ops=getattr(args, "ops", None),
                       nproc=getattr(args, "nproc", None), return_all=bool(getattr(args, "return_all", False)),
                       per_rank_reports=bool(getattr(args, "per_rank_reports", False)),
                       samples=getattr(args, "samples", None), memory=getattr(args, "memory", None),
                       gpu_metrics=bool(getattr(args, "gpu_metrics", False)),
                       advice_thresholds=tuple(parse_assignments(getattr(args, "advice_threshold", None)).items()))


def _ncu_args():
    return (
        (("--set",), dict(default=DEFAULT_SET, help=f"ncu section set (default {DEFAULT_SET}; 'full' for everything, "
                                                    "slower)")),
        (("--section",), dict(action="append", default=None, metavar="NAME",
                              help=f"add a section to the set (repeatable; {', '.join(DEFAULT_SECTIONS)} is "
                                   "always added)")),
        (("--metrics",), dict(default=None, metavar="A,B", help="extra metrics, comma-separated")),
        (("--kernel",), dict(default=None, metavar="REGEX", help="profile only kernels whose name matches")),
        (("--nvtx-include",), dict(action="append", default=None, metavar="EXPR",
                                   help="profile only kernels inside NVTX ranges (repeatable, OR'ed). Push/pop "
                                        "ranges need a trailing slash: 'step 3/' = inside push/pop range 'step 3', "
                                        "'A/B' = B pushed directly inside A; without the slash a start/end range "
                                        "is meant; 'Domain@A/' for a named domain")),
        (("--module",), dict(default=None, metavar="NAME",
                             help="kernels inside the NVTX range of this nn.Module (ranges from "
                                  "nsight_magic.annotate_modules; NAME is the module's dotted path)")),
        (("--count",), dict(type=int, default=DEFAULT_COUNT, metavar="N",
                            help=f"profile at most N kernels (default {DEFAULT_COUNT})")),
        (("--skip",), dict(type=int, default=0, metavar="N", help="skip the first N matching kernels")),
        (("--replay",), dict(default="kernel", choices=REPLAY_MODES, help="replay mode (default kernel)")),
        (("--fresh",), dict(action="store_true",
                            help="in the in-place Nsight Compute kernel: run the cell in a fresh process under ncu, "
                                 "as in any other kernel (elsewhere %%ncu always does)")),
        (("--ncu-args",), dict(default="", metavar='"..."',
                               help="more ncu flags; flags nsight-magic sets (-o/--export, -f, --log-file, --csv, "
                                    "--page, --print-units, --import, and those of the options above) are refused")),
    )


NCU_ARGS = _ncu_args()


def ncu_options_from_args(args, default_name: str):
    """(RunOptions, NcuOptions) from parsed COMMON_ARGS + NCU_ARGS."""
    extra = tuple(sec for sec in (args.section or ()) if sec not in DEFAULT_SECTIONS)
    ncu = NcuOptions(set=args.set or None, sections=DEFAULT_SECTIONS + extra,
                     metrics=split_names(args.metrics), kernel=args.kernel,
                     nvtx_include=tuple(args.nvtx_include or ()), module=args.module, count=args.count,
                     skip=args.skip, replay=args.replay, extra_args=tuple(validate_ncu_args(args.ncu_args)))
    return RunOptions(**_common(args, default_name)), ncu
