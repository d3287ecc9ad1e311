"""A report's verdict and findings kept beside its columnar cache (saved_analysis.py): a profile opened again shows
what its first view showed, without analysing it again; anything that does not match is analysed afresh."""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nsight_magic import saved_analysis
from nsight_magic.analysis.findings import Finding
from nsight_magic.analysis.frame_memo import report_memo
from nsight_magic.readers import nsys_cache
from nsight_magic.report import open_report
from nsight_magic.views.report_view import NsysView, nsys_text, prepare_tables
from nsight_magic.views.timeline_prepare import TimelineData, prepare_timeline

DATA = Path(__file__).parent / "data"


def _copied(tmp_path: Path, name: str) -> Path:
    """A copy of tests/data's export `name` in a folder of its own (its cache is written beside it)."""
    src = tmp_path / "p" / name
    src.parent.mkdir()
    shutil.copy(DATA / name, src)
    return src


@pytest.fixture(params=["findings_bad.sqlite", "nsys_h100_a_cuda_nvtx.sqlite"])
def seen(tmp_path, request):
    """A report opened, its columnar cache written, its view's text made (the analysis ran) and its results kept:
    (the export's path, that text).  A report planted with CPU-side causes, and one of an H100."""
    src = _copied(tmp_path, request.param)
    with open_report(src) as rep:
        rep.data.write_cache()
        text = nsys_text(rep.data)
        assert saved_analysis.save(rep.data)
    return src, text


@pytest.fixture
def seen_drawn(tmp_path):
    """As `seen`, the view drawn (its timeline prepared and held while the results are kept): (the export, that
    timeline)."""
    src = _copied(tmp_path, "nsys_h100_a_cuda_nvtx.sqlite")
    with open_report(src) as rep:
        rep.data.write_cache()
        view = NsysView(rep.data)
        assert saved_analysis.save(rep.data)
    return src, view.data, view.tables


def _kept(f: Finding) -> dict:
    return {k.name: getattr(f, k.name) for k in dataclasses.fields(Finding) if k.name != "evidence"}


def test_every_field_of_a_finding_is_kept():
    assert {f.name for f in dataclasses.fields(Finding)} == saved_analysis.kept_fields()


def test_a_report_opened_again_shows_its_findings_without_analysing_it(seen):
    src, text = seen
    with open_report(src) as fresh, open_report(src) as again:
        assert saved_analysis.restore(again.data)
        assert nsys_text(again.data) == text  # the view's words, verdict and findings as the first time
        assert "diagnosis" not in report_memo(again.data)  # nothing was analysed for it
        want, got = fresh.findings(), again.findings()
        assert want and [_kept(f) for f in got] == [_kept(f) for f in want]
        for a, b in zip(want, got):
            pd.testing.assert_frame_equal(a.evidence.reset_index(drop=True), b.evidence, check_dtype=False,
                                          check_categorical=False)
        vb, va = fresh.bottleneck(), again.bottleneck()
        assert (va.kind, va.summary, va.window, va.steps) == (vb.kind, vb.summary, vb.window, vb.steps)
        pd.testing.assert_frame_equal(vb.breakdown.reset_index(drop=True), va.breakdown, check_dtype=False)


def test_other_thresholds_code_files_beside_or_export_are_analysed_again(seen, monkeypatch):
    src, _ = seen
    with open_report(src) as rep:
        assert not saved_analysis.restore(rep.data, {"alarm.min_ms": 1.0})  # kept for the defaults only
    monkeypatch.setattr(saved_analysis, "code_hash", lambda: "another version of nsight-magic")
    with open_report(src) as rep:
        assert not saved_analysis.restore(rep.data)
    monkeypatch.undo()
    (src.parent / "cell.py").write_text("x = 1\n")  # a file the analysis reads beside the export, changed
    with open_report(src) as rep:
        assert not saved_analysis.restore(rep.data)
    (src.parent / "cell.py").unlink()
    with open_report(src) as rep:
        assert saved_analysis.restore(rep.data)  # as it was: taken again
    with open(src, "ab") as f:  # the export changed (appended to): its columns and results no longer apply
        f.write(b"\0" * 4096)
    with open_report(src) as rep:
        assert not saved_analysis.restore(rep.data)


def test_the_views_timeline_is_kept_and_taken_as_it_was_prepared(seen_drawn):
    src, made, _ = seen_drawn
    with open_report(src) as rep:
        assert saved_analysis.restore(rep.data, timeline=True)
        kept = prepare_timeline(rep.data)  # taken from the memo, not prepared
        assert prepare_timeline(rep.data) is not kept  # taken once: a second view prepares its own
    for f in dataclasses.fields(TimelineData):
        a, b = getattr(made, f.name), getattr(kept, f.name)
        if f.name == "_index":
            assert set(a) == set(b)
        elif isinstance(a, pd.DataFrame):
            pd.testing.assert_frame_equal(a.reset_index(drop=True), b, check_dtype=False)
        elif isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
        else:
            assert a == b, f.name


def test_the_views_tables_are_kept_and_a_reopen_reads_no_summary(seen_drawn, monkeypatch):
    src, timeline, made = seen_drawn
    assert made.origin_ns == timeline.origin_ns and len(made.kernels) and made.kernel_zoom
    with open_report(src) as rep:
        assert saved_analysis.restore(rep.data, timeline=True)
        assert prepare_tables(rep.data, timeline.origin_ns + 1).origin_ns == timeline.origin_ns + 1  # made anew
        for name in ("kernel_summary", "memcpy_summary", "cuda_api_summary", "nvtx_summary"):
            monkeypatch.setattr(rep.data, name, lambda *a, name=name, **k: pytest.fail(f"{name} was read"))
        kept = prepare_tables(rep.data, timeline.origin_ns)  # the kept ones, from their origin
    for name in ("kernels", "memory", "cuda_api", "nvtx"):
        pd.testing.assert_frame_equal(getattr(made, name), getattr(kept, name))
    assert kept.kernel_zoom == made.kernel_zoom and kept.nvtx_zoom == made.nvtx_zoom


def test_a_record_kept_without_the_timeline_gives_the_findings_and_asks_for_it(seen):
    src, text = seen  # kept by a text view: no timeline was drawn
    with open_report(src) as rep:
        assert not saved_analysis.restore(rep.data, timeline=True)
        assert "diagnosis" not in report_memo(rep.data) and nsys_text(rep.data) == text


@pytest.mark.parametrize("damage", ["key", "doc", "evidence", "gone"])
def test_a_damaged_record_is_analysed_again_without_a_word(seen, damage):
    src, text = seen
    kept = next((nsys_cache.cache_dir(src) / nsys_cache.RESULTS_DIR).iterdir())
    key = kept / nsys_cache.KEY_FILE
    if damage == "key":
        key.write_text("{not json")
    elif damage == "doc":  # a finding's time edited into text
        k = json.loads(key.read_text())
        k["doc"]["findings"][0]["time_at_stake_ns"] = "soon"
        key.write_text(json.dumps(k))
    elif damage == "evidence":
        next(kept.glob("evidence*.arrow")).write_bytes(b"ARROW1 but not really")
    else:
        next(kept.glob("evidence*.arrow")).unlink()
    with open_report(src) as rep:
        assert not saved_analysis.restore(rep.data)
        assert nsys_text(rep.data) == text  # analysed again: the same view


def test_nothing_is_kept_without_the_columnar_cache(tmp_path):
    src = tmp_path / "findings_bad.sqlite"
    shutil.copy(DATA / "findings_bad.sqlite", src)
    with open_report(src) as rep:
        assert not saved_analysis.save(rep.data)  # nothing computed yet
        rep.findings(), rep.bottleneck()
        assert not saved_analysis.save(rep.data)  # computed, but no columns kept beside the export
    assert not nsys_cache.cache_dir(src).exists()


@pytest.mark.timeout(300)
def test_nsys_load_keeps_them_and_shows_the_same_profile_from_them_the_next_time(tmp_path):
    """In real kernels: the first %nsys_load of a profile writes its columns and keeps its verdict and findings;
    a later kernel's %nsys_load shows the same text from them (it keeps nothing anew: the kept folder stays the
    one written first)."""
    from conftest import cell_text, run_notebook

    folder = tmp_path / "prof"
    folder.mkdir()
    shutil.copy(DATA / "findings_bad.sqlite", folder / "report.sqlite")
    load = ["%load_ext nsight_magic", f"%nsys_load {folder} --no-render"]
    first = cell_text(run_notebook(load, tmp_path).cells[1])
    assert "Advice" in first and "Traceback" not in first, first
    kept = list((nsys_cache.cache_dir(folder / "report.sqlite") / nsys_cache.RESULTS_DIR).iterdir())
    assert len(kept) == 1 and (kept[0] / nsys_cache.KEY_FILE).is_file(), kept
    written = (kept[0] / nsys_cache.KEY_FILE).stat()
    assert cell_text(run_notebook(load, tmp_path).cells[1]) == first
    again = (kept[0] / nsys_cache.KEY_FILE).stat()
    assert (again.st_ino, again.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)  # read, not written again


def test_what_is_kept_already_is_not_written_again(seen):
    """A text view of a profile kept before (no timeline to add) keeps the folder as it is: no rewrite each open."""
    src, _ = seen
    key = next((nsys_cache.cache_dir(src) / nsys_cache.RESULTS_DIR).iterdir()) / nsys_cache.KEY_FILE
    before = key.stat()
    with open_report(src) as rep:
        nsys_text(rep.data)  # analysed again (not restored), then saved as a view would
        assert saved_analysis.save(rep.data)
    after = key.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_result_sets_of_other_thresholds_beyond_the_few_used_last_are_removed(seen):
    import os
    import time

    src, _ = seen
    results = nsys_cache.cache_dir(src) / nsys_cache.RESULTS_DIR
    (defaults,) = list(results.iterdir())
    old_tmp, young_tmp = results / f"{defaults.name}.dead", results / f"{defaults.name}.writing"
    old_tmp.mkdir(), young_tmp.mkdir()
    hour_ago = time.time() - nsys_cache.STALE_TMP_S - 60
    os.utime(old_tmp, (hour_ago, hour_ago))
    for i in range(nsys_cache.RESULTS_KEPT + 1):  # other thresholds, each kept in a set of its own
        time.sleep(0.02)  # apart on a file system's coarse clock
        th = {"alarm.min_ms": 1.0 + i}
        with open_report(src) as rep:
            rep.findings(th)
            rep.bottleneck()
            assert saved_analysis.save(rep.data, th)
        if i == 1:
            time.sleep(0.02)
            with open_report(src) as rep:  # the defaults' set read again: used after the first two others
                assert saved_analysis.restore(rep.data)
    sets = [d.name for d in results.iterdir() if "." not in d.name]
    assert len(sets) == nsys_cache.RESULTS_KEPT and defaults.name in sets
    assert not old_tmp.exists() and young_tmp.exists()  # a dead writer's folder goes, a live one's stays
    with open_report(src) as rep:
        assert saved_analysis.restore(rep.data)
        assert saved_analysis.restore(rep.data, {"alarm.min_ms": 1.0 + nsys_cache.RESULTS_KEPT})
        assert not saved_analysis.restore(rep.data, {"alarm.min_ms": 1.0})  # written after the defaults, used less
        assert not saved_analysis.restore(rep.data, {"alarm.min_ms": 2.0})



REQUEST = "a3c1f2d4-5b6e-4f70-8a9b-0c1d2e3f4a5b"  # a UUID in the user's own text: an NVTX range named after a request


@pytest.fixture
def seen_page(tmp_path):
    """As `seen_drawn`, its static page made (as a cell's view makes it) and kept, with an NVTX range named after a
    request's UUID: (the export, the view)."""
    import sqlite3

    src = _copied(tmp_path, "nsys_h100_a_cuda_nvtx.sqlite")
    with sqlite3.connect(src) as c:
        assert c.execute("UPDATE NVTX_EVENTS SET text = ? WHERE text = '0'", (f"request {REQUEST}",)).rowcount
    with open_report(src) as rep:
        rep.data.write_cache()
        view = NsysView(rep.data, src.parent)
        view.static_fragment(include_bokehjs=False)
        assert saved_analysis.save(rep.data)
    return src, view


def _without_files(html: str) -> str:
    """A view's page without its Files listing (the folder's files when it was shown)."""
    import re

    return re.sub(r'<p>[^<]*</p><input class="nm-filter" data-table="nm-[0-9a-f-]+-files".*?</table></div>', "",
                  html, count=1, flags=re.S)


def test_a_reopen_shows_the_kept_page_with_ids_of_its_own(seen_page):
    """A profile drawn before is shown from its kept page: the same page, every id of its own made anew each time
    (two copies in one notebook never share a Bokeh model, an element or a plot name), the user's UUID as it was,
    the Files listing made when shown; a whole view made around the page takes its new ids."""
    from nsight_magic.views.kept_page import UUID
    from nsight_magic.views.output import kept_bundle, profile_bundle

    src, view = seen_page
    made = view.static_fragment(include_bokehjs=False)
    shown = []
    with open_report(src) as rep:
        page = saved_analysis.kept_page(rep.data)
        assert page is not None and page.text == view.text()
        for _ in range(2):
            b = kept_bundle(rep, page, src.parent)
            assert b is not None and b["text/plain"] == view.text()
            shown.append(b["text/html"])
        assert saved_analysis.restore(rep.data, timeline=True)
        shown.append(profile_bundle(rep, src.parent, live=False, page=page)["text/html"])
        assert kept_bundle(rep, page, src.parent / "elsewhere") is None  # made for another folder: drawn again
    own = [set(UUID.findall(h)) - {REQUEST} for h in [made, *shown]]
    assert all(len(ids) > 50 for ids in own), [len(i) for i in own]
    for i, a in enumerate(own):
        for b in own[i + 1:]:
            assert not a & b
    same = [UUID.sub("ID", _without_files(h).replace(REQUEST, "REQUEST")) for h in [made, *shown]]
    assert "nm-ID-files" not in same[0] and same[1:] == same[:1] * 3
    for h in [made, *shown]:
        assert h.count(REQUEST) == made.count(REQUEST) > 0 and "nm-files" not in h
    # the whole view's plot, tables and Files listing under the one new uid its page took
    uid = UUID.search(shown[2], shown[2].index('class="nm-report" id="nm-')).group()
    assert f'"nsight-timeline-{uid}"' in shown[2] and f'id="nm-{uid}-files"' in shown[2]
    assert f'id="nm-{uid}-kernels"' in shown[2]


@pytest.mark.parametrize("damage", ["page", "ids", "path"])
def test_a_damaged_or_moved_page_is_drawn_again(seen_page, damage):
    src, _ = seen_page
    kept = next((nsys_cache.cache_dir(src) / nsys_cache.RESULTS_DIR).iterdir())
    key = kept / nsys_cache.KEY_FILE
    if damage == "page":
        (kept / f"{saved_analysis.PAGE}.arrow").write_bytes(b"ARROW1 but not really")
    else:
        k = json.loads(key.read_text())
        k["doc"]["page"]["ids" if damage == "ids" else "path"] = None if damage == "ids" else "/elsewhere.sqlite"
        key.write_text(json.dumps(k))
    with open_report(src) as rep:
        assert saved_analysis.kept_page(rep.data) is None
        assert saved_analysis.restore(rep.data)  # the rest of what was kept stays good


def test_a_page_whose_ids_cannot_all_be_made_anew_is_not_kept(seen_page):
    """An id the page holds where it cannot be told from the text around it (here glued to the end of a text that
    reads as most of a UUID: that UUID is found and the id is not) would stay shared between two copies: such a
    page is not kept, and the view is drawn each time."""
    from nsight_magic.views.report_view import keep_page, made_page

    src, view = seen_page
    page = made_page(view.report)
    assert page is not None and page.renewable()
    glued = dataclasses.replace(page, html=page.html + f"<p>aaaaaaaa-bbbb-cccc-dddd-eeee{page.uid}</p>")
    assert not glued.renewable()
    shutil.rmtree(nsys_cache.cache_dir(src) / nsys_cache.RESULTS_DIR)
    keep_page(view.report, glued)
    assert saved_analysis.save(view.report)  # the verdict and findings kept, not the page
    with open_report(src) as rep:
        assert saved_analysis.kept_page(rep.data) is None and saved_analysis.restore(rep.data)


def test_a_page_made_for_another_folder_is_replaced_by_the_next_view(seen_page):
    """A profile folder moved (its kept page names the old folder and path): the next view draws the page again
    and keeps it for where the profile is now, once; the view after that is shown from it."""
    src, _ = seen_page
    moved = src.parent.parent / "moved"
    src.parent.rename(moved)
    src = moved / src.name
    with open_report(src) as rep:
        page = saved_analysis.kept_page(rep.data)
        assert page is None  # kept for the old path
        NsysView(rep.data, moved).static_fragment(include_bokehjs=False)
        assert saved_analysis.save(rep.data)
    key = next((nsys_cache.cache_dir(src) / nsys_cache.RESULTS_DIR).iterdir()) / nsys_cache.KEY_FILE
    before = key.stat()
    with open_report(src) as rep:
        page = saved_analysis.kept_page(rep.data)
        assert page is not None and page.folder == str(moved)
        assert saved_analysis.restore(rep.data, timeline=True)
        NsysView(rep.data, moved, page=page).static_fragment(include_bokehjs=False)
        assert saved_analysis.save(rep.data)  # kept already: not written again
    after = key.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_view_made_around_a_kept_page_keeps_it_with_the_timeline_it_adds(tmp_path):
    """A headless first view keeps its page without the timeline (no live view held it); a later view made around
    that page, its timeline held, keeps both: the page is not dropped for the timeline."""
    src = _copied(tmp_path, "nsys_h100_a_cuda_nvtx.sqlite")
    with open_report(src) as rep:
        rep.data.write_cache()
        NsysView(rep.data, src.parent).static_fragment(include_bokehjs=False)  # the view let go: no timeline held
        assert saved_analysis.save(rep.data)
    with open_report(src) as rep:
        page = saved_analysis.kept_page(rep.data)
        assert page is not None and not saved_analysis.restore(rep.data, timeline=True)
        view = NsysView(rep.data, src.parent, page=page)  # held: its timeline is kept with the page
        assert saved_analysis.save(rep.data)
    with open_report(src) as rep:
        assert saved_analysis.kept_page(rep.data) == page and saved_analysis.restore(rep.data, timeline=True)
    assert view.data is not None


@pytest.mark.parametrize("how", ["edited", "another user's"])
def test_a_page_edited_or_signed_by_another_user_is_never_shown(seen_page, how):
    """A kept page is HTML a reopen shows as it is: one edited after it was kept (a script put in), or kept by
    another user (a profile folder from anyone, signed with their secret), is not shown; the view is drawn from
    the data instead."""
    import hashlib
    import hmac

    import pyarrow as pa
    from pyarrow import ipc

    src, _ = seen_page
    kept = next((nsys_cache.cache_dir(src) / nsys_cache.RESULTS_DIR).iterdir())
    key = kept / nsys_cache.KEY_FILE
    with open_report(src) as rep:
        assert saved_analysis.kept_page(rep.data) is not None
    k = json.loads(key.read_text())
    entry = k["doc"]["page"]
    if how == "edited":
        arrow = kept / f"{saved_analysis.PAGE}.arrow"
        html = ipc.open_file(pa.memory_map(str(arrow))).read_all().column("html")[0].as_py()
        table = pa.table({"html": [html + "<script>alert(1)</script>"]})
        with ipc.new_file(str(arrow), table.schema) as w:
            w.write_table(table)
    else:  # the same page, signed with a key that is not this user's
        fields = {f: v for f, v in entry.items() if f != "signature"}
        html = ipc.open_file(pa.memory_map(str(kept / f"{saved_analysis.PAGE}.arrow"))).read_all()["html"][0].as_py()
        msg = json.dumps(fields, sort_keys=True).encode() + b"\0" + html.encode()
        entry["signature"] = hmac.new(b"another user's secret 32 bytes!!", msg, hashlib.sha256).hexdigest()
        key.write_text(json.dumps(k))
    with open_report(src) as rep:
        assert saved_analysis.kept_page(rep.data) is None
        assert saved_analysis.restore(rep.data)  # the verdict and findings still taken
