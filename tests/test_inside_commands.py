"""The command FIFO between the notebook and a warm process: delivered once the reader exists, never blocking."""
from __future__ import annotations

import os
import threading

from nsight_magic.inside import commands


def test_a_command_sent_right_after_the_inbox_opens_is_delivered(tmp_path):
    """The reader says "ready" after it made its inbox; a command sent at once, before the reader asks for the next
    one, must not be refused (a lazily opened FIFO refused it, and the notebook waited for an answer forever)."""
    fifo = commands.make(tmp_path / "worker.fifo")
    assert commands.send(fifo, {"cmd": "nobody"}) is False  # no reader yet: refused at once, not blocked
    inbox = commands.Inbox(fifo)
    assert commands.send(fifo, {"cmd": "load", "folder": "a"}) is True
    assert commands.send(fifo, {"cmd": "run"}) is True
    assert next(inbox) == {"cmd": "load", "folder": "a"}
    assert next(inbox) == {"cmd": "run"}


def test_commands_written_in_pieces_and_garbage_between_them(tmp_path):
    fifo = commands.make(tmp_path / "host.fifo")
    inbox = commands.Inbox(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.extend(next(inbox) for _ in range(2)), daemon=True)
    reader.start()
    fd = os.open(fifo, os.O_WRONLY)
    for piece in (b'{"seq": 1, "ve', b'rb": "start"}\nnot json\n', b'{"seq": 2}\n'):
        os.write(fd, piece)
    os.close(fd)
    reader.join(timeout=10)
    assert got == [{"seq": 1, "verb": "start"}, {"seq": 2}]
