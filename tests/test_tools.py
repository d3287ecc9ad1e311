"""Finding nsys's importer in the install layouts seen, and the PID-namespace isolation switch."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from nsight_magic import tools


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("nsys_rel,importer_rel", [
    # NVIDIA's installer: <root>/target-linux-x64/nsys and <root>/host-linux-x64/QdstrmImporter
    ("nsight-systems/2025.3/target-linux-x64/nsys", "nsight-systems/2025.3/host-linux-x64/QdstrmImporter"),
    # Nsight Compute's bundled nsys
    ("nsight-compute/2025.3.1/host/target-linux-x64/nsys",
     "nsight-compute/2025.3.1/host/linux-desktop-glibc_2_11_3-x64/QdstrmImporter"),
    # Debian 12: the CLI and the importer live in different trees
    ("usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys",
     "usr/lib/nsight-systems/host-linux-x64/QdstrmImporter"),
])
def test_importer_is_found_beside_nsys_in_every_layout(tmp_path, nsys_rel, importer_rel):
    nsys = _exe(tmp_path / nsys_rel)
    importer = _exe(tmp_path / importer_rel)
    assert tools.find_qdstrm_importer(nsys) == importer


def test_no_importer_is_none(tmp_path):
    assert tools.find_qdstrm_importer(_exe(tmp_path / "bin" / "nsys")) is None


def test_isolation_can_be_turned_off_with_a_note(monkeypatch):
    tools.system._namespace_prefix.cache_clear()
    monkeypatch.setenv("NSIGHT_MAGIC_ISOLATE", "0")
    try:
        prefix, note = tools.isolation_prefix()
        assert prefix == () and "NSIGHT_MAGIC_ISOLATE=0" in note and "NsightMagics.isolate" in note
        # what nsys then records: every process with its environment, the kernel's own (issue 63)
        assert "every process of this machine" in note and "this kernel's" in note
    finally:
        tools.system._namespace_prefix.cache_clear()


@pytest.mark.skipif(os.geteuid() != 0, reason="the namespace probe's first form needs root")
def test_isolation_prefix_runs_commands_in_a_namespace_of_their_own():
    import subprocess
    import sys

    tools.system._namespace_prefix.cache_clear()
    prefix, note = tools.isolation_prefix()
    assert note is None
    probe = "import os; print(os.getpid(), len([p for p in os.listdir('/proc') if p.isdigit()]))"
    out = subprocess.run([*prefix, sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=30).stdout.split()
    assert out[0] == "1" and int(out[1]) <= 3  # pid 1, and only a couple of processes visible


@pytest.mark.skipif(os.geteuid() != 0, reason="the namespace probe's first form needs root")
def test_a_run_that_records_no_kernel_frames_finds_no_kernel_symbols():
    """nsys's agent parses all of /proc/kallsyms at every start; a run without CPU samples or context switches
    gets an empty one in its namespace, any other run the machine's."""
    import subprocess
    import sys

    tools.system._namespace_prefix.cache_clear()
    probe = [sys.executable, "-c", "print(len(open('/proc/kallsyms').read()))"]

    def size(kernel_symbols: bool) -> int:
        argv, note = tools.isolated_argv(probe, kernel_symbols=kernel_symbols)
        assert note is None
        return int(subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout)

    assert size(False) == 0
    assert size(True) > 100_000


ASK = ("import json, sys; from nsight_magic import tools; n = sys.argv[1]; "
       "print(json.dumps([tools.nsys_version(n), sorted(tools.nsys_switches(n, 'profile'))]))")


def test_nsys_is_asked_its_version_and_switches_once_until_it_changes(tmp_path):
    """Each new process (a kernel, a run's helpers) used to ask nsys again: a fake nsys that logs every question
    is asked once by the first process, not by the next, and again once its binary changes (an upgrade)."""
    import json
    import subprocess
    import sys

    log = tmp_path / "asked.log"
    nsys = tmp_path / "bin" / "nsys"
    script = ("#!/bin/sh\necho \"$@\" >> {log}\ncase \"$1\" in\n  --version) echo 'NVIDIA Nsight Systems version "
              "{v}-abc1234';;\n  profile) printf '  -t, --trace=\\n  --sample=\\n';;\nesac\n")
    _exe(nsys).write_text(script.format(log=log, v="2024.5.1.113"))
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}

    def ask():
        p = subprocess.run([sys.executable, "-c", ASK, str(nsys)], capture_output=True, text=True, env=env,
                           timeout=60)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    assert ask() == ["2024.5.1.113", ["--sample", "--trace"]]
    assert log.read_text().splitlines() == ["--version", "profile --help"]
    assert ask() == ["2024.5.1.113", ["--sample", "--trace"]]  # from the cache: nsys not asked
    assert len(log.read_text().splitlines()) == 2
    nsys.write_text(script.format(log=log, v="2025.3.2.474"))  # upgraded in place
    assert ask()[0] == "2025.3.2.474"
    assert len(log.read_text().splitlines()) == 4
    answers = tmp_path / "cache" / "nsight-magic" / "tools" / "tool-answers.json"
    answers.write_text("{not json")  # a damaged cache: asked again, and written whole
    assert ask()[0] == "2025.3.2.474"
    assert len(log.read_text().splitlines()) == 6 and len(json.loads(answers.read_text())) == 2
    # a folder other users could write to is not trusted: nothing is kept (nor left in the temporary folder)
    (tmp_path / "tmp").mkdir()
    env["TMPDIR"] = str(tmp_path / "tmp")
    shared = tmp_path / "open" / "nsight-magic" / "tools"
    shared.mkdir(parents=True)
    for d in (shared, shared.parent, shared.parent.parent):
        d.chmod(0o777)  # mkdir's mode is masked by the umask
    env["XDG_CACHE_HOME"] = str(tmp_path / "open")
    assert ask()[0] == "2025.3.2.474"
    assert len(log.read_text().splitlines()) == 8
    assert not list(shared.iterdir()) and not list((tmp_path / "tmp").iterdir())


def test_nsys_raw_os_errors_read_as_plain_words():
    """Round 5: a read-only profile folder showed nsys's raw `FileStream.cpp(281)` exception text.  The OS error
    inside it is said plainly, with what to do; any other text is still its last error line."""
    import subprocess

    from nsight_magic.tools.nsys import _last_line

    raw = ("Processing [=====]\n/build/agent/work/QuadD/Common/FileStream.cpp(281): Throw in function void "
           "QuadDCommon::FileStream::Open()\nDynamic exception type: boost::wrapexcept<QuadDCommon::"
           "RuntimeException>\nstd::exception::what: RuntimeException\n[QuadDCommon::tag_message*] = {}: "
           "Read-only file system\n")
    said = _last_line(subprocess.CompletedProcess([], 1, "", raw))
    assert said.startswith("the folder is read-only (Read-only file system)") and "FileStream" not in said
    denied = _last_line(subprocess.CompletedProcess([], 1, "", raw.replace("Read-only file system",
                                                                            "Permission denied")))
    assert "not writable (Permission denied)" in denied
    assert _last_line(subprocess.CompletedProcess([], 1, "", "Error: bad report\n")) == "Error: bad report"
