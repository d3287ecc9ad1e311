"""inside/procs.py: what both sides ask of other processes, on real processes (a child, a zombie, one gone)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from nsight_magic.inside import procs
from nsight_magic.tools import identity_alive, parent_pid, process_identity


def test_a_child_is_seen_as_it_runs_as_a_zombie_and_once_gone():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "marker-arg"],
                             env={**os.environ, "NM_PROCS_TEST": "it-is-me"})
    try:
        deadline = time.monotonic() + 10
        while "marker-arg" not in procs.cmdline(child.pid) and time.monotonic() < deadline:
            time.sleep(0.02)  # between fork and exec it shows our command line
        assert procs.cmdline(child.pid)[-1] == "marker-arg"
        assert (procs.environ(child.pid) or {}).get("NM_PROCS_TEST") == "it-is-me"
        assert procs.alive(child.pid) and child.pid in procs.pids()
        assert procs.parent(child.pid) == parent_pid(child.pid) == os.getpid()
        assert procs.parents()[child.pid] == os.getpid()
        assert procs.rss_bytes(child.pid) > 0 and procs.name(child.pid)
        ident = process_identity(child.pid)
        assert ident["start"] == procs.started(child.pid) and identity_alive(ident)
        assert not identity_alive({**ident, "start": "0.000"})  # a pid reused by another process is not it

        child.send_signal(signal.SIGKILL)
        while procs.alive(child.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        # not waited for yet: a zombie, which runs nothing, has no command line and no parent entry
        assert not procs.alive(child.pid) and procs.cmdline(child.pid) == []
        assert child.pid not in procs.parents()
    finally:
        child.kill()
        child.wait()
    assert not procs.alive(child.pid) and not identity_alive(ident)
    assert procs.cmdline(child.pid) == [] and procs.environ(child.pid) is None
    assert procs.parent(child.pid) is None and procs.started(child.pid) is None and procs.rss_bytes(child.pid) is None
