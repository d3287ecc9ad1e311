"""The one definition of a report's capture span and time origin (used by summaries, utilization, timeline, findings).

nsys writes the capture bounds into ANALYSIS_DETAILS.  Some real exports carry bounds on another clock than their
events (capture-range reports, exports of a time window, some public files): bounds that do not overlap the
events at all are not trusted, and the events' own span is the capture instead, with the reason recorded.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CaptureSpan:
    start_ns: int           # the capture span, on the report's clock
    end_ns: int
    source: str             # "capture bounds" (ANALYSIS_DETAILS) | "cell range" | "events" | "none"
    note: str | None        # why the capture bounds were not used, when they were not
    origin_ns: int          # x = 0 of a timeline: the capture start, or the first event when one starts earlier
    axis_end_ns: int        # end of a timeline's axis: the capture end, or the last event when one ends later

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def capture_span(bounds: tuple[int | None, int | None] | None,
                 events: tuple[int | None, int | None] | None,
                 frame: tuple[int, int | None] | None = None) -> CaptureSpan:
    """Decide the capture span from the recorded capture bounds and the [first start, last end] of the events.

    Bounds are trusted when they overlap the events (or when there are no events); otherwise the events' span is
    the capture, and `note` says why.  `frame`: nsight-magic's own cell range (start, end), when the report has
    one: its start is x = 0 (what the user profiled starts there), the axis still covering every event."""
    span = _capture_span(bounds, events)
    if frame is None or frame[0] is None:
        return span
    f0, f1 = int(frame[0]), int(frame[1] if frame[1] is not None else span.axis_end_ns)
    lo = min(span.origin_ns, f0) if events else f0
    return CaptureSpan(span.start_ns, span.end_ns, span.source, span.note, f0, max(span.axis_end_ns, f1, lo))


def cell_capture(cell: tuple[int, int], bounds) -> CaptureSpan:
    """The capture of one of our reports whose capture bounds cannot be used: nsight-magic's cell range.

    A warm session's recording (nsys start/stop) has bounds on the session's clock and OS calls that began
    before the recording (a thread blocked since the setup ran); the cell's range is what the user profiled."""
    a, b = int(cell[0]), int(cell[1])
    why = "no capture bounds" if not bounds or None in bounds else \
        f"the capture bounds [{bounds[0]}, {bounds[1]}] ns do not overlap the events (another clock)"
    return CaptureSpan(a, b, "cell range", f"{why}: nsight-magic's cell range is the capture", a, b)


def _capture_span(bounds, events) -> CaptureSpan:
    a, b = bounds if bounds else (None, None)
    lo, hi = events if events else (None, None)
    have_bounds = a is not None and b is not None and b >= a
    have_events = lo is not None and hi is not None
    if not have_events:
        if have_bounds:
            return CaptureSpan(int(a), int(b), "capture bounds", None, int(a), int(b))
        return CaptureSpan(0, 0, "none", "the report holds neither capture bounds nor events", 0, 0)
    lo, hi = int(lo), int(max(hi, lo))
    if have_bounds:
        a, b = int(a), int(b)
        if not (hi < a or lo > b):
            return CaptureSpan(a, b, "capture bounds", None, min(a, lo), max(b, hi))
        note = (f"the capture bounds [{a}, {b}] ns do not overlap the events [{lo}, {hi}] ns (another clock); "
                f"the events' span is used")
        return CaptureSpan(lo, hi, "events", note, lo, hi)
    return CaptureSpan(lo, hi, "events", "the report has no capture bounds (ANALYSIS_DETAILS)", lo, hi)
