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
    tools.isolation_prefix.cache_clear()
    monkeypatch.setenv("NSIGHT_MAGIC_ISOLATE", "0")
    try:
        prefix, note = tools.isolation_prefix()
        assert prefix == () and "NSIGHT_MAGIC_ISOLATE=0" in note
    finally:
        tools.isolation_prefix.cache_clear()


@pytest.mark.skipif(os.geteuid() != 0, reason="the namespace probe's first form needs root")
def test_isolation_prefix_runs_commands_in_a_namespace_of_their_own():
    import subprocess
    import sys

    tools.isolation_prefix.cache_clear()
    prefix, note = tools.isolation_prefix()
    assert note is None
    probe = "import os; print(os.getpid(), len([p for p in os.listdir('/proc') if p.isdigit()]))"
    out = subprocess.run([*prefix, sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=30).stdout.split()
    assert out[0] == "1" and int(out[1]) <= 3  # pid 1, and only a couple of processes visible
