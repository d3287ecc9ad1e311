"""Tables for any DataFrame: formatting by column-name suffix, static HTML (sortable, filterable) and
an ipywidgets version.  Generic on purpose: the Nsight Compute views reuse these helpers.

Formats are chosen from column names (`*_ns` time, `*_bytes` size, `pct`/`*_pct` percent, `*_gbps` rate,
`count`/`*_count` integer) unless given explicitly.  Every cell is escaped text; sorting uses the raw
value kept in a `data-v` attribute, so formatted units ("1.2 ms" vs "800 µs") sort correctly.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from html import escape
from typing import TYPE_CHECKING, TypeAlias

import numpy as np
import pandas as pd

from .assets import view_css

if TYPE_CHECKING:
    import ipywidgets

Formatter: TypeAlias = "Callable[[pd.Series], pd.Series]"  # a column's values -> their text
Spans: TypeAlias = "dict[str, list[tuple[float, float]]]"  # a name -> its instances' (start, end) in ms

# kind -> formatter over a numeric Series (vectorised through numpy; returns strings)


def _time_formatter(fmt: str) -> Formatter:
    def f(v: pd.Series) -> pd.Series:
        x = pd.to_numeric(v, errors="coerce").to_numpy(float)
        a = np.abs(x)  # the unit by magnitude: a change of -8.6 ms reads like one of +8.6 ms
        out = np.where(a >= 1e9, np.char.add(np.char.mod(fmt, x / 1e9), " s"),
                       np.where(a >= 1e6, np.char.add(np.char.mod(fmt, x / 1e6), " ms"),
                                np.where(a >= 1e3, np.char.add(np.char.mod(fmt, x / 1e3), " µs"),
                                         np.char.add(np.char.mod("%.0f", x), " ns"))))
        return pd.Series(np.where(np.isnan(x), "", out), index=v.index)

    return f


fmt_time = _time_formatter("%.3f")


def _fmt_bytes(v: pd.Series) -> pd.Series:
    x = pd.to_numeric(v, errors="coerce").to_numpy(float)
    out = np.where(x >= 2**30, np.char.add(np.char.mod("%.2f", x / 2**30), " GiB"),
                   np.where(x >= 2**20, np.char.add(np.char.mod("%.2f", x / 2**20), " MiB"),
                            np.where(x >= 2**10, np.char.add(np.char.mod("%.1f", x / 2**10), " KiB"),
                                     np.char.add(np.char.mod("%.0f", x), " B"))))
    return pd.Series(np.where(np.isnan(x), "", out), index=v.index)


def _fmt_num(fmt: str, suffix: str = "") -> Formatter:
    digits = int(fmt[2]) if fmt.startswith("%.") and fmt[2].isdigit() else 0

    def f(v: pd.Series) -> pd.Series:
        x = pd.to_numeric(v, errors="coerce").to_numpy(float)
        # rounded first, and + 0.0: a change of -0.01 % reads "0.0 %", not "-0.0 %"
        out = np.char.add(np.char.mod(fmt, np.round(np.nan_to_num(x), digits) + 0.0), suffix)
        return pd.Series(np.where(np.isnan(x), "", out), index=v.index)

    return f


def _fmt_text(v: pd.Series) -> pd.Series:
    return v.astype("string").fillna("").astype(str)


FORMATTERS = {
    "time": fmt_time, "bytes": _fmt_bytes, "pct": _fmt_num("%.1f", " %"), "gbps": _fmt_num("%.2f", " GB/s"),
    "int": _fmt_num("%.0f"), "float": _fmt_num("%.3f"), "text": _fmt_text,
    # what samples measured, already rounded to the digits their count supports: no digit more ("20 ms", "80 %")
    "sampled_time": _time_formatter("%.4g"), "sampled_pct": _fmt_num("%.4g", " %"),
}


def column_kind(name: str, series: pd.Series) -> str:
    """Guess a column's format from its name (and dtype as a last resort)."""
    n = name.lower()
    if n.endswith("_ns"):
        return "time"
    if n.endswith("_bytes") or n == "bytes":
        return "bytes"
    if n == "pct" or n.endswith("_pct"):
        return "pct"
    if n.endswith("_gbps"):
        return "gbps"
    if n == "count" or n.endswith("_count") or pd.api.types.is_integer_dtype(series):
        return "int"
    if pd.api.types.is_float_dtype(series):
        return "float"
    return "text"


_UNIT_SUFFIX = {"time": "_ns", "bytes": "_bytes", "pct": "_pct", "gbps": "_gbps", "sampled_time": "_ns",
                "sampled_pct": "_pct"}
_UNIT_WORD = {"bytes": "size", "pct": "%", "gbps": "GB/s", "sampled_pct": "%"}


def header_label(name: str, kind: str) -> str:
    """A column's header as shown: the unit its values carry is not repeated ("total_ns" shows "29.7 ms": header
    "total"; "total_bytes": "total size"; "pct": "%"), underscores are spaces."""
    n = str(name)
    suffix = _UNIT_SUFFIX.get(kind)
    if suffix and n.endswith(suffix):
        n = n[: -len(suffix)] + (" " + _UNIT_WORD[kind] if kind in _UNIT_WORD else "")
    elif kind in _UNIT_WORD and n in ("bytes", "pct"):
        n = _UNIT_WORD[kind]
    n = n.replace("_", " ").strip()
    return {"gpu": "GPU time", "cpu": "CPU time"}.get(n, n)


def default_sort(df: pd.DataFrame, kinds: dict[str, str] | None = None) -> str | None:
    """The column a table starts sorted by (descending): total time where there is one, else the first time; a
    column of zeros only (GPU time on a CPU-only profile) says nothing about the order and is passed over."""
    kinds = kinds or {c: column_kind(c, df[c]) for c in df.columns}
    times = [c for c in ("total_ns", "gpu_ns", "delta_ns") if c in df.columns]
    times += [c for c in df.columns if kinds.get(c) == "time" and c not in times]
    informative = [c for c in times if pd.to_numeric(df[c], errors="coerce").fillna(0).abs().sum() > 0]
    shown = informative or times
    return shown[0] if shown else None


def format_table(df: pd.DataFrame, formats: dict[str, str] | None = None) -> pd.DataFrame:
    """Display strings for every cell (same shape as df)."""
    formats = formats or {}
    return pd.DataFrame({c: FORMATTERS[formats.get(c) or column_kind(c, df[c])](df[c]) for c in df.columns},
                        index=df.index)


def readable(df: pd.DataFrame, formats: dict[str, str] | None = None) -> pd.io.formats.style.Styler:
    """A DataFrame as people read it in a notebook: a pandas Styler with times in ns/µs/ms/s, sizes in B/KiB/MiB,
    percentages with one decimal, headers without the units the values carry.  The DataFrame keeps its numbers."""
    formats = dict(formats or {})
    kinds = {c: formats.get(c) or column_kind(c, df[c]) for c in df.columns}
    shown = {c: (lambda v, k=k: FORMATTERS[k](pd.Series([v])).iloc[0]) for c, k in kinds.items() if k != "text"}
    st = df.style.format(shown)
    visible = list(df.columns)
    if {"range", "name"} <= set(df.columns) and df["range"].astype(str).equals(df["name"].astype(str)):
        visible.remove("range")  # nsys's label and ours say the same (the default domain): show it once
    try:
        if len(visible) < len(df.columns):
            st = st.hide([c for c in df.columns if c not in visible], axis="columns")
        st = st.relabel_index([header_label(c, kinds[c]) for c in visible], axis=1)
    except (AttributeError, ValueError, TypeError):  # an older pandas: the column names as they are
        pass
    return st


def _sort_values(s: pd.Series, kind: str) -> pd.Series:
    if kind == "text":
        return s.astype("string").fillna("").astype(str)
    x = pd.to_numeric(s, errors="coerce")
    return x.map(lambda v: "" if pd.isna(v) else repr(float(v)))


# The browser side of every table (sort, filter, click-to-zoom) lives in assets/view.js and view.css; a page
# carries them once (assets.head()).  TABLE_CSS is the style alone, for places without scripts (widgets).
TABLE_CSS = view_css()


CELL_CHARS = 1000  # of a value shown in a cell: a 60 kB template name would make the page hundreds of MB


def _cut(s: str) -> str:
    return s if len(s) <= CELL_CHARS else s[:CELL_CHARS] + "…"


# instance spans one table carries for click-to-zoom, all rows together: 2,000 NVTX names of 60 instances each made
# a 4.9 MB table (a saved notebook's cell); with many names, each steps through its first few
ZOOM_SPANS = 10_000
MAX_ROWS = 2000  # rows a table shows (a --pytorch run's NVTX summary has a row per operator call: millions)


def table_html(df: pd.DataFrame, *, table_id: str, formats: dict[str, str] | None = None,
               zoom: Spans | None = None,
               zoom_col: str = "name", plot_name: str = "", max_rows: int = MAX_ROWS, caption: str = "",
               filter_box: bool = True) -> str:
    """A sortable, filterable HTML table; every value escaped.

    zoom: {value of zoom_col: [(t0_ms, t1_ms), ...]} (the instances); a click on such a cell zooms the Bokeh plot
    named plot_name to the first, its arrows to the previous / next.  Headers name the column without the unit its
    values show; the column the rows are sorted by (descending: total time) carries the arrow.
    """
    formats = dict(formats or {})
    kinds = {c: formats.get(c) or column_kind(c, df[c]) for c in df.columns}
    shown = df.head(max_rows)
    text = format_table(shown, kinds)
    by = default_sort(df, kinds)
    head = "".join(f'<th data-num="{0 if kinds[c] == "text" else 1}" title="{escape(str(c))}"'
                   f'{" data-dir=desc" if c == by else ""}>{escape(header_label(c, kinds[c]))}</th>' for c in df.columns)
    cols = []
    for c in df.columns:
        v = _sort_values(shown[c], kinds[c]).map(lambda s: escape(_cut(s), quote=True))
        t = text[c].map(lambda s: escape(_cut(s)))
        if kinds[c] == "text":
            t = t.map(breakable)
        else:  # "12.983 ms" on one line, with or without a style sheet
            t = t.map(lambda s: s.replace(" ", "&nbsp;"))
        cls = "" if kinds[c] == "text" else ' class="nm-num"'
        if zoom and c == zoom_col:
            # summary rows, not events; at most ZOOM_SPANS instances in the whole table
            each = max(1, ZOOM_SPANS // max(len(shown), 1))
            spans = [(zoom.get(k) or [])[:each] for k in shown[c].astype("string").fillna("")]
            cells = [_zoom_cell(vv, tt, s) if s else f'<td data-v="{vv}">{tt}</td>' for vv, tt, s in zip(v, t, spans)]
            cols.append(cells)
        else:
            cols.append([f'<td{cls} data-v="{vv}">{tt}</td>' for vv, tt in zip(v, t)])
    body = "".join("<tr>" + "".join(r) + "</tr>" for r in zip(*cols)) if cols else ""
    more = (f"<div>first {max_rows:,} of {len(df):,} rows</div>" if len(df) > max_rows else "")
    cap = f"<div>{escape(caption)}</div>" if caption else ""
    # the filter box works with scripts only: hidden until view.js shows it
    box = (f'<input class="nm-filter" data-table="{escape(table_id)}" placeholder="filter rows" '
           f'style="display:none;margin:4px 0;width:24em"/>' if filter_box else "")
    return (f'{cap}{box}{more}<div class="nm-scroll"><table class="nm-table" id="{escape(table_id)}" '
            f'data-filter-id="{escape(table_id)}" data-plot="{escape(plot_name)}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{body}</tbody></table></div>')


_BREAK_AFTER = re.compile(r"(::|,|&lt;|\(|/|_(?=[^_]))")
_LONG_WORD = re.compile(r"\S{30,}")


def breakable(escaped: str) -> str:
    """Escaped text whose long words (a kernel's templated name) may break after `::`, `,`, `<`, `(`, `/`, `_`:
    where no style sheet applies (an untrusted notebook, a static renderer) a 300-character name would otherwise
    push the table's number columns out of view.  <wbr> changes no text a reader copies or a filter matches."""
    if len(escaped) < 30:
        return escaped
    return _LONG_WORD.sub(lambda m: _BREAK_AFTER.sub(r"\1<wbr>", m.group(0)), escaped)


def _zoom_cell(v: str, text: str, spans: Sequence[tuple[float, float]]) -> str:
    """A name that zooms the timeline to its first instance; with several, arrows step through them."""
    import json

    js = escape(json.dumps([[round(a, 6), round(b, 6)] for a, b in spans]), quote=True)
    steps = ("" if len(spans) < 2 else
             f' <span class="nm-step" data-d="-1" title="previous instance">&#9664;</span><span class="nm-pos">'
             f'1/{len(spans)}</span><span class="nm-step" data-d="1" title="next instance">&#9654;</span>')
    return (f'<td class="nm-zoom" data-v="{v}" data-spans="{js}" data-i="0" '
            f'title="zoom the timeline to the first instance">{text}{steps}</td>')


def table_text(df: pd.DataFrame, formats: dict[str, str] | None = None, max_rows: int = 10) -> str:
    """Plain-text rendering (terminals, text/plain); headers without the units the values carry."""
    if df.empty:
        return "(none)"
    formats = dict(formats or {})
    kinds = {c: formats.get(c) or column_kind(c, df[c]) for c in df.columns}
    shown = format_table(df.head(max_rows), kinds)
    shown.columns = [header_label(c, kinds[c]) for c in df.columns]
    return str(shown.to_string(index=False))


def table_widget(df: pd.DataFrame, formats: dict[str, str] | None = None, *, name_col: str = "name",
                 on_name: Callable[[str, int], int | None] | None = None, max_rows: int = 500) -> ipywidgets.VBox:
    """ipywidgets table: filter box, sort column + order (starting with total time, descending, as the static
    page and the summaries), and (with on_name) a name picker that calls on_name(value, i) to show instance i of it,
    e.g. to zoom the timeline (it returns how many instances there are), with previous / next buttons.  Rendered as
    escaped HTML inside an HTML widget."""
    import ipywidgets as w

    formats = dict(formats or {})
    kinds = {c: formats.get(c) or column_kind(c, df[c]) for c in df.columns}
    filt = w.Text(placeholder="filter rows", layout=w.Layout(width="24em"))
    by = default_sort(df, kinds)
    sort = w.Dropdown(options=[(header_label(c, kinds[c]), c) for c in df.columns],
                      value=by if by is not None else (None if df.empty else df.columns[0]), description="sort by")
    desc = w.ToggleButton(value=by is not None, layout=w.Layout(width="10em"))
    out = w.HTML()

    def label_order(*_: object) -> None:  # the toggle says the order it shows
        desc.description = "descending \u25BC" if desc.value else "ascending \u25B2"

    def render(*_: object) -> None:
        d = df
        if filt.value:
            q = filt.value.lower()
            mask = format_table(d, formats).apply(lambda col: col.str.lower().str.contains(q, regex=False)).any(axis=1)
            d = d[mask]
        if sort.value is not None and len(d):
            d = d.sort_values(sort.value, ascending=not desc.value, kind="stable")
        out.value = (f"<style>{TABLE_CSS}</style>" +
                     table_html(d, table_id=f"w{id(out)}", formats=formats, max_rows=max_rows, filter_box=False))

    desc.observe(label_order, names="value")
    label_order()
    for c in (filt, sort, desc):
        c.observe(render, names="value")
    render()
    children = [w.HBox([filt, sort, desc])]
    if on_name is not None and name_col in df.columns and len(df):
        pick = w.Dropdown(options=[""] + df[name_col].astype(str).tolist(), description="zoom to",
                          layout=w.Layout(width="50em"))
        prev = w.Button(description="\u25C0 previous", layout=w.Layout(width="8em"), disabled=True)
        nxt = w.Button(description="next \u25B6", layout=w.Layout(width="8em"), disabled=True)
        where = w.Label()
        state = {"i": 0, "n": 0}

        def show(i: int) -> None:
            n = on_name(pick.value, i) or 0
            state.update(i=i % n if n else 0, n=n)
            where.value = f"instance {state['i'] + 1} of {n}" if n else ""
            prev.disabled = nxt.disabled = n < 2

        def picked(change: dict[str, object]) -> None:
            if change["new"]:
                show(0)  # the first instance; previous / next step through the others

        pick.observe(picked, names="value")
        prev.on_click(lambda _: show(state["i"] - 1))
        nxt.on_click(lambda _: show(state["i"] + 1))
        children.append(w.HBox([pick, prev, nxt, where]))
    children.append(out)
    return w.VBox(children)


def static_tabs_html(titles: Sequence[str], panes: Sequence[str]) -> str:
    """A view's sections: without scripts, one <details> per title (the first open), which every sanitizer keeps;
    view.js turns them into tabs (the strip of buttons, hidden until then)."""
    buttons = "".join(f'<button class="nm-tabbtn{" nm-on" if i == 0 else ""}" data-tab="{i}">{escape(n)}</button>'
                      for i, n in enumerate(titles))
    body = "".join(f'<details class="nm-pane"{" open" if i == 0 else ""}><summary>{escape(n)}</summary>{p}</details>'
                   for i, (n, p) in enumerate(zip(titles, panes)))
    # hidden by style: sanitizers drop an empty `hidden` attribute, they keep `display`
    return f'<div class="nm-tabs" style="display:none">{buttons}</div>{body}'


