"""nsys's settings files (/tmp/injection_config_*): the sweep removes those no living process names, nothing else."""
import os
import subprocess
import sys
import time
import uuid

import pytest

from nsight_magic.inside.tool_files import remove_tool_files, sees_every_process, sweep_tool_files


def _file(folder, age_s, name=None):
    p = folder / (name or f"injection_config_{uuid.uuid4().hex[:8]}")
    p.write_text("HotKeyIntValue=123\nHotKeyEnabled=true\n")
    then = time.time() - age_s
    os.utime(p, (then, then))
    return p


@pytest.mark.skipif(not sees_every_process(), reason="inside a pid namespace the sweep does nothing by design")
def test_the_sweep_removes_old_files_no_process_names_and_keeps_the_rest(tmp_path):
    left = _file(tmp_path, 600)  # a run that failed at start-up named it nowhere
    young = _file(tmp_path, 1)  # nsys has just written it, its process is starting
    named = _file(tmp_path, 600)  # a living process (an in-place kernel, a long cell) still has it
    other = _file(tmp_path, 600, "injection_config.bak")  # not a name nsys gives
    directory = tmp_path / "injection_config_dir0"
    directory.mkdir()
    os.utime(directory, (0, 0))
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              env={**os.environ, "QUADD_INJECTION_CONFIG": f"/tmp/{named.name}"})
    try:
        assert sweep_tool_files(tmp_path) == [str(left)]
    finally:
        holder.kill()
        holder.wait()
    assert not left.exists() and young.exists() and named.exists() and other.exists() and directory.is_dir()
    # once its process has ended, the file is an orphan too
    assert sweep_tool_files(tmp_path) == [str(named)]


def test_only_files_named_as_nsys_names_them_are_removed(tmp_path):
    victim = tmp_path / "notes.txt"
    victim.write_text("keep me")
    mine = _file(tmp_path, 0)
    link = tmp_path / "injection_config_link"
    link.symlink_to(victim)
    remove_tool_files([victim, mine, link, tmp_path / "injection_config_missing"])
    assert victim.read_text() == "keep me" and link.is_symlink() and not mine.exists()
