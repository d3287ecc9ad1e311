"""Pass-through flags (`--nsys-args`, `--ncu-args`): split like a shell, refuse the flags nsight-magic owns."""
from __future__ import annotations

import shlex

from ..errors import OptionError


def flag_name(token: str) -> str:
    return token.split("=", 1)[0]


def validate_passthrough(text: str, owned: dict[str, str], tool: str) -> tuple[str, ...]:
    """Split --nsys-args/--ncu-args with shlex and refuse the flags nsight-magic owns (one-line OptionError).
    Every nsys switch takes a value (`--sample=none` or `--sample none`): any other word would be read by nsys as
    the program to profile, and is refused."""
    try:
        tokens = shlex.split(text or "")
    except ValueError as e:
        raise OptionError(f"--{tool}-args could not be parsed ({e}); quote values like --{tool}-args \"--flag value\"")
    for i, tok in enumerate(tokens):
        if not tok.startswith("-"):
            prev = tokens[i - 1] if i else ""
            takes_value = prev.startswith("-") and "=" not in prev and (prev.startswith("--") or len(prev) == 2)
            if tool == "nsys" and not takes_value:
                raise OptionError(f"--nsys-args takes nsys switches and their values only; {tok!r} would be read "
                                  "as the program to profile (the cell is the program)")
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
