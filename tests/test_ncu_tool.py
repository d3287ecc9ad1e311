"""ncu command lines: finding ncu, options, argv building/validation, CSV import and failure explanations.

Real-process tests use Debian's Nsight Compute 2022.3 (scripts/install-ncu-debian.sh): it cannot profile without a
GPU, but it runs our argv (so ncu itself checks every flag we build), prints the real "No kernels were profiled",
and imports reports to CSV."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import fixture_path, requires_ncu
from nsight_magic.errors import OptionError, ToolNotFound
from nsight_magic.tools.ncu import (NcuOptions, build_ncu_argv, count_limit_note, explain_ncu_failure, find_ncu,
                                   import_csvs, module_nvtx_filter, ncu_version, parse_ncu_version,
                                   validate_ncu_args)
from nsight_magic.readers.ncu import open_ncu_report



# ---- finding ncu ----------------------------------------------------------------------------------------

def test_env_var_pointing_nowhere_says_how_to_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("NSIGHT_MAGIC_NCU", str(tmp_path / "ncu"))
    with pytest.raises(ToolNotFound, match="NSIGHT_MAGIC_NCU=.* is not an executable file") as e:
        find_ncu()
    assert "install Nsight Compute" in str(e.value) and "\n" not in str(e.value)


def test_no_ncu_anywhere(monkeypatch, tmp_path):
    if Path("/usr/local/cuda/bin/ncu").exists() or list(Path("/opt/nvidia/nsight-compute").glob("*/ncu")):
        pytest.skip("an ncu is installed in a fixed location here")
    monkeypatch.delenv("NSIGHT_MAGIC_NCU", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolNotFound, match="ncu .*not found.*NSIGHT_MAGIC_NCU"):
        find_ncu()


@requires_ncu
def test_env_var_wins_over_path(monkeypatch, tmp_path):
    link = tmp_path / "my-ncu"
    link.symlink_to(shutil.which("ncu"))
    monkeypatch.setenv("NSIGHT_MAGIC_NCU", str(link))
    assert find_ncu() == link
    assert ncu_version(link).count(".") >= 2


def test_parse_version():
    out = "NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2025.3.1.0 (build 36398880) (public-release)\n"
    assert parse_ncu_version(out) == "2025.3.1.0"
    with pytest.raises(ValueError):
        parse_ncu_version("garbage")


# ---- options and argv -----------------------------------------------------------------------------------

def test_defaults_basic_set_plus_memory_workload_nvtx_and_a_bounded_count():
    argv = build_ncu_argv("/x/ncu", NcuOptions(), "/p/report", ["python", "cell.py"])
    assert argv[:3] == ["/x/ncu", "--export", "/p/report"] and "--force-overwrite" not in argv
    joined = " ".join(argv)
    assert "--set basic --section MemoryWorkloadAnalysis" in joined and "--nvtx" in argv
    assert "--launch-count 50" in joined and argv[-2:] == ["python", "cell.py"]
    assert "--nvtx-include" not in argv and "--kernel-name" not in argv


def test_module_becomes_a_push_pop_include_with_trailing_slash():
    argv = build_ncu_argv("ncu", NcuOptions(module="encoder", nvtx_include=("step 3/",)), "r", ["py"])
    i = [k for k, a in enumerate(argv) if a == "--nvtx-include"]
    assert [argv[k + 1] for k in i] == ["step 3/", "encoder/"]
    assert module_nvtx_filter("encoder/attn/") == "encoder/attn/"
    with pytest.raises(OptionError):
        module_nvtx_filter(" / ")


def test_every_option_changes_the_command_line():
    base = build_ncu_argv("ncu", NcuOptions(), "r", ["py"])
    variants = [NcuOptions(set="full"), NcuOptions(sections=("SpeedOfLight", "Occupancy")),
                NcuOptions(metrics=("dram__bytes.sum",)), NcuOptions(kernel="gemm"), NcuOptions(nvtx_include=("a/",)),
                NcuOptions(module="m"), NcuOptions(count=3), NcuOptions(skip=2), NcuOptions(replay="application"),
                NcuOptions(extra_args=("--cache-control", "none"))]
    for opts in variants:
        assert build_ncu_argv("ncu", opts, "r", ["py"]) != base, opts


@pytest.mark.parametrize("kwargs,match", [
    ({"replay": "bogus"}, "--replay"), ({"count": 0}, "--count"), ({"skip": -1}, "--skip"),
    ({"kernel": "gemm("}, "not a regular expression"),
])
def test_bad_options_are_one_line_errors(kwargs, match):
    with pytest.raises(OptionError, match=match) as e:
        NcuOptions(**kwargs)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text", ["-o out", "-oout", "--export=x", "-f", "--force-overwrite", "--log-file l.txt",
                                  "--csv", "--page raw", "--print-units base", "--import r.ncu-rep", "-i r.ncu-rep",
                                  "--set full --export y"])
def test_owned_flags_are_refused(text):
    with pytest.raises(OptionError, match="--ncu-args may not contain -") as e:
        validate_ncu_args(text)
    assert "\n" not in str(e.value)


def test_other_flags_pass_through_split_like_a_shell():
    assert validate_ncu_args('--cache-control none --import-source yes --nvtx-exclude "a b/"') == [
        "--cache-control", "none", "--import-source", "yes", "--nvtx-exclude", "a b/"]
    assert validate_ncu_args("") == []
    with pytest.raises(OptionError, match="could not be parsed"):
        validate_ncu_args('--nvtx-exclude "open')


def test_count_note_only_when_the_bound_is_reached():
    assert count_limit_note(NcuOptions(count=5), 4) is None
    assert "--count 5" in count_limit_note(NcuOptions(count=5), 5)
    assert count_limit_note(NcuOptions(count=None), 10_000) is None


def test_permission_error_lists_the_three_fixes():
    err = ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
           "Counters on the target device 0.")
    msg = explain_ncu_failure(err, 1)
    assert "run as root" in msg and "NVreg_RestrictProfilingToAdminUsers=0" in msg and "SYS_ADMIN" in msg
    assert explain_ncu_failure("something else", 1) is None


# ---- real ncu processes ---------------------------------------------------------------------------------

@requires_ncu
def test_real_ncu_accepts_our_flags_and_reports_no_kernels_with_the_filters(tmp_path):
    child = tmp_path / "cell.py"
    child.write_text("print('cell ran')\n")
    opts = NcuOptions(module="encoder", kernel="gemm|conv", count=3, skip=1, metrics=("dram__bytes.sum",),
                      extra_args=tuple(validate_ncu_args("--cache-control all")))
    argv = build_ncu_argv(find_ncu(), opts, tmp_path / "report", [sys.executable, str(child)])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert "cell ran" in proc.stdout
    assert "unrecognised option" not in out and "unrecognized option" not in out and "==ERROR==" not in out, out
    assert not (tmp_path / "report.ncu-rep").exists()
    msg = explain_ncu_failure(out, proc.returncode, opts)
    assert msg.startswith("no kernels were profiled") and "--module 'encoder' (NVTX include 'encoder/')" in msg
    assert "--kernel 'gemm|conv'" in msg


@requires_ncu
def test_import_csvs_with_real_ncu_matches_ncu_report(tmp_path):
    rep = tmp_path / "report.ncu-rep"
    shutil.copy(fixture_path("ncu", "public-rep", "montecarlo_profile.ncu-rep"), rep)
    raw, details = import_csvs(find_ncu(), rep, timeout=120)
    assert raw == tmp_path / "report_raw.csv" and details == tmp_path / "report_details.csv"
    from_csv = open_ncu_report(raw)
    assert from_csv.source == "csv-raw" and open_ncu_report(details).source == "csv-details"
    if importlib.util.find_spec("ncu_report") is None:
        pytest.skip("ncu_report not installed")
    from_rep = open_ncu_report(rep)
    j = from_rep.metrics.merge(from_csv.metrics, on=["kernel_id", "metric"]).dropna(subset=["value_x", "value_y"])
    assert len(j) > 1000
    assert ((j["value_x"] - j["value_y"]).abs() <= 0.005 + 1e-12 * j["value_y"].abs()).all()
    d = open_ncu_report(details)
    assert len(d.rules) == len(from_rep.rules) == 30
    assert d.kernels["duration_ns"].tolist() == from_rep.kernels["duration_ns"].tolist()
    assert d.kernels["l2_dram_bytes"].to_numpy() == pytest.approx(from_rep.kernels["l2_dram_bytes"].to_numpy(),
                                                                 rel=1e-6)


@requires_ncu
def test_import_of_a_report_newer_than_ncu_explains_itself(tmp_path):
    rep = tmp_path / "report.ncu-rep"
    shutil.copy(fixture_path("ncu", "public-rep", "armleth_report.ncu-rep"), rep)  # ncu 2024.2 report
    version = ncu_version(find_ncu())
    if tuple(int(x) for x in version.split(".")[:2]) >= (2024, 2):
        pytest.skip(f"ncu {version} reads this report")
    with pytest.raises(RuntimeError, match="report is from a newer Nsight Compute than this ncu"):
        import_csvs(find_ncu(), rep, timeout=120)
    assert not (tmp_path / "report_raw.csv").exists()


def test_the_pages_of_some_kernels_are_cut_from_ncus_own_csv_pages(tmp_path):
    """In place, a cell's kernels are read from the kernel's whole report and --kernel/--skip/--count pick among
    them by id (profilers/inplace_ncu.py): ncu's raw and details pages keep their units row and messages, and the
    reader finds exactly the kept kernels."""
    from nsight_magic.profilers.inplace_ncu import keep_kernels, kernel_ids
    from nsight_magic.readers.ncu import open_ncu_pages

    raw = fixture_path("ncu", "public-csv", "GEN_ncu2022.3_montecarlo_raw_baseunits.csv").read_text()
    details = fixture_path("ncu", "public-csv", "GEN_ncu2022.3_montecarlo_details_baseunits.csv").read_text()
    ids = kernel_ids(raw)
    assert len(ids) >= 2 and kernel_ids(details) == ids
    keep = {ids[-1]}
    (tmp_path / "r.csv").write_text(keep_kernels(raw, keep))
    (tmp_path / "d.csv").write_text(keep_kernels(details, keep))
    whole = open_ncu_pages(fixture_path("ncu", "public-csv", "GEN_ncu2022.3_montecarlo_raw_baseunits.csv"),
                           fixture_path("ncu", "public-csv", "GEN_ncu2022.3_montecarlo_details_baseunits.csv"))
    cut = open_ncu_pages(tmp_path / "r.csv", tmp_path / "d.csv")
    assert list(cut.kernels["id"]) == [int(ids[-1])]
    mine = whole.kernels[whole.kernels["id"] == int(ids[-1])].reset_index(drop=True)
    assert cut.kernels.iloc[0]["duration_ns"] == mine.iloc[0]["duration_ns"]
    assert set(cut.metrics["kernel_id"]) == {int(ids[-1])}
