"""`ncu --import R --csv --page raw|details` output -> (kernel info, long metrics, rules) DataFrames.

Pure: text in, DataFrames out.  Works with base or auto-scaled units, thousands separators, the `==WARNING==`
lines ncu prints before the header, and the short rows ncu writes for metric rows of the details page.
"""
from __future__ import annotations

import io
import re

import pandas as pd

from ..errors import ReportError
from .ncu_names import nvtx_paths, short_kernel_names
from .ncu_spec import METRIC_FRAME_COLUMNS, RULE_FRAME_COLUMNS
from .ncu_units import parse_numbers, to_base_units

# Per-kernel columns ncu prints before the metrics (raw page) or before "Section Name" (details page).
ID_COLUMNS = {
    "ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context", "Stream",
    "Block Size", "Grid Size", "Device", "CC",
}
DETAILS_COLUMNS = {"Section Name", "Metric Name", "Metric Unit", "Metric Value"}
_RULE_TYPES = {"OPT", "INF", "WRN", "ERR"}


def _is_nvtx_column(name: str) -> bool:
    return "Push/Pop_Range" in name or "Start/Stop_Range" in name


def parse_ncu_csv(text: str, source: str = "CSV") -> tuple[str, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Return (page, kernel info, metrics, rules); page is 'raw' or 'details'."""
    start = re.search(r'^"ID",', text, flags=re.MULTILINE)
    if start is None:
        raise ReportError(f"{source}: not an Nsight Compute CSV (no '\"ID\",...' header line); "
                          "make it with `ncu --import R.ncu-rep --csv --page raw` or `--page details`")
    try:
        df = pd.read_csv(io.StringIO(text[start.start():]), dtype=str, keep_default_na=False, na_filter=False)
    except (pd.errors.ParserError, ValueError) as exc:
        raise ReportError(f"{source}: broken Nsight Compute CSV ({str(exc).splitlines()[0]})") from None
    df = df.fillna("")
    if DETAILS_COLUMNS <= set(df.columns):
        return ("details", *_parse_details(df, source))
    return ("raw", *_parse_raw(df, source))


def _kernel_info(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per kernel ID: id, name, short_name, nvtx, grid_dims, block_dims (vectorised over unique values)."""
    first = rows.drop_duplicates("ID")
    ids = pd.to_numeric(first["ID"], errors="coerce")
    info = pd.DataFrame({"kernel_id": ids.astype("Int64")})
    info["name"] = first["Kernel Name"].to_numpy() if "Kernel Name" in first else ""
    info["short_name"] = short_kernel_names(info["name"])
    push = next((c for c in first.columns if "Push/Pop_Range" in c), None)
    start = next((c for c in first.columns if "Start/Stop_Range" in c), None)
    info["nvtx"] = nvtx_paths(
        first[push] if push else pd.Series("", index=first.index),
        first[start] if start else pd.Series("", index=first.index),
    ).to_numpy()
    info["grid_dims"] = first["Grid Size"].to_numpy() if "Grid Size" in first else ""
    info["block_dims"] = first["Block Size"].to_numpy() if "Block Size" in first else ""
    info = info[info["kernel_id"].notna()].astype({"kernel_id": "int64"})
    return info.reset_index(drop=True)


def _long_metrics(kernel_id, section, metric, unit, value) -> pd.DataFrame:
    value = pd.Series(value).reset_index(drop=True).astype(str)
    if isinstance(section, str):  # one section for every row (the raw page has none): broadcast, never align
        section = pd.Series(section, index=value.index)
    numbers, units = to_base_units(value, pd.Series(unit).reset_index(drop=True))
    text = value.where(numbers.isna() & (value != ""), None)
    out = pd.DataFrame({
        "kernel_id": pd.Series(kernel_id).reset_index(drop=True).astype("int64"),
        "section": pd.Series(section).reset_index(drop=True).astype(str),
        "metric": pd.Series(metric).reset_index(drop=True).astype(str),
        "unit": units,
        "value": numbers,
        "text": text.astype("object"),
    })
    return out[list(METRIC_FRAME_COLUMNS)]


def _parse_raw(df: pd.DataFrame, source: str):
    if "ID" not in df.columns or df.empty:
        raise ReportError(f"{source}: Nsight Compute CSV without kernel rows")
    # The raw page's second line holds each metric's unit (ID is empty there).
    has_units = df["ID"].iloc[0] == ""
    units = df.iloc[0] if has_units else pd.Series("", index=df.columns)
    rows = df.iloc[1:] if has_units else df
    rows = rows[pd.to_numeric(rows["ID"], errors="coerce").notna()]
    info = _kernel_info(rows)
    metric_cols = [c for c in df.columns if c not in ID_COLUMNS and not _is_nvtx_column(c)]
    wide = rows[metric_cols].assign(ID=pd.to_numeric(rows["ID"]).astype("int64"))
    long = wide.melt(id_vars="ID", var_name="metric", value_name="value")
    long = long[long["value"] != ""]
    metrics = _long_metrics(long["ID"], "", long["metric"], long["metric"].map(units.to_dict()), long["value"])
    return info, metrics, pd.DataFrame(columns=list(RULE_FRAME_COLUMNS))


def _parse_details(df: pd.DataFrame, source: str):
    df = df[pd.to_numeric(df["ID"], errors="coerce").notna()]
    if df.empty:
        raise ReportError(f"{source}: Nsight Compute details CSV without kernel rows")
    info = _kernel_info(df)
    ids = pd.to_numeric(df["ID"]).astype("int64")
    is_metric = df["Metric Name"] != ""
    m = df[is_metric]
    metrics = _long_metrics(ids[is_metric], m["Section Name"], m["Metric Name"], m["Metric Unit"], m["Metric Value"])
    rules = pd.DataFrame(columns=list(RULE_FRAME_COLUMNS))
    if "Rule Name" in df.columns:
        r = df[(df["Rule Name"] != "") & ~is_metric]
        get = lambda col: r[col] if col in r.columns else pd.Series("", index=r.index)  # noqa: E731
        rtype = get("Rule Type").str.strip().str.upper()
        rules = pd.DataFrame({
            "kernel_id": ids[r.index],
            "section": r["Section Name"],
            "rule": r["Rule Name"],
            "type": rtype.where(rtype.isin(_RULE_TYPES), "INF"),
            "message": get("Rule Description"),
            "speedup_pct": parse_numbers(get("Estimated Speedup")),
            "speedup_type": get("Estimated Speedup Type"),
        }).reset_index(drop=True)
    return info, metrics, rules
