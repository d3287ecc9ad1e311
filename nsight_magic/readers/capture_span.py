"""The one definition of a report's capture span and time origin (used by summaries, utilization, timeline, findings).

Our own reports say what was profiled: the cell runs inside nsight-magic's NVTX range (one per rank with
--nproc), and with --capture all the profiled process marks its start and end in the same domain.  Those ranges and
marks are on the events' clock by construction, so they are the capture on every path (cold, warm, killed, timed
out, several ranks, merged per-rank reports).

Other reports: nsys writes capture bounds into ANALYSIS_DETAILS, but on a clock that is not always the events'
(recordings made with a capture range or `nsys start`/`stop` carry their events on the recording's own clock,
from 0 to `duration`, and the bounds on the session's).  An overlap of bounds and events proves nothing.  The bounds
are used only when the events lie inside them and do NOT also fit the recording's own clock [0, duration]; otherwise
the capture is the events' own span, and `note` says why.
"""
from __future__ import annotations

from dataclasses import dataclass

import re

from ..inside.marks import CELL_END_MARK, OWN_END_MARK, OWN_START_MARK  # the process marks its start and end
OWN_SOURCES = ("cell range", "ranks' cell ranges", "process marks")


@dataclass(frozen=True)
class CaptureSpan:
    start_ns: int           # the capture span, on the report's clock
    end_ns: int
    source: str             # "cell range" | "ranks' cell ranges" | "process marks" | "capture bounds" | "events" | "none"
    note: str | None        # how the span was decided, when it was not the cell's range
    origin_ns: int          # x = 0 of a timeline: the capture start
    axis_end_ns: int        # end of a timeline's axis: the capture end, or the last event when one ends later

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def own(self) -> bool:
        """Decided by nsight-magic's own range or marks (not by nsys's bounds or the events)."""
        return self.source in OWN_SOURCES

    def with_events(self, events: tuple[int | None, int | None] | None) -> "CaptureSpan":
        """The same span with the axis stretched over every event (x = 0 stays the capture start)."""
        lo, hi = events if events else (None, None)
        if lo is None or hi is None:
            return self
        return CaptureSpan(self.start_ns, self.end_ns, self.source, self.note, self.origin_ns,
                           max(self.axis_end_ns, int(hi)))


def own_span(ranges, marks, last_event_ns: int | None) -> CaptureSpan | None:
    """The capture from nsight-magic's own rows: `ranges` [(pid, start, end or None)] of the cell ranges, `marks`
    [(pid, t, text)] in our domain.  A range never closed (the process was stopped) ends at the last event.  A
    range whose push nsys dropped is known by the mark made as it closed, which carries its length."""
    lost = None
    if not ranges:
        ranges = [(pid, t - int(m.group(1)), t) for pid, t, text in marks
                  if (m := _CELL_END.search(str(text))) is not None]
        lost = ranges and ("the cell range's start was not recorded (nsys drops the first milliseconds after "
                           "`nsys start` in a process that has started CUDA): it is its end less its length")
    if ranges:
        starts = [int(s) for _, s, _ in ranges]
        ends = [int(e) if e is not None else None for _, _, e in ranges]
        open_ = ends.count(None)
        closed = [e for e in ends if e is not None]
        end = max(closed + ([int(last_event_ns)] if open_ and last_event_ns is not None else []), default=None)
        if end is None:
            end = max(starts)
        a = min(starts)
        pids = {p for p, _, _ in ranges}
        source = "cell range" if len(pids) == 1 else "ranks' cell ranges"
        note = None
        if len(pids) > 1:
            note = f"from the first rank's cell start to the last rank's cell end ({len(pids)} processes)"
        if open_:
            note = ((note + "; ") if note else "") + (
                f"{open_} cell range{'s were' if open_ > 1 else ' was'} never closed (the process was stopped): "
                "the capture ends at the last event")
        if lost:
            note = ((note + "; ") if note else "") + lost
        return CaptureSpan(a, max(end, a), source, note, a, max(end, a))
    starts = [int(t) for _, t, text in marks if str(text).endswith(OWN_START_MARK)]
    if starts:
        ends = [int(t) for _, t, text in marks if str(text).endswith(OWN_END_MARK)]
        a = min(starts)
        b = max(ends) if ends else (int(last_event_ns) if last_event_ns is not None else a)
        note = None if ends else "the profiled process never marked its end: the capture ends at the last event"
        return CaptureSpan(a, max(a, b), "process marks", note, a, max(a, b))
    return None


_CELL_END = re.compile(re.escape(CELL_END_MARK) + r" (\d+) ns$")


def foreign_span(bounds: tuple[int | None, int | None, int | None] | None,
                 events: tuple[int | None, int | None] | None) -> CaptureSpan:
    """The capture of a report without our rows: `bounds` (startTime, stopTime, duration) of ANALYSIS_DETAILS,
    `events` the [first start, last end] of its timed events."""
    a, b, dur = bounds if bounds else (None, None, None)
    lo, hi = events if events else (None, None)
    have_bounds = a is not None and b is not None and b >= a
    if lo is None or hi is None:
        if have_bounds:
            return CaptureSpan(int(a), int(b), "capture bounds", "the report holds no events", int(a), int(b))
        return CaptureSpan(0, 0, "none", "the report holds neither capture bounds nor events", 0, 0)
    lo, hi = int(lo), int(max(hi, lo))
    if not have_bounds:
        return CaptureSpan(lo, hi, "events", "the report has no capture bounds (ANALYSIS_DETAILS): the events' "
                                             "span is the capture", lo, hi)
    a, b = int(a), int(b)
    dur = int(dur) if dur is not None else b - a
    inside = a <= lo and hi <= b
    own_clock = 0 <= lo and hi <= dur  # a recording's own clock: events from 0 to its duration
    if inside and not own_clock:
        return CaptureSpan(a, b, "capture bounds", None, a, b)
    why = ("they do not contain the events" if not inside else
           "the events also fit the recording's own clock [0, duration], so the bounds' clock is not proven")
    note = f"the capture bounds [{a}, {b}] ns are not used ({why}): the events' span [{lo}, {hi}] ns is the capture"
    return CaptureSpan(lo, hi, "events", note, lo, hi)
