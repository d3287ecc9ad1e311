""".ncu-rep files through NVIDIA's `ncu_report` module (which one: readers/ncu_module.py) -> (kernel info, metrics,
rules) DataFrames."""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pandas as pd

from ..errors import ReportError
from .ncu_module import INSTALL_HINT, load_ncu_report_module
from .ncu_names import clean_rule_message, nvtx_path, short_kernel_names
from .ncu_spec import METRIC_FRAME_COLUMNS, RULE_FRAME_COLUMNS, raw_metric_names
from .ncu_units import to_base_units

MAGIC = b"NVR\x00"
# ncu_report's MsgType -> the type letters `ncu --page details` prints (OK and NONE print as INF).
_MSG_TYPE = {0: "INF", 1: "INF", 2: "OPT", 3: "WRN", 4: "ERR"}
_SPEEDUP_TYPE = {0: "", 1: "local", 2: "global"}


def _load_context(module, path: Path):
    """Load the report, catching what the C++ side writes to fd 2: an older ncu_report does not raise on a newer
    report, it prints a protobuf error there and returns an empty report."""
    sys.stderr.flush()
    with tempfile.TemporaryFile() as err:
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            ctx = module.load_report(str(path))
        except Exception as exc:  # noqa: BLE001 - any failure of the C++ loader is a report problem to the user
            ctx, error = None, exc
        else:
            error = None
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
    return ctx, error, stderr


def read_ncu_rep(path: Path, module=None):
    """Return (context, actions, ncu_report version) for an .ncu-rep, or raise a one-line ReportError.  The actions
    live only as long as the context: a caller keeps both (ncu_report 2025.3's metric.unit() read through an action
    whose context was freed killed the process with SIGSEGV, on the lent H100).

    module: (ncu_report module, its version) to use instead of `load_ncu_report_module()`."""
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head != MAGIC:
        raise ReportError(f"{path}: not an Nsight Compute report (the file does not start with NVR)")
    module, version = module or load_ncu_report_module()
    ctx, error, stderr = _load_context(module, path)
    if "Can't parse message" in stderr or "missing required fields" in stderr:
        raise ReportError(f"{path}: report from a newer ncu than the installed ncu_report (version {version}): "
                          f"{INSTALL_HINT}")
    if error is not None or ctx is None:
        why = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise ReportError(f"{path}: ncu_report {version} could not read it ({why})")
    actions = [ctx.range_by_idx(r).action_by_idx(a)
               for r in range(ctx.num_ranges()) for a in range(ctx.range_by_idx(r).num_actions())]
    if not actions:
        raise ReportError(f"{path}: no profiled kernels in this report (is it truncated? if an ncu newer than "
                          f"ncu_report {version} wrote it: {INSTALL_HINT})")
    return ctx, actions, version


def _nvtx(action) -> str:
    state = action.nvtx_state()
    if state is None:
        return ""
    out = []
    for dom_id in state.domains():
        dom = state.domain_by_id(dom_id)
        # push_pop_range(i) follows the stack order (i = 0 pushed first); the names list alone is documented
        # as "sorted", so take the names through the indexed ranges.
        n = len(dom.push_pop_ranges())
        ranges = [dom.push_pop_range(i).name() for i in range(n)]
        if not ranges:
            ranges = [" & ".join(dom.start_end_ranges())] if dom.start_end_ranges() else []
        out.append((dom.name(), ranges))
    return nvtx_path(out)


def _metric_rows(action, kernel_id: int, names, sections: dict[str, str]):
    rows = []
    for name in names:
        m = action.metric_by_name(name)
        if m is None:
            continue
        value = m.value()
        if value is None:
            continue
        # IMetric.unit() is missing from older ncu_report (2022.x): their values are in base units anyway.
        unit = m.unit() if hasattr(m, "unit") else ""
        if isinstance(value, str):
            rows.append((kernel_id, sections.get(name, ""), name, unit, float("nan"), value))
        else:
            rows.append((kernel_id, sections.get(name, ""), name, unit, float(value), None))
    return rows


def _section_map(action) -> dict[str, str]:
    out: dict[str, str] = {}
    for sec in action.sections() if hasattr(action, "sections") else ():  # no sections API before 2023
        for m in list(sec.header_metrics()) + list(sec.body_metrics()):
            out.setdefault(m.name(), sec.name())
    return out


def _to_frame(rows) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(METRIC_FRAME_COLUMNS))
    values, units = to_base_units(df["value"], df["unit"])
    df["value"], df["unit"] = values, units
    return df.astype({"kernel_id": "int64"})


class RepSource:
    """Keeps the loaded actions so that `metrics` (all of them) is read only when asked for."""

    def __init__(self, path: Path, module=None):
        # the context owns what the actions point to: kept for as long as they are read
        self._context, self.actions, self.version = read_ncu_rep(path, module)

    def kernel_info(self) -> pd.DataFrame:
        act = self.actions
        name_full = [a.name(a.NameBase_DEMANGLED) if hasattr(a, "NameBase_DEMANGLED") else a.name() for a in act]
        info = pd.DataFrame({
            "kernel_id": range(len(act)),
            "name": name_full,
            "short_name": [a.name() for a in act],
            "nvtx": [_nvtx(a) for a in act],
            "grid_dims": "",
            "block_dims": "",
        })
        # ncu_report's short name keeps template args on some versions: normalise like the CSV path does.
        info["short_name"] = short_kernel_names(info["short_name"])
        return info

    def spec_metrics(self) -> pd.DataFrame:
        names = sorted(raw_metric_names())
        return _to_frame([r for k, a in enumerate(self.actions) for r in _metric_rows(a, k, names, {})])

    def all_metrics(self) -> pd.DataFrame:
        rows = []
        for k, a in enumerate(self.actions):
            rows.extend(_metric_rows(a, k, a.metric_names(), _section_map(a)))
        return _to_frame(rows)

    def rules(self) -> pd.DataFrame:
        rows = []
        for k, a in enumerate(self.actions):
            if not hasattr(a, "rule_results_as_dicts"):  # ncu_report before 2023 has no rule results API
                break
            for r in a.rule_results_as_dicts():
                msg = r.get("rule_message") or {}
                speed = r.get("speedup_estimation") or {}
                rows.append((
                    k, r.get("section_identifier", ""), r.get("rule_identifier") or r.get("name", ""),
                    _MSG_TYPE.get(int(msg.get("type", 0)), "INF"), clean_rule_message(msg.get("message", "")),
                    float(speed["speedup"]) if "speedup" in speed else float("nan"),
                    _SPEEDUP_TYPE.get(int(speed.get("type", 0)), "") if speed else "",
                ))
        return pd.DataFrame(rows, columns=list(RULE_FRAME_COLUMNS)).astype({"kernel_id": "int64"})
