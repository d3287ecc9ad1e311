"""One-line JSON commands through a FIFO: the notebook's kernel writes, a warm process reads (blocking, no polling).

The reader keeps its FIFO open for writing too, so it never sees end-of-file between writers, and a writer's open
never blocks: with no reader alive, send() fails at once (ENXIO) instead of hanging the notebook.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator


def make(path: Path) -> Path:
    os.mkfifo(path, 0o600)
    return path


def send(path: Path, command: dict) -> bool:
    """Write one command; False when nobody reads (the process is gone)."""
    line = (json.dumps(command) + "\n").encode()
    if len(line) > 4096:  # PIPE_BUF: longer writes could interleave
        raise ValueError("command too long")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        os.write(fd, line)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


class Inbox:
    """The reading end of a command FIFO, open from construction on: a writer's send() succeeds as soon as the
    reader has said it is ready (a generator would open it only at the first next(), after saying so).  Iterating
    yields the commands as they come and blocks between them; an interrupt in a read loses nothing (the bytes
    read so far stay in the inbox)."""

    def __init__(self, path: Path):
        self._file = os.fdopen(os.open(path, os.O_RDWR), "rb", buffering=0)
        self._buf = b""

    def __iter__(self) -> Iterator[dict]:
        return self

    def __next__(self) -> dict:
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                try:
                    return json.loads(line)
                except ValueError:
                    continue
            chunk = self._file.read(4096)
            if not chunk:
                raise StopIteration
            self._buf += chunk
