"""A picture of the timeline (PNG), drawn in Python with Pillow (a Bokeh dependency), for where no script runs.

An untrusted notebook in JupyterLab or Notebook 7, GitHub's and other static renderers show a notebook's HTML
without its scripts: the Bokeh timeline is then an empty box.  The static view carries this picture in its place
(an <img> with a data: URI, which every sanitizer we met keeps); the page's script hides it once BokehJS has drawn
the interactive plot.  It shows what the first view of the static timeline shows: the same glyphs (exact events
and busy-shaded bins), the same rows and labels, an axis in ms.
"""
from __future__ import annotations

import base64
import functools
import io

from typing import TYPE_CHECKING, TypeAlias

import numpy as np
import numpy.typing as npt

from .timeline_prepare import TimelineData

if TYPE_CHECKING:
    from bokeh.models import ColumnDataSource
    from PIL import ImageDraw, ImageFont

    from .timeline import TimelineView

    Font: TypeAlias = "ImageFont.ImageFont | ImageFont.FreeTypeFont | ImageFont.TransposedFont"

LABEL_PX = 250
ROW_PX = 20
TOP_PX = 26      # the caption
AXIS_PX = 30     # ticks and their labels
MAX_ROWS = 60    # a taller picture says how many rows it leaves out
BG, GRID, TEXT, FRAME = (255, 255, 255), (232, 232, 232), (34, 34, 34), (200, 200, 200)


@functools.lru_cache(maxsize=4)
def _font(size: int) -> Font:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1: the bitmap font, one size
        return ImageFont.load_default()


def _rgb(color: str) -> tuple[int, int, int]:
    c = str(color).lstrip("#")
    try:
        return int(c[0:2], 16), int(c[2:4], 16), int(c[4:6], 16)
    except ValueError:
        return 76, 120, 168


def _fit(draw: ImageDraw.ImageDraw, text: str, font: Font, px: float) -> str:
    """text cut with an ellipsis to fit px pixels (canvas text: never markup)."""
    if px <= 8:
        return ""
    if draw.textlength(text, font=font) <= px:
        return text
    lo, hi = 0, len(text)
    while lo < hi:  # the longest prefix that fits with the ellipsis
        mid = (lo + hi + 1) // 2
        if draw.textlength(text[:mid] + "…", font=font) <= px:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo] + "…" if lo else ""


def _ticks(x0: float, x1: float, n: int = 8) -> np.ndarray:
    span = max(x1 - x0, 1e-9)
    raw = span / n
    mag = 10 ** np.floor(np.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return np.arange(np.ceil(x0 / step) * step, x1 + step * 1e-9, step)


def _tick_label(v: float, step: float) -> str:
    digits = max(0, int(-np.floor(np.log10(step)))) if step < 1 else 0
    return f"{v:,.{digits}f}"


def timeline_png(tv: TimelineView, width: int = 1100) -> bytes:
    """The first view of a TimelineView (views.timeline) as PNG bytes."""
    from PIL import Image, ImageDraw

    data: TimelineData = tv.data
    rows_y = np.asarray(tv.rows_y, dtype=float)
    visible = int(np.sum(~np.isnan(rows_y)))
    shown_rows = min(visible, MAX_ROWS)
    plot_w = max(int(width) - LABEL_PX, 200)
    height = TOP_PX + max(shown_rows, 1) * ROW_PX + AXIS_PX + (16 if visible > shown_rows else 0)
    img = Image.new("RGB", (LABEL_PX + plot_w, height), BG)
    draw = ImageDraw.Draw(img, "RGBA")
    font, small = _font(11), _font(10)
    x0, x1 = float(tv.figure.x_range.start), float(tv.figure.x_range.end)
    scale = plot_w / max(x1 - x0, 1e-12)

    def px(ms: npt.ArrayLike) -> np.ndarray:
        return LABEL_PX + (np.asarray(ms, dtype=float) - x0) * scale

    def py(y: npt.ArrayLike) -> np.ndarray:
        return TOP_PX + np.asarray(y, dtype=float) * ROW_PX

    draw.text((LABEL_PX, 6), _fit(draw, str(tv.glyphs.caption), small, plot_w), fill=TEXT, font=small)
    for i in range(shown_rows + 1):  # row lines
        y = TOP_PX + i * ROW_PX
        draw.line([(LABEL_PX, y), (LABEL_PX + plot_w, y)], fill=GRID)
    if data.frame_ns is not None:  # outside the cell: shaded, as in the plot
        a, b = float(px(data.frame_ns[0] / 1e6)), float(px(data.frame_ns[1] / 1e6))
        bottom = TOP_PX + shown_rows * ROW_PX
        if a > LABEL_PX:
            draw.rectangle([LABEL_PX, TOP_PX, min(a, LABEL_PX + plot_w), bottom], fill=(136, 136, 136, 30))
        if b < LABEL_PX + plot_w:
            draw.rectangle([max(b, LABEL_PX), TOP_PX, LABEL_PX + plot_w, bottom], fill=(136, 136, 136, 30))
    palette = [_rgb(c) for c in (data.palette or ["#4c78a8"])]

    def bars(src: ColumnDataSource, exact: bool) -> None:
        d = src.data
        if not len(d["left"]):
            return
        y = np.asarray(d["y"], dtype=float)
        keep = np.isfinite(y) & (y < shown_rows)
        left = np.clip(px(np.asarray(d["left"])[keep]), LABEL_PX, LABEL_PX + plot_w)
        right = np.clip(px(np.asarray(d["right"])[keep]), LABEL_PX, LABEL_PX + plot_w)
        right = np.maximum(right, left + 1)  # one pixel at least: a 2 us kernel stays visible
        yy = y[keep]
        colors = np.asarray(d["color"])[keep]
        h = np.full(len(yy), 0.8) if exact else np.asarray(d["h"], dtype=float)[keep]
        alpha = np.full(len(yy), 255) if exact else \
            (255 * (0.25 + 0.75 * np.clip(np.asarray(d["busy"], dtype=float)[keep], 0, 1))).astype(int)
        top, bottom = py(yy - h / 2), py(yy + h / 2)
        for l_, r_, t_, b_, c_, a_ in zip(left, right, top, bottom, colors, alpha):
            r, g, b = palette[int(c_)] if 0 <= int(c_) < len(palette) else palette[0]
            draw.rectangle([float(l_), float(t_), max(float(l_), float(r_) - 1), max(float(t_), float(b_) - 1)],
                           fill=(r, g, b, int(a_)))

    bars(tv.agg_src, exact=False)
    bars(tv.exact_src, exact=True)
    lab = tv.label_src.data  # the names on the wide bars, as the plot's first view has them
    for x, y, text, col in zip(lab["x"], lab["y"], lab["text"], lab["tcol"]):
        if np.isfinite(y) and y < shown_rows:
            xx = float(px(x))
            draw.text((xx, float(py(y)) - 6), _fit(draw, str(text), small, LABEL_PX + plot_w - xx),
                      fill=_rgb(col), font=small)
    rows = tv.rows_src.data
    for y, x, text, weight in zip(rows["y"], rows["x"], rows["text"], rows["weight"]):
        if y is None or not np.isfinite(y) or y >= shown_rows:
            continue
        left, mid, text = 4 + float(x) * (LABEL_PX - 8), float(py(y)), str(text)
        if text[:2] in ("▾ ", "▸ "):  # a group's fold mark, drawn (the default font has no such glyph)
            down = text[0] == "▾"
            draw.polygon([(left, mid - 3), (left + 7, mid - 3), (left + 3.5, mid + 3)] if down else
                         [(left + 1, mid - 4), (left + 1, mid + 4), (left + 7, mid)], fill=(90, 90, 90))
            left, text = left + 11, text[2:]
        f = font if weight == "bold" else small
        draw.text((left, mid - 6), _fit(draw, text, f, LABEL_PX - left - 4), fill=TEXT, font=f)
    axis_y = TOP_PX + shown_rows * ROW_PX
    draw.line([(LABEL_PX, axis_y), (LABEL_PX + plot_w, axis_y)], fill=FRAME)
    draw.line([(LABEL_PX, TOP_PX), (LABEL_PX, axis_y)], fill=FRAME)
    ticks = _ticks(x0, x1)
    step = float(ticks[1] - ticks[0]) if len(ticks) > 1 else 1.0
    for t in ticks:
        xx = float(px(t))
        if LABEL_PX <= xx <= LABEL_PX + plot_w:
            draw.line([(xx, axis_y), (xx, axis_y + 4)], fill=FRAME)
            label = _tick_label(float(t), step)
            w = draw.textlength(label, font=small)
            # centred on its tick, but kept whole inside the picture (a tick at the right edge read "3,00")
            lx = min(max(xx - w / 2, LABEL_PX), LABEL_PX + plot_w - w - 1)
            draw.text((lx, axis_y + 6), label, fill=TEXT, font=small)
    draw.text((LABEL_PX + plot_w - 150, axis_y + 18), "ms from the start of the cell" if data.frame_ns
              else "ms from capture start", fill=(102, 102, 102), font=small)
    if visible > shown_rows:
        draw.text((4, axis_y + 18), f"{visible - shown_rows} more rows in the interactive view", fill=TEXT,
                  font=small)
    out = io.BytesIO()
    img.save(out, format="PNG", optimize=True)
    return out.getvalue()


def picture_html(tv: TimelineView, width: int = 1100, *, alt: str = "timeline") -> str:
    """An <img> of the timeline (data: URI), marked so the page's script hides it once the plot is drawn."""
    png = base64.b64encode(timeline_png(tv, width)).decode("ascii")
    return (f'<img class="nm-picture" alt="{alt}" style="max-width:100%;display:block" '
            f'src="data:image/png;base64,{png}"/>')
