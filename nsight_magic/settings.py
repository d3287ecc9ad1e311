"""Every user setting in one place: `NsightSettings`, a traitlets Configurable.

The notebook's magics are one (`%config NsightMagics.trace = 'cuda,nvtx,osrt'`, `c.NsightSettings.*` or
`c.NsightMagics.*` in `ipython_config.py`); the command line and a process that loaded no magics read a plain one.
`current()` is the settings in force: the kernel's magics once the extension is loaded, else a fresh one.

A setting left unset (None) follows its environment variable, read each time it is needed: the one way to reach
what no `%config` reaches (headless runs, the server that starts an in-place kernel, the command line).  Each
variable is in the README.
"""
from __future__ import annotations

import math
import os

from traitlets import Bool, Float, Int, List, TraitError, Unicode, validate
from traitlets.config import Configurable

from .errors import NsightMagicError

QUERY_LIMIT_S = 600.0  # seconds a report's query may run, unless set

# name -> (environment variable, how its text reads, the value when neither is set)
ENV = {
    "wait": ("NSIGHT_MAGIC_WAIT", lambda v: v == "1", False),
    "prewarm_worker": ("NSIGHT_MAGIC_PREWARM", lambda v: v != "0", True),
    "isolate": ("NSIGHT_MAGIC_ISOLATE", lambda v: v != "0", True),
    "orphan_guard": ("NSIGHT_MAGIC_ORPHAN_GUARD", lambda v: v != "0", True),
    "query_limit_s": ("NSIGHT_MAGIC_QUERY_LIMIT_S", float, QUERY_LIMIT_S),
    "memory_limit_gb": ("NSIGHT_MAGIC_MEMORY_LIMIT_GB", float, None),
}  # secret_patterns' variable is read from the environment a profiled process is made from (tools/environment.py)


# settings that are a positive number: (its unit, what an unset one means besides its variable)
POSITIVE = {"query_limit_s": ("seconds", ""), "memory_limit_gb": ("GB", ", else the memory available")}


class NsightSettings(Configurable):
    """What a user of nsight-magic may set for every profile (`%config NsightMagics` lists them with their help)."""

    pass_env = List(Unicode(), help="environment variables passed to every profiled process beyond the allow-list "
                                    "(nsight_magic/tools/environment.py); each is recorded in the reports, as nsys "
                                    "records the profiled process's environment").tag(config=True)
    trace = Unicode("", help="what %%nsys traces when its line gives no --trace (nsys's list, e.g. 'cuda,nvtx'); "
                             "empty: cuda,nvtx; add osrt for the OS calls it waits in").tag(config=True)
    live_views = Int(4, help="how many of the newest profile views keep their live timeline, whose zoom reads "
                             "exact events from the kernel; older views show their saved timeline and the kernel "
                             "frees what they held").tag(config=True)
    wait = Bool(None, allow_none=True, help="every profiled cell waits for its profile, as --wait (unset: on where "
                                            "NSIGHT_MAGIC_WAIT=1)").tag(config=True)
    prewarm_worker = Bool(None, allow_none=True, help="prepare the warm worker for the next %%nsys in the background "
                                                      "(unset: on, off where NSIGHT_MAGIC_PREWARM=0)").tag(config=True)
    isolate = Bool(None, allow_none=True, help="run nsys in its own PID namespace, so that a report holds no other "
                                               "process of the machine (unset: on, off where NSIGHT_MAGIC_ISOLATE=0)"
                   ).tag(config=True)
    orphan_guard = Bool(None, allow_none=True, help="end nsys and the cell's processes when the kernel is killed "
                                                    "(setpriv --pdeathsig; unset: on, off where "
                                                    "NSIGHT_MAGIC_ORPHAN_GUARD=0)").tag(config=True)
    query_limit_s = Float(None, allow_none=True, help="seconds one query of a report may run before it is stopped "
                                                      "(unset: NSIGHT_MAGIC_QUERY_LIMIT_S, else 600)"
                          ).tag(config=True)
    memory_limit_gb = Float(None, allow_none=True,
                            help="GB of memory a report may take in this kernel: a larger one is not loaded unless "
                                 "forced (%nsys_load --force), so that the kernel never runs out (unset: "
                                 "NSIGHT_MAGIC_MEMORY_LIMIT_GB, else the memory this machine has available)"
                            ).tag(config=True)
    secret_patterns = List(Unicode(), default_value=None, allow_none=True,
                           help="more name fragments that mark a variable as a secret, never passed to a profiled "
                                "process (unset: NSIGHT_MAGIC_SECRET_PATTERNS, comma-separated)").tag(config=True)

    @validate("pass_env")
    def _valid_pass_env(self, proposal) -> list:
        from .options import valid_names

        names = [str(n).strip() for n in proposal["value"]]
        try:
            valid_names(tuple(n for n in names if n))
        except NsightMagicError as e:  # said when set, not in every later %%nsys as an --env nobody passed
            raise TraitError(str(e).replace("--env", f"{type(self).__name__}.pass_env", 1)) from None
        return [n for n in names if n]

    @validate("live_views")
    def _valid_live_views(self, proposal) -> int:
        if proposal["value"] < 0:
            raise TraitError(f"{type(self).__name__}.live_views is a count of views: 0 or more")
        return proposal["value"]

    @validate("query_limit_s", "memory_limit_gb")
    def _valid_positive(self, proposal):
        v, name = proposal["value"], proposal["trait"].name
        if v is not None and not (math.isfinite(v) and v > 0):
            unit, otherwise = POSITIVE[name]
            raise TraitError(f"{type(self).__name__}.{name} is a number of {unit} above 0 (None: {ENV[name][0]}"
                             f"{otherwise})")
        return v

    def value(self, name: str):
        """The setting in force: what was set, else its environment variable as it is now, else its default (a
        variable that does not read as its kind counts as unset)."""
        v = getattr(self, name)
        if v is not None or name not in ENV:
            return v
        var, parse, fallback = ENV[name]
        text = os.environ.get(var, "")
        if not text.strip():
            return fallback
        try:
            got = parse(text.strip())
        except ValueError:
            return fallback
        if isinstance(got, float) and not (math.isfinite(got) and got > 0):
            return fallback
        return got


_CURRENT: list[NsightSettings] = []


def use(settings: NsightSettings) -> None:
    """Make these the settings in force (the magics do, as the extension loads)."""
    _CURRENT[:] = [settings]


def current() -> NsightSettings:
    """The settings in force: the loaded magics', else a fresh one that follows the environment."""
    return _CURRENT[0] if _CURRENT else NsightSettings()


def setting(name: str):
    """current().value(name): one setting as it is in force now."""
    return current().value(name)
