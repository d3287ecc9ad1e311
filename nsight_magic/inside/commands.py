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


def receive(path: Path) -> Iterator[dict]:
    """Commands as they come; blocks between them."""
    fd = os.open(path, os.O_RDWR)
    with os.fdopen(fd, "rb", buffering=0) as f:
        buf = b""
        while True:
            chunk = f.read(4096)
            if not chunk:
                return
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    yield json.loads(line)
                except ValueError:
                    continue
