"""Kernel names, NVTX range paths and rule messages as ncu writes them -> plain text (vectorised over unique values)."""
from __future__ import annotations

import re

import pandas as pd

DEFAULT_DOMAIN = "<default domain>"
_QUOTED = re.compile(r'"((?:[^"]|"")*)"')


def short_kernel_name(name: str) -> str:
    """'void at::native::foo<128, (int)2>(float *, int)' -> 'foo'; 'copy_blocked[v1,...](Array<..>)' -> 'copy_blocked'.

    The same rule for every source, so short names agree between .ncu-rep and CSV."""
    text = (name or "").replace("(anonymous namespace)", "anon").replace("<unnamed>", "anon")
    depth, out = 0, []
    for ch in text:  # drop template arguments, parameter lists and Numba's [specialisation] suffixes
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    bare = "".join(out).strip()
    bare = bare.split(" ")[-1] if " " in bare else bare  # return type ("void ") before the name
    return bare.split("::")[-1] or (name or "")


def short_kernel_names(names: pd.Series) -> pd.Series:
    uniq = pd.unique(names.astype(str))
    return names.astype(str).map({n: short_kernel_name(n) for n in uniq})


def nvtx_path(domain_ranges: list[tuple[str, list[str]]]) -> str:
    """[(domain, [outer, inner])] -> 'outer/inner' (default domain) or 'Domain@outer/inner'; several joined by ' | '.

    The range nsight-magic pushes around every profiled cell (its own domain) is left out: it is on every
    kernel's stack and would make every path, and so every module grouping, differ per run."""
    from ..inside.marks import CAPTURE_DOMAIN

    parts = []
    for domain, ranges in domain_ranges:
        if not ranges or domain == CAPTURE_DOMAIN:
            continue
        path = "/".join(ranges)
        parts.append(path if domain in ("", DEFAULT_DOMAIN) else f"{domain}@{path}")
    return " | ".join(parts)


def _csv_push_pop(cell: str) -> str:
    """'961  "<default domain>:step 3:none:..."  "<default domain>:0:none:..."' -> 'step 3/0'.

    Each quoted item is Domain:Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg, outermost range first."""
    stack: list[tuple[str, list[str]]] = []
    for item in _QUOTED.findall(cell or ""):
        head = item.replace('""', '"').rsplit(":", 6)[0]
        domain, _, name = head.partition(":")
        if stack and stack[-1][0] == domain:
            stack[-1][1].append(name)
        else:
            stack.append((domain, [name]))
    return nvtx_path(stack)


def _csv_start_end(cell: str) -> str:
    """Start/end ranges: Id:Domain:Range:... items -> their names joined by ' & '."""
    names = []
    for item in _QUOTED.findall(cell or ""):
        parts = item.replace('""', '"').rsplit(":", 6)[0].split(":", 2)
        if len(parts) == 3:
            names.append(parts[2] if parts[1] in ("", DEFAULT_DOMAIN) else f"{parts[1]}@{parts[2]}")
    return " & ".join(names)


def nvtx_paths(push_pop: pd.Series, start_end: pd.Series) -> pd.Series:
    """The NVTX columns of ncu's CSV -> one path per row ('' when none)."""
    pp = push_pop.astype(str).map({v: _csv_push_pop(v) for v in pd.unique(push_pop.astype(str))})
    se = start_end.astype(str).map({v: _csv_start_end(v) for v in pd.unique(start_end.astype(str))})
    return pp.where(pp != "", se).fillna("")


_URL = re.compile(r"@url:([^:@]*):([^@]*)@")
_LINK = re.compile(r"@\w+:[^:@]*:([^@]*)@")


def clean_rule_message(text: str) -> str:
    """ncu_report keeps the UI's link markup; the CSV prints it as text: do the same.

    '@section:MemoryWorkloadAnalysis:Memory Workload Analysis@' -> 'Memory Workload Analysis';
    '@url:Guide:https://x@' -> 'Guide (https://x)'."""
    return _LINK.sub(r"\1", _URL.sub(r"\1 (\2)", text or ""))
