"""The finish stage of the notebook's profiles, in the background.

A %%nsys / %%ncu cell returns as soon as its code has finished in the profiled process and its output and --return
values are back (the record stage, profilers/).  What is left runs here, in a thread, while the user goes on:

    Recording.finish()   the profiler's report written (warm: `nsys stop`; cold: nsys exits), imported, exported
    read                 the report opened, its columnar cache and summary.json written
    draw                 the view built (views/output.py), view.html saved, the cell's output filled in place

Each profile is one ProfileJob.  Its folder holds finishing.json while it runs, so listings (store.list_profiles,
the Lab sidebar) do not take it for a finished profile; a job that ends for any reason removes it, so a folder that
keeps it was cut short by the kernel's end.  `wait_for()` / `last()` wait for a job; Ctrl-C (interrupt()) stops
what can be stopped and keeps what the profiler wrote; the kernel's exit stops every job (shutdown()).
The thread runs in the context of the cell that started it, so what it publishes belongs to that cell.
"""
from __future__ import annotations

import atexit
import contextvars
import errno
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from .errors import NsightMagicError, ReportError
from .heap import give_back_freed_memory
from .store import (FINISHING_FILE, clear_finishing, finishing_state, mark_finishing, mark_interrupted,
                    write_summary_file)

_JOBS: list["ProfileJob"] = []
_LOCK = threading.Lock()
# finished jobs that keep their opened report (and the view's bundle) in memory: the newest ones (last(), the
# next %nsys_diff); older ones close theirs and open it again from the folder when asked (a kernel that profiled
# a hundred cells must not hold a hundred reports: 47-55 MB each measured with 100k NVTX ranges)
KEEP_OPEN = 2



# what the finish stage reads and draws with (tests/test_layout.py checks that each exists)
FINISH_MODULES = ("readers.nsys", "report", "views.report_view", "views.timeline", "views.picture")


_IMPORTING: list[threading.Thread] = []  # import_finish_stage's thread


def imports_settled(timeout: float = 60.0) -> None:
    """Wait for import_finish_stage's imports to end before this thread imports the same modules: two threads
    importing one package at once can each see a module of it half made ("cannot import name ... from partially
    initialized module": seen once in a full test run, a %nsys_load right after %load_ext)."""
    for t in list(_IMPORTING):
        if t is not threading.current_thread():
            t.join(timeout)


def import_finish_stage() -> threading.Thread:
    """Import, in a background thread, what the finish stage reads and draws with (the SQLite reader, pandas,
    Bokeh, PIL: about 1 s of a 2-core machine), so that a kernel's first profile is drawn as soon as later ones.
    Whatever else imports them first waits for it (imports_settled)."""
    def run():
        import importlib

        for name in FINISH_MODULES:
            try:
                importlib.import_module(f"{__package__}.{name}")
            except Exception:  # noqa: BLE001 - the finish imports it again and says what is wrong
                pass

    t = threading.Thread(target=run, daemon=True, name="nsight-magic imports")
    _IMPORTING.append(t)
    t.start()
    return t


def prefetch(folder: Path) -> threading.Thread:
    """While nsys writes the recording (seconds of `nsys stop` in which the finish stage only waits), parse what
    the profiled process left beside it: torch's memory snapshots, which the report's read then takes."""
    def run() -> None:
        imports_settled()
        from .readers.gpu_memory import prefetch_snapshots

        prefetch_snapshots(folder)

    t = threading.Thread(target=run, daemon=True, name=f"nsight-magic prefetch {Path(folder).name}")
    t.start()
    return t


class ProfileJob:
    """One profile's finish stage (see the module docstring)."""

    def __init__(self, recording, *, render: bool = True, thresholds: dict | None = None,
                 on_phase: Callable[[str, float], None] | None = None,
                 on_done: Callable[["ProfileJob"], None] | None = None, loader: bool = False,
                 live: bool = True, on_drawn: Callable[["ProfileJob", dict], None] | None = None):
        self.recording = recording
        self.loader = loader        # the view carries BokehJS (the notebook's first view)
        self.live = live            # with its live part (a frontend that draws later: JupyterLab, Notebook 7)
        self.folder = Path(recording.folder.path)
        self.tool = recording.tool
        self.render, self.thresholds = render, thresholds
        self.on_phase = on_phase or (lambda phase, t: None)
        self.on_done = on_done or (lambda job: None)
        self.on_drawn = on_drawn    # given the view's live part first, before its saved copy is made
        self.done = threading.Event()
        self.cancel = threading.Event()
        self.result = None          # the RunResult
        self.report = None          # the opened report (NsysReport / NcuReport)
        self.bundle: dict | None = None
        self.error: str | None = None
        self.phase = "starting"
        self.t0 = time.monotonic()
        self.finish_s: float | None = None
        self.thread: threading.Thread | None = None
        self.released = False       # its report was closed to free memory (report_or_raise opens it again)
        self.phases: dict = {}      # seconds of the finish stage's own steps: read_s, drawn_s, draw_s
        self.had_report = False

    # ---- the stage ------------------------------------------------------------------------------------------
    def start(self) -> "ProfileJob":
        mark_finishing(self.folder)
        with _LOCK:
            _JOBS.append(self)
            done = [j for j in _JOBS if not j.running and not j.released]
            older = done[:max(0, len(done) - KEEP_OPEN + 1)]  # this one counts as one of the KEEP_OPEN
        for j in older:
            j.release()
        _beat()
        ctx = contextvars.copy_context()
        self.thread = threading.Thread(target=ctx.run, args=(self._run,), daemon=True,
                                       name=f"nsight-magic finish {self.folder.name}")
        self.thread.start()
        return self

    def _status(self, phase: str, _t: float | None = None) -> None:
        self.phase = phase
        try:
            self.on_phase(phase, time.monotonic() - self.t0)
        except Exception:  # noqa: BLE001 - a display problem must not stop the finish
            pass

    def _run(self) -> None:
        completed = False
        ahead = prefetch(self.folder) if self.tool == "nsys" and self.render else None
        try:
            self.result = self.recording.finish(self._status, self.cancel)
            if not self.cancel.is_set() and (self.result.sqlite or self.result.report_file):
                self._status("reading the report")
                imports_settled()
                from .report import open_report

                if ahead is not None:  # its result is taken by this read (not parsed twice, not left behind)
                    ahead.join()
                t = time.monotonic()
                report = open_report(self.folder)
                from .memory_room import check_room

                check_room(report, f"%nsys_load {self.folder}")  # before any table is read: the kernel lives on
                self.report = report
                self.phases["read_s"] = time.monotonic() - t
                if not self.cancel.is_set():
                    self._status("drawing the view" if self.render else "summarising")
                    from .views.output import profile_bundle

                    t = time.monotonic()

                    def drawn(bundle: dict) -> None:
                        self.phases["drawn_s"] = time.monotonic() - t  # the live view, before the saved copy
                        try:
                            (self.on_drawn or (lambda job, b: None))(self, bundle)
                        except Exception:  # noqa: BLE001 - a display problem must not stop the finish
                            pass

                    self.bundle = profile_bundle(self.report, self.folder, render=self.render,
                                                 thresholds=self.thresholds, lines=self.new_messages(),
                                                 loader=self.loader, live=self.live,
                                                 drawn=drawn if self.on_drawn is not None else None)
                    self.phases["draw_s"] = time.monotonic() - t
                    if self.tool == "nsys":  # its verdict, findings and timeline kept: %nsys_load takes them
                        from .saved_analysis import save

                        t = time.monotonic()
                        save(self.report.data, self.thresholds)
                        self.phases["keep_s"] = time.monotonic() - t
            completed = True
        except NsightMagicError as e:
            self.error = str(e)
            completed = True
            if self.result is not None and not self.cancel.is_set() and self.folder.is_dir():
                # finished, with nothing to show: listings (the Lab sidebar) say why instead of "not finished"
                write_summary_file(self.folder, {"tool": self.tool, "error": self.error.splitlines()[0][:500]})
        except Exception as e:  # noqa: BLE001 - a bug of ours: said in one line, the files are kept
            self.error = _folder_trouble(self.folder, e) or \
                f"could not show the profile ({type(e).__name__}: {e}); the files are in {self.folder}/"
            completed = True
        finally:
            self.finish_s = time.monotonic() - self.t0
            self._write_timings()
            if completed:
                clear_finishing(self.folder)
            try:
                self.on_done(self)
            except Exception:  # noqa: BLE001
                pass
            give_back_freed_memory()  # the reading's and the drawing's temporaries
            self.done.set()

    def _write_timings(self) -> None:
        """timings.json: how long each step took (the cell's wait, the profiler's writing, the export, the view)."""
        data = {"record_s": round(self.recording.record_s, 3), "finish_s": round(self.finish_s or 0.0, 3),
                **({k: (round(v, 3) if isinstance(v, float) else v) for k, v in self.result.timings.items()}
                   if self.result is not None else {}), **{k: round(v, 3) for k, v in self.phases.items()}}
        try:
            (self.folder / "timings.json").write_text(json.dumps(data, indent=1) + "\n")
        except OSError:
            pass

    def new_messages(self) -> list[str]:
        """What the finish stage found to say that the record stage had not said already."""
        if self.result is None:
            return []
        said = set(self.recording.messages) | set(self.recording.notes)
        return [f"nsight-magic: {m}" for m in self.result.notes + self.result.messages if m not in said]

    # ---- from the notebook ----------------------------------------------------------------------------------
    def wait(self, timeout: float | None = None) -> bool:
        """Until the job has ended (True) or `timeout` s have passed (False); Ctrl-C interrupts the waiting."""
        end = None if timeout is None else time.monotonic() + timeout
        while not self.done.is_set():
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return False
            self.done.wait(0.1 if left is None else min(0.1, left))
        return True

    def interrupt(self) -> None:
        """Ctrl-C: stop what can be stopped (an export, the reading, the drawing); a warm session's `nsys stop` is
        let finish, since it writes the report."""
        self.cancel.set()

    @property
    def running(self) -> bool:
        return not self.done.is_set()

    def release(self) -> None:
        """Drop what the finished job holds (its opened report, its sqlite connection, the view's bundle, already
        shown); the files stay, and report_or_raise() opens the report again."""
        if self.running or self.released:
            return
        report, self.report, self.bundle, self.released = self.report, None, None, True
        self.had_report = report is not None
        if report is not None:
            try:
                report.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
            give_back_freed_memory()

    def report_or_raise(self):
        """The opened report once the job is done; ReportError saying why there is none."""
        if self.report is not None:
            return self.report
        if self.released and self.had_report:
            from .report import open_report

            return open_report(self.folder)
        if self.error:
            raise ReportError(self.error)
        if self.cancel.is_set():
            raise ReportError(f"{self.folder.name}: interrupted before its report was read; %nsys_load "
                              f"{self.folder} shows it")
        msgs = "; ".join(self.result.messages) if self.result is not None else ""
        raise ReportError(f"{self.folder.name} left no report{(': ' + msgs) if msgs else ''}")


def _folder_trouble(folder: Path, e: Exception) -> str | None:
    """What happened to the profile folder itself while the profile was finished (deleted, made read-only), in
    words; None when the folder is fine."""
    if not folder.exists():
        return (f"the profile folder {folder}/ was deleted while its profile was being written (by the cell or "
                "another program): nothing is left to show; profile the cell again")
    if isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return (f"cannot write in the profile folder {folder}/ any more ({e.strerror}): make it writable and "
                f"open what was written with %nsys_load {folder}")
    return None


BEAT_S = 5.0  # finishing.json is touched this often while its profile finishes: a frontend that finds it untouched
#              for much longer (the Lab sidebar: a minute) knows its kernel stopped, also one restarted under its id
_BEATING: list[threading.Thread] = []


def _beat() -> None:
    """Touch the finishing.json of every profile finishing here, every BEAT_S, while there are any."""
    with _LOCK:
        if _BEATING and _BEATING[0].is_alive():
            return

        def run() -> None:
            while True:
                running = pending()
                if not running:
                    with _LOCK:  # a job started meanwhile finds this thread still alive: it beats for it
                        if not any(j.running for j in _JOBS):
                            _BEATING.clear()
                            return
                    continue
                for j in running:
                    try:
                        os.utime(j.folder / FINISHING_FILE)
                    except OSError:  # removed meanwhile (finished), or the folder went away
                        pass
                time.sleep(BEAT_S)

        t = threading.Thread(target=run, daemon=True, name="nsight-magic finishing beat")
        _BEATING[:] = [t]
        t.start()


def start(recording, **kw) -> ProfileJob:
    """Start the finish stage of `recording` (a profilers.Recording) in the background."""
    return ProfileJob(recording, **kw).start()


def jobs() -> list[ProfileJob]:
    with _LOCK:
        return list(_JOBS)


def pending() -> list[ProfileJob]:
    return [j for j in jobs() if j.running]


def job_for(path) -> ProfileJob | None:
    """The job finishing the profile folder `path` (or holding the report file `path`), newest first."""
    p = Path(path).expanduser().resolve()
    for j in reversed(jobs()):
        f = j.folder.resolve()
        if p == f or f in p.parents:
            return j
    return None


def _folder_of(path) -> Path | None:
    """The profile folder `path` is, or is a file of."""
    p = Path(path).expanduser()
    for f in (p, p.parent):
        if f.is_dir() and (f / FINISHING_FILE).exists():
            return f
    return None


def wait_for_profile(path, say: Callable[[str], None] | None = None, poll_s: float = 0.2) -> None:
    """Wait while the profile at `path` (a folder, or a file in one) is being finished, here or by another live
    process (its finishing.json), with a line saying so; Ctrl-C stops the waiting (KeyboardInterrupt)."""
    j = job_for(path)
    if j is not None and j.running:
        if say:
            say(f"waiting for profile {j.folder.name} to finish loading ({j.phase}); Ctrl-C stops waiting")
        j.wait()
        return
    folder = _folder_of(path)
    if folder is None or finishing_state(folder) != "finishing":
        return
    if say:
        say(f"waiting for profile {folder.name} to finish loading in the kernel that made it; Ctrl-C stops waiting")
    while finishing_state(folder) == "finishing":
        time.sleep(poll_s)


def wait_for(paths, say: Callable[[str], None] | None = None) -> None:
    """Wait for the profiles among `paths` (folders or files in them) that are still being finished."""
    for path in paths:
        wait_for_profile(path, say)


def wait_under(root, say: Callable[[str], None] | None = None) -> None:
    """Wait for the profiles being finished whose folders are in `root` (a folder of profiles)."""
    r = Path(root).expanduser().resolve()
    mine = [j.folder for j in pending() if j.folder.resolve().parent == r]
    others = [d for d in r.iterdir() if (d / FINISHING_FILE).exists()] if r.is_dir() else []
    wait_for([*mine, *(d for d in others if d.resolve() not in {m.resolve() for m in mine})], say)


def last(wait: bool = True):
    """The newest profile's report (NsysReport or NcuReport) made in this process, waiting for it while it is
    still loading; without one, the newest finished profile beside the notebook."""
    js = jobs()
    if js:
        j = js[-1]
        if wait:
            if j.running:  # seconds of silence read as a hang: say what is waited for
                print(f"nsight-magic: waiting for profile {j.folder.name} to finish loading ({j.phase}); Ctrl-C "
                      "stops waiting", file=sys.stderr, flush=True)
            j.wait()
        elif j.running:
            raise ReportError(f"{j.folder.name} is still loading ({j.phase}); last() waits for it")
        return j.report_or_raise()
    from .report import open_report
    from .store import list_profiles, profiles_root

    root = profiles_root(None)
    if wait:
        wait_under(root)
    profiles = list_profiles(root)
    if profiles.empty:
        raise ReportError(f"no profile yet: {root} holds none; profile a cell with %%nsys or %%ncu")
    return open_report(profiles["folder"].iloc[0])


def interrupt_pending() -> bool:
    """Ctrl-C while the kernel is idle: stop the finish stages still running.  Whether there was one."""
    running = pending()
    for j in running:
        j.interrupt()
    return bool(running)


def shutdown(timeout: float = 2.0) -> None:
    """The kernel exits: stop every job (an export in progress is killed, its partial file removed); a job that
    could not end leaves its folder marked unfinished."""
    running = pending()
    for j in running:
        j.interrupt()
    end = time.monotonic() + timeout
    for j in running:
        j.done.wait(max(0.0, end - time.monotonic()))
        if not j.done.is_set():
            mark_interrupted(j.folder)


atexit.register(shutdown)
