"""Python call stacks sampled in the profiled process while the cell runs (issue 45): which of the user's code the
host was running at any moment, for the timeline, the Python tab and the advice.

Nsight Systems can sample Python (`--python-sampling`, 2024.1+), but its 2025.3 export to SQLite carries none of
the Python frames (only the native ones), its `nsys stop` takes 4-5 s longer with them, and Debian's 2022.4 has no
such switch.  So a thread of ours samples `sys._current_frames()` every `interval` (5 ms: 200 Hz, as py-spy's
default 100 Hz and pyinstrument's 1 ms bracket it) and writes, after the cell, python_samples.json:

    clock     the process's time.monotonic_ns() at an NVTX mark in nsight-magic's domain whose text carries the same
              value ("nsight-magic clock N"): the reader places every sample on the report's time axis by that mark;
              clocks: more such values, marked as the cell ends (nsys may drop the first mark: the first
              milliseconds after `nsys start` in a process that has started CUDA)
    frames    [file, function, first line] per code object seen
    stacks    each distinct stack, leaf first, as [frame, line, frame, line, ...]
    samples   parallel lists: t (ns since the clock's value), tid (the thread's native id: nsys's tid), stack
    threads   the sampled threads' Python names by native id ("IOPub", "MainThread", the program's own names)
    machinery_tids  the native ids of the sampled threads that are the machinery's (is_machinery: the kernel's,
              nsight-magic's finishing and importing threads), whatever code they ran (an import runs a library's)
    passes    when the sampler held the GIL: parallel lists t (ns since the clock's value, as samples), ns (how
              long) and lead (how long before t its sleep ended and it asked for the GIL), one per pass over the
              threads; sampler_tid: its own native id.  A thread of the program that
              waited for the GIL meanwhile waited for us: the reader leaves those waits out of the program's time
    syncs     where the program made the host wait for the GPU: parallel lists t, tid, stack (as samples), one per
              synchronising CUDA operation torch flags (`torch.cuda.set_sync_debug_mode("warn")` during the cell:
              `.item()`, a boolean mask, `nonzero`, `.cpu()`), at the operation's own Python line, not where a
              sample happened to fall; at most MAX_SYNCS, then the mode is set back (syncs_dropped: how many)

A sample takes the GIL for tens of microseconds; the thread sleeps a random 0.5-1.5 intervals in between (no
phase lock with a loop whose steps last about an interval).  While the sampler is the only other thread of the
program (the threads of the machinery that runs the cell, such as the in-place kernel's IOPub, heartbeat, control
and history threads, mostly wait in the OS and do not count),
the interpreter's switch interval is at most SWITCH_S: a thread waiting for the GIL makes the running one let go
only after that long, and at CPython's 5 ms the samples fell where the cell released the GIL (its CUDA calls),
never in a 4 ms pure-Python function between them (seen on the H100).  As soon as the program has a thread of its
own the interval is given back: between its threads it sets how the GIL changes hands (the host_wait rule reads
those 5 ms waits), and the profile must show the program as it runs plain.  A C call that holds the GIL
(json.dumps, pickling) is still sampled only when it returns: the reader gives each sample the time since the thread's previous one, so that time falls on what ran
next.  Samples stop at MAX_SAMPLES (then
every other one is dropped and the interval doubled): a long cell keeps a bounded file.
"""
from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from pathlib import Path

from .marks import CLOCK_MARK  # the contract with readers/python_samples.py

SAMPLES_FILE = "python_samples.json"
INTERVAL_S = 0.005
SWITCH_S = 0.0005
MAX_SAMPLES = 200_000
MAX_SYNCS = 20_000
MARK_WINDOW_NS = 200_000  # a clock mark made within this of its clock's reading places the samples well enough
MARK_TRIES = 5
SYNC_TEXT = "called a synchronizing CUDA operation"   # torch's sync-debug warning (c10/cuda warn_or_error_on_sync)
_ENCODER = json.JSONEncoder(separators=(",", ":"))
BUSY_PASSES = 3  # passes in a row a program thread is seen outside WAITING_FILES: it runs Python
# where a sampled thread is waiting, not running Python: its innermost frame in one of these modules (a queue's
# get, an Event's wait, select, a socket, a subprocess, asyncio's loop, multiprocessing's pipes, zmq)
WAITING_FILES = frozenset({"threading.py", "queue.py", "selectors.py", "socket.py", "subprocess.py", "connection.py",
                           "synchronize.py", "popen_fork.py", "base_events.py", "ssl.py", "socketserver.py"})


def waiting_file(file: str) -> bool:
    """Whether a frame of this file is a thread waiting (WAITING_FILES, or zmq's sockets)."""
    file = str(file).replace("\\", "/")
    return file.rsplit("/", 1)[-1] in WAITING_FILES or "/zmq/" in file


def samples_name(rank: int | None = None) -> str:
    return SAMPLES_FILE if rank is None else f"python_samples.rank{rank}.json"


class PythonSampler:
    """A handle (as annotate_cell's): start() before the cell, remove() after it writes the file."""

    def __init__(self, path: Path, interval: float = INTERVAL_S, domain: str | None = None, on_busy_thread=()):
        self.path, self.interval, self.domain = Path(path), interval, domain
        # called once, when another thread of the program is seen running Python (not waiting) BUSY_PASSES passes
        # in a row: it takes the GIL from the cell's thread (inside/memory_history.py stops taking stacks then)
        self.on_busy_thread = tuple(on_busy_thread)
        self._cell_ident: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.frames: list[list] = []
        self._frame_ids: dict = {}
        self.stacks: list[list[int]] = []
        self._stack_ids: dict = {}
        self.t: list[int] = []
        self.tid: list[int] = []
        self.stack: list[int] = []
        self.clock_ns = 0
        self._switch: float | None = None
        self._lowered = False
        self.names: dict[int, str] = {}
        self.machinery: set[int] = set()  # native ids of the machinery's threads (is_machinery), the cell's aside
        self.clocks: list[int] = []   # later clock marks (pause)
        self.pass_t: list[int] = []   # each pass over the threads: when it began (GIL held) and how long it took
        self.pass_ns: list[int] = []
        self.pass_lead: list[int] = []  # how long before `now` the sleep ended (it asked for the GIL then)
        self.native_id = 0
        self._lock = threading.Lock()  # new frames and stacks: the sampler's thread and the cell's (syncs) add them
        self.syncs = _SyncRecorder(self)

    def start(self) -> "PythonSampler":
        self.clock_ns = self._mark()
        self.clocks = []
        self._switch = sys.getswitchinterval()
        self._lowered = False
        self._cell_ident = threading.get_ident()
        self.syncs.start()
        self._thread = threading.Thread(target=self._run, name="nsight-magic sampler", daemon=True)
        self._thread.start()
        return self

    def _native_ids(self) -> dict[int, int]:
        out = {}
        for t in threading.enumerate():
            if t.ident is not None and t.native_id:
                out[t.ident] = t.native_id
                if t.native_id not in self.names:
                    self.names[t.native_id] = t.name
                    if t.ident != self._cell_ident and is_machinery(t):
                        self.machinery.add(t.native_id)
        return out

    def _program_threads(self) -> set[int]:
        """The idents of the program's own threads other than the cell's (ours and the machinery's aside)."""
        me = threading.get_ident()
        return {t.ident for t in threading.enumerate()
                if t.ident not in (me, self._cell_ident) and t.ident is not None and not is_machinery(t)}

    @staticmethod
    def _known_threads() -> set[int | None]:
        """The idents of the threads `threading` knows (sys._current_frames may show one before it does)."""
        return {t.ident for t in threading.enumerate()}

    def _alone(self) -> bool:
        """Whether the cell's thread is the program's only thread (ours and the machinery's aside)."""
        me = threading.get_ident()
        return sum(1 for t in threading.enumerate() if t.ident != me and not is_machinery(t)) <= 1

    def _run(self) -> None:
        _name_os_thread(b"nsight-magic-py")  # the report's thread rows name it (its waits are OS runtime calls)
        self.native_id = threading.get_native_id()
        me = threading.get_ident()
        native = self._native_ids()
        interval = self.interval
        rng = random.Random()
        wait = interval
        self._lower(self._alone())
        program, threads = self._program_threads(), self._known_threads()
        running: dict[int, int] = {}  # a program thread's consecutive passes seen running Python
        told = not self.on_busy_thread
        due = time.monotonic_ns() - self.clock_ns + int(wait * 1e9)
        while not self._stop.wait(wait):
            now = time.monotonic_ns() - self.clock_ns
            current = sys._current_frames()
            # a thread came or went: is the cell's still alone, which are the program's?  By identity (one ending as
            # another starts keeps the count), and again until `threading` knows a new one's ident (a new thread
            # runs Python before it has one: a refresh then left it out of the program's, never to be watched)
            if current.keys() != threads:
                self._lower(self._alone())
                program, threads = self._program_threads(), self._known_threads()
            for ident, frame in current.items():
                if ident == me:
                    continue
                if not told and ident in program:
                    running[ident] = 0 if waiting_file(frame.f_code.co_filename) else running.get(ident, 0) + 1
                    if running[ident] >= BUSY_PASSES:
                        told = True
                        for call in self.on_busy_thread:
                            call()
                tid = native.get(ident)
                if tid is None:
                    native = self._native_ids()
                    tid = native.get(ident, ident)
                sid = self.stack_of(frame)
                self.t.append(now)
                self.tid.append(tid)
                self.stack.append(sid)
            del frame, current
            self.syncs.check()
            # the pass: from when it held the GIL to its end (it may have let the GIL go meanwhile: the switch
            # interval; on this 2-core machine passes of a CPU training loop lasted 0.5 ms, median)
            self.pass_t.append(now)
            self.pass_ns.append(time.monotonic_ns() - self.clock_ns - now)
            # from when the sleep ended: the thread asked for the GIL then, and held it through Event.wait's own
            # Python code before `now` (under load that took more than the reader's 0.2 ms margin)
            self.pass_lead.append(max(0, now - due))
            if len(self.t) >= MAX_SAMPLES:  # keep a bounded record: every other sample, half the rate from now
                self.t, self.tid, self.stack = self.t[::2], self.tid[::2], self.stack[::2]
                self.pass_t, self.pass_ns, self.pass_lead = self.pass_t[::2], self.pass_ns[::2], self.pass_lead[::2]
                interval *= 2
            # the next one about an interval after this one was due (waiting for the GIL took part of it), at a
            # random point of it: a loop whose step lasts about an interval is not seen at the same phase every
            # time (seen on the H100: 5 ms steps sampled only in their forward, never in their 3 ms of JSON)
            wait = max(interval * rng.uniform(0.5, 1.5) - (time.monotonic_ns() - self.clock_ns - now) / 1e9,
                       interval / 5)
            due = time.monotonic_ns() - self.clock_ns + int(wait * 1e9)

    def _new_frame(self, code) -> int:
        with self._lock:  # get-or-add as one step: both threads may meet the same code first
            fid = self._frame_ids.get(code)
            if fid is None:
                fid = self._frame_ids[code] = len(self.frames)
                self.frames.append([code.co_filename, code.co_name, code.co_firstlineno])
            return fid

    def _new_stack(self, key: tuple) -> int:
        with self._lock:
            sid = self._stack_ids.get(key)
            if sid is None:
                sid = self._stack_ids[key] = len(self.stacks)
                self.stacks.append(list(key))
            return sid

    def stack_of(self, frame) -> int:
        """The id of `frame`'s stack (leaf first), added to the tables if new."""
        key = []
        while frame is not None:
            code = frame.f_code
            fid = self._frame_ids.get(code)
            if fid is None:
                fid = self._new_frame(code)
            key.append(fid)
            key.append(frame.f_lineno or 0)
            frame = frame.f_back
        k = tuple(key)
        sid = self._stack_ids.get(k)
        return self._new_stack(k) if sid is None else sid

    def pause(self) -> None:
        """No sample from here on (the cell is over: what runs next is our bookkeeping, and outside the cell's
        range once that is closed); remove() still writes those taken.  A second clock mark, still inside the
        capture."""
        self.syncs.stop()
        self._stop.set()
        if not self.clocks:
            self.clocks.append(self._mark())

    def _mark(self) -> int:
        """A clock mark: the clock read just before an NVTX mark whose text carries it.  The reader places every
        sample as if the mark were made at that reading, so one that took longer than MARK_WINDOW_NS (nvtx's
        import or its domain's creation in the first one, the thread preempted between the two: seen in a loaded
        full run, the samples of a 4 ms sleep placed 10 ms late, in the next line's range) is made again, up to
        MARK_TRIES marks; the promptest one's reading is the clock (the others' texts match no clock)."""
        try:
            import nvtx  # before the clock is read
        except Exception:  # noqa: BLE001 - without the mark the samples cannot be placed: the reader says so
            return time.monotonic_ns()
        best, took = 0, None
        for _ in range(MARK_TRIES):
            now = time.monotonic_ns()
            try:
                nvtx.mark(f"{CLOCK_MARK}{now}", domain=self.domain)
            except Exception:  # noqa: BLE001 - as above
                return now
            late = time.monotonic_ns() - now
            if took is None or late < took:
                best, took = now, late
            if late <= MARK_WINDOW_NS:
                break
        return best

    def remove(self) -> None:
        self.syncs.stop()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._lower(False)
        seen = set(self.tid)
        data = {"clock_ns": self.clock_ns, "clocks": self.clocks, "interval_ns": int(self.interval * 1e9),
                "pid": os.getpid(),
                "frames": self.frames, "stacks": self.stacks,
                "samples": {"t": self.t, "tid": self.tid, "stack": self.stack},
                "passes": {"t": self.pass_t, "ns": self.pass_ns, "lead": self.pass_lead},
                "sampler_tid": self.native_id,
                "syncs": {"t": self.syncs.t, "tid": self.syncs.tid, "stack": self.syncs.stack},
                "syncs_dropped": self.syncs.dropped,
                "threads": {str(k): v for k, v in self.names.items() if k in seen},
                "machinery_tids": sorted(self.machinery & seen)}
        try:
            tmp = self.path.with_name(self.path.name + ".part")
            # an encoder of our own: the cell may have patched json.dumps (--functions json.dumps annotates it)
            tmp.write_text(_ENCODER.encode(data), encoding="utf-8", errors="surrogatepass")
            os.replace(tmp, self.path)
        except Exception as e:  # noqa: BLE001 - the profile without them
            print(f"nsight-magic: the Python samples could not be saved ({type(e).__name__}: {e})", file=sys.stderr)

    def _lower(self, alone: bool) -> None:
        """The switch interval at most SWITCH_S while the sampler and one other thread are all; given back
        otherwise (unless the cell set one of its own meanwhile)."""
        if alone and not self._lowered and self._switch is not None and self._switch > SWITCH_S:
            sys.setswitchinterval(SWITCH_S)
            self._lowered = True
        elif not alone and self._lowered:
            if sys.getswitchinterval() == SWITCH_S:
                sys.setswitchinterval(self._switch)
            self._lowered = False


class _SyncRecorder:
    """torch's sync-debug mode as a recorder: each synchronising CUDA operation of the cell warns from its own
    Python line; the warning is taken here (never shown, never the program's) and its stack kept.

    Only where torch is imported with CUDA and its mode is off (the program's own choice stays), and only while
    our filter decides for the warning: a filter the cell puts in front of it (`simplefilter("error")` would make
    each sync raise) turns the mode off at the sampler's next pass."""

    def __init__(self, sampler: PythonSampler):
        self.sampler = sampler
        self.t: list[int] = []
        self.tid: list[int] = []
        self.stack: list[int] = []
        self.dropped = 0
        self._torch = None
        self._entry = None
        self._shown = None

    def start(self) -> None:
        torch = sys.modules.get("torch")
        setter = getattr(getattr(torch, "_C", None), "_cuda_set_sync_debug_mode", None)
        if setter is None:  # no torch yet, or a build without CUDA
            return
        try:
            if torch.cuda.get_sync_debug_mode() != 0:
                return
            import re
            import warnings

            warnings.filterwarnings("always", message=re.escape(SYNC_TEXT), category=UserWarning)
            self._entry = warnings.filters[0]
            self._shown = warnings.showwarning
            warnings.showwarning = self._show
            torch.cuda.set_sync_debug_mode(1)
            self._torch = torch
        except Exception:  # noqa: BLE001 - a torch without it: the advice names sync lines from samples
            self.stop()

    def _show(self, message, category, filename, lineno, file=None, line=None):
        if self._torch is None or category is not UserWarning or not str(message).startswith(SYNC_TEXT):
            return self._shown(message, category, filename, lineno, file, line)
        if len(self.t) >= MAX_SYNCS:
            self.dropped += 1
            if self.dropped == 1:
                self._mode_off()
            return None
        f = sys._getframe(1)
        while f is not None and f.f_code.co_filename == _WARNINGS_FILE:  # the warnings module's own frames
            f = f.f_back
        self.t.append(time.monotonic_ns() - self.sampler.clock_ns)
        self.tid.append(threading.get_native_id())
        self.stack.append(self.sampler.stack_of(f))
        return None

    def check(self) -> None:
        """(the sampler's thread, each pass) Off as soon as another filter decides for the warning."""
        if self._torch is not None:
            import warnings

            if not warnings.filters or warnings.filters[0] is not self._entry:
                self._mode_off()

    def _mode_off(self) -> None:
        torch, self._torch = self._torch, None
        if torch is not None:
            try:
                torch.cuda.set_sync_debug_mode(0)
            except Exception:  # noqa: BLE001
                pass

    def stop(self) -> None:
        import warnings

        self._mode_off()
        if self._shown is not None and warnings.showwarning == self._show:
            warnings.showwarning = self._shown
        self._shown = None
        if self._entry is not None:
            try:
                warnings.filters.remove(self._entry)
                warnings._filters_mutated()
            except (ValueError, AttributeError):  # the cell replaced the filters (catch_warnings): nothing of ours
                pass
            self._entry = None


def _warnings_file() -> str:
    import warnings

    return warnings.__file__


_WARNINGS_FILE = _warnings_file()


# the machinery that runs a cell: a thread whose class or target lives in these packages is not the program's
_MACHINERY = ("ipykernel", "IPython", "jupyter_client", "zmq", "tornado", "traitlets", "comm", "nsight_magic")


def is_machinery(t: threading.Thread) -> bool:
    if str(t.name).startswith("nsight-magic"):  # ours by name: a target such as contextvars' Context.run has no module
        return True
    target = getattr(t, "_target", None)
    for mod in (type(t).__module__, getattr(target, "__module__", None)):
        if mod and mod.split(".")[0] in _MACHINERY:
            return True
    return False


def _name_os_thread(name: bytes) -> None:
    """The OS thread's name (what nsys shows; Python before 3.14 names only its own Thread object)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.prctl(15, ctypes.c_char_p(name[:15]), 0, 0, 0)  # PR_SET_NAME
    except Exception:  # noqa: BLE001 - not Linux, no libc: the thread stays unnamed
        pass
