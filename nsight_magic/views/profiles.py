"""A folder of saved profiles as a table (for `%nsys_load nsight-profiles`): newest first, bounded."""
from __future__ import annotations

import uuid
from html import escape

import pandas as pd

from .assets import SETUP, head
from .tables import table_html, table_text

MAX_ROWS = 200  # a notebook output stays small however many profiles a folder collects


def _rows(profiles: pd.DataFrame) -> pd.DataFrame:
    df = profiles.head(MAX_ROWS)
    top_k = df["top_kernel"].fillna("").astype(str).str.slice(0, 80)
    top_r = df["top_range"].fillna("").astype(str).str.slice(0, 60)

    def pct(s: pd.Series) -> pd.Series:
        return s.map(lambda v: "" if pd.isna(v) else f" ({v:.0f}%)")

    out = pd.DataFrame({
        "index": range(len(df)),
        "name": df["name"].astype(str),
        "created": df["created"].fillna("").astype(str),
        "tool": df["tool"].fillna("").astype(str),
        "capture_ns": pd.to_numeric(df["capture_ns"], errors="coerce"),
        "kernels_count": pd.to_numeric(df["kernels"], errors="coerce"),
        "top_kernel": (top_k + pct(df["top_kernel_pct"])).where(top_k != "", ""),
        "top_range": (top_r + pct(df["top_range_pct"])).where(top_r != "", ""),
    })
    if "has_report" in df and not df["has_report"].fillna(True).all():
        out.insert(2, "report", df["has_report"].map(lambda ok: "" if ok is not False else "none (failed run)"))
    return out


def profiles_text(profiles: pd.DataFrame) -> str:
    more = f" (newest {MAX_ROWS} shown)" if len(profiles) > MAX_ROWS else ""
    return f"{len(profiles)} profiles, newest first{more}\n" + table_text(_rows(profiles), max_rows=MAX_ROWS)


def profiles_html(profiles: pd.DataFrame, shown: str | None = None) -> str:
    more = f"; the newest {MAX_ROWS} are listed" if len(profiles) > MAX_ROWS else ""
    note = f"; showing <b>{escape(shown)}</b> below" if shown else ""
    uid = uuid.uuid4().hex[:8]
    return (f"{head()}"
            f'<div class="nm-report"><p>{len(profiles)} profiles, newest first{escape(more)}{note}</p>'
            f"{table_html(_rows(profiles), table_id=f'nm-profiles-{uid}')}</div>{SETUP}")
