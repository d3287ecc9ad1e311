"""The profiled process: `python -m nsight_magic.inside.child <profile folder>`, started under nsys/ncu.

Order: redirect output into the folder, run the remembered setup code, load the sent variables, then run the cell
inside an NVTX range named after the profile (the capture range with `--capture cell`), then pickle `--return` values.
Exit status: 0 ok, 1 the cell raised, 3 the setup code raised, 4 the state could not be loaded.

With --nproc (run.json "nproc"), torchrun starts one child per rank: rank 0 writes stdout.txt, progress.jsonl, ...
as always, rank R writes stdout.rankR.txt, progress.rankR.jsonl; all ranks meet at a file barrier before the cell
range opens and after the cell, so that one capture range (nsys starts at the first push and stops at the first
pop) covers every rank's cell; a mark "rank R of W" in our domain tells the reader which process is which rank.
"""
from __future__ import annotations

import io
import json
import os
from json import dumps as _dumps  # bound now: --functions may wrap json.dumps, our own writes must not show
import sys
import time
import traceback
from pathlib import Path

from .marks import (CAPTURE_DOMAIN, CELL_END_MARK, EXIT_CELL_ERROR, EXIT_SETUP_ERROR,  # noqa: F401 - the contract
                    EXIT_STATE_ERROR, OWN_END_MARK, OWN_START_MARK, USER_TMPDIR_ENV)
from .tool_files import tool_files


def cell_end_text(elapsed_ns: int) -> str:
    return f"{CELL_END_MARK} {int(elapsed_ns)} ns"


def redirect_output(stdout: Path, stderr: Path) -> None:
    # At the file-descriptor level so that C extensions' output (CUDA, torch warnings) is kept too.
    for fd, path in ((1, stdout), (2, stderr)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if f != fd:  # a cell that closed fd 1 or 2 (os.close(1)) makes it the lowest free one: os.open gave it back
            os.dup2(f, fd)
            os.close(f)
    usable_streams()


def usable_streams() -> None:
    """sys.stdout and sys.stderr writing to fds 1 and 2, line-buffered, whatever the cell did to them (set them to
    None, closed them, replaced them with an object of its own): our messages and the next cell's output must
    not be lost, nor the process die printing them."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name, None)
        usable = stream is not None and not getattr(stream, "closed", True) and callable(
            getattr(stream, "reconfigure", None)) and _fileno(stream) == fd
        if usable:
            try:
                stream.reconfigure(line_buffering=True)
                continue
            except (OSError, ValueError):
                pass
        try:
            setattr(sys, name, open(fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace",
                                    closefd=False))
        except OSError:  # fd itself is gone and could not be made again: nothing to write to
            setattr(sys, name, open(os.devnull, "w"))


def _fileno(stream) -> int | None:
    try:
        return stream.fileno()
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return None




class Progress:
    def __init__(self, path: Path):
        self.path = path

    def __call__(self, phase: str, **extra) -> None:
        with open(self.path, "a") as f:
            f.write(_dumps({"phase": phase, "t": time.time(), **extra}) + "\n")


def _print_user_traceback(filename_prefixes: tuple[str, ...], cell_file: str | None = None, offset: int = 0) -> None:
    """The traceback from the user's code on, without this module's frames; the cell's lines as the editor numbers
    them (`offset`: lines above the cell's first, the magic's under %%nsys), as the Python rows and Lines tab do."""
    etype, value, tb = sys.exc_info()
    frames = traceback.extract_tb(tb)
    keep = [i for i, fr in enumerate(frames) if fr.filename.startswith(filename_prefixes)]
    start = keep[0] if keep else 0
    while tb is not None and start > 0:
        tb, start = tb.tb_next, start - 1
    te = traceback.TracebackException(etype, value, tb)
    if offset and cell_file is not None:
        seen, todo = set(), [te]
        while todo:  # the exception and those it was raised from or while handling
            t = todo.pop()
            if t is None or id(t) in seen:
                continue
            seen.add(id(t))
            t.stack = traceback.StackSummary.from_list([
                traceback.FrameSummary(fr.filename, fr.lineno + offset if fr.filename == cell_file and fr.lineno
                                       else fr.lineno, fr.name, line=fr.line) for fr in t.stack])
            todo += [t.__cause__, t.__context__]
    print("".join(te.format()), end="", file=sys.stderr)


def rank_of(cfg: dict) -> tuple[int | None, int]:
    """(rank, world size) under --nproc (torchrun sets RANK and WORLD_SIZE); (None, 1) otherwise."""
    if not cfg.get("nproc"):
        return None, 1
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", str(cfg["nproc"])))


RANKS_DIR = ".ranks"  # the ranks' barrier and state files, in the profile folder


def rank_suffix(rank: int | None) -> str:
    """'' for rank 0 and single-process runs, '.rankR' otherwise: the per-rank file names (stdout.rank1.txt)."""
    return "" if not rank else f".rank{rank}"


def _barrier(folder: Path, name: str, rank: int, world: int, timeout_s: float = 300.0) -> None:
    """Wait until every rank got here, or one rank failed (an `error` file): files in FOLDER/.ranks.  When it is
    stopped (a --timeout or Ctrl-C reaches every rank) or gives up, it says which ranks it was waiting for instead
    of a traceback from here."""
    d = folder / RANKS_DIR
    d.mkdir(exist_ok=True)
    (d / f"{name}.{rank}").touch()
    end = time.monotonic() + timeout_s

    def missing() -> str:
        # a rank stopped in its cell (the same stop that reaches us) still passes here on its way out: it was not
        # there when we started waiting for it
        stopped = {p.name.split(".", 1)[1] for p in d.glob("stopped.*")}
        there = {p.name.split(".", 1)[1] for p in d.glob(f"{name}.*")} - stopped
        gone = [str(r) for r in range(world) if str(r) not in there]
        return f"rank{'s' if len(gone) > 1 else ''} {', '.join(gone)}" if gone else "no rank"

    where = "the start of the cell" if name == "start" else "the end of the cell (it had finished its cell)"
    try:
        while len(list(d.glob(f"{name}.*"))) < world and not any(d.glob("error.*")):
            if time.monotonic() > end:
                print(f"nsight-magic: rank {rank} waited {timeout_s:g} s at {where} for {missing()}; going on",
                      file=sys.stderr)
                return
            time.sleep(0.002)
    except KeyboardInterrupt:
        print(f"nsight-magic: rank {rank} was stopped at {where} while waiting for {missing()}", file=sys.stderr)
        (d / f"waiting.{rank}").write_text(f"{name} {missing()}\n")
        if name == "start":
            raise


def _op_ranges(which: str | None, ns: dict):
    """--ops: what puts every PyTorch operator of the cell in an NVTX range (nsight_magic.inside.ops): PyTorch's
    emit_nvtx on CUDA builds, else the dispatch mode (NSIGHT_MAGIC_OPS_MODE=dispatch or emit_nvtx forces one); or
    None (off, or refused with one line: the cell runs without operator ranges)."""
    if not which:
        return None
    try:
        from .ops import EmitNvtx, OpRanges, check_not_compiled, emit_nvtx_available

        check_not_compiled(ns)
        mode = os.environ.get("NSIGHT_MAGIC_OPS_MODE", "")
        if mode == "emit_nvtx" or (mode != "dispatch" and emit_nvtx_available()):
            return EmitNvtx(shapes=which == "shapes")
        ranges = OpRanges(shapes=which == "shapes")
        ranges.warm()
        return ranges
    except ImportError:
        print("nsight-magic: --ops needs PyTorch in the profiled process; the cell runs without operator ranges",
              file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - say it, run the cell without operator ranges
        print(f"nsight-magic: --ops: {e}", file=sys.stderr)
    return None


def _wait_for(path: Path, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.002)


def annotate_cell(ann: dict, ns: dict, folder: Path) -> list:
    """--modules / --functions: NVTX ranges for the models in the namespace and the named functions, before the
    cell runs (outside the capture).  A problem is reported and the cell runs anyway; annotations.json lists the
    range names (the views tell module ranges from other ones with it).  Returns the handles (a warm worker takes
    the annotations off again after the cell; so does an in-place kernel, profilers/inplace.py)."""
    made, handles = {}, []
    if ann.get("modules") is not None:
        try:
            from .annotate import annotate_namespace

            h = annotate_namespace(ns, depth=ann["modules"] or None)
            made["modules"] = h.names
            made["module_types"] = h.types  # the module tree's types, and its models by variable name
            made["models"] = h.models
            made["model_prefixed"] = len(h.models) > 1  # several models: their ranges start with the variable
            handles.append(h)
            # what it did is information (stdout); a model it could not annotate, or none, a problem (stderr)
            print(f"nsight-magic: --modules: {modules_line(h)}", file=sys.stdout if h.models and not h.skipped
                  else sys.stderr)
        except Exception as e:  # noqa: BLE001 - say it, run the cell without module ranges
            print(f"nsight-magic: --modules: {e}", file=sys.stderr)
    if ann.get("functions"):
        try:
            from .annotate import annotate_functions

            h = annotate_functions(ann["functions"])
            made["functions"] = h.names
            handles.append(h)
        except Exception as e:  # noqa: BLE001
            print(f"nsight-magic: --functions: {e}", file=sys.stderr)
    if made:
        (folder / "annotations.json").write_text(_dumps(made, indent=1) + "\n")
    return handles


def _training_ranges():
    """The optimizer's steps and zero_grads in NVTX ranges (inside/training_ranges.py), when torch is imported."""
    from .training_ranges import TrainingRanges

    try:
        return TrainingRanges().install()
    except Exception:  # noqa: BLE001 - a torch we do not know: the cell runs without them
        return TrainingRanges()


def modules_line(h) -> str:
    """What --modules did: the models and the ranges it annotated, or why it annotated none."""
    parts = []
    if h.models:
        parts.append(f"annotated {len(h.names)} modules of {', '.join(h.models)} "
                     "(a forward and a backward range each)")
    for name, why in h.skipped:
        parts.append(f"{name} not annotated: {why}")
    if not parts:
        parts.append("no torch.nn.Module among the sent variables and the setup code's names, so no module "
                     "ranges (send the model, e.g. --vars model, or build it in %%nsight_setup)")
    return "; ".join(parts)


def mark_process(which: str) -> None:
    """--capture all: the profiled process marks its start and end in our domain (readers.capture_span)."""
    try:
        import nvtx

        nvtx.mark(which, domain=CAPTURE_DOMAIN)
    except Exception:  # noqa: BLE001 - without nvtx the events' span is the capture
        pass


def process_snapshot() -> set[int]:
    """The live processes now: what a cell leaves running is told from what was there before it."""
    return set(_processes())


FORK_WORDS = "a fork of the cell's process (os.fork, multiprocessing)"


def stop_leftovers(progress=None, before: set[int] | None = None) -> list[str]:
    """Processes the cell started that still run when it ends (a detached server, a forgotten Popen, a double
    fork): stopped (SIGTERM, then SIGKILL), so that the profiler, which waits for every process of the run, can
    finish.  With `before` (process_snapshot() when the cell began) only processes born since are the cell's, and
    orphans count too: nsys's launcher, our parent, is a subreaper, so a process that left our tree by a double
    fork or setsid is its child.  Returns their descriptions ("pid: command") and says so on stderr."""
    import signal

    procs = _processes()
    kids = _below(procs, os.getpid())
    if before is not None:
        if "nsys-launcher" in _command(os.getppid()):
            kids += [p for p in _below(procs, os.getppid()) if p != os.getpid() and p not in kids]
        kids = [p for p in kids if p not in before]
    if not kids:
        return []
    mine = _command(os.getpid())
    # a fork keeps our command line (python -m nsight_magic.inside...): named as what it is, not as one of ours
    described = [f"{pid}: {FORK_WORDS if _command(pid) == mine else _command(pid)}" for pid in kids]
    for sig, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 1.0)):
        for pid in kids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        end = time.monotonic() + wait
        while time.monotonic() < end and any(_alive(p) for p in kids):
            time.sleep(0.02)
        kids = [p for p in kids if _alive(p)]
        if not kids:
            break
    n = len(described)
    print(f"nsight-magic: the cell left {n} process{'es' if n > 1 else ''} running ({'; '.join(described[:5])}"
          f"{'; ...' if n > 5 else ''}); {'they were' if n > 1 else 'it was'} stopped when the cell ended",
          file=sys.stderr)
    if progress is not None:
        progress("leftovers", processes=described)
    return described


def _processes() -> dict[int, int]:
    """pid -> parent pid of every live (not zombie) process this PID namespace shows."""
    from . import procs

    return procs.parents()


def _below(procs: dict[int, int], root: int) -> list[int]:
    """Every process below `root` (by parent pid), deepest last."""
    children: dict[int, list[int]] = {}
    for pid, ppid in procs.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _alive(pid: int) -> bool:
    from . import procs

    return procs.alive(pid)


def _command(pid: int) -> str:
    """A process's command line; a process caught between fork and exec shows none for a moment: asked again,
    then its name."""
    from . import procs

    for _ in range(10):
        if not procs.alive(pid):
            return "?"
        cmd = " ".join(procs.cmdline(pid)).strip()
        if cmd:
            return cmd[:80]
        time.sleep(0.02)
    got = procs.name(pid)
    return f"[{got}]" if got else "?"


def new_namespace(cfg: dict) -> dict:
    """The namespace the code runs in, and the module search path the notebook has (its folder first)."""
    script = cfg.get("script")
    # Python puts the script's folder first on the path; for a cell, the notebook's folder.
    first = str(Path(script).resolve().parent) if script else (cfg.get("cwd") or os.getcwd())
    if first not in sys.path[:1]:
        sys.path.insert(0, first)
    ns: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    if script:
        sys.argv = [script, *cfg.get("script_args", [])]
        ns["__file__"] = script
    return ns


SETUP_PREFIX = "<%%nsight_setup cell "  # how a traceback names a setup cell: <%%nsight_setup cell 2 of 3>


def write_setup(setup: Path, sources) -> str:
    """The setup cells as setup.py (joined, for people) and setup.json (one source per cell, for run_setup);
    returns the joined text."""
    sources = [s.rstrip() for s in sources]
    text = "\n\n".join(sources)
    setup.write_text(text + ("\n" if text else ""), encoding="utf-8", errors="surrogatepass")
    setup.with_suffix(".json").write_text(json.dumps(sources), encoding="utf-8", errors="surrogatepass")
    return text


def run_setup(setup: Path, ns: dict, progress) -> int:
    """The remembered %%nsight_setup code, cell by cell; EXIT_SETUP_ERROR (traceback printed) when it raises.  A
    traceback names the setup cell and its line as the editor numbers it ("<%%nsight_setup cell 2 of 3>", line 4),
    with the line's source: the files a warm worker ran from are gone with its session."""
    import linecache

    try:
        sources = json.loads(setup.with_suffix(".json").read_text(encoding="utf-8", errors="surrogatepass"))
    except (OSError, ValueError):
        sources = [setup.read_text()] if setup.exists() else []
    sources = [src for src in sources if isinstance(src, str) and src.strip()]
    for i, src in enumerate(sources, 1):
        name = f"{SETUP_PREFIX}{i} of {len(sources)}>"
        # numbered as the editor numbers the cell: its %%nsight_setup line is line 1
        lines = ["%%nsight_setup\n", *src.splitlines(True)]
        linecache.cache[name] = (sum(map(len, lines)), None, lines, name)
        try:
            exec(compile("\n" + src, name, "exec"), ns)
        except BaseException:
            _print_user_traceback((SETUP_PREFIX,))
            progress("setup-error")
            return EXIT_SETUP_ERROR
    return 0


def load_variables(folder: Path, ns: dict, progress) -> int:
    """The sent variables (vars.pkl) into ns; EXIT_STATE_ERROR when they cannot be loaded."""
    blob = folder / "vars.pkl"
    if blob.exists():
        try:
            from .state import unpack_variables

            ns.update(unpack_variables(blob.read_bytes()))
        except BaseException as e:
            print(f"nsight-magic: the sent variables could not be loaded: {type(e).__name__}: {e}", file=sys.stderr)
            progress("state-error")
            return EXIT_STATE_ERROR
    return 0


def run_cell(folder: Path, cfg: dict, ns: dict, progress) -> int:
    """The cell (or script) inside our NVTX range, then --return values; the exit status (0, EXIT_CELL_ERROR or
    the sys.exit code).  Annotations made for it are taken off afterwards."""
    script = cfg.get("script")
    code_path = Path(script) if script else folder / "cell.py"
    ann = cfg.get("annotations") or {}
    handles = annotate_cell(ann, ns, folder)
    handles.append(_training_ranges())
    if ann.get("lines"):
        from .line_ranges import helpers, instrument

        ns.update(helpers())
        # ranges named in the editor's numbers, as the Lines tab shows them (a script: its own)
        code = instrument(code_path.read_text(), str(code_path), 1 if script else cfg.get("cell_first_line", 1))
    else:
        code = compile(code_path.read_text(), str(code_path), "exec")
    status = 0
    rng = None
    rank, world = rank_of(cfg)
    ops = _op_ranges(ann.get("ops"), ns)  # made and warmed before the capture: torch's lazy imports are not the cell's
    extras: list = []  # what the profile records beyond the trace (allocator history, Python samples)
    if (cfg.get("extras") or {}).get("history"):  # torch's allocator history, saved after the capture
        from .memory_history import AllocatorHistory

        history = AllocatorHistory.start(folder, rank)
        if history is not None:
            extras.append(history)
    if rank is not None:
        _barrier(folder, "start", rank, world)
    if cfg.get("capture") == "cell" or rank is not None:
        import nvtx

        # nsys starts recording at the first push of the range named after the profile and stops at its pop.
        # Under one nsys (--nproc) only rank 0 pushes that name, after the start barrier and popped after the end
        # barrier, so the recording covers every rank's cell even when another rank fails; with one nsys per rank
        # (--per-rank-reports) each rank's own nsys needs it.
        name = cfg["range_name"]
        if rank and not cfg.get("per_rank_reports"):
            name = f"{name} rank {rank}"
            _wait_for(folder / RANKS_DIR / "recording", 10.0)  # what a rank marks before that is not recorded
        nvtx.push_range(name, domain=CAPTURE_DOMAIN)
        pushed_ns = time.monotonic_ns()
        rng = True
    if (cfg.get("extras") or {}).get("samples"):  # inside the capture: its clock mark must be recorded
        from .python_samples import PythonSampler, samples_name

        extras.append(PythonSampler(folder / samples_name(rank), domain=CAPTURE_DOMAIN,
                                    on_busy_thread=[h.without_stacks for h in extras if hasattr(h, "without_stacks")]
                                    ).start())
    if rng:
        if rank is not None:
            nvtx.mark(f"rank {rank} of {world}", domain=CAPTURE_DOMAIN)
            if rank == 0:
                (folder / RANKS_DIR / "recording").touch()
    progress("running")
    try:
        if ops is not None:
            with ops:
                exec(code, ns)
        else:
            exec(code, ns)
    except SystemExit as e:
        usable_streams()
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)  # sys.exit("message") prints its message, as Python does
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        progress("exited", status=status)
    except BaseException as e:
        usable_streams()  # the cell may have taken sys.stderr away before it raised
        _print_user_traceback((str(code_path),), str(code_path),
                              0 if script else int(cfg.get("cell_first_line", 1)) - 1)
        status = EXIT_CELL_ERROR
        if rank is not None:  # the other ranks must not wait for this one at the end barrier
            (folder / RANKS_DIR).mkdir(exist_ok=True)
            if isinstance(e, KeyboardInterrupt):
                (folder / RANKS_DIR / f"stopped.{rank}").touch()
            (folder / RANKS_DIR / f"error.{rank}").touch()
    finally:
        for h in extras:  # no Python sample of what follows: our bookkeeping, partly after the range is closed
            if hasattr(h, "pause"):
                h.pause()
        # the cell is over: from here a --timeout no longer applies (the runner reads this), and a stop signal
        # ends our own bookkeeping quietly instead of showing a traceback from this file
        progress("cell-done", status=status)
        if rank is not None:  # again, inside the recording for sure (rank 0 pops only after the end barrier)
            nvtx.mark(f"rank {rank} of {world}", domain=CAPTURE_DOMAIN)
        try:
            if rank is not None:
                _barrier(folder, "end", rank, world)
            if rng:
                nvtx.mark(cell_end_text(time.monotonic_ns() - pushed_ns), domain=CAPTURE_DOMAIN)
                nvtx.pop_range(domain=CAPTURE_DOMAIN)
            # the cell's annotations first (our own bookkeeping must not show in them), then the sampler, then
            # the allocator's snapshot (the sampler must not see it: it is not the cell's)
            for h in handles:
                h.remove()
            for h in reversed(extras):
                h.remove()
        except KeyboardInterrupt:
            pass
        usable_streams()  # the cell may have set sys.stdout to None or closed it
        sys.stdout.flush()
        sys.stderr.flush()
    returns = cfg.get("returns") or []
    if returns and (not rank or cfg.get("return_all")):  # rank 0's, or every rank's with --return-all
        from .state import dumps_returns

        data, warnings = dumps_returns(tuple(returns), ns)
        name = f"returns.rank{rank}.pkl" if cfg.get("return_all") else "returns.pkl"
        (folder / name).write_bytes(data)
        for w in warnings:
            print(f"nsight-magic: {w}", file=sys.stderr)
        sys.stderr.flush()
    # everything the notebook needs from the cell is written: its record stage ends here (the profiler's writing,
    # the export and the view follow in the background)
    progress("finished", status=status)
    return status


def user_tmpdir() -> None:
    if USER_TMPDIR_ENV in os.environ:
        mine = os.environ.pop(USER_TMPDIR_ENV)
        if mine:
            os.environ["TMPDIR"] = mine
        else:
            os.environ.pop("TMPDIR", None)


def main(argv: list[str]) -> int:
    user_tmpdir()
    folder = Path(argv[0]).resolve()
    cfg = json.loads((folder / "run.json").read_text())
    # nsys starts its target with umask 0; files the cell writes should get the notebook's permissions.
    if "umask" in cfg:
        os.umask(cfg["umask"])
    sfx = rank_suffix(rank_of(cfg)[0])
    redirect_output(folder / f"stdout{sfx}.txt", folder / f"stderr{sfx}.txt")
    progress = Progress(folder / f"progress{sfx}.jsonl")
    progress("importing", pid=os.getpid(), tool_files=tool_files())
    before = process_snapshot()
    if cfg.get("capture") == "all":
        mark_process(OWN_START_MARK)
    ns = new_namespace(cfg)
    status = run_setup(folder / "setup.py", ns, progress) or load_variables(folder, ns, progress)
    if not status:
        status = run_cell(folder, cfg, ns, progress)
    # objects of the cell (a DataLoader's workers) end with the namespace; whatever else it started is stopped.
    # Not while a thread of the program's own still runs: its functions read their globals from the namespace
    # (a setup's metrics thread died with "NameError: name 'METRICS' is not defined"); it ends with the process.
    import threading

    if not any(t.is_alive() and t is not threading.current_thread() for t in threading.enumerate()):
        ns.clear()
    import gc

    gc.collect()
    try:
        stop_leftovers(progress, before)
    except KeyboardInterrupt:
        pass
    if cfg.get("capture") == "all":
        mark_process(OWN_END_MARK)
    _say_lingering_threads(progress)
    return status


def _say_lingering_threads(progress) -> None:
    """Threads of the cell's own that are not daemons keep the process alive after main() (Python waits for
    them at exit, as it would plain), and nsys writes its report only once the process has exited: the notebook
    says so instead of "the profiler is writing its report"."""
    import threading

    alive = [t.name for t in threading.enumerate()
             if t is not threading.current_thread() and not t.daemon and t.is_alive()]
    if alive:
        progress("threads", names=alive[:5], count=len(alive))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
