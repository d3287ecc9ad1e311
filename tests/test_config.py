"""The magics' settings as IPython users set them: `%config NsightMagics.NAME = ...` in a real kernel, with real
nsys."""
from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import cell_text, requires_nsys

pytestmark = [requires_nsys, pytest.mark.nsys, pytest.mark.timeout(600)]


def test_config_sets_the_trace_and_the_wait_of_every_later_cell(tmp_path):
    cells = (
        "%load_ext nsight_magic",
        "%config NsightMagics",  # IPython lists the settings and their help
        "%config NsightMagics.trace = 'bogus'",
        "%config NsightMagics.trace = 'nvtx'",
        "%config NsightMagics.wait = True",
        "%%nsys --name configured --fresh\nprint('ran')",
        "%%nsys --name own --fresh -t nvtx,osrt\nprint('ran')",  # the line's own --trace comes first
        "print(next(c for c in get_ipython().configurables if type(c).__name__ == 'NsightMagics').trace)",
        "%config NsightMagics.pass_env = ['A B', '$(id)']",  # refused when set, not at every later %%nsys
        "%%nsys --name after-bad-env --fresh\nprint('ran after')",
        "%config NsightMagics.live_views = -1",
        "%config NsightMagics.live_views = 2",
        "from nsight_magic.views import live_views; print(live_views.KEEP)",  # what the views keep live now
        # the settings the readers and tools act on are the same object's (settings.NsightSettings)
        "%config NsightMagics.query_limit_s = 0",
        "%config NsightMagics.query_limit_s = 45.0\n%config NsightMagics.secret_patterns = ['ZEPHYR']",
        "import os\nfrom nsight_magic.readers.nsys_sql import query_limit_s\n"
        "from nsight_magic.tools.environment import profiled_environment\nos.environ['ZEPHYR_ID'] = 'x'\n"
        "print(query_limit_s(), 'ZEPHYR_ID' in profiled_environment()[1])",
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    listing = cell_text(nb.cells[1])
    for name in ("trace", "wait", "prewarm_worker", "pass_env", "live_views", "isolate", "orphan_guard",
                 "query_limit_s", "secret_patterns"):
        name = f"NsightMagics.{name}"
        assert name in listing, listing
    bad = cell_text(nb.cells[2])
    assert "'bogus' is not an API this nsys traces" in bad and "nvtx" in bad, bad
    assert bad.count("\n") < 12, bad  # IPython's one error, not a traceback through our code
    profiles = tmp_path / "nsight-profiles"
    configured = (next(profiles.glob("configured-*")) / "command.txt").read_text()
    own = (next(profiles.glob("own-*")) / "command.txt").read_text()
    assert "--trace=nvtx " in configured or "-t nvtx " in configured, configured
    assert "nvtx,osrt" in own, own
    # wait: the cell itself held the finished profile (no "loading" line left for later)
    assert "ran" in cell_text(nb.cells[5], "stdout")
    assert "nsight-profiles" in cell_text(nb.cells[5]) and "loading" not in cell_text(nb.cells[5]).lower()
    assert cell_text(nb.cells[7], "stdout").strip() == "nvtx"
    bad_env = cell_text(nb.cells[8])
    assert "NsightMagics.pass_env 'A B': give the names of environment variables" in bad_env, bad_env
    assert bad_env.count("\n") < 12, bad_env
    assert "ran after" in cell_text(nb.cells[9], "stdout") and "--env" not in cell_text(nb.cells[9])
    assert "NsightMagics.live_views is a count of views: 0 or more" in cell_text(nb.cells[10])
    assert cell_text(nb.cells[12], "stdout").strip() == "2"
    assert "NsightMagics.query_limit_s is a number of seconds above 0" in cell_text(nb.cells[13])
    assert cell_text(nb.cells[15], "stdout").split() == ["45.0", "True"], cell_text(nb.cells[15])
