"""The command line with real processes: profile a script, doctor, view."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import DATA, TEST_TRACE, nvtx_ranges, requires_nsys

pytestmark = [pytest.mark.timeout(240)]


def _cli(*args, cwd, env=None):
    return subprocess.run([sys.executable, "-m", "nsight_magic.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=200, env={**os.environ, **(env or {})})


@requires_nsys
def test_profile_a_script_with_arguments(tmp_path):
    (tmp_path / "proj").mkdir()
    script = tmp_path / "proj" / "train.py"
    (tmp_path / "proj" / "helper.py").write_text("VALUE = 'sibling module found'\n")
    script.write_text("import sys, nvtx, helper\nwith nvtx.annotate('script range'):\n"
                      "    print('args', sys.argv[1:], helper.VALUE)\n")
    # a pass-through value that starts with '-' is taken as the magic takes it; after the script, words are its own
    p = _cli("profile", "-t", TEST_TRACE, "--nsys-args", "--sample=none", "--dir", str(tmp_path / "profiles"),
             str(script), "--lr", "0.1", "--nsys-args", "-x", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "args ['--lr', '0.1', '--nsys-args', '-x'] sibling module found" in p.stdout  # its folder is on sys.path
    folder = next((tmp_path / "profiles").glob("train-*"))
    assert "script range" in nvtx_ranges(folder / "report.sqlite")
    assert (folder / "view.html").stat().st_size > 1000
    assert str(folder) in p.stdout
    from nsight_magic.report import open_report

    rep = open_report(folder)
    try:  # a script is called a script, not a cell
        assert rep.subject == "the script" and "the script ran on the CPU" in rep.bottleneck().summary
    finally:
        rep.close()


@requires_nsys
def test_profile_exit_status_follows_the_script(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("raise SystemExit(4)\n")
    p = _cli("profile", "-t", TEST_TRACE, "--no-render", "--dir", str(tmp_path / "p"), str(script), cwd=tmp_path)
    assert p.returncode == 1
    assert "exit status 4" in p.stderr


def test_profile_missing_script_is_one_line(tmp_path):
    p = _cli("profile", str(tmp_path / "nope.py"), cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "no such script" in p.stderr
    # a folder is not a missing script (issue 63)
    p = _cli("profile", str(tmp_path), cwd=tmp_path)
    assert p.returncode == 2 and "is a folder; give the Python script to run in it" in p.stderr, p.stderr


@requires_nsys
def test_a_scripts_syntax_error_names_the_script_and_its_line(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("x = 1\ny = (\n")
    p = _cli("profile", "-t", TEST_TRACE, "--dir", str(tmp_path / "p"), str(script), cwd=tmp_path)
    assert p.returncode == 2 and "syntax error in broken.py, line 2" in p.stderr, p.stderr
    assert "the cell" not in p.stderr


def test_a_symbolic_link_loop_or_a_link_to_nothing_is_named_as_such(tmp_path):
    import os

    os.symlink(tmp_path / "a", tmp_path / "b")
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "nothing", tmp_path / "c")
    p = _cli("view", str(tmp_path / "a"), cwd=tmp_path)
    assert p.returncode == 2 and "a symbolic link loop" in p.stderr and "no such" not in p.stderr, p.stderr
    p = _cli("diff", str(tmp_path / "c"), str(tmp_path / "a"), cwd=tmp_path)
    assert p.returncode == 2 and "a symbolic link to" in p.stderr and "which does not exist" in p.stderr, p.stderr


def test_doctor_reports_a_missing_nsys(tmp_path):
    p = _cli("doctor", cwd=tmp_path, env={"NSIGHT_MAGIC_NSYS": str(tmp_path / "nsys-missing")})
    assert p.returncode == 1
    assert "FAIL" in p.stdout and "NSIGHT_MAGIC_NSYS" in p.stdout


@requires_nsys
def test_doctor_passes_with_debian_nsys(tmp_path):
    p = _cli("doctor", cwd=tmp_path)
    assert p.returncode == 0, p.stdout
    assert "QdstrmImporter at" in p.stdout


def test_view_of_a_missing_report_is_one_line(tmp_path):
    p = _cli("view", str(tmp_path / "missing.sqlite"), cwd=tmp_path)
    assert p.returncode == 2 and "no such file" in p.stderr and "Traceback" not in p.stderr


def test_doctor_survives_an_ncu_that_prints_no_version(tmp_path):
    p = _cli("doctor", cwd=tmp_path, env={"NSIGHT_MAGIC_NCU": "/bin/true"})
    assert "Traceback" not in p.stderr
    assert "warn" in p.stdout and "/bin/true --version failed" in p.stdout


@pytest.mark.parametrize("where", ["missing-dir", "a-folder"])
def test_diff_checks_its_output_path_before_comparing(tmp_path, where, capsys):
    from nsight_magic.cli import main

    out = tmp_path / "missing" / "x.html" if where == "missing-dir" else tmp_path
    rep = str(DATA / "nsys_h100_a_cuda_nvtx.sqlite")
    assert main(["diff", rep, rep, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nsight-magic: -o ") and "Traceback" not in err[0], err


def test_kernel_install_refuses_names_that_are_not_a_kernel_of_its_own(tmp_path):
    """`--name .` or `..` would name the kernels folder or its parent (jupyter_client removes the destination
    before it copies: every kernelspec, Lab settings and extensions would go), and a kernel that is not ours
    (the environment's python3) is never replaced; each refusal is one line and leaves the prefix as it was."""
    prefix = tmp_path / "prefix"
    kernels = prefix / "share" / "jupyter" / "kernels"
    (kernels / "python3").mkdir(parents=True)
    (kernels / "python3" / "kernel.json").write_text('{"argv": ["python", "-m", "ipykernel_launcher", "-f", '
                                                     '"{connection_file}"], "display_name": "Python 3"}')
    settings = prefix / "share" / "jupyter" / "lab" / "settings"
    settings.mkdir(parents=True)
    (settings / "overrides.json").write_text("{}")
    before = sorted(str(p) for p in prefix.rglob("*"))
    for name, said in ((".", "starting with a letter or digit"), ("..", "starting with a letter or digit"),
                       ("x" * 300, "1-64 letters"), ("python3", "not nsight-magic's")):
        p = _cli("kernel", "install", "--prefix", str(prefix), "--name", name, cwd=tmp_path)
        assert p.returncode == 2 and said in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = _cli("kernel", "install", "--prefix", str(prefix), "--set", "full", cwd=tmp_path)
    assert p.returncode == 2 and "add --ncu" in p.stderr, p.stderr
    assert sorted(str(p) for p in prefix.rglob("*")) == before
    # a --prefix that is a file, or under one: said in one line, naming the option to change (the tests run as
    # root, for whom no folder is read-only)
    (tmp_path / "a-file").write_text("")
    for bad in (tmp_path / "a-file", tmp_path / "a-file" / "sub"):
        p = _cli("kernel", "install", "--prefix", str(bad), cwd=tmp_path)
        assert p.returncode == 2 and "could not write the kernelspec under --prefix" in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and "-o" not in p.stderr.split(";")[-1], p.stderr
    # ours is replaced by a new install of the same name
    for _ in range(2):
        p = _cli("kernel", "install", "--prefix", str(prefix), "--name", "mine", "--ncu", cwd=tmp_path)
        assert p.returncode == 0, p.stderr
    spec = (kernels / "mine" / "kernel.json").read_text()
    assert "--tool" in spec and "Nsight Compute in place" in spec
