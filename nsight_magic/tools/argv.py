"""Pass-through flags (`--nsys-args`, `--ncu-args`): split like a shell, refuse the flags nsight-magic owns."""
from __future__ import annotations

import shlex

from ..errors import OptionError


def flag_name(token: str) -> str:
    return token.split("=", 1)[0]


def validate_passthrough(text: str, owned: dict[str, str], tool: str) -> tuple[str, ...]:
    """Split --nsys-args/--ncu-args with shlex and refuse the flags nsight-magic owns (one-line OptionError)."""
    try:
        tokens = shlex.split(text or "")
    except ValueError as e:
        raise OptionError(f"--{tool}-args could not be parsed ({e}); quote values like --{tool}-args \"--flag value\"")
    for tok in tokens:
        if not tok.startswith("-"):
            continue
        name = flag_name(tok)
        # Short flags with glued values, e.g. -onew: match on the first two characters.
        short = name[:2] if not name.startswith("--") else name
        for candidate in (name, short):
            if candidate in owned:
                raise OptionError(f"--{tool}-args may not contain {candidate}: {owned[candidate]}")
        # the tools take any unambiguous start of a long flag (--force-over, --sess): so do we
        if name.startswith("--") and len(name) > 2:
            for full in sorted(owned):
                if full.startswith("--") and full.startswith(name):
                    raise OptionError(f"--{tool}-args may not contain {name} ({tool} reads it as {full}): "
                                      f"{owned[full]}")
    return tuple(tokens)
