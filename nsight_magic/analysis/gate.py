"""A comparison that can fail a CI job: did the cell, a named NVTX range or the top kernels get slower than a bound,
beyond the run-to-run noise the profiles themselves show?

    gate(profile_diff, fail_above_pct=5, ranges=("step",), top_kernels=5) -> GateResult

Each check compares the before and after profiles of one thing:

    cell      the capture (the cell's own range) from start to end;
    range     an NVTX range by name (digits count as one name: "step 3" is a "step #"), its median instance;
              without --range, the loop's step range when both profiles have one (analysis/steps.py);
    kernel    each of the `top_kernels` kernels that took most GPU time before (matched as %nsys_diff matches
              them), its total time.

Noise comes from repetition: instances of a range (a kernel, the steps under the cell) vary from one to the next.
Their spread is measured robustly (1.4826 x the median absolute deviation), because a loop's first step (warm-up,
cuDNN's search, compilation) often lasts 100 times the others and would make any change look like noise; the
median of n instances varies by about 1.25 x spread / sqrt(n), a sum of n by spread x sqrt(n).  A check fails when
the thing got slower by more than `fail_above_pct` plus twice the noise of the difference (about 95% of what
repetition alone would show); one instance has no noise estimate and fails on the bound alone.  Pure: reports in,
a result out.
"""
from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..inside.marks import CAPTURE_DOMAIN
from .diff import ProfileDiff, kernel_key
from .steps import Steps
from ..readers.contract import NsysFrames, is_nsys

NOISE_SIGMAS = 2.0


@dataclass(frozen=True)
class GateCheck:
    what: str             # cell | range | kernel
    name: str
    before_ns: float      # cell: its span; range: the median instance; kernel: the total
    after_ns: float
    instances_before: int
    instances_after: int
    change_pct: float     # (after - before) / before, in percent (+: slower)
    noise_pct: float      # twice the noise of that difference, in percent of before (0: no estimate)
    failed: bool


@dataclass(frozen=True)
class GateResult:
    before: str
    after: str
    fail_above_pct: float
    checks: list[GateCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # what could not be checked, and why

    @property
    def failed(self) -> bool:
        return any(c.failed for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after, "fail_above_pct": self.fail_above_pct,
                "failed": self.failed, "checks": [asdict(c) for c in self.checks], "notes": list(self.notes)}

    def lines(self) -> list[str]:
        """One line per check, the failed ones first, then the verdict."""
        out = []
        for c in sorted(self.checks, key=lambda c: not c.failed):
            noise = f", noise ±{c.noise_pct:.1f}%" if c.noise_pct else ", no noise estimate"
            mark = "SLOWER" if c.failed else "ok"
            out.append(f"{mark:6} {c.what} {c.name}: {c.before_ns / 1e6:,.3f} -> {c.after_ns / 1e6:,.3f} ms "
                       f"({c.change_pct:+.1f}%{noise})")
        out += [f"note: {n}" for n in self.notes]
        verdict = "FAILED" if self.failed else "passed"
        out.append(f"gate {verdict}: fail above {self.fail_above_pct:g}% slower beyond the noise "
                   f"({sum(c.failed for c in self.checks)} of {len(self.checks)} checks slower)")
        return out


def _spread(d: np.ndarray) -> float:
    """A standard deviation that one warm-up instance cannot inflate (0 for fewer than 3 instances)."""
    if len(d) < 3:
        return 0.0
    return 1.4826 * float(np.median(np.abs(d - np.median(d))))


def _stats(values: npt.ArrayLike, total: bool = False) -> Stats:
    """(value, its noise as a standard error, n): the median instance, or with `total` the sum of all."""
    d = np.asarray(values, float)
    d = d[np.isfinite(d)]
    n = len(d)
    if n == 0:
        return math.nan, 0.0, 0
    if total:
        return float(d.sum()), _spread(d) * math.sqrt(n), n
    return float(np.median(d)), 1.2533 * _spread(d) / math.sqrt(n), n


Stats = tuple[float, float, int]  # (value, its standard error, n instances): _stats


def _check(what: str, name: str, before: Stats, after: Stats, bound: float) -> GateCheck | None:
    """before/after: (value, its standard error, n instances); None when one side has no instance."""
    (b, eb, nb), (a, ea, na) = before, after
    if not (nb and na) or not b > 0:
        return None
    change = 100.0 * (a - b) / b
    noise = 100.0 * NOISE_SIGMAS * math.sqrt(eb * eb + ea * ea) / b
    return GateCheck(what, name, b, a, nb, na, change, noise, change > bound + noise)


def _pattern(name: str) -> str:
    return re.sub(r"\d+", "#", str(name)).strip()


def range_durations(report: NsysFrames, name: str) -> np.ndarray:
    """Durations of the user NVTX ranges whose name (digits as '#') is `name`'s."""
    nv = report.nvtx
    if nv.empty:
        return np.empty(0)
    if "domain" in nv:
        nv = nv[nv["domain"].astype("string").fillna("") != CAPTURE_DOMAIN]
    ends = pd.to_numeric(nv["end_ns"], errors="coerce")
    codes, uniq = pd.factorize(nv["name"].astype(str))  # each distinct name once: a million ranges, a few names
    target = _pattern(name)
    named = np.array([_pattern(u) == target for u in uniq], dtype=bool)[codes]
    keep = ends.notna().to_numpy() & named
    return np.asarray((ends[keep] - pd.to_numeric(nv["start_ns"], errors="coerce")[keep]).to_numpy(float))


def _kernel_durations(report: NsysFrames) -> dict[str, np.ndarray]:
    """Per kernel key (diff.kernel_key, as %nsys_diff matches kernels), its instances' durations."""
    k = report.kernels
    if k.empty or "duration_ns" not in k:
        return {}
    codes, uniq = pd.factorize(k["name"].astype(str))
    keys = np.array([kernel_key(u) for u in uniq], dtype=object)[codes]
    d = pd.to_numeric(k["duration_ns"], errors="coerce").to_numpy(float)
    return {key: d[idx] for key, idx in pd.Series(np.arange(len(d))).groupby(keys).indices.items()}


def _step_durations(steps: Steps) -> np.ndarray:
    starts = steps.bounds()[0].tolist() + [int(steps.ends[-1])]
    return np.diff(np.asarray(starts, float))


def _steps(report: NsysFrames) -> Steps | None:
    from .steps import find_steps

    found = find_steps(report)
    return max(found.values(), key=lambda s: s.count) if found else None


def check_args(fail_above_pct: float, top_kernels: int = 5) -> None:
    """Raise OptionError for a bound or a count that means nothing (said before the comparison is made)."""
    from ..errors import OptionError

    if not (math.isfinite(fail_above_pct) and fail_above_pct >= 0):
        raise OptionError(f"--fail-above {fail_above_pct:g}: give a percentage of 0 or more (e.g. --fail-above 5)")
    if top_kernels < 0:
        raise OptionError(f"--top-kernels {top_kernels}: give 0 or more")


def gate(d: ProfileDiff, fail_above_pct: float, ranges: Iterable[str] = (), top_kernels: int = 5) -> GateResult:
    """See the module docstring.  `d` compares two Nsight Systems profiles (analysis.diff.diff)."""
    from ..errors import OptionError

    check_args(fail_above_pct, top_kernels)
    b, a = d.before, d.after
    if not (is_nsys(b) and is_nsys(a)):  # a comparison of Nsight Compute reports: no capture, no ranges
        raise OptionError("--fail-above gates Nsight Systems profiles; Nsight Compute replays each kernel, so its "
                          "times say nothing of a cell's run time: compare %%nsys profiles")
    checks: list[GateCheck] = []
    notes: list[str] = []
    sb, sa = _steps(b), _steps(a)
    # the cell: its span, with the noise of its steps' sum
    eb = _stats(_step_durations(sb), total=True)[1] if sb is not None else 0.0
    ea = _stats(_step_durations(sa), total=True)[1] if sa is not None else 0.0
    c = _check("cell", "capture", (float(b.meta.duration_ns), eb, 1), (float(a.meta.duration_ns), ea, 1),
               fail_above_pct)
    if c is not None:
        checks.append(c)
    named = list(ranges)
    if not named:
        if sb is not None and sa is not None and sb.name == sa.name:
            named = [sb.name]
        elif sb is not None or sa is not None:
            notes.append("the two profiles have no step range in common: give --range NAME to check one")
    for name in named:
        got = _check("range", name, _stats(range_durations(b, name)), _stats(range_durations(a, name)),
                     fail_above_pct)
        if got is None:
            notes.append(f"NVTX range {name!r} is not in both profiles")
        else:
            checks.append(got)
    if top_kernels:
        kb, ka = _kernel_durations(b), _kernel_durations(a)
        top = sorted(kb, key=lambda k: -np.nansum(kb[k]))[:top_kernels]
        for name in top:
            if name in ka:
                got = _check("kernel", name, _stats(kb[name], total=True), _stats(ka[name], total=True),
                             fail_above_pct)
                if got is not None:
                    checks.append(got)
            else:
                notes.append(f"kernel {name[:80]!r} ran before, not after")
    return GateResult(d.before_label, d.after_label, float(fail_above_pct), checks, notes)
