"""The Nsight Systems reader: every fixture opens (or fails with a specific one-line message) and every summary
equals what the installed `nsys stats` prints for the same file.

tests/data/nsys_h100_a_cuda_nvtx.sqlite and nsys_h100_c_range.sqlite are copies of
../shared/fixtures/nsys/h100-2025.3/{a_cuda_nvtx,c_range}.sqlite (made for this project on an H100 with
nsys 2025.3.1: `nsys profile -t cuda,nvtx -s none --cpuctxsw=none python demo_train_step.py` and
`nsys profile -t cuda,nvtx,cublas,cudnn --capture-range=cudaProfilerApi --capture-range-end=stop ...`, then
`nsys export --type sqlite`); they stand in for the shared fixtures when those are absent.
CPU reports are recorded here with the installed nsys (`record_cpu_report`).
"""
from __future__ import annotations

import io
import os
import shutil
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import run_bounded
from nsight_magic import open_report
from nsight_magic.errors import OptionError, ReportError
from nsight_magic.readers.nsys import ReportMeta, open_nsys_report
from nsight_magic.readers.nsys_schema import frame_columns

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "nsys"
DATA = Path(__file__).resolve().parent / "data"
NSYS = shutil.which("nsys")
FRAMES = ("kernels", "memcpy", "memset", "cuda_api", "nvtx", "osrt", "sync", "cublas", "cudnn", "threads",
          "processes", "gpus")

BROKEN = {"cardiac_report1_PARTIAL.sqlite": "incomplete Nsight Systems export"}


def _sqlite_fixtures():
    # the shared fixtures when present, else our own H100 exports (tests/data, copies of h100-2025.3 files)
    files = sorted(FIXTURES.glob("*/*.sqlite")) if FIXTURES.is_dir() else sorted(DATA.glob("nsys_*.sqlite"))
    return [pytest.param(p, id=p.name) for p in files]


def _readable():
    return [p for p in _sqlite_fixtures() if p.values[0].name not in BROKEN]


def _need_fixtures():
    if not FIXTURES.is_dir():
        pytest.skip(f"{FIXTURES} is absent")


def nsys_stats(report: str, sqlite: Path, fmt: str = "csv") -> pd.DataFrame | None:
    """`nsys stats --report <report>` as a DataFrame (None when nsys says the data is absent)."""
    if NSYS is None:
        pytest.skip("nsys is not installed")
    r = run_bounded([NSYS, "stats", "--report", report, "--format", fmt, "--output", "-", str(sqlite)])
    text = r.stdout
    if "SKIPPED" in text or "does not contain" in text:
        return None
    lines = [ln for ln in text.splitlines() if not ln.startswith("Processing [")]
    body = "\n".join(lines).strip()
    if r.returncode != 0 or not body:
        pytest.fail(f"nsys stats {report} failed on {sqlite.name}: {(r.stderr or text)[-300:]}")
    return pd.read_csv(io.StringIO(body), keep_default_na=False, na_values=[""])


def _close(a, b, tol=0.051):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return np.all(np.abs(a - b) <= tol + 1e-9 * np.abs(b))



# -- every fixture opens, with the contract's columns -----------------------------------------------------------

@pytest.mark.parametrize("path", _sqlite_fixtures())
def test_every_fixture_opens_or_fails_with_a_specific_message(path):
    if path.name in BROKEN:
        with pytest.raises(ReportError, match=BROKEN[path.name]) as e:
            open_report(path)
        assert "\n" not in str(e.value)
        return
    rep = open_report(path)
    try:
        assert isinstance(rep.meta, ReportMeta)
        assert rep.meta.end_ns >= rep.meta.start_ns and rep.meta.duration_ns == rep.meta.end_ns - rep.meta.start_ns
        for name in FRAMES:
            df = getattr(rep, name)
            assert tuple(df.columns) == frame_columns(name), name
            if "start_ns" in df and len(df):
                assert df["start_ns"].is_monotonic_increasing, name
                assert (df["duration_ns"].dropna() >= 0).all(), name
            if name in ("kernels", "memcpy", "memset", "cuda_api") and len(df):
                assert df["start_ns"].dtype == np.int64 and df["pid"].dtype == np.int64
    finally:
        rep.close()


@pytest.mark.parametrize("path", _readable())
def test_frames_match_the_raw_row_counts(path, opened):
    rep = opened(path)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    # OS runtime: without nsys's instant "profiling started/stopped" markers
    for frame, table, cond in (("kernels", "CUPTI_ACTIVITY_KIND_KERNEL", "1"),
                               ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY", "1"),
                               ("memset", "CUPTI_ACTIVITY_KIND_MEMSET", "1"),
                               ("cuda_api", "CUPTI_ACTIVITY_KIND_RUNTIME", "1"),
                               ("osrt", "OSRT_API", '"end" > start')):
        n = con.execute(f"SELECT count(*) FROM {table} WHERE {cond}").fetchone()[0] if table in tables else 0
        assert len(getattr(rep, frame)) == n, frame
    con.close()


def _dtypes(df):
    return {c: "category" if isinstance(t, pd.CategoricalDtype) else str(t) for c, t in df.dtypes.items()}


COLUMNS = {"kernels": ["pid", "device_id", "start_ns", "end_ns", "duration_ns", "name", "correlation_id"],
           "memcpy": ["pid", "start_ns", "duration_ns", "kind", "bytes"], "memset": ["start_ns", "end_ns"],
           "cuda_api": ["pid", "tid", "name", "start_ns", "correlation_id"], "osrt": ["pid", "tid", "start_ns"]}


@pytest.mark.parametrize("path", _readable())
def test_a_few_columns_read_alone_are_the_frames_columns(path, opened):
    # report.columns() (what a job's rank task reads) builds them from the summaries' scan and a narrow read
    fresh = open_nsys_report(path)
    try:
        for frame, cols in COLUMNS.items():
            alone = fresh.columns(frame, cols)
            assert frame not in fresh.__dict__, frame  # the frame itself was not built
            want = getattr(opened(path), frame)[cols].reset_index(drop=True)
            got = alone.iloc[np.argsort(alone["start_ns"].to_numpy(), kind="stable")].reset_index(drop=True)
            pd.testing.assert_frame_equal(got, want, check_categorical=False, obj=frame)
            assert _dtypes(alone) == _dtypes(want), frame
        with pytest.raises(OptionError, match=r"not integer or id columns of .kernels.; use report.kernels"):
            fresh.columns("kernels", ["start_ns", "nope"])
    finally:
        fresh.close()


@pytest.mark.parametrize("path", _readable())
def test_frames_have_the_same_dtypes_as_empty_ones(path, opened):
    from nsight_magic.readers.nsys_frames import empty_frame

    rep = opened(path)
    for name in FRAMES:
        assert _dtypes(getattr(rep, name)) == _dtypes(empty_frame(name)), name


@pytest.mark.parametrize("path", _readable())
def test_the_reader_keeps_the_contract_analysis_and_views_read(path, opened):
    """readers.contract: what the fakes of tests/fakes.py are checked against is what the reader gives."""
    from nsight_magic.readers.contract import FRAME_COLUMNS, NsysTables, missing_columns

    rep = opened(path)
    assert isinstance(rep, NsysTables)
    assert {f: missing_columns(f, getattr(rep, f)) for f in FRAME_COLUMNS} == {f: [] for f in FRAME_COLUMNS}


def test_versioned_and_renamed_tables_are_found(tmp_path):
    """Newer exports suffix some tables (NVTX_EVENTS_V3); the unversioned one wins when both exist."""
    _need_fixtures()
    p = tmp_path / "renamed.sqlite"
    shutil.copy(FIXTURES / "h100-2025.3" / "a_cuda_nvtx.sqlite", p)
    with open_nsys_report(p) as rep:
        n_nvtx, gpu = len(rep.nvtx), rep.gpus["name"].iloc[0]
    con = sqlite3.connect(p)
    con.execute("ALTER TABLE NVTX_EVENTS RENAME TO NVTX_EVENTS_V3")
    con.execute("ALTER TABLE TARGET_INFO_GPU RENAME TO TARGET_INFO_CUDA_GPU")
    con.execute("ALTER TABLE META_DATA_EXPORT RENAME TO EXPORT_META_DATA")
    con.commit()
    with open_nsys_report(p) as rep:
        assert len(rep.nvtx) == n_nvtx and rep.gpus["name"].iloc[0] == gpu
        assert rep.meta.nsys_version.startswith("2025.3")
    con.execute("CREATE TABLE NVTX_EVENTS AS SELECT * FROM NVTX_EVENTS_V3 LIMIT 3")
    con.commit()
    con.close()
    with open_nsys_report(p) as rep:
        assert len(rep.nvtx) <= 3


def test_old_schema_decodes_names_enums_and_gpus_without_enum_tables():
    _need_fixtures()
    rep = open_nsys_report(FIXTURES / "public-sqlite" / "beast_report2.sqlite")  # nsys 2020.3: no ENUM tables
    assert rep.meta.nsys_version is None
    assert set(rep.memcpy["kind"].unique()) <= {"HtoD", "DtoH", "DtoD", "HtoH", "PtoP"}
    assert {"pageable", "device"} & set(rep.memcpy["src_kind"].astype(str))
    assert rep.kernels["name"].notna().all() and rep.kernels["name"].str.len().min() > 0
    assert len(rep.gpus) == 2 and rep.gpus["name"].str.contains("V100").all()
    assert rep.gpus["sm_count"].notna().all()


def test_launch_tid_joins_per_process_correlation_ids():
    _need_fixtures()
    rep = open_nsys_report(FIXTURES / "public-sqlite" / "nsysai_mfu_2gpu_before.sqlite")
    k, api = rep.kernels, rep.cuda_api
    assert k["pid"].nunique() == 2 and k["device_id"].nunique() == 2
    # correlation ids repeat across the two processes, so the join key must include the pid
    both = set(k[k.pid == k.pid.unique()[0]].correlation_id) & set(k[k.pid == k.pid.unique()[1]].correlation_id)
    assert both
    m = k.merge(api[["pid", "tid", "correlation_id"]], on=["pid", "correlation_id"], how="left")
    assert m["launch_tid"].notna().mean() > 0.99
    assert (m["launch_tid"].dropna() == m["tid"][m["launch_tid"].notna()]).all()
    assert set(rep.gpus["id"]) == set(k["device_id"])  # 2026 export without GPU info: ids from activity


def test_memcpy_kinds_of_the_h100_workload(opened):
    """The demo workload copies host-to-device from pageable memory on even steps and pinned on odd ones."""
    _need_fixtures()
    mc = opened(FIXTURES / "h100-2025.3" / "a_cuda_nvtx.sqlite").memcpy
    htod = mc[mc["kind"] == "HtoD"]
    assert {"pageable", "pinned"} <= set(htod["src_kind"].astype(str))
    assert set(htod["dst_kind"].astype(str)) == {"device"}
    assert (mc["bytes"] > 0).all() and mc["correlation_id"].notna().all()


def test_gpu_utilization_has_rows_per_gpu_on_a_two_gpu_trace(opened):
    _need_fixtures()
    rep = opened(FIXTURES / "public-sqlite" / "nsysai_h100_2gpu_1s.sqlite")
    u = rep.gpu_utilization(bins=20)
    assert sorted(u["device_id"].unique()) == sorted(rep.kernels["device_id"].unique()) and len(u) == 20 * 2
    assert (u.groupby("device_id")["busy_fraction"].max() > 0).all()


def test_nvtx_registered_strings_and_domains():
    _need_fixtures()
    rep = open_nsys_report(FIXTURES / "public-sqlite" / "nsightful_power_iteration__baseline.sqlite")
    nv = rep.nvtx
    con = sqlite3.connect(f"file:{rep.sqlite_path}?mode=ro", uri=True)
    n_textid = con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE textId IS NOT NULL AND eventType IN (59,60)")
    assert n_textid.fetchone()[0] > 0 and nv["name"].notna().all()
    # CCCL's ranges live in their own domain (one domain-create event names it)
    cccl = nv[nv["domain"] == "CCCL"]
    assert len(cccl) and cccl["name"].astype(str).str.startswith("cub::").all()
    assert "CCCL:cub::DeviceReduce::Sum" in set(rep.nvtx_summary()["name"])
    assert "CCCL:cub::DeviceReduce::Sum" in set(rep.nvtx_summary()["range"])  # named domains: the same label
    # the public label column names each range as the summary does
    assert set(rep.nvtx_summary()["name"]) <= set(nv.loc[nv["kind"] != "mark", "label"].astype(str))
    assert (cccl["label"].astype(str) == "CCCL:" + cccl["name"].astype(str)).all()
    plain = nv[nv["domain"].isna()]
    assert (plain["label"].astype(str) == plain["name"].astype(str)).all()
    rep.close()


def test_ranges_never_closed_last_until_the_last_nvtx_timestamp(tmp_path):
    """A capture stopped (--timeout) inside its ranges leaves every end NULL: durations run to the last start."""
    p = tmp_path / "unclosed.sqlite"
    shutil.copy(DATA / "nsys_h100_a_cuda_nvtx.sqlite", p)
    con = sqlite3.connect(p)
    with con:
        con.execute('UPDATE NVTX_EVENTS SET "end" = NULL')
    last = con.execute("SELECT max(start) FROM NVTX_EVENTS").fetchone()[0]
    con.close()
    rep = open_nsys_report(p)
    nv = rep.nvtx
    ranges = nv[nv["kind"] != "mark"]
    assert len(ranges) and ranges["end_ns"].isna().all()
    s = rep.nvtx_summary()
    assert len(s) and (s[["total_ns", "min_ns", "max_ns"]] >= 0).all().all()
    assert s["max_ns"].max() == last - ranges["start_ns"].min()
    proj = rep.nvtx_gpu_projection()
    assert (proj["duration_ns"] >= 0).all()
    rep.close()


# -- summaries equal nsys stats ------------------------------------------------------------------------------

def _grid(s):
    return tuple(int(x) for x in str(s).split())


@pytest.mark.parametrize("path", _readable())
def test_kernel_summary_equals_nsys_stats(path, opened):
    ref = nsys_stats("gpukernsum", path)
    ours = opened(path).kernel_summary(by_launch=True)
    if ref is None:
        assert ours.empty
        return
    ref_keys = [(n, _grid(g), _grid(b)) for n, g, b in zip(ref["Name"], ref["GridXYZ"], ref["BlockXYZ"])]
    our_keys = [(n, _grid(g), _grid(b)) for n, g, b in zip(ours["name"], ours["grid"], ours["block"])]
    ours.index = pd.MultiIndex.from_tuples(our_keys)
    ref.index = pd.MultiIndex.from_tuples(ref_keys)
    assert sorted(our_keys) == sorted(ref_keys)
    ours = ours.loc[ref.index]
    assert (ours["count"].to_numpy() == ref["Instances"].to_numpy()).all()
    for a, b in (("total_ns", "Total Time (ns)"), ("min_ns", "Min (ns)"), ("max_ns", "Max (ns)")):
        assert (ours[a].to_numpy() == ref[b].to_numpy()).all(), a
    for a, b in (("avg_ns", "Avg (ns)"), ("med_ns", "Med (ns)"), ("std_ns", "StdDev (ns)"), ("pct", "Time (%)")):
        assert _close(ours[a], ref[b]), a
    # the default (per name, like cuda_gpu_kern_sum of nsys 2023+) folds the launch shapes together
    by_name = opened(path).kernel_summary().set_index("name")
    g = ref.groupby("Name").agg(n=("Instances", "sum"), total=("Total Time (ns)", "sum"),
                                lo=("Min (ns)", "min"), hi=("Max (ns)", "max"))
    assert sorted(by_name.index) == sorted(g.index)
    b = by_name.loc[g.index]
    assert (b["count"].to_numpy() == g["n"].to_numpy()).all() and (b["total_ns"].to_numpy() == g["total"].to_numpy()).all()
    assert (b["min_ns"].to_numpy() == g["lo"].to_numpy()).all() and (b["max_ns"].to_numpy() == g["hi"].to_numpy()).all()


def test_kernel_summary_by_name_sums_the_launch_shapes(opened):
    _need_fixtures()
    rep = opened(FIXTURES / "h100-2025.3" / "a_cuda_nvtx.sqlite")
    by_name, by_launch = rep.kernel_summary(), rep.kernel_summary(by_launch=True)
    assert by_name["name"].is_unique and len(by_launch) >= len(by_name)
    assert by_name["total_ns"].sum() == by_launch["total_ns"].sum() == rep.kernels["duration_ns"].sum()
    assert abs(by_name["pct"].sum() - 100) < 1e-6
    base = rep.kernel_summary(base=True)
    assert set(base["name"]) == set(rep.kernels["short_name"])


@pytest.mark.parametrize("path", _readable())
def test_memcpy_summary_equals_nsys_stats(path, opened):
    t = nsys_stats("gpumemtimesum", path)
    s = nsys_stats("gpumemsizesum", path, fmt="csv:mem=B")
    ours = opened(path).memcpy_summary()
    if t is None:
        assert ours.empty
        return
    # the numbers of any version; labels as 2022.4 prints them (our stable kind -> its label)
    from nsight_magic.readers.nsys_labels import memcpy_operations

    ours = ours.set_index(memcpy_operations(ours["kind"], "2022.4"))
    assert sorted(ours.index) == sorted(t["Operation"])
    o = ours.loc[t["Operation"]]
    assert (o["count"].to_numpy() == t["Count"].to_numpy()).all()
    assert (o["total_ns"].to_numpy() == t["Total Time (ns)"].to_numpy()).all()
    assert (o["min_ns"].to_numpy() == t["Min (ns)"].to_numpy()).all()
    for a, b in (("avg_ns", "Avg (ns)"), ("med_ns", "Med (ns)"), ("std_ns", "StdDev (ns)"), ("pct", "Time (%)")):
        assert _close(o[a], t[b]), a
    o = ours.loc[s["Operation"]]
    assert (o["total_bytes"].to_numpy() == s["Total (B)"].to_numpy()).all()
    assert (o["max_bytes"].to_numpy() == s["Max (B)"].to_numpy()).all()
    for a, b in (("avg_bytes", "Avg (B)"), ("med_bytes", "Med (B)"), ("std_bytes", "StdDev (B)")):
        assert _close(o[a], s[b], tol=1e-6), a


@pytest.mark.parametrize("path", _readable())
def test_cuda_api_summary_equals_nsys_stats(path, opened):
    ref = nsys_stats("cudaapisum", path)
    ours = opened(path).cuda_api_summary()
    if ref is None:
        assert ours.empty
        return
    assert sorted(ours["name"]) == sorted(ref["Name"])
    o = ours.set_index("name").loc[ref["Name"]]
    assert (o["count"].to_numpy() == ref["Num Calls"].to_numpy()).all()
    assert (o["total_ns"].to_numpy() == ref["Total Time (ns)"].to_numpy()).all()
    assert (o["max_ns"].to_numpy() == ref["Max (ns)"].to_numpy()).all()
    for a, b in (("avg_ns", "Avg (ns)"), ("med_ns", "Med (ns)"), ("std_ns", "StdDev (ns)"), ("pct", "Time (%)")):
        assert _close(o[a], ref[b]), a


@pytest.mark.parametrize("path", _readable())
def test_nvtx_summary_equals_nsys_stats(path, opened):
    ref = nsys_stats("nvtxsum", path)
    ours = opened(path).nvtx_summary()
    if ref is None:
        assert ours.empty
        return
    ref_keys = list(zip(ref["Range"].astype(str), ref["Style"]))
    ours.index = pd.MultiIndex.from_arrays([ours["name"].astype(str), ours["style"]])
    assert sorted(ours.index) == sorted(ref_keys)
    o = ours.loc[ref_keys]
    assert (o["count"].to_numpy() == ref["Instances"].to_numpy()).all()
    assert (o["total_ns"].to_numpy() == ref["Total Time (ns)"].to_numpy()).all()
    assert (o["min_ns"].to_numpy() == ref["Min (ns)"].to_numpy()).all()
    for a, b in (("avg_ns", "Avg (ns)"), ("med_ns", "Med (ns)"), ("std_ns", "StdDev (ns)"), ("pct", "Time (%)")):
        assert _close(o[a], ref[b]), a


# nsys stats nvtxgpuproj took 56 s on 19k ranges (nsysai_mfu), 10.5 s on 4.6k, 15.7 s on its first 5,000 in the
# suite: its first 2,000 (the pytest budget)
PROJECTION_MAX_RANGES = 2_000


def _first_ranges(path: Path, tmp_path: Path, keep: int = PROJECTION_MAX_RANGES) -> Path:
    """The report itself, or, past `keep` NVTX ranges, a copy holding only its first ranges in time (everything
    else kept): both tools then project the same ranges, in a tenth of the reference's time."""
    from nsight_magic.readers import nsys_schema as S

    kinds = ", ".join(str(k) for k in S.NVTX_PUSH_POP + S.NVTX_START_END)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        has = con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'NVTX_EVENTS'").fetchone()
        # the keep-th range's start, and whether one follows it
        cut = con.execute(f"SELECT start FROM NVTX_EVENTS WHERE eventType IN ({kinds}) ORDER BY start "
                          "LIMIT 2 OFFSET ?", (keep - 1,)).fetchall() if has else []
    finally:
        con.close()
    if len(cut) < 2:
        return path
    copy = tmp_path / path.name
    shutil.copyfile(path, copy)
    con = sqlite3.connect(copy)
    with con:
        con.execute(f"DELETE FROM NVTX_EVENTS WHERE eventType IN ({kinds}) AND start > ?", (cut[0][0],))
    con.close()
    return copy


@pytest.mark.parametrize("path", _readable())
def test_nvtx_gpu_projection_equals_nsys_stats(path, tmp_path):
    path = _first_ranges(path, tmp_path)
    ref = nsys_stats("nvtxgpuproj", path)
    with open_nsys_report(path) as rep:
        ours = rep.nvtx_gpu_projection()
        if ref is None:
            assert ours.empty
            return
        key = lambda n, s, ps, pd_, ops: (str(n), int(s), int(ps), int(pd_), int(ops))  # noqa: E731
        r = sorted(map(key, ref["Name"], ref["Orig Start (ns)"], ref["Projected Start (ns)"],
                       ref["Projected Duration (ns)"], ref["NumGPUOps"]))
        o = sorted(map(key, ours["name"], ours["start_ns"], ours["proj_start_ns"], ours["proj_duration_ns"],
                       ours["gpu_ops"]))
        assert o == r
        s = rep.nvtx_summary().set_index(["name", "style"])
        g = ours.groupby(["name", "style"])["proj_duration_ns"].sum()
        assert (s.loc[g.index, "gpu_ns"].to_numpy() == g.to_numpy()).all()


def test_gpu_utilization_is_the_busy_share_of_each_bin(opened):
    _need_fixtures()
    rep = opened(FIXTURES / "h100-2025.3" / "a_cuda_nvtx.sqlite")
    u = rep.gpu_utilization(bins=50)
    assert len(u) == 50 and set(u["device_id"]) == {0}
    assert ((u["busy_fraction"] >= 0) & (u["busy_fraction"] <= 1 + 1e-12)).all()
    width = (u["bin_end_ns"] - u["bin_start_ns"]).to_numpy()
    busy = (u["busy_fraction"] * width).sum()
    ops = pd.concat([rep.kernels, rep.memcpy, rep.memset])[["start_ns", "end_ns"]].sort_values("start_ns")
    # union length computed independently by a plain sweep
    union, cur_s, cur_e = 0, None, None
    for s, e in ops.itertuples(index=False):
        if cur_e is None or s > cur_e:
            union += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    union += cur_e - cur_s
    assert abs(busy - union) < 1e-3 * union


# -- .nsys-rep / .qdrep -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["beast_report2.qdrep", "mordred_report1.qdrep"])
def test_old_qdrep_is_exported_with_the_installed_nsys(name, tmp_path):
    _need_fixtures()
    if NSYS is None:
        pytest.skip("nsys is not installed")
    src = tmp_path / name
    shutil.copy(FIXTURES / "public-rep" / name, src)  # the export is cached beside the report
    rep = open_report(src)
    assert rep.sqlite_path == src.with_suffix(".sqlite") and rep.path == src
    ref = open_nsys_report(FIXTURES / "public-sqlite" / src.with_suffix(".sqlite").name)
    assert len(rep.kernels) == len(ref.kernels) > 0
    assert rep.kernel_summary()["total_ns"].sum() == ref.kernel_summary()["total_ns"].sum()
    mtime = rep.sqlite_path.stat().st_mtime_ns
    rep.close()
    open_report(src).close()  # second open reuses the cached export
    assert rep.sqlite_path.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("name,version", [("cs336half_report1.nsys-rep", "2026.1.2"),
                                          ("pycnv_report1.nsys-rep", "2023.4.1"),
                                          ("cudatut_report1.nsys-rep", "2023.3.3"),
                                          ("p4arth_report1.nsys-rep", "2025.5.2")])
def test_report_too_new_for_nsys_says_which_version_it_needs(name, version, tmp_path):
    _need_fixtures()
    if NSYS is None:
        pytest.skip("nsys is not installed")
    src = tmp_path / name
    shutil.copy(FIXTURES / "public-rep" / name, src)
    with pytest.raises(ReportError) as e:
        open_report(src)
    msg = str(e.value)
    assert "\n" not in msg and version in msg and "too old" in msg, msg
    assert not list(tmp_path.glob("*.sqlite")), "a failed export must not leave a file behind"


# -- a CPU report recorded here with the real nsys ----------------------------------------------------------

NVTX_SCRIPT = """
import time, nvtx
with nvtx.annotate("outer", color="red"):
    time.sleep(0.01)
    with nvtx.annotate("inner", color="blue"):
        time.sleep(0.01)
        with nvtx.annotate("leaf"):
            time.sleep(0.005)
    with nvtx.annotate("inner"):
        time.sleep(0.005)
    nvtx.mark("checkpoint")
"""


def record_cpu_report(folder: Path, script: str, trace: str = "nvtx,osrt") -> Path:
    """nsys profile (CPU only) -> QdstrmImporter when nsys could not import -> nsys export; returns .sqlite."""
    if NSYS is None:
        pytest.skip("nsys is not installed")
    from nsight_magic import tools

    (folder / "script.py").write_text(script)
    out = folder / "rec"
    # in its own namespace with a private /dev/shm, as %%nsys runs nsys: two raw runs at once (pytest-xdist) can
    # break nsys's shared files in the machine's /dev/shm, and every later run there with them ("Agent launcher
    # failed")
    argv, _ = tools.isolated_argv([NSYS, "profile", "-t", trace, "-s", "none", "--cpuctxsw=none", "-o", str(out),
                                   sys.executable, str(folder / "script.py")], kernel_symbols=False)
    rep = out.with_suffix(".nsys-rep")
    for _ in range(2):  # nsys 2022.4 sometimes fails at start-up, writing nothing (as %%nsys, once more then)
        r = run_bounded(argv, timeout=120)
        if rep.exists() or out.with_suffix(".qdstrm").exists():
            break
    if not rep.exists():
        qd = out.with_suffix(".qdstrm")
        assert qd.exists(), f"nsys profile left neither .nsys-rep nor .qdstrm: {r.stderr[-300:]}"
        tools.import_qdstrm(qd, NSYS, timeout=120)
    return rep


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory):
    return record_cpu_report(tmp_path_factory.mktemp("cpu"), NVTX_SCRIPT)


def test_recorded_cpu_report_has_nested_nvtx_ranges(cpu_report):
    rep = open_report(cpu_report)  # .nsys-rep: exported by the reader
    nv = rep.nvtx
    ranges = nv[nv["kind"] == "push_pop"].reset_index(drop=True)
    assert list(ranges["name"]) == ["outer", "inner", "leaf", "inner"]
    assert list(ranges["depth"]) == [0, 1, 2, 1]
    assert ranges["pid"].nunique() == 1 and ranges["tid"].nunique() == 1
    assert ranges["pid"].iloc[0] > 0 and ranges["tid"].iloc[0] == ranges["pid"].iloc[0]  # main thread
    assert ranges["end_ns"].notna().all() and (ranges["duration_ns"] >= 5_000_000).all()
    marks = nv[nv["kind"] == "mark"]
    assert list(marks["name"]) == ["checkpoint"] and marks["end_ns"].isna().all()
    assert int(ranges["color"].iloc[0]) & 0xFFFFFF == 0xFF0000  # ARGB integer
    assert ranges["tid"].iloc[0] in set(rep.threads["tid"])
    assert len(rep.osrt) > 0 and rep.kernels.empty and rep.kernel_summary().empty
    s = rep.nvtx_summary().set_index("name")
    assert s.loc["inner", "count"] == 2 and (s["gpu_ns"] == 0).all()
    ref = nsys_stats("nvtxsum", rep.sqlite_path)
    assert dict(zip(ref["Range"], ref["Total Time (ns)"])) == dict(zip(s.index, s["total_ns"]))
    rep.close()


# -- bad input ---------------------------------------------------------------------------------------------

def _one_line_error(path, match):
    with pytest.raises(ReportError, match=match) as e:
        open_report(path)
    assert "\n" not in str(e.value)
    assert str(path.name) in str(e.value)


def test_missing_file(tmp_path):
    _one_line_error(tmp_path / "nope.sqlite", "no such file")


def test_not_an_sqlite_file(tmp_path):
    p = tmp_path / "notes.sqlite"
    p.write_text("hello, this is text\n" * 10)
    _one_line_error(p, "not an SQLite file")


def test_empty_file(tmp_path):
    p = tmp_path / "zero.sqlite"
    p.write_bytes(b"")
    _one_line_error(p, "empty file")


def test_sqlite_from_another_program(tmp_path):
    p = tmp_path / "other.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    con.execute("INSERT INTO users VALUES (1, 'a')")
    con.commit()
    con.close()
    _one_line_error(p, "not an Nsight Systems export")


def test_truncated_export_from_a_public_repository():
    _need_fixtures()
    _one_line_error(FIXTURES / "public-sqlite" / "cardiac_report1_PARTIAL.sqlite", "incomplete")


def test_file_cut_in_the_middle(tmp_path):
    _need_fixtures()
    src = FIXTURES / "h100-2025.3" / "a_cuda_nvtx.sqlite"
    p = tmp_path / "cut.sqlite"
    p.write_bytes(src.read_bytes()[: src.stat().st_size // 3])
    with pytest.raises(ReportError) as e:
        rep = open_report(p)
        for name in FRAMES:
            getattr(rep, name)
    assert "\n" not in str(e.value) and "cut.sqlite" in str(e.value)


def test_empty_capture(tmp_path):
    rep = record_cpu_report(tmp_path, "pass\n", trace="nvtx")
    _one_line_error(rep, "empty capture")


def test_committed_h100_exports_open():
    files = sorted(DATA.glob("*.sqlite"))
    if not files:
        pytest.skip("no committed exports")
    for p in files:
        with open_nsys_report(p) as rep:
            assert len(rep.kernels) > 0 and rep.kernels["launch_tid"].notna().all()


def test_sqlite_with_string_ids_but_no_thread_names_names_what_is_missing(tmp_path):
    p = tmp_path / "strings-only.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.commit()
    con.close()
    with pytest.raises(ReportError) as e:
        open_report(p)
    msg = str(e.value)
    assert "none of ThreadNames" in msg and "StringIds among them" in msg and "no StringIds" not in msg
    assert "nsys export --type sqlite" in msg and p.name in msg and "\n" not in msg


# -- the columnar cache and the two read paths ------------------------------------------------------------------

SUMMARIES = ("kernel_summary", "memcpy_summary", "cuda_api_summary", "nvtx_summary", "nvtx_gpu_projection")


def _everything(rep):
    return [getattr(rep, s)() for s in SUMMARIES] + [rep.nvtx, rep.kernels]


def test_columnar_cache_gives_the_same_frames_and_is_dropped_when_the_export_changes(tmp_path):
    p = tmp_path / "report.sqlite"
    shutil.copy(DATA / "nsys_h100_a_cuda_nvtx.sqlite", p)
    with open_nsys_report(p) as rep:
        assert not rep.cached
        expected, meta = _everything(rep), rep.meta
        assert rep.write_cache() == tmp_path / "report.nsight-cache"
    with open_nsys_report(p) as rep:
        assert rep.cached and rep.meta == meta  # the events' span comes from the cache too
        # each cached column made into an array when first asked for: the open made none of the NVTX ones nor
        # the kernels' names (a reopen that shows a kept page reads none)
        assert rep.nvtx_arrays.made() == [] and "name" not in rep.core("kernels").made()
        for a, b in zip(_everything(rep), expected):
            pd.testing.assert_frame_equal(a, b)
        assert "name" in rep.nvtx_arrays.made()
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))  # copied or unpacked: another time,
    with open_nsys_report(p) as rep:                                       # the same content
        assert rep.cached
    folder = (tmp_path / "report.nsight-cache").stat().st_ino
    with open_nsys_report(p) as rep:  # written again (a second kernel finishing the same profile): kept as it is
        assert rep.write_cache() == tmp_path / "report.nsight-cache"
    assert (tmp_path / "report.nsight-cache").stat().st_ino == folder
    with sqlite3.connect(p) as db:  # a write to the export (its file change counter moves): the cache is not it
        db.execute("CREATE TABLE touched (x)")
    db.close()
    with open_nsys_report(p) as rep:
        assert not rep.cached
    (tmp_path / "report.nsight-cache" / "key.json").write_text("{not json")
    with open_nsys_report(p) as rep:
        assert not rep.cached and len(rep.kernel_summary())


@pytest.mark.parametrize("cached", [False, True], ids=["read", "cached"])
def test_the_frames_share_the_summaries_columns_and_an_edit_of_a_frame_copies(tmp_path, cached):
    """The kernels' and CUDA calls' frames hold the core columns the summaries read (no second copy: 107 MB at 1M
    kernels); a user's edit of such a frame changes that frame only, never the summaries or the cache."""
    p = tmp_path / "report.sqlite"
    shutil.copy(DATA / "nsys_h100_a_cuda_nvtx.sqlite", p)
    with open_nsys_report(p) as rep:
        expected = [rep.kernel_summary(), rep.cuda_api_summary()]
        if cached:
            rep.write_cache()
    with open_nsys_report(p) as rep:
        assert rep.cached == cached
        for frame in ("kernels", "cuda_api"):
            core = rep.core(frame)
            before = {c: np.array(core[c]) for c in ("start_ns", "end_ns", "correlation_id")}
            few = rep.columns(frame, ["start_ns", "correlation_id"])  # what the analysis reads before the frame
            assert np.shares_memory(few["start_ns"].to_numpy(), np.asarray(core["start_ns"]))
            few.loc[1, "start_ns"] = -9
            df = getattr(rep, frame)
            for c in before:
                assert np.shares_memory(df[c].to_numpy(), np.asarray(core[c])), (frame, c)
            df.loc[0, "start_ns"] = -5
            df.loc[:, "correlation_id"] = 7
            df["end_ns"] += 1
            assert df["start_ns"].iloc[0] == -5 and (df["correlation_id"] == 7).all()
            assert df["start_ns"].iloc[1] == before["start_ns"][1] and few["start_ns"].iloc[1] == -9
            for c, was in before.items():
                np.testing.assert_array_equal(np.asarray(rep.core(frame)[c]), was, err_msg=f"{frame}.{c}")
        for a, b in zip([rep.kernel_summary(), rep.cuda_api_summary()], expected):
            pd.testing.assert_frame_equal(a, b)
        if not cached:  # the cache written after the edits holds the report's columns
            rep.write_cache()
    if not cached:
        with open_nsys_report(p) as rep:
            assert rep.cached
            for a, b in zip([rep.kernel_summary(), rep.cuda_api_summary()], expected):
                pd.testing.assert_frame_equal(a, b)


@pytest.mark.parametrize("cached", [False, True], ids=["read", "cached"])
def test_a_column_of_one_value_is_held_once_and_reads_and_edits_as_before(tmp_path, cached):
    """A one-GPU run's process, GPU and context columns (and graph node ids never set) hold their value once (a
    zero-stride array: 80 MB a column at 10M kernels); they read as SQLite has them, and an edit copies (read from
    the export or from the columnar cache beside it)."""
    from nsight_magic.readers.constant_columns import compacted, constant

    a = np.arange(5)
    signed = np.array([0.0, -0.0])
    assert compacted(a) is a and compacted(signed) is signed  # floats as they are: -0.0 == 0.0, NaN != NaN
    one = compacted(np.full(4, 7))
    assert one.strides == (0,) and list(one) == [7] * 4 and not one.flags.writeable
    assert constant(True, 3).dtype == bool and compacted(np.array(["a", "a"], object)).strides == (8,)
    p = tmp_path / "report.sqlite"
    shutil.copy(DATA / "nsys_h100_a_cuda_nvtx.sqlite", p)
    with sqlite3.connect(p) as db:
        raw = pd.read_sql('SELECT contextId, graphNodeId, start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start', db)
    db.close()
    assert raw["contextId"].nunique() == 1 and raw["graphNodeId"].isna().all()
    if cached:
        with open_nsys_report(p) as rep:
            rep.write_cache()
    with open_nsys_report(p) as rep:
        assert rep.cached == cached
        k = rep.kernels
        for c in ("pid", "device_id"):
            assert k[c].to_numpy().strides == (0,), c
        for c in ("context_id", "graph_node_id"):
            arr = k[c].array
            assert arr._data.strides == (0,) and arr._mask.strides == (0,), c
        np.testing.assert_array_equal(k["context_id"].to_numpy(np.int64), raw["contextId"].to_numpy(np.int64))
        assert k["graph_node_id"].isna().all() and k["grid_x"].nunique() > 1 and k["grid_x"].to_numpy().strides == (8,)
        k.loc[0, "context_id"] = 99
        k.loc[1, "pid"] = 7
        assert k["context_id"].iloc[0] == 99 and (k["context_id"].iloc[1:] == raw["contextId"].iloc[0]).all()
        assert k["pid"].iloc[1] == 7 and k["pid"].nunique() == 2
        assert rep.core("kernels")["pid"][1] != 7 and rep.kernel_summary()["count"].sum() == len(k)


def test_text_and_arrow_read_paths_agree(monkeypatch):
    """ADBC's Arrow path and the group_concat text path (used when ADBC is missing or cannot type a column)."""
    from nsight_magic.readers import nsys_sql

    path = DATA / "nsys_h100_a_cuda_nvtx.sqlite"
    with open_nsys_report(path) as rep:
        arrow = _everything(rep)
    calls = []
    monkeypatch.setattr(nsys_sql, "_read_ints_adbc", lambda *a: calls.append(a) or None)
    with open_nsys_report(path) as rep:
        text = _everything(rep)
    assert calls  # the fast path was asked and declined
    for a, b in zip(arrow, text):
        pd.testing.assert_frame_equal(a, b)


def test_arrow_path_declines_a_column_it_cannot_type(tmp_path):
    from nsight_magic.readers.nsys_sql import _read_ints_adbc

    p = tmp_path / "mixed.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE t (a INTEGER)")
    con.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(2000)] + [("text",)])
    con.commit()
    con.close()
    con = sqlite3.connect(p)
    assert _read_ints_adbc(con, p, "t", ["a"], None) is None
    assert list(_read_ints_adbc(con, p, "t", ["a"], "rowid <= 3")[0]) == [0, 1, 2]
    con.close()


def test_arrow_path_reads_a_big_table_in_parts_as_in_one(tmp_path, monkeypatch):
    """Big tables are read in rowid ranges over several connections at once: the same rows in the same order as
    one read (gaps in the rowids, a WHERE that drops rows, NULLs), and a text value in any part still declines."""
    from nsight_magic.readers import nsys_sql

    p = tmp_path / "big.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE t (a INTEGER, b INTEGER)")
    rows = [(i * 7, None if i % 5 == 0 else -i) for i in range(5000)]
    con.executemany("INSERT INTO t VALUES (?, ?)", rows)
    con.execute("DELETE FROM t WHERE rowid BETWEEN 1000 AND 1999")  # a hole: parts of unequal size
    con.commit()
    whole = nsys_sql._read_ints_adbc(con, p, "t", ['"a"', '"b"', '"a" - "b"'], "a % 3 != 0")
    monkeypatch.setattr(nsys_sql, "PARALLEL_MIN_ROWS", 100)
    monkeypatch.setattr(nsys_sql.os, "sched_getaffinity", lambda pid: set(range(4)), raising=False)
    parts = nsys_sql._read_ints_adbc(con, p, "t", ['"a"', '"b"', '"a" - "b"'], "a % 3 != 0")
    text = nsys_sql.read_ints(con, "t", ['"a"', '"b"', '"a" - "b"'], "a % 3 != 0")  # the text path
    expect = [r for i, r in enumerate(rows) if not 999 <= i <= 1998 and r[0] % 3]
    assert len(parts[0]) == len(expect) and list(parts[0]) == [r[0] for r in expect]
    for w, q, t in zip(whole, parts, text):
        assert np.array_equal(w, q) and np.array_equal(q, t)
    con.execute("UPDATE t SET a = 'text' WHERE rowid = 4990")  # in the last part only
    con.commit()
    assert nsys_sql._read_ints_adbc(con, p, "t", ['"a"'], None) is None
    con.close()


def test_frames_read_after_the_summaries_reuse_their_columns(monkeypatch):
    """The kernel and CUDA API frames take the columns the summaries read already (start, end, pid, correlation
    id, name) instead of reading them again, and equal frames read alone."""
    from nsight_magic.readers import nsys_sql

    path = DATA / "nsys_h100_a_cuda_nvtx.sqlite"
    with open_nsys_report(path) as rep:
        alone = [rep.kernels, rep.cuda_api]
    read = []
    real = nsys_sql._read_ints_adbc
    monkeypatch.setattr(nsys_sql, "_read_ints_adbc", lambda con, p, table, exprs, where: (
        read.append((table, exprs)) or real(con, p, table, exprs, where)))
    with open_nsys_report(path) as rep:
        rep.kernel_summary(), rep.cuda_api_summary()  # (the core tables are read in threads: wait for both)
        read.clear()
        after = [rep.kernels, rep.cuda_api]
    for a, b in zip(alone, after):
        pd.testing.assert_frame_equal(a, b)
    again = [exprs for table, exprs in read if table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME")]
    assert again and not any('"start"' in e or '"correlationId"' in e for e in again), read


def test_a_warm_session_recording_is_framed_by_the_cell_range():
    """A cell recorded by nsys start/stop in a warm session (H100): capture bounds on the session's clock and OS
    calls that began 27 s before the recording; the capture is the cell, and the timeline opens on it."""
    from nsight_magic.views.timeline_prepare import prepare_timeline

    path = Path(__file__).parent / "data" / "warm_cell_h100.sqlite"
    with open_nsys_report(path) as rep:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        (a, b), = con.execute("SELECT startTime, stopTime FROM ANALYSIS_DETAILS").fetchall()
        first_osrt, = con.execute('SELECT min(start) FROM OSRT_API WHERE "end" > start').fetchone()
        con.close()
        k0, k1 = rep.kernels["start_ns"].min(), rep.kernels["end_ns"].max()
        assert b < k0 or a > k1  # the recorded bounds miss every kernel: another clock
        assert first_osrt < k0 - 10**10  # an OS call that began >10 s before the cell
        c0, c1 = rep.cell_range
        assert rep.meta.span_source == "cell range"
        assert (rep.meta.start_ns, rep.meta.end_ns) == (c0, c1)
        assert c0 <= k0 and len(rep.kernels) == 3000
        assert rep.meta.duration_ns < 10**9  # the cell took ~0.13 s, not the 27 s since that OS call
        data = prepare_timeline(rep)
        assert data.origin_ns == c0 and data.first_ns == 0 and data.last_ns < 10**9


def test_a_table_that_changes_between_the_summaries_and_the_frames_is_a_clear_error(tmp_path):
    """The frames reuse the columns the summaries read: if the export changed on disk in between (rows added), the
    frame says so instead of pairing columns of two different tables."""
    p = tmp_path / "report.sqlite"
    shutil.copy(DATA / "nsys_h100_a_cuda_nvtx.sqlite", p)
    with open_nsys_report(p) as rep:
        rep.kernel_summary(), rep.cuda_api_summary()
        con = sqlite3.connect(p)
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1")
        con.commit()
        con.close()
        with pytest.raises(ReportError, match="changed while it was read; open the report again"):
            rep.kernels


def test_the_nvtx_arrays_held_for_a_reports_life_stay_under_70_bytes_a_row():
    """build_nvtx's arrays live as long as the report (3.15M ranges: each int64 column is 24 MB): 62 bytes a row
    today (texts as codes, the kind in one byte; a row's thread and style made where asked for), so one more int64
    column fails."""
    d = open_report(DATA / "nsys_h100_a_cuda_nvtx.sqlite").data
    a = d.nvtx_arrays
    n = len(a["start"])
    assert n > 50
    assert a["kind"].dtype == np.int8 and "thread" not in a and "style" not in a
    assert all(isinstance(a[k], pd.Categorical) for k in ("name", "domain", "tag"))
    assert sum(v.nbytes for v in a.values()) / n < 70, {k: v.nbytes for k, v in a.items()}


@pytest.mark.parametrize("seed", range(4))
def test_texts_made_from_codes_equal_the_categorical_of_the_texts(seed):
    """build_nvtx makes its name, domain and label columns from codes (_by_text, _either_codes): the same categories
    in the same order (first seen), and the same missing rows, as to_categorical of the rows' texts."""
    from nsight_magic.readers.nsys_frames import _by_text, _either_codes
    from nsight_magic.readers.nsys_sql import to_categorical

    rng = np.random.default_rng(seed)
    texts = np.array(["a", "b", None, "a", np.nan, "c:d", "e"], dtype=object)  # repeats and both missing kinds
    codes = rng.integers(-1, len(texts), 500)
    want = to_categorical(np.array([texts[c] if c >= 0 else None for c in codes], dtype=object))
    got = _by_text(codes, texts)
    assert list(got.categories) == list(want.categories) and (np.asarray(got.codes) == np.asarray(want.codes)).all()
    first = pd.Series(pd.Categorical(rng.choice(["x", "y", None], 300)))
    second = pd.Series(pd.Categorical(rng.choice(["y", "z", None], 300)))
    rows = np.array([f if isinstance(f, str) else s for f, s in zip(first, second)], dtype=object)
    got = _by_text(*_either_codes(first, second))
    want = to_categorical(rows)
    assert list(got.categories) == list(want.categories) and (np.asarray(got.codes) == np.asarray(want.codes)).all()


def test_grouped_statistics_of_categorical_names_equal_those_of_their_texts():
    """The NVTX summary groups the reader's names as codes: the same groups, in the same order, with the same
    names (a missing name stays one group) as grouping their texts."""
    from nsight_magic.readers.nsys_frames import nvtx_texts
    from nsight_magic.readers.nsys_summary import grouped_stats

    rng = np.random.default_rng(3)
    names = pd.Categorical(rng.choice(["step", "fwd", None, "bwd"], 2000))
    durations = rng.integers(1, 10_000, 2000)
    a, ga = grouped_stats({"name": names}, durations, return_groups=True)
    b, gb = grouped_stats({"name": nvtx_texts(names)}, durations, return_groups=True)
    pd.testing.assert_frame_equal(a, b)
    assert (ga == gb).all()


@pytest.mark.parametrize("seed", range(5))
def test_nvtx_texts_given_in_distinct_parts_make_the_categorical_one_array_makes(seed):
    """build_nvtx's names and labels come as parts each distinct (registered strings, literal texts, domain labels)
    that may share texts: looked up in the largest part instead of hashed together, they give the categorical the
    concatenation gives (categories in the rows' order, alike texts one category, missing rows NaN)."""
    from nsight_magic.readers.nsys_frames import _by_text

    rng = np.random.default_rng(seed)
    pool = np.array([f"t{i}" for i in range(40)], dtype=object)
    parts = [pd.Index(rng.choice(pool, size=n, replace=False), dtype=object) for n in rng.integers(0, 30, size=3)]
    total = sum(len(p) for p in parts)
    codes = rng.integers(-1, max(total, 1), size=200) if total else np.full(200, -1)
    got = _by_text(codes, parts)
    want = _by_text(codes, np.concatenate([np.asarray(p, dtype=object) for p in parts]) if total
                    else np.empty(0, dtype=object))
    assert list(got.categories) == list(want.categories)
    assert np.array_equal(np.asarray(got.codes), np.asarray(want.codes))


@pytest.mark.parametrize("seed", range(4))
def test_the_nvtx_gpu_projection_of_two_threads_ranges_in_turn_is_what_each_range_launched(seed):
    """nvtx_projection against a range-by-range count: two threads (two ranks in one report) whose ranges come in
    turn, nested ones among them; a range projects the ops whose launching call lies within it, on its thread."""
    from nsight_magic.readers.nsys_summary import nvtx_projection, op_keys

    rng = np.random.default_rng(seed)
    calls = 400
    tid = rng.integers(1, 3, calls)
    c_start = np.arange(calls) * 250 + rng.integers(0, 100, calls)  # a thread's calls come one after another
    c_end = c_start + rng.integers(1, 50, calls)
    corr = np.arange(1, calls + 1)
    api = {"start_ns": c_start, "end_ns": c_end, "pid": np.full(calls, 7), "tid": tid, "correlation_id": corr}
    launched = rng.integers(0, calls, 600)  # each op's call; some calls launch several
    o_start = c_end[launched] + rng.integers(0, 500, 600)
    ops = {"start_ns": o_start, "end_ns": o_start + rng.integers(1, 300, 600),
           "key": op_keys(np.full(600, 7), corr[launched])}
    n = 300
    r_start = np.sort(rng.integers(0, 100_000, n))
    r_end = (r_start + rng.integers(10, 5_000, n)).astype(float)
    internal = {"is_range": np.ones(n, bool), "same_thread": np.ones(n, bool), "ours": np.zeros(n, bool),
                "start": r_start, "end": r_end, "pid": np.full(n, 7), "tid": np.tile([1, 2], n // 2)}
    got = nvtx_projection(internal, ops, api, None).set_index("row")
    for r in range(n):
        inside = (tid == internal["tid"][r]) & (c_start >= r_start[r]) & (c_start <= r_end[r]) & (c_end <= r_end[r])
        mine = inside[launched]
        if not mine.any():
            assert r not in got.index
            continue
        row = got.loc[r]
        assert row["proj_start_ns"] == ops["start_ns"][mine].min()
        assert row["proj_start_ns"] + row["proj_duration_ns"] == ops["end_ns"][mine].max()
        assert row["gpu_ops"] == len(np.unique(launched[mine]))


@pytest.mark.parametrize("shape", ["dense", "sparse", "unordered", "few", "one"])
def test_first_match_is_a_join_on_the_first_equal_key(shape):
    """FirstMatch (the joins on correlation ids): a binary search where the keys increase, a hash table where they
    do not: the same answer as a dict of first positions, for probes in and out of range, missing and NA (-1)."""
    from nsight_magic.readers.nsys_frames import FirstMatch

    rng = np.random.default_rng(7)
    n = {"few": 10, "one": 1}.get(shape, 5000)
    step = {"dense": (1, 3), "sparse": (1, 50)}.get(shape, (1, 3))
    keys = (np.int64(4321) << 36) ^ np.cumsum(rng.integers(*step, n)).astype(np.int64)
    if shape == "unordered":
        keys = rng.permutation(np.r_[keys, keys[:100]])  # repeated keys: the first position answers
    m = FirstMatch(keys)
    assert m.ordered == (shape != "unordered")
    first: dict[int, int] = {}
    for i, k in enumerate(keys.tolist()):
        first.setdefault(k, i)
    probe = np.r_[rng.choice(keys, 3000), keys.min() - 1, keys.max() + 1, keys + 1, -1, 0]
    expected = np.array([first.get(k, -1) for k in probe.tolist()])
    np.testing.assert_array_equal(m(probe), expected)
    np.testing.assert_array_equal(m(probe[:0]), expected[:0])
