"""Pages we write (view.html, diff and ncu pages): whole or not at all, never through a link."""
from __future__ import annotations

import os
import secrets
from pathlib import Path


def write_page(path: Path, html: str) -> Path:
    """Write an HTML page whole or not at all: into a new file beside it, then renamed over it (a symbolic link
    at `path` is replaced, never written through)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.partial")
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            f.write(html)
        os.replace(tmp, path)
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass
    return path
