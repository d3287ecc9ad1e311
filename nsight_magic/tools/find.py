"""Finding NVIDIA's tools: an environment variable, PATH, then their usual install folders."""
from __future__ import annotations

import os
import re
import shutil
import glob
from pathlib import Path

from ..errors import ToolNotFound


def _version_key(path: str) -> tuple:
    return tuple(int(n) for n in re.findall(r"\d+", path))


def find_executable(name: str, env_var: str, globs, hint: str) -> Path:
    """An NVIDIA tool: $env_var, then PATH, then the install folders in `globs` (newest version first).

    ToolNotFound says how to install it and that env_var may point at it."""
    env = os.environ.get(env_var)
    if env:
        p = Path(env).expanduser()
        if p.is_file() and os.access(p, os.X_OK):
            return p
        raise ToolNotFound(f"{env_var}={env} is not an executable file; fix it or unset it; {hint}")
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    for pattern in globs:
        for f in sorted(glob.glob(pattern), key=_version_key, reverse=True):
            if os.access(f, os.X_OK):
                return Path(f)
    raise ToolNotFound(f"{name} was not found: {hint}")


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version))
