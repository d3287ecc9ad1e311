"""Errors the user can act on: each message is one line that says what to do."""


class NsightMagicError(Exception):
    """Base class: the message is meant for the user as it is (no traceback needed)."""


class ToolNotFound(NsightMagicError):
    """nsys or ncu could not be found."""


class ReportError(NsightMagicError):
    """A report file is missing, broken, or of a kind we cannot read."""


class OptionError(NsightMagicError):
    """A magic or command-line option is invalid."""


class Interrupted(NsightMagicError):
    """Ctrl-C stopped a step (an export, a read); what was written before is kept."""


class CellRaised(NsightMagicError):
    """The profiled cell raised: its traceback is shown above, the profile is kept.  The notebook's cell fails
    too, so that Run All, nbclient and papermill stop there as they would without the profiler."""

    def _render_traceback_(self) -> list[str]:  # IPython shows these lines instead of a traceback of ours
        return [f"nsight-magic: {self}"]


class ReportWarning(UserWarning):
    """A report was read, but part of it is damaged and was read in a stated way (one line)."""
