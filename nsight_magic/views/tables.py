"""Tables for any DataFrame: formatting by column-name suffix, static HTML (sortable, filterable) and
an ipywidgets version.  Generic on purpose: the Nsight Compute views reuse these helpers.

Formats are chosen from column names (`*_ns` time, `*_bytes` size, `pct`/`*_pct` percent, `*_gbps` rate,
`count`/`*_count` integer) unless given explicitly.  Every cell is escaped text; sorting uses the raw
value kept in a `data-v` attribute, so formatted units ("1.2 ms" vs "800 µs") sort correctly.
"""
from __future__ import annotations

from html import escape
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import ReportError

# kind -> formatter over a numeric Series (vectorised through numpy; returns strings)


def _fmt_time(v: pd.Series) -> pd.Series:
    x = pd.to_numeric(v, errors="coerce").to_numpy(float)
    a = np.abs(x)  # the unit by magnitude: a change of -8.6 ms reads like one of +8.6 ms
    out = np.where(a >= 1e9, np.char.add(np.char.mod("%.3f", x / 1e9), " s"),
                   np.where(a >= 1e6, np.char.add(np.char.mod("%.3f", x / 1e6), " ms"),
                            np.where(a >= 1e3, np.char.add(np.char.mod("%.3f", x / 1e3), " µs"),
                                     np.char.add(np.char.mod("%.0f", x), " ns"))))
    return pd.Series(np.where(np.isnan(x), "", out), index=v.index)


def _fmt_bytes(v: pd.Series) -> pd.Series:
    x = pd.to_numeric(v, errors="coerce").to_numpy(float)
    out = np.where(x >= 2**30, np.char.add(np.char.mod("%.2f", x / 2**30), " GiB"),
                   np.where(x >= 2**20, np.char.add(np.char.mod("%.2f", x / 2**20), " MiB"),
                            np.where(x >= 2**10, np.char.add(np.char.mod("%.1f", x / 2**10), " KiB"),
                                     np.char.add(np.char.mod("%.0f", x), " B"))))
    return pd.Series(np.where(np.isnan(x), "", out), index=v.index)


def _fmt_num(fmt: str, suffix: str = ""):
    def f(v: pd.Series) -> pd.Series:
        x = pd.to_numeric(v, errors="coerce").to_numpy(float)
        out = np.char.add(np.char.mod(fmt, np.nan_to_num(x)), suffix)
        return pd.Series(np.where(np.isnan(x), "", out), index=v.index)

    return f


def _fmt_text(v: pd.Series) -> pd.Series:
    return v.astype("string").fillna("").astype(str)


FORMATTERS = {
    "time": _fmt_time, "bytes": _fmt_bytes, "pct": _fmt_num("%.1f", " %"), "gbps": _fmt_num("%.2f", " GB/s"),
    "int": _fmt_num("%.0f"), "float": _fmt_num("%.3f"), "text": _fmt_text,
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


def format_table(df: pd.DataFrame, formats: dict | None = None) -> pd.DataFrame:
    """Display strings for every cell (same shape as df)."""
    formats = formats or {}
    return pd.DataFrame({c: FORMATTERS[formats.get(c) or column_kind(c, df[c])](df[c]) for c in df.columns},
                        index=df.index)


def _sort_values(s: pd.Series, kind: str) -> pd.Series:
    if kind == "text":
        return s.astype("string").fillna("").astype(str)
    x = pd.to_numeric(s, errors="coerce")
    return x.map(lambda v: "" if pd.isna(v) else repr(float(v)))


# Sort, filter and click-to-zoom for every `table.nm-table` on the page (included once per page).
TABLE_JS = r"""
(function () {
  if (window.__nsightTables) return; window.__nsightTables = true;
  function rows(t) { return Array.from(t.tBodies[0].rows); }
  document.addEventListener('click', function (ev) {
    const th = ev.target.closest('table.nm-table th');
    if (th) {
      const t = th.closest('table'), col = th.cellIndex, num = th.dataset.num === '1';
      const dir = th.dataset.dir === 'asc' ? 'desc' : 'asc'; th.dataset.dir = dir;
      const key = r => { const v = r.cells[col].dataset.v; return num ? (v === '' ? -Infinity : parseFloat(v)) : v; };
      const sorted = rows(t).sort((a, b) => { const x = key(a), y = key(b);
        const c = x < y ? -1 : x > y ? 1 : 0; return dir === 'asc' ? c : -c; });
      const body = t.tBodies[0]; sorted.forEach(r => body.appendChild(r));
      return;
    }
    const td = ev.target.closest('table.nm-table td.nm-zoom');
    if (td && window.Bokeh) {
      const plot = td.closest('table').dataset.plot, t0 = parseFloat(td.dataset.t0), t1 = parseFloat(td.dataset.t1);
      const pad = Math.max((t1 - t0) * 0.05, 1e-3);
      for (const doc of Bokeh.documents) {
        const p = doc.get_model_by_name(plot);
        if (p) { p.x_range.setv({start: t0 - pad, end: t1 + pad}); }
      }
      const root = td.closest('.nm-report');
      if (root) { const b = root.querySelector('.nm-tabbtn[data-tab="0"]'); if (b) b.click(); }
    }
  });
  document.addEventListener('input', function (ev) {
    const inp = ev.target.closest('input.nm-filter'); if (!inp) return;
    const t = document.getElementById(inp.dataset.table), q = inp.value.toLowerCase();
    rows(t).forEach(r => { r.style.display = r.textContent.toLowerCase().includes(q) ? '' : 'none'; });
  });
  document.addEventListener('click', function (ev) {
    const b = ev.target.closest('.nm-tabbtn'); if (!b) return;
    const root = b.closest('.nm-report');
    root.querySelectorAll(':scope > .nm-tabs > .nm-tabbtn').forEach(x => x.classList.toggle('nm-on', x === b));
    root.querySelectorAll(':scope > .nm-pane').forEach((p, i) => {
      p.style.display = String(i) === b.dataset.tab ? '' : 'none'; });
  });
})();
"""

TABLE_CSS = """
.nm-report{font:12px sans-serif}
.nm-tabs{margin:4px 0 8px 0}
.nm-tabbtn{border:1px solid #ccc;background:#f4f4f4;padding:3px 10px;cursor:pointer;margin-right:2px}
.nm-tabbtn.nm-on{background:#fff;border-bottom-color:#fff;font-weight:bold}
table.nm-table{border-collapse:collapse;font:12px monospace}
table.nm-table th{cursor:pointer;background:#eee;text-align:left;padding:2px 6px;position:sticky;top:0}
table.nm-table td{padding:1px 6px;border-bottom:1px solid #eee;white-space:nowrap;max-width:60em;overflow:hidden;
  text-overflow:ellipsis}
table.nm-table td.nm-num{text-align:right}
table.nm-table td.nm-zoom{color:#1f5fa8;cursor:pointer;text-decoration:underline dotted}
.nm-scroll{max-height:480px;overflow:auto}
"""


def table_html(df: pd.DataFrame, *, table_id: str, formats: dict | None = None, zoom: dict | None = None,
               zoom_col: str = "name", plot_name: str = "", max_rows: int = 2000, caption: str = "",
               filter_box: bool = True) -> str:
    """A sortable, filterable HTML table; every value escaped.

    zoom: {value of zoom_col: (t0_ms, t1_ms)}; those cells zoom the Bokeh plot named plot_name when clicked.
    """
    formats = dict(formats or {})
    kinds = {c: formats.get(c) or column_kind(c, df[c]) for c in df.columns}
    shown = df.head(max_rows)
    text = format_table(shown, kinds)
    head = "".join(f'<th data-num="{0 if kinds[c] == "text" else 1}">{escape(str(c))}</th>' for c in df.columns)
    cols = []
    for c in df.columns:
        v = _sort_values(shown[c], kinds[c]).map(lambda s: escape(s, quote=True))
        t = text[c].map(escape)
        cls = "" if kinds[c] == "text" else ' class="nm-num"'
        if zoom and c == zoom_col:
            spans = [zoom.get(k) for k in shown[c].astype("string").fillna("")]  # summary rows, not events
            cells = [f'<td class="nm-zoom" data-v="{vv}" data-t0="{s[0]:.6f}" data-t1="{s[1]:.6f}" '
                     f'title="zoom the timeline to its instances">{tt}</td>' if s is not None else
                     f'<td data-v="{vv}">{tt}</td>' for vv, tt, s in zip(v, t, spans)]
            cols.append(cells)
        else:
            cols.append([f'<td{cls} data-v="{vv}">{tt}</td>' for vv, tt in zip(v, t)])
    body = "".join("<tr>" + "".join(r) + "</tr>" for r in zip(*cols)) if cols else ""
    more = (f"<div>first {max_rows:,} of {len(df):,} rows</div>" if len(df) > max_rows else "")
    cap = f"<div>{escape(caption)}</div>" if caption else ""
    box = (f'<input class="nm-filter" data-table="{escape(table_id)}" placeholder="filter rows" '
           f'style="margin:4px 0;width:24em"/>' if filter_box else "")
    return (f'{cap}{box}{more}<div class="nm-scroll"><table class="nm-table" '
            f'id="{escape(table_id)}" data-plot="{escape(plot_name)}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{body}</tbody></table></div>')


def table_text(df: pd.DataFrame, formats: dict | None = None, max_rows: int = 10) -> str:
    """Plain-text rendering (terminals, text/plain)."""
    if df.empty:
        return "(none)"
    return format_table(df.head(max_rows), formats).to_string(index=False)


def table_widget(df: pd.DataFrame, formats: dict | None = None, *, name_col: str = "name", on_name=None,
                 max_rows: int = 500):
    """ipywidgets table: filter box, sort column + order, and (with on_name) a name picker that calls
    on_name(value), e.g. to zoom the timeline.  Rendered as escaped HTML inside an HTML widget."""
    import ipywidgets as w

    formats = dict(formats or {})
    filt = w.Text(placeholder="filter rows", layout=w.Layout(width="24em"))
    sort = w.Dropdown(options=list(df.columns), value=None if df.empty else df.columns[0], description="sort by")
    desc = w.ToggleButton(value=False, description="descending")
    out = w.HTML()

    def render(*_):
        d = df
        if filt.value:
            q = filt.value.lower()
            mask = format_table(d, formats).apply(lambda col: col.str.lower().str.contains(q, regex=False)).any(axis=1)
            d = d[mask]
        if sort.value is not None and len(d):
            d = d.sort_values(sort.value, ascending=not desc.value, kind="stable")
        out.value = (f"<style>{TABLE_CSS}</style>" +
                     table_html(d, table_id=f"w{id(out)}", formats=formats, max_rows=max_rows, filter_box=False))

    for c in (filt, sort, desc):
        c.observe(render, names="value")
    render()
    children = [w.HBox([filt, sort, desc])]
    if on_name is not None and name_col in df.columns and len(df):
        pick = w.Dropdown(options=[""] + df[name_col].astype(str).tolist(), description="zoom to",
                          layout=w.Layout(width="60em"))

        def picked(change):
            if change["new"]:
                on_name(change["new"])

        pick.observe(picked, names="value")
        children.append(pick)
    children.append(out)
    return w.VBox(children)


def static_tabs_html(titles, panes) -> str:
    """The tab strip of a static page: one button and one pane per title (TABLE_JS switches them)."""
    buttons = "".join(f'<button class="nm-tabbtn{" nm-on" if i == 0 else ""}" data-tab="{i}">{escape(n)}</button>'
                      for i, n in enumerate(titles))
    body = "".join(f'<div class="nm-pane"{"" if i == 0 else " style=display:none"}>{p}</div>'
                   for i, p in enumerate(panes))
    return f'<div class="nm-tabs">{buttons}</div>{body}'


def folder_files(folder) -> pd.DataFrame:
    """The Files tab: every file under folder (relative path, bytes), sorted; no rows when folder is None.
    A folder that is not a directory is a one-line ReportError."""
    if folder is None:
        return pd.DataFrame(columns=["file", "bytes"])
    p = Path(folder)
    if not p.is_dir():
        raise ReportError(f"{p}: not a folder; pass the profile folder that holds the report")
    files = sorted(f for f in p.rglob("*") if f.is_file())
    return pd.DataFrame({"file": [str(f.relative_to(p)) for f in files], "bytes": [f.stat().st_size for f in files]})
