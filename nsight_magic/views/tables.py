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


_UNIT_SUFFIX = {"time": "_ns", "bytes": "_bytes", "pct": "_pct", "gbps": "_gbps"}
_UNIT_WORD = {"bytes": "size", "pct": "%", "gbps": "GB/s"}


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


def default_sort(df: pd.DataFrame, kinds: dict | None = None) -> str | None:
    """The column a table starts sorted by (descending): total time where there is one, else the first time."""
    kinds = kinds or {c: column_kind(c, df[c]) for c in df.columns}
    for c in ("total_ns", "gpu_ns", "delta_ns"):
        if c in df.columns:
            return c
    return next((c for c in df.columns if kinds.get(c) == "time"), None)


def format_table(df: pd.DataFrame, formats: dict | None = None) -> pd.DataFrame:
    """Display strings for every cell (same shape as df)."""
    formats = formats or {}
    return pd.DataFrame({c: FORMATTERS[formats.get(c) or column_kind(c, df[c])](df[c]) for c in df.columns},
                        index=df.index)


def readable(df: pd.DataFrame, formats: dict | None = None):
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


# Sort, filter and click-to-zoom for every `table.nm-table` on the page (included once per page).
TABLE_JS = r"""
(function () {
  if (window.__nsightTables) return; window.__nsightTables = true;
  function rows(t) { return Array.from(t.tBodies[0].rows); }
  document.addEventListener('click', function (ev) {
    const th = ev.target.closest('table.nm-table th');
    if (th) {
      const t = th.closest('table'), col = th.cellIndex, num = th.dataset.num === '1';
      const dir = th.dataset.dir === 'desc' ? 'asc' : 'desc';
      t.querySelectorAll('th').forEach(h => { if (h !== th) delete h.dataset.dir; });
      th.dataset.dir = dir;
      const key = r => { const v = r.cells[col].dataset.v; return num ? (v === '' ? -Infinity : parseFloat(v)) : v; };
      const sorted = rows(t).sort((a, b) => { const x = key(a), y = key(b);
        const c = x < y ? -1 : x > y ? 1 : 0; return dir === 'asc' ? c : -c; });
      const body = t.tBodies[0]; sorted.forEach(r => body.appendChild(r));
      return;
    }
    // a name zooms the timeline to its first instance; the stepper shown above the timeline (and the arrows in
    // the cell) go to the previous / next one
    const stepper = ev.target.closest('.nm-stepper .nm-step');
    const td = stepper ? null : ev.target.closest('table.nm-table td.nm-zoom');
    if ((td || stepper) && window.Bokeh) {
      const src = td || stepper.closest('.nm-stepper');
      const spans = JSON.parse(src.dataset.spans || '[]'), step = ev.target.closest('.nm-step');
      if (!spans.length) return;
      const i = step ? (parseInt(src.dataset.i || '0') + parseInt(step.dataset.d) + spans.length) % spans.length : 0;
      const root = src.closest('.nm-report'), plot = src.dataset.plot || src.closest('table').dataset.plot;
      const label = src.dataset.label || (td ? td.childNodes[0].textContent : '');
      zoomTo(root, plot, spans, i, label);
      return;
    }
  });
  function zoomTo(root, plot, spans, i, label) {
    const t0 = spans[i][0], t1 = spans[i][1], pad = Math.max((t1 - t0) * 0.05, 1e-3);
    for (const doc of Bokeh.documents) {
      const p = doc.get_model_by_name(plot);
      if (p) { p.x_range.setv({start: t0 - pad, end: t1 + pad}); }
    }
    if (!root) return;
    const pane = root.querySelector(':scope > .nm-pane');
    let st = root.querySelector('.nm-stepper');
    if (!st && pane) {
      st = document.createElement('div'); st.className = 'nm-stepper';
      st.innerHTML = '<span class="nm-step" data-d="-1" title="previous instance">&#9664;</span> ' +
        '<span class="nm-what"></span> <span class="nm-pos"></span> ' +
        '<span class="nm-step" data-d="1" title="next instance">&#9654;</span>';
      pane.insertBefore(st, pane.firstChild);
    }
    if (st) {
      Object.assign(st.dataset, {spans: JSON.stringify(spans), i: String(i), plot: plot, label: label});
      st.querySelector('.nm-what').textContent = label;  // text, never markup: names are the user's
      st.querySelector('.nm-pos').textContent = `${i + 1}/${spans.length}`;
      st.style.display = spans.length > 1 ? '' : 'none';
    }
    root.querySelectorAll('td.nm-zoom').forEach(c => {  // the name's cell keeps the same position
      if (!c.childNodes[0] || c.childNodes[0].textContent !== label) return;
      c.dataset.i = String(i);
      const pos = c.querySelector('.nm-pos'); if (pos) pos.textContent = `${i + 1}/${spans.length}`;
    });
    const b = root.querySelector('.nm-tabbtn[data-tab="0"]'); if (b) b.click();
  }
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
table.nm-table th::after{content:" \2195";color:#999}
table.nm-table th[data-dir=desc]::after{content:" \25BC";color:#333}
table.nm-table th[data-dir=asc]::after{content:" \25B2";color:#333}
table.nm-table .nm-step{color:#666;padding:0 3px;cursor:pointer}
table.nm-table .nm-pos{color:#999;font-size:10px}
.nm-stepper{font:12px sans-serif;margin:2px 0 4px;color:#333}
.nm-stepper .nm-step{cursor:pointer;padding:0 6px;color:#1f5fa8}
.nm-stepper .nm-pos{color:#777}
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
        v = _sort_values(shown[c], kinds[c]).map(lambda s: escape(s, quote=True))
        t = text[c].map(escape)
        cls = "" if kinds[c] == "text" else ' class="nm-num"'
        if zoom and c == zoom_col:
            spans = [zoom.get(k) for k in shown[c].astype("string").fillna("")]  # summary rows, not events
            cells = [_zoom_cell(vv, tt, s) if s else f'<td data-v="{vv}">{tt}</td>' for vv, tt, s in zip(v, t, spans)]
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


def _zoom_cell(v: str, text: str, spans) -> str:
    """A name that zooms the timeline to its first instance; with several, arrows step through them."""
    import json

    js = escape(json.dumps([[round(a, 6), round(b, 6)] for a, b in spans]), quote=True)
    steps = ("" if len(spans) < 2 else
             f' <span class="nm-step" data-d="-1" title="previous instance">&#9664;</span><span class="nm-pos">'
             f'1/{len(spans)}</span><span class="nm-step" data-d="1" title="next instance">&#9654;</span>')
    return (f'<td class="nm-zoom" data-v="{v}" data-spans="{js}" data-i="0" '
            f'title="zoom the timeline to the first instance">{text}{steps}</td>')


def table_text(df: pd.DataFrame, formats: dict | None = None, max_rows: int = 10) -> str:
    """Plain-text rendering (terminals, text/plain); headers without the units the values carry."""
    if df.empty:
        return "(none)"
    formats = dict(formats or {})
    kinds = {c: formats.get(c) or column_kind(c, df[c]) for c in df.columns}
    shown = format_table(df.head(max_rows), kinds)
    shown.columns = [header_label(c, kinds[c]) for c in df.columns]
    return shown.to_string(index=False)


def table_widget(df: pd.DataFrame, formats: dict | None = None, *, name_col: str = "name", on_name=None,
                 max_rows: int = 500):
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

    def label_order(*_):  # the toggle says the order it shows
        desc.description = "descending \u25BC" if desc.value else "ascending \u25B2"

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

        def show(i):
            n = on_name(pick.value, i) or 0
            state.update(i=i % n if n else 0, n=n)
            where.value = f"instance {state['i'] + 1} of {n}" if n else ""
            prev.disabled = nxt.disabled = n < 2

        def picked(change):
            if change["new"]:
                show(0)  # the first instance; previous / next step through the others

        pick.observe(picked, names="value")
        prev.on_click(lambda _: show(state["i"] - 1))
        nxt.on_click(lambda _: show(state["i"] + 1))
        children.append(w.HBox([pick, prev, nxt, where]))
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
