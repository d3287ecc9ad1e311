"""What a profiled cell shows while it runs and loads: one status line updated in place, the profiled process's
output streamed below it (bounded), then the output where the profile appears ("loading", its phases, the view)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from IPython.display import display

MAX_STREAMED_CHARS = 200_000


class LiveStatus:
    """One status line in the cell output, updated in place; the child's output streams below it."""

    def __init__(self, tool: str, quiet: bool):
        self.tool, self.quiet, self.handle, self.streamed = tool, quiet, None, 0

    def __call__(self, phase: str, elapsed: float) -> None:
        if self.quiet:
            return
        self._show(f"{self.tool}: {phase_words(phase)} ({elapsed:.1f} s)")

    def _show(self, text: str) -> None:
        if self.quiet:
            return
        if self.handle is None:
            self.handle = display({"text/plain": text}, raw=True, display_id=True)
        else:
            self.handle.update({"text/plain": text}, raw=True)

    def recorded(self, rec, loading: bool) -> None:
        """The cell's code has finished: its outcome, and that the profile loads below (or is loaded now)."""
        more = "; the profile loads below" if loading else ""
        self._show(f"{self.tool}: {rec.status} in {rec.record_s:.1f} s{more}, saved in {rec.folder.path}/")

    def finished(self, job) -> None:
        """The profile is loaded (or not)."""
        if job.result is None:
            return
        rec, r = job.recording, job.result
        what = "profile ready" if job.report is not None else "no profile" if not job.cancel.is_set() else \
            "profile not loaded (interrupted)"
        self._show(f"{self.tool}: {r.status} in {rec.record_s:.1f} s, {what} {job.finish_s:.1f} s later, saved in "
                   f"{r.folder.path}/")

    def output(self, stream: str, text: str) -> None:
        """Stream the cell's output, up to MAX_STREAMED_CHARS: a notebook must stay small (all of it is saved)."""
        if self.quiet or self.streamed >= MAX_STREAMED_CHARS:
            return
        room = MAX_STREAMED_CHARS - self.streamed
        self.streamed += len(text)
        out = sys.stdout if stream == "stdout" else sys.stderr
        out.write(text[:room])
        if len(text) > room:
            out.write(f"\n[nsight-magic: output cut after {MAX_STREAMED_CHARS:,} characters; all of it is in "
                      f"stdout.txt / stderr.txt in the profile folder]\n")


def phase_words(phase: str) -> str:
    return {"importing": "loading setup and variables", "running": "running cell",
            # a warm cell between its variables' loading and `nsys start` (which waits for the previous `nsys stop`)
            "loaded": "starting the recording", "ready": "starting the recording",
            "cell-done": "cell finished; the profiler is writing its report",
            "leftovers": "stopping processes the cell left running",
            "finished": "cell finished", "exporting": "exporting report"}.get(phase, phase)


class ProfileOutput:
    """The output below the cell's own where its profile appears: "loading" while the finish stage runs in the
    background (a status line our JupyterLab extension can tell from one whose kernel stopped first), then the view
    (or one line saying why there is none), replaced in place (a display handle).  The first view of a notebook
    carries BokehJS (views/bokehjs.py)."""

    MIN_UPDATE_S = 0.5  # phase lines at most this often: each update is a message to every open frontend

    def __init__(self, tool: str, status: LiveStatus, folder: Path):
        from .views.output import status_bundle

        self.tool, self.status, self.folder, self.last = tool, status, folder, 0.0
        self.drawn_first = False
        self.handle = display(status_bundle(f"{tool}: loading the profile...{self._hint()}", tool=tool,
                                            folder=folder), raw=True, display_id=True)

    def _hint(self) -> str:
        # for frontends without our extension: what to do if this line never changes
        return f" (if its kernel stops first: %nsys_load {self.folder})"

    def phase(self, phase: str, elapsed: float) -> None:
        from .views.output import status_bundle

        now = time.monotonic()
        if now - self.last < self.MIN_UPDATE_S or self.drawn_first:
            return
        self.last = now
        self.handle.update(status_bundle(f"{self.tool}: loading the profile: {phase_words(phase)} ({elapsed:.1f} s)"
                                         f"{self._hint()}", tool=self.tool, folder=self.folder), raw=True)

    def drawn(self, job, bundle: dict) -> None:
        """The view's live part, shown before its saved copy is made (done() sends the whole view)."""
        self.drawn_first = True
        self.handle.update(bundle, raw=True)

    def done(self, job) -> None:
        from .views import bokehjs
        from .views.output import READY_KEY

        if job.loader and job.bundle is None:
            bokehjs.not_sent()  # the next view carries BokehJS
        self.status.finished(job)
        meta = {READY_KEY: {"state": "ready" if job.bundle else "failed", "folder": str(job.folder)}}
        if job.bundle is not None:
            self.handle.update(job.bundle, metadata=meta, raw=True)
            return
        lines = job.new_messages() or ([f"nsight-magic: {job.error}"] if job.error else [])
        if job.error and f"nsight-magic: {job.error}" not in lines:
            lines.append(f"nsight-magic: {job.error}")
        if not lines:
            lines = [f"nsight-magic: no profile to show; the files are in {job.folder}/"]
        self.handle.update({"text/plain": "\n".join(lines)}, metadata=meta, raw=True)
