"""Findings: what a profile says to change, each with its evidence (events with the report's own timestamps) and
the time its fix saves.

`nsys_findings(report, thresholds)` runs the rules (analysis/rules/, one family per module) over an NsysData and
returns `Finding`s, the real causes first.  Every rule's time at stake comes from one diagnosis of the report
(analysis.bottleneck: the steady-state step split into compute, communication, copy and the causes of idle time,
scaled to the whole loop), so that

- it is what the cell would save if the cause were fixed: time the GPU overlaps anyway saves nothing;
- the same time is counted once: a pageable copy that is also serialised is one cause, gaps and low utilisation
  (nsys's symptoms) keep only what no cause explains, the straggler's waiting is collective_wait's;
- together they never exceed the capture; severity follows from the share of the capture.

The twins of `nsys analyze` (cuda_memcpy_async, cuda_memcpy_sync, cuda_memset_sync, cuda_api_sync, gpu_gaps,
gpu_time_util) keep flagging exactly the events nsys flags; only their time at stake and severity are ours.
Pure functions over DataFrames; no views, no IPython.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any

import pandas as pd

from ..readers.contract import NsysTables
from .. import thresholds as T
from .bottleneck import Bottleneck, diagnose
from .frame_memo import report_memo
from .rules import FAILURES, GPU_SIDE, NSYS_ANALYZE_NAMES, NSYS_RULES, SEVERITY_ORDER, Context, Finding
from .rules.common import Found
from .rules.comm import straggler_of

__all__ = ["Finding", "NSYS_RULES", "NSYS_ANALYZE_NAMES", "SEVERITY_ORDER", "nsys_findings", "findings_frame",
           "sort_findings"]

FINDING_COLUMNS = ["rule", "severity", "title", "time_at_stake_ns", "estimate", "count", "first_ns", "last_ns",
                   "explanation", "suggestion", "code"]
FAILS_SOON = frozenset({"memory_growth"})  # at high severity: the device is full within a run's length
SYMPTOMS = ("gpu_gaps", "gpu_time_util")  # run last: they keep what the causes before them do not explain


def findings_frame(findings: list[Finding]) -> pd.DataFrame:
    """One row per finding (the evidence stays on the Finding objects)."""
    rows = [{"rule": f.rule, "severity": f.severity, "title": f.title, "time_at_stake_ns": f.time_at_stake_ns,
             "estimate": f.estimate, "count": f.count,
             "first_ns": min((a for a, _ in f.ranges), default=pd.NA),
             "last_ns": max((b for _, b in f.ranges), default=pd.NA),
             "explanation": f.explanation, "suggestion": f.suggestion, "code": f.code} for f in findings]
    return pd.DataFrame(rows, columns=FINDING_COLUMNS)


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """A failed cell's cause first, then memory that fills the device soon (the run will fail: memory_growth at
    high), then causes by the time their fix saves, notes ("info") last.  Where the steps themselves grow
    (growing_steps), memory that grows with them is the same cause seen from memory: it does not lead."""
    steps_grow = any(f.rule == "growing_steps" for f in findings)

    def lead(f: Finding) -> int:
        return 0 if f.rule in FAILURES else \
            1 if f.rule in FAILS_SOON and f.severity == "high" and not steps_grow else 2

    return sorted(findings, key=lambda f: (lead(f), f.severity == "info", -f.time_at_stake_ns,
                                           SEVERITY_ORDER.get(f.severity, 9), f.rule))


def nsys_findings(report: NsysTables, thresholds: dict[str, Any] | None = None,
                  rules: str | Collection[str] | None = None) -> list[Finding]:
    """Every rule (or those named in `rules`) over an NsysData, the real causes first.

    A rule's answer depends on the rules before it (a nanosecond a named cause claimed is not the generic rule's;
    the symptoms keep what the causes left) and the whole's time at stake is bounded by the capture: so every rule
    runs, and `rules` picks which findings come back, the same as in the full run.  The full run is made once per
    report and thresholds (frame_memo.report_memo): the view, the text and a subset asked for later reuse it."""
    th = T.resolve(thresholds)
    if isinstance(rules, str):  # one name
        rules = [rules]
    if rules is not None:
        unknown = sorted(set(rules) - set(NSYS_RULES))
        if unknown:
            raise ValueError(f"no such rule: {', '.join(unknown)} (the rules: {', '.join(NSYS_RULES)})")
    memo = report_memo(report).setdefault("findings", {})
    key = tuple(sorted(th.items()))
    if key not in memo:
        memo[key] = _all_findings(report, th)
    return [f for f in memo[key] if rules is None or f.rule in rules]


def computed(report: NsysTables, thresholds: dict[str, Any] | None = None) -> tuple[Bottleneck | None,
                                                                              list[Finding] | None]:
    """The verdict and the full run's findings (these thresholds) already computed for this report, or None each:
    what a store keeps so that the report opened again is not analysed again."""
    memo = report_memo(report)
    found = memo.get("findings", {}).get(tuple(sorted(T.resolve(thresholds).items())))
    return memo.get("bottleneck"), (list(found) if found is not None else None)


def remember(report: NsysTables, verdict: Bottleneck, findings: list[Finding],
             thresholds: dict[str, Any] | None = None) -> None:
    """Take a verdict and a full run's findings computed before (by this code, for this report and thresholds:
    the caller's to know) as this report's, as if they had been computed now."""
    memo = report_memo(report)
    memo["bottleneck"] = verdict
    memo.setdefault("findings", {})[tuple(sorted(T.resolve(thresholds).items()))] = list(findings)


def _all_findings(report: NsysTables, th: dict[str, Any]) -> list[Finding]:
    ctx = Context(report, th, diagnose(report))
    if "collective_wait" in NSYS_RULES and ctx.diag.pairs:
        ctx.straggler = straggler_of(ctx)  # before the others: the straggler's time is counted once, there
    out: list[Finding] = []
    for name, rule in NSYS_RULES.items():
        got = rule(ctx)
        if isinstance(got, Found):  # a cause's claims: the rules after it read them (each ns counted once)
            ctx.absorb(got.claims)
            got = got.findings
        if got and name not in SYMPTOMS and any(f.time_at_stake_ns > 0 for f in got):
            ctx.fired.add(name)
        out += got
    out = _within_capture(out, ctx)
    # each finding's words and numbers come from all its events; what it keeps of them is bounded (a report of ten
    # million kernels would otherwise hold millions of rows of evidence)
    return sort_findings([_with_code(f, ctx).bounded() for f in out])


def _with_code(f: Finding, ctx: Context) -> Finding:
    """A host-side cause says which of the user's code the host ran in its evidence's stretches (the Python
    samples: analysis/python_code.py), unless its rule said so itself."""
    if f.code or f.severity == "info" or f.rule in GPU_SIDE or f.rule in SYMPTOMS or f.evidence is None \
            or f.evidence.empty or "tid" not in f.evidence or f.evidence["tid"].isna().all():
        return f
    from .python_code import code_words

    said = code_words(ctx.report, f.evidence)
    if not said.code:  # said only where the samples name something: the rules' own words stay otherwise
        return f
    return dataclasses.replace(f, explanation=f.explanation + said.words, code=said.code)


def _within_capture(findings: list[Finding], ctx: Context) -> list[Finding]:
    """The causes' time at stake never adds up past the capture: scaled down together when it would (a safety
    net; the breakdown's categories are disjoint, but several processes can each claim their own)."""
    cap = ctx.span
    total = sum(f.time_at_stake_ns for f in findings if f.severity != "info")  # info: context (start-up), no cause
    if cap <= 0 or total <= cap:
        return findings
    k = cap / total
    return [f if f.severity == "info" else
            dataclasses.replace(f, time_at_stake_ns=int(f.time_at_stake_ns * k),
                                severity=ctx.severity(f.time_at_stake_ns * k),
                                estimate=f.estimate + f"; scaled by {k:.2f} so that the findings add up to the capture")
            for f in findings]
