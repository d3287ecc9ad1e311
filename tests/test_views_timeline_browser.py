"""The timeline as a user reads it, in a real Chromium, on a real CPU profile made by run_nsys (real nsys):
the code's NVTX colours, names on the bars wide enough for them, rows that fold, our cell range framing the axis
instead of being a row, a plot as wide as the window, and a span measured with the mouse.
Screenshots go to test-artifacts/ (timeline_*.png)."""
from __future__ import annotations

import io

import pytest

from conftest import in_page, requires_chromium, requires_nsys
from test_views_browser import Page, js

pytestmark = [pytest.mark.browser, pytest.mark.nsys, requires_nsys, pytest.mark.timeout(300),
              requires_chromium]

CELL = """
import time, nvtx
with nvtx.annotate("wide blue work", color="blue"):
    time.sleep(0.30)
with nvtx.annotate("narrow", color="red"):
    time.sleep(0.001)
with nvtx.annotate("wide green work", color="green"):
    time.sleep(0.25)
"""
MAIN = "(() => $VIEWS.find(v => v.frame))()"
LABELS = ("(() => { const i = Bokeh.index; const roots = (i && typeof i.values === 'function') ? [...i.values()] "
          ": Object.values(i || {}); const all = []; const walk = v => "
          "{ all.push(v); for (const c of (v.child_views || [])) walk(c); }; roots.forEach(walk); "
          "return all.find(v => (v.model.name || '').endsWith('-rowlabels')); })()")


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    from nsight_magic.options import NsysOptions
    from nsight_magic.run import run_nsys
    from nsight_magic.views import write_view_html

    d = tmp_path_factory.mktemp("timeline")
    res = run_nsys(CELL, NsysOptions(name="colours", directory=str(d), trace="nvtx,osrt", timeout=120))
    assert res.ok and res.sqlite, res.messages
    report = res.open()
    page = write_view_html(report, d / "view.html", folder=res.folder.path)
    return report, page


def _pixel(pg, x, y):
    from PIL import Image

    img = Image.open(io.BytesIO(pg.page.screenshot(clip={"x": x - 1, "y": y - 1, "width": 3, "height": 3})))
    return img.convert("RGB").getpixel((1, 1))


def test_colours_names_frame_fold_width_and_measure(profile, browser):
    report, page = profile
    from nsight_magic.views.timeline_prepare import prepare_timeline

    data = prepare_timeline(report)
    # our cell range frames the timeline: no row, no summary line, x = 0 at its start
    assert not any("colours" in str(lab) for lab in data.rows["label"])
    assert not report.nvtx_summary()["name"].astype(str).str.contains("colours").any()
    ours = report.nvtx[report.nvtx["domain"].astype(str) == "nsight-magic"]
    assert (ours["kind"].astype(str) != "mark").sum() == 1  # still in the raw frame (with the samples' clock mark)
    assert data.frame_ns is not None and data.frame_ns[0] == 0

    pg = Page(browser, page.as_uri())
    # names on the bars: both wide ranges carry theirs, the 1 ms one is too narrow at this zoom
    texts = pg.page.evaluate(js("() => { const v = " + MAIN + ";"
                                " const s = v.model.renderers.map(r => r.data_source)"
                                ".find(s => s.name && s.name.endsWith('-labels')); return s.data.text; }"))
    assert "wide blue work" in texts and "wide green work" in texts and "narrow" not in texts
    # the colours the code gave: the middle of each wide bar is drawn in it
    pos = pg.page.evaluate(js("""(names) => { const v = """ + MAIN + """;
      const d = v.model.renderers.map(r => r.data_source).find(s => 'detail' in s.data).data;
      const r = v.el.getBoundingClientRect(), out = {};
      for (let i = 0; i < d.left.length; i++) {
        const n = names[d.name[i]];
        if (n === 'wide blue work' || n === 'wide green work')
          out[n] = {x: r.x + v.frame.x_scale.compute(d.left[i] + 0.75 * (d.right[i] - d.left[i])),
                    y: r.y + v.frame.y_scale.compute(d.y[i]) + 6};
      }
      return out; }"""), data.names)
    blue, green = _pixel(pg, **pos["wide blue work"]), _pixel(pg, **pos["wide green work"])
    assert blue[2] > 150 and blue[0] < 80 and blue[1] < 80, blue
    assert green[1] > 90 and green[0] < 60 and green[2] < 60, green
    pg.screenshot("timeline_colours.png")
    # the plot follows the window's width
    width = js("() => " + MAIN + ".el.getBoundingClientRect().width")
    frame = js("() => " + MAIN + ".frame.bbox.width")  # Bokeh's own layout, which places what is clicked below
    w_wide, f_wide = pg.page.evaluate(width), pg.page.evaluate(frame)
    pg.page.set_viewport_size({"width": 900, "height": 900})
    w_narrow = in_page(pg.page, width, "(w, wide) => wide - w > 400", w_wide)
    assert w_wide - w_narrow > 400, (w_wide, w_narrow)
    pg.page.set_viewport_size({"width": 1400, "height": 900})
    assert in_page(pg.page, frame, "(w, wide) => Math.abs(w - wide) < 1", f_wide) == pytest.approx(f_wide, abs=1)
    # folding the process hides its rows (a click on its name in the tree on the left)
    proc = data.rows[data.rows["kind"] == "process"].iloc[0]
    where = """([key, labels]) => { const lv = eval(labels);
      const s = lv.model.renderers[0].data_source, i = s.data.key.indexOf(key), r = lv.el.getBoundingClientRect();
      return {x: r.x + lv.frame.x_scale.compute(s.data.x[i] + 0.03), y: r.y + lv.frame.y_scale.compute(s.data.y[i])};
    }"""
    at = pg.page.evaluate(where, [proc["key"], LABELS])
    # the drawn events' distinct rows: folded, every event of this CPU profile is drawn on the process's one strip
    visible = js("() => { const v = " + MAIN + "; const d = v.model.renderers.map(r => r.data_source)"
                 ".find(s => 'detail' in s.data).data; const ys = d.y.filter(y => isFinite(y));"
                 " return [ys.length, new Set(ys).size]; }")
    before = pg.page.evaluate(visible)
    # the row labels' plot as laid out: folding makes it shorter, and what is clicked next is placed by it
    drawn_height = f"() => {LABELS}.el.getBoundingClientRect().height"
    tall = pg.page.evaluate(drawn_height)
    pg.page.mouse.click(at["x"], at["y"])
    folded = in_page(pg.page, visible, "(now, before) => now[1] == 1", before)
    assert before[0] > 0 and before[1] > 1 and folded == [before[0], 1], (before, folded)
    # shorter, down to the plot's least height (200 px: a profile of four rows is drawn that tall unfolded)
    if tall > 210:
        assert in_page(pg.page, drawn_height, "(h, tall) => h < tall - 10", tall) < tall - 10
    else:
        assert pg.page.evaluate(drawn_height) <= tall
    label_text = pg.page.evaluate(f"() => {LABELS}.model.renderers[0].data_source.data.text")
    assert label_text[0].startswith("▸ ")  # the folded mark on the process
    # names on the one strip do not overlap (the sleep's OS calls lie under the ranges): each starts after the last
    placed = pg.page.evaluate(js("() => { const v = " + MAIN + "; const d = v.model.renderers.map(r => r.data_source)"
                                 ".find(s => s.name && s.name.endsWith('-labels')).data;"
                                 " return d.x.map((x, i) => [d.y[i], v.frame.x_scale.compute(x), d.text[i]]); }"))
    assert len(placed) >= 2, placed
    for (y0, x0, t0), (y1, x1, _) in zip(sorted(placed), sorted(placed)[1:]):
        assert y0 != y1 or x1 >= x0 + 6.2 * len(t0), (t0, x0, x1)
    pg.screenshot("timeline_folded.png")
    at = pg.page.evaluate(where, [proc["key"], LABELS])  # the plot is shorter now: the name moved
    # BokehJS takes a second tap within 300 ms of the first for a double tap (UIGestures.doubletap_threshold):
    # a user's second click comes later than that
    pg.page.wait_for_timeout(350)
    pg.page.mouse.click(at["x"], at["y"])  # and back
    assert in_page(pg.page, visible, "(now, before) => now[1] == before[1]", before) == before
    assert in_page(pg.page, drawn_height, "(h, tall) => Math.abs(h - tall) < 1", tall) == pytest.approx(tall, abs=1)
    # the measuring tool: drag across the plot, read the span's duration
    box = pg.page.evaluate(js("() => { const v = " + MAIN + "; const r = v.el.getBoundingClientRect();"
                              " return {x0: r.x + v.frame.x_scale.compute(100), x1: r.x + v.frame.x_scale.compute(300),"
                              " y: r.y + v.frame.bbox.top + 20}; }"))
    tool = pg.page.evaluate(js("""() => { const v = """ + MAIN + """;
      const t = v.model.toolbar.tools.find(t => t.description === 'Measure a span (drag)');
      v.model.toolbar.active_drag = t; return !!t; }"""))
    assert tool
    pg.page.mouse.move(box["x0"], box["y"])
    pg.page.mouse.down()
    pg.page.mouse.move((box["x0"] + box["x1"]) / 2, box["y"], steps=5)
    pg.page.mouse.move(box["x1"], box["y"], steps=5)
    pg.page.mouse.up()
    label = in_page(pg.page, js("() => { const v = " + MAIN + "; const l = v.model.center.find(m => "
                                "m.x_offset !== undefined && m.text !== undefined); return l ? l.text : null; }"),
                    "text => !!text")
    assert label and label.startswith("Δ 2") and "ms" in label, label  # about 200 ms
    pg.screenshot("timeline_measure.png")
    assert pg.errors == [] and pg.dialogs == []
    pg.page.close()
