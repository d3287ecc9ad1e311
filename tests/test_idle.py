"""idle.when_idle in a real IPython shell: what waits for an idle kernel runs after a pause, never between cells
that follow each other at once (Run All), and only the latest asked for runs."""
from __future__ import annotations

import threading
import time

from conftest import eventually
from nsight_magic import idle


def _shell():
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.instance()  # the worker's one shell (other modules' tests make it too)


def test_it_runs_once_after_a_pause_and_not_between_cells():
    ip, ran = _shell(), []
    ip.run_cell("x = 1")
    idle.when_idle(ip, lambda: ran.append("first"), delay=0.3)
    idle.when_idle(ip, lambda: ran.append(threading.current_thread().name), delay=0.3)  # replaces the first
    assert ran == []  # not before the cell ends
    for i in range(4):  # cells one after the other, each shorter than the pause: nothing runs in between
        ip.run_cell(f"import time; time.sleep(0.2); y = {i}")
    assert ran == []
    assert eventually(lambda: ran, 5) == ["nsight-magic when idle"]
    ip.run_cell("z = 2")
    time.sleep(0.6)
    assert ran == ["nsight-magic when idle"]  # once


def test_dropped_it_never_runs_and_outside_a_cell_nothing_is_armed():
    ip, ran = _shell(), []
    idle.when_idle(ip, lambda: ran.append(1), delay=0.2)
    ip.run_cell("a = 1")
    idle.drop(ip)
    time.sleep(0.5)
    assert ran == []
    idle.when_idle(ip, lambda: ran.append(2), delay=0.2)  # no cell ends after it (a script's run_line_magic)
    time.sleep(0.5)
    assert ran == []
    ip.run_cell("b = 1")
    assert eventually(lambda: ran, 5) == [2]
