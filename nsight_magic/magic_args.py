"""How the magics read their line (shell quoting, pass-through values that start with '-') and how their help
reads (`%%nsys?`): the option specs themselves live in options.py, shared with the command line."""
from __future__ import annotations

import shlex

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from .options import join_passthrough


def parse_line(magic, line: str):
    """Parse a magic's line with shell quoting: `--nvtx-include "step 3/"` gives `step 3/`.

    IPython's parse_argstring keeps the quotes around values (non-POSIX split), which would end up inside NVTX
    filters and pass-through flags.
    """
    try:
        argv = shlex.split(line)
    except ValueError as e:
        raise UsageError(f"could not parse the options ({e}); check the quotes") from None
    return magic.parser.parse_args(join_passthrough(argv))


def arguments_from(*specs):
    """Decorator applying option specs from options.py (shared with the command line)."""
    def apply(func):
        for spec in reversed([item for group in specs for item in group]):
            flags, kwargs = spec
            func = argument(*flags, **kwargs)(func)
        return func
    return apply


def cell_magic_help(func, name: str) -> None:
    """IPython's magic_arguments writes the help as "::\n\n  %name [...]" (an RST literal block, shown raw by
    `%%nsys?`) and names a cell magic with one %: start it with the usage as users type it, %%name."""
    doc = func.__doc__ or ""
    if doc.startswith("::"):
        doc = doc[2:].lstrip("\n")
    lines = doc.splitlines()
    if lines and lines[0].lstrip().startswith(f"%{name} ") or lines and lines[0].strip() == f"%{name}":
        indent = len(lines[0]) - len(lines[0].lstrip())
        lines = [("%" + ln[indent:] if i == 0 else ln[min(indent, len(ln) - len(ln.lstrip())):] if ln.strip() else ln)
                 for i, ln in enumerate(lines)]
    func.__doc__ = "\n".join(lines)
    parser = getattr(func, "parser", None)
    if parser is not None:
        parser.prog = f"%{name}"  # the formatter puts one % before it
