"""Profile in place: a kernel that runs under `nsys launch` (nsight_magic/inplace_kernel.py) records a cell in its
own process and namespace, between `nsys start` and `nsys stop` of its session.  Nothing is sent, nothing re-run:
the cell's variables stay, a model loaded in the notebook is profiled as it is (GPU memory held once).

    record   the profile folder, `nsys start --session=S` (waits for the previous cell's `nsys stop`), the cell
             inside our NVTX range (its kernels synchronised when torch is in use), what the cell waits for;
    finish   `nsys stop --session=S` (the report is written), the import and export, in the background.

The kernel's environment is the profiled process's: the launcher starts the kernel from the allow-list
(tools/environment.py), so no secret of the server's environment reaches the reports; and it runs in a PID namespace
of its own (inside/kernel_host.py), so nsys records no other process.

The cell runs as the editor numbers it: its text is compiled under a comment line for each line above it (the
`%%nsys` line), so a traceback, the Python samples and the allocation sites name the editor's lines, and under the
cell's own prompt number ("Cell In[4], line 6").  run.json's `code_files` names every notebook cell the kernel
compiled ("In [3]"), so that functions defined in other cells are named by their cell, not by ipykernel's hashed
file names.
"""
from __future__ import annotations

import _thread
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..errors import NsightMagicError
from ..inside import procs
from ..inside.child import annotate_cell, cell_end_text
from ..inside.marks import CAPTURE_DOMAIN
from ..inside.kernel_host import INPLACE_ENV
from ..inside.memory_history import AllocatorHistory
from ..inside.python_samples import SAMPLES_FILE, PythonSampler
from ..options import nsys_default_args
from ..store import ProfileFolder, create_profile_folder, profiles_root
from .nsys import finish_nsys
from .prepare import tool_versions
from .process import Recording, RunResult
from .recorder import CellRequest

START_TIMEOUT_S = 120
NVTX_SETTLE_S = 0.025
STOP_TIMEOUT_S = 600


class SessionGone(NsightMagicError):
    """The kernel's nsys session cannot record (nsys died, or the session was shut down)."""


def inplace_config() -> dict | None:
    """The nsys session this kernel runs under (its launcher says so), or None: not an in-place kernel."""
    raw = os.environ.get(INPLACE_ENV)
    if not raw:
        return None
    try:
        cfg = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(cfg, dict):
        return None
    if cfg.get("refused") or (cfg.get("session") and (cfg.get("nsys") or cfg.get("ncu"))):
        from ..tools.injection import injection_free

        injection_free()  # what the profiler added to the environment, noted before any cell adds its own
        return cfg
    return None


def why_not_in_place(opts, trace_given: str | None, kernel_trace: str) -> str | None:
    """Why this %%nsys cannot be recorded in place (it runs in a fresh process instead), or None."""
    if opts.fresh:
        return "--fresh"
    if opts.nproc:
        return "--nproc starts its ranks with torchrun"
    if opts.capture != "cell":
        return "--capture all records a whole process"
    if opts.nsys_args:
        return "--nsys-args are flags of nsys profile (this kernel's nsys was launched with its flags)"
    if getattr(opts, "lines", False) or getattr(opts, "ops", None):
        return "--lines and --ops instrument the code the profiled process runs"
    if trace_given is not None:
        norm = lambda t: sorted({x.strip() for x in t.split(",") if x.strip()})  # noqa: E731
        if norm(trace_given) != norm(kernel_trace):
            return (f"this kernel traces {kernel_trace}, fixed when nsys launched it (install a kernel that traces "
                    f"{trace_given}: nsight-magic kernel install --trace {trace_given} --name ...)")
    return None


class InPlaceSession:
    """This kernel's nsys session; one recording at a time (a `nsys start` waits for the previous `nsys stop`)."""

    tool = "nsys"

    def __init__(self, cfg: dict):
        self.refused = cfg.get("refused")  # the kernel started without nsys: why, in one line
        self.name, self.trace = cfg.get("session", ""), cfg.get("trace", "")
        self.nsys = Path(cfg.get("nsys") or "nsys")
        self.launch = cfg.get("launch", "")
        self.version = cfg.get("version")
        self.pid = cfg.get("pid")
        self.start_args = tuple(cfg.get("start_args") or ())  # what `nsys start` records beyond the trace
        self.memory = bool(cfg.get("memory"))  # nsys's device-memory record, fixed at launch
        self.cells = 0
        self._stopped = threading.Event()
        self._stopped.set()  # nothing recording yet
        self._lock = threading.Lock()

    def alive(self) -> bool:
        """Whether `nsys launch` of this kernel still runs.  When it ends (its agent killed, say), `nsys start`
        still answers 0 and records nothing; the kernel lives on (its namespace's first process stays while the
        kernel runs: inside/kernel_host.py) and says so instead of recording."""
        if not self.pid:  # in the kernel's PID namespace (inside/kernel_host.py): few processes to look at
            mark = f"--session-new={self.name}"
            return any(mark in procs.cmdline(p) for p in procs.pids())
        # a zombie shows no command line; another process that took the pid does not name our session
        return any(self.name in a for a in procs.cmdline(int(self.pid)))

    def _gone(self, folder: ProfileFolder) -> SessionGone:
        return SessionGone(f"this kernel's nsys session {self.name} has ended (its nsys launch process exited), so "
                           "nothing can be recorded in place: restart the kernel for a new session (its variables "
                           "go with it; save what you need first), or profile in a fresh process with %%nsys --fresh; "
                           f"the cell was not run ({folder.path})")

    def _nsys(self, verb: str, *args: str, timeout: float) -> tuple[int | None, str]:
        from ..tools.injection import tool_environment

        argv = [str(self.nsys), verb, f"--session={self.name}", *args]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                               env=tool_environment())
            return p.returncode, (p.stdout + p.stderr).strip()
        except subprocess.TimeoutExpired:
            return None, f"nsys {verb} did not answer within {timeout:.0f} s"
        except OSError as e:
            return None, f"nsys {verb} could not run ({e.strerror or e})"

    def _gpu_metrics_args(self, opts) -> tuple[list[str], str | None]:
        """--gpu-metrics for this cell's `nsys start`, where it takes the switch: (args, a note when it cannot)."""
        if not getattr(opts, "gpu_metrics", False):
            return [], None
        from ..tools import nsys_help, nsys_switches
        from .extras import gpu_metrics_request

        got, why = gpu_metrics_request(self.trace, nsys_switches(self.nsys, "start"), nsys_help("start", self.nsys),
                                       f"this kernel's nsys {self.version or ''} takes no --gpu-metrics-devices per "
                                       "cell (`nsys start`); `%%nsys --fresh --gpu-metrics` samples them")
        return list(got), why

    def record(self, req: CellRequest) -> Recording:
        """Run the request's cell in this kernel (shell.run_cell, as the editor numbers it: `header` is the magic's
        line, `number` the cell's prompt number) between `nsys start` and `nsys stop`; the Recording whose finish()
        stops the recording and exports the report (a Recorder: profilers/recorder.py)."""
        cell, opts, shell, on_status = req.cell, req.opts, req.shell, req.on_status
        cell_first_line, number, header = req.cell_first_line, req.number, req.header
        t0 = time.monotonic()
        root = profiles_root(opts.directory)
        folder = ProfileFolder(create_profile_folder(root, opts.name))
        folder.cell.write_text(cell, encoding="utf-8", errors="surrogatepass")
        if self.refused:
            raise SessionGone(f"{self.refused}; the cell was not run (kept in {folder.path}/)")
        metrics_args, metrics_note = self._gpu_metrics_args(opts)
        folder.write_json(folder.run_config, {"tool": "nsys", "mode": "in place", "session": self.name,
                                              "trace": self.trace, "cell_first_line": cell_first_line,
                                              "extras": {"samples": opts.samples is not False,
                                                         "memory": self.memory,
                                                         "history": opts.memory is not False,
                                                         "gpu_metrics": bool(metrics_args)}})
        start_args = [f"--output={folder.report_base}", *nsys_default_args(self.start_args), *self.start_args,
                      *metrics_args, "--force-overwrite=true"]
        start = shlex.join([str(self.nsys), "start", f"--session={self.name}", *start_args])
        folder.command.write_text(f"in place: {self.launch}\n{start}\n")
        folder.write_json(folder.versions, tool_versions(self.nsys, "nsys", self.version))
        messages: list[str] = []
        notes = [f"profiled in place (cell {self.cells + 1} of this kernel's nsys session, tracing {self.trace})"]
        if opts.memory and not self.memory:
            notes.append("this kernel's nsys makes no device-memory record (its launch fixed that): torch's allocator "
                         "history is recorded; `%%nsys --fresh --memory` records nsys's too")
        if metrics_note:
            notes.append(metrics_note)
        if opts.send_vars or opts.no_vars or opts.return_vars:
            notes.append("in place nothing is sent or returned: the cell runs in this kernel, with its variables")
        if not self._stopped.is_set():
            if on_status:
                on_status("waiting for the previous profile's recording to be written", time.monotonic() - t0)
            self._stopped.wait()  # Ctrl-C here: nothing started, the folder says so
        if not self.alive():
            raise self._gone(folder)
        with self._lock:
            rc, out = self._nsys("start", *start_args, timeout=START_TIMEOUT_S)
        if rc != 0:
            folder.tool_log.write_text(out + "\n")
            raise SessionGone(f"nsys start failed in this kernel's session {self.name} ({out.splitlines()[-1] if out else rc}"
                              f"); the session may be gone: restart the kernel, or profile in a fresh process with "
                              f"%%nsys --fresh; nsys's output is in {folder.tool_log}")
        self._stopped.clear()
        self.cells += 1
        # nsys 2025.3 drops what a process that has started CUDA marks in the first milliseconds after `nsys start`
        # (1-5 ms measured on the H100: the cell's first NVTX range was lost): wait them out before the cell
        time.sleep(NVTX_SETTLE_S)
        status, annotations, extras = "ok", [], []
        cell_file, file_first = None, cell_first_line
        record_start = time.monotonic()
        try:
            if opts.modules is not None or opts.functions:  # on the kernel's own objects, taken off after the cell
                annotations = annotate_cell({"modules": opts.modules, "functions": list(opts.functions)},
                                            shell.user_ns, folder.path)
            if opts.memory is not False:  # torch's allocator history, saved after the capture
                history = AllocatorHistory.start(folder.path)
                if history is not None:
                    extras.append(history)
            with _cell_range(folder.path.name):
                if opts.samples is not False:  # its clock mark inside the capture
                    extras.append(PythonSampler(folder.path / SAMPLES_FILE, domain=CAPTURE_DOMAIN, on_busy_thread=[
                        h.without_stacks for h in extras if hasattr(h, "without_stacks")]).start())
                # no Python sample of what follows the cell, outside its range
                status, cell_file, file_first = run_timed(
                    shell, cell, opts.timeout, cell_first_line, number, header,
                    after=[h.pause for h in extras if hasattr(h, "pause")])
        except KeyboardInterrupt:  # between our steps, not inside the cell: the recording still ends
            status = "interrupted"
        finally:
            # the cell's annotations first, then the sampler, then the history's snapshot (not the cell's code)
            for h in [*annotations, *reversed(extras)]:
                h.remove()
        cell_s = time.monotonic() - record_start
        cell_done(folder, shell, status, cell_file, file_first, opts.timeout, messages)
        record_s = time.monotonic() - t0

        def finish(on_status_cb=None, cancel=None) -> RunResult:
            return self._finish(folder, status, messages, notes, t0, record_s, cell_s, on_status_cb or on_status)

        return Recording(folder, "nsys", status, record_s, {}, [], messages, notes, finish)

    def _finish(self, folder: ProfileFolder, status: str, messages: list[str], notes: list[str], t0: float,
                record_s: float, cell_s: float, on_status) -> RunResult:
        """`nsys stop` (let finish even on Ctrl-C: it writes the report), then the import and export."""
        t_stop = time.monotonic()
        if on_status:
            on_status("stopping the recording", time.monotonic() - t0)
        try:
            with self._lock:
                rc, out = self._nsys("stop", timeout=STOP_TIMEOUT_S)
        finally:
            self._stopped.set()
        stop_s = time.monotonic() - t_stop
        with open(folder.tool_log, "a") as f:
            f.write(out + "\n")
        messages = list(messages)
        if not self.alive():
            messages.append(f"this kernel's nsys session {self.name} ended during the cell (its nsys launch process "
                            "exited): restart the kernel to profile in place again")
        elif rc != 0:
            messages.append(f"nsys stop failed ({out.splitlines()[-1] if out else rc}); what it wrote is in "
                            f"{folder.path}/")
        if on_status:
            on_status("exporting", time.monotonic() - t0)
        rep, sqlite = finish_nsys(folder, self.nsys, messages)
        if rep is None and sqlite is None:
            messages.append(f"nsys wrote no report; its own output is in {folder.tool_log}")
        timings = {"record_s": round(record_s, 3), "cell_s": round(cell_s, 3), "nsys_stop_s": round(stop_s, 3),
                   "report_s": round(time.monotonic() - t_stop - stop_s, 3)}
        return RunResult(folder, status, 0 if status == "ok" else None, time.monotonic() - t0, rep, sqlite,
                         messages, {}, [], timings, list(notes))


def run_timed(shell, cell: str, timeout: float | None, first_line: int, number: int | None, header: str,
              after=()) -> tuple[str, str | None, int]:
    """The cell run here (run_as_editor) under --timeout, its queued GPU work synchronised, then `after` (each a
    callable); (its status: ok | cell-error | interrupted | timeout, the compiled cell's file, that file's first
    line as the editor numbers it)."""
    timer = CellTimeout(timeout)
    cell_file, file_first = None, first_line
    try:
        timer.start()
        try:
            result, cell_file, file_first = run_as_editor(shell, cell, first_line, number, header)
        finally:
            timer.cancel()
        synchronize_gpu()
        for f in after:
            f()
    except KeyboardInterrupt:  # Ctrl-C (or the timer) between the cell's end and ours
        return ("timeout" if timer.fired else "interrupted"), cell_file, file_first
    err = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
    if timer.fired:
        return "timeout", cell_file, file_first
    if isinstance(err, KeyboardInterrupt):
        return "interrupted", cell_file, file_first
    return ("cell-error" if err is not None else "ok"), cell_file, file_first


def cell_done(folder: ProfileFolder, shell, status: str, cell_file: str | None, first_line: int,
              timeout: float | None, messages: list) -> None:
    """After a cell recorded in place (%%nsys and %%ncu alike): run.json's code files, and the line a timeout
    owes the user."""
    note_code_files(folder, shell, cell_file, first_line)
    if status == "timeout":
        messages.append(f"the cell ran past --timeout {timeout:g} s and was interrupted (KeyboardInterrupt in the "
                        "cell; the kernel lives on, with what the cell had done)")


def previous_end_note(cfg: dict) -> str | None:
    """What the namespace's first process said as the previous kernel of this connection file ended (processes
    the kernel had left running, stopped): read once (the file is removed), for the restarted kernel to say."""
    from ..inside.kernel_host import NOTE_SUFFIX

    conn = cfg.get("connection_file")
    if not conn:
        return None
    note = Path(conn + NOTE_SUFFIX)
    try:
        said = json.loads(note.read_text()).get("said")
        note.unlink()
    except (OSError, ValueError, AttributeError):
        return None
    return said if isinstance(said, str) else None


def run_as_editor(shell, cell: str, first_line: int, number: int | None, header: str = ""):
    """shell.run_cell(cell) numbered as the editor numbers it: above the cell, a comment line for each line the
    editor shows above it (`header`, the magic's own line, first), so that the cell's line N is line N of the code
    IPython compiles (tracebacks show the source at that line: a shifted line number alone would show the wrong
    one); and under the cell's prompt number (IPython counts the running %%nsys cell already).  A cell that starts
    with a cell magic of its own is run as it is.  Returns (the ExecutionResult, the compiled cell's file name, the
    editor's number of that file's line 1)."""
    code, file_first = cell, first_line
    if first_line > 1 and not cell.lstrip().startswith("%%"):
        above = [f"# {header}".rstrip() if header else "#"] + ["#"] * (first_line - 2)
        code, file_first = "\n".join(above) + "\n" + cell, 1
    names = _filename_map(shell)
    before = dict(names)
    count = shell.execution_count
    if number is not None:
        shell.execution_count = number
    try:
        result = shell.run_cell(code, store_history=False)
    finally:
        shell.execution_count = count
    changed = [k for k, v in names.items() if before.get(k, object()) != v or k not in before]
    return result, (changed[-1] if changed else None), file_first


def _filename_map(shell) -> dict:
    """IPython's compiler's map of compiled cell file names to prompt numbers (what names "Cell In[3]")."""
    m = getattr(getattr(shell, "compile", None), "_filename_map", None)
    return m if isinstance(m, dict) else {}


CODE_FILES_KEPT = 2000  # the newest cells a profile names (a kernel may have run tens of thousands)


def code_files(shell, cell_file: str | None, first_line: int) -> dict:
    """The notebook's cells this kernel compiled, by file name: {"label": "In [3]"}; for the profiled cell also
    {"cell": true, "first_line": N} (its lines are the editor's: run_as_editor), and for the magic's own cell (the
    `%%nsys` line's code, compiled under the same number) {"ours": true}."""
    out = {}
    names = _filename_map(shell)
    number = names.get(cell_file) if cell_file else None
    for name, n in list(names.items())[-CODE_FILES_KEPT:]:
        if isinstance(name, str) and isinstance(n, int):
            out[name] = {"label": f"In [{n}]"}
            if n == number and name != cell_file:
                out[name]["ours"] = True
    if cell_file:
        out.setdefault(cell_file, {"label": "the cell"}).update(cell=True, first_line=first_line)
    return out


def note_code_files(folder: ProfileFolder, shell, cell_file: str | None, first_line: int) -> None:
    """run.json's code_files (see code_files): written after the cell, which may have compiled cells of its own."""
    try:
        cfg = json.loads(folder.run_config.read_text())
        cfg["code_files"] = code_files(shell, cell_file, first_line)
        folder.write_json(folder.run_config, cfg)
    except (OSError, ValueError):
        pass  # the profile without them: hashed file names


class CellTimeout:
    """--timeout in place: KeyboardInterrupt in the cell after `seconds` (the kernel is not killed)."""

    def __init__(self, seconds: float | None):
        self.seconds, self.fired, self._timer = seconds, False, None

    def start(self) -> None:
        if self.seconds:
            self._timer = threading.Timer(self.seconds, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        _thread.interrupt_main()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


class _cell_range:
    """Our NVTX range around the cell (the capture span of readers/capture_span.py): what the magic does outside
    it is not the cell's."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        import nvtx

        nvtx.push_range(self.name, domain=CAPTURE_DOMAIN)
        self.pushed_ns = time.monotonic_ns()
        return self

    def __exit__(self, *exc):
        import nvtx

        nvtx.mark(cell_end_text(time.monotonic_ns() - self.pushed_ns), domain=CAPTURE_DOMAIN)
        nvtx.pop_range(domain=CAPTURE_DOMAIN)
        return False


def synchronize_gpu() -> None:
    """The cell's queued GPU work inside the capture: torch's, when torch is in use here."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    except Exception:  # noqa: BLE001 - a failed sync is the cell's own error; it shows at its next use
        pass


def gpu_memory_guard() -> str | None:
    """Before a profiled copy of the notebook starts (subprocess mode): when the notebook's own torch holds more
    GPU memory than is free, the copy cannot fit; the line that says so and what to do, else None."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return None
        for d in range(torch.cuda.device_count()):
            held = torch.cuda.memory_reserved(d)
            if not held:
                continue
            free, _total = torch.cuda.mem_get_info(d)
            if held > free:
                return (f"the notebook holds {held / 1e9:.1f} GB on GPU {d}; a profiled copy needs as much and "
                        f"{free / 1e9:.1f} GB are free: profile it in place (nsight-magic kernel install, then "
                        "choose the kernel 'Python 3 (nsight-magic, profile in place)'), or free the notebook's "
                        "copy first")
    except Exception:  # noqa: BLE001 - no answer from the driver: nothing to say
        return None
    return None
