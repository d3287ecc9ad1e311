"""The profiled process: `python -m nsight_magic.child <profile folder>`, started under nsys/ncu.

Order: redirect output into the folder, run the remembered setup code, load the sent variables, then run the cell
inside an NVTX range named after the profile (the capture range with `--capture cell`), then pickle `--return` values.
Exit status: 0 ok, 1 the cell raised, 3 the setup code raised, 4 the state could not be loaded.

With --nproc (run.json "nproc"), torchrun starts one child per rank: rank 0 writes stdout.txt, progress.jsonl, ...
as always, rank R writes stdout.rankR.txt, progress.rankR.jsonl; all ranks meet at a file barrier before the cell
range opens and after the cell, so that one capture range (nsys starts at the first push and stops at the first
pop) covers every rank's cell; a mark "rank R of W" in our domain tells the reader which process is which rank.
"""
from __future__ import annotations

import json
import os
from json import dumps as _dumps  # bound now: --functions may wrap json.dumps, our own writes must not show
import sys
import time
import traceback
from pathlib import Path

CAPTURE_DOMAIN = "nsight-magic"
EXIT_CELL_ERROR, EXIT_SETUP_ERROR, EXIT_STATE_ERROR = 1, 3, 4


def _redirect_output(stdout: Path, stderr: Path) -> None:
    # At the file-descriptor level so that C extensions' output (CUDA, torch warnings) is kept too.
    for fd, path in ((1, stdout), (2, stderr)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(f, fd)
        os.close(f)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)


class _Progress:
    def __init__(self, path: Path):
        self.path = path

    def __call__(self, phase: str, **extra) -> None:
        with open(self.path, "a") as f:
            f.write(_dumps({"phase": phase, "t": time.time(), **extra}) + "\n")


def _print_user_traceback(filename_prefixes: tuple[str, ...]) -> None:
    """The traceback from the user's code on, without this module's frames."""
    etype, value, tb = sys.exc_info()
    frames = traceback.extract_tb(tb)
    keep = [i for i, fr in enumerate(frames) if fr.filename.startswith(filename_prefixes)]
    start = keep[0] if keep else 0
    while tb is not None and start > 0:
        tb, start = tb.tb_next, start - 1
    traceback.print_exception(etype, value, tb)


def _exec_file(path: Path, ns: dict) -> None:
    code = compile(path.read_text(), str(path), "exec")
    exec(code, ns)


def rank_of(cfg: dict) -> tuple[int | None, int]:
    """(rank, world size) under --nproc (torchrun sets RANK and WORLD_SIZE); (None, 1) otherwise."""
    if not cfg.get("nproc"):
        return None, 1
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", str(cfg["nproc"])))


def rank_suffix(rank: int | None) -> str:
    """'' for rank 0 and single-process runs, '.rankR' otherwise: the per-rank file names (stdout.rank1.txt)."""
    return "" if not rank else f".rank{rank}"


def _barrier(folder: Path, name: str, rank: int, world: int, timeout_s: float = 300.0) -> None:
    """Wait until every rank got here, or one rank failed (an `error` file): files in FOLDER/.ranks."""
    d = folder / ".ranks"
    d.mkdir(exist_ok=True)
    (d / f"{name}.{rank}").touch()
    end = time.monotonic() + timeout_s
    while len(list(d.glob(f"{name}.*"))) < world and not any(d.glob("error.*")):
        if time.monotonic() > end:
            print(f"nsight-magic: rank {rank}: not every rank reached the {name} of the cell within "
                  f"{timeout_s:g} s; going on", file=sys.stderr)
            return
        time.sleep(0.002)


def _annotate(ann: dict, ns: dict, folder: Path) -> list:
    """--modules / --functions: NVTX ranges for the models in the namespace and the named functions, before the
    cell runs (outside the capture).  A problem is reported and the cell runs anyway; annotations.json lists the
    range names (the views tell module ranges from other ones with it).  Returns the handles (a warm worker takes
    the annotations off again after the cell)."""
    made, handles = {}, []
    if ann.get("modules") is not None:
        try:
            from .annotate import annotate_namespace

            h = annotate_namespace(ns, depth=ann["modules"] or None)
            made["modules"] = h.names
            handles.append(h)
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


def run_setup(setup: Path, ns: dict, progress) -> int:
    """The remembered %%nsight_setup code; EXIT_SETUP_ERROR (traceback printed) when it raises."""
    if setup.exists() and setup.read_text().strip():
        try:
            _exec_file(setup, ns)
        except BaseException:
            _print_user_traceback((str(setup),))
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
    handles = _annotate(ann, ns, folder)
    if ann.get("lines"):
        from .line_ranges import helpers, instrument

        ns.update(helpers())
        code = instrument(code_path.read_text(), str(code_path))
    else:
        code = compile(code_path.read_text(), str(code_path), "exec")
    status = 0
    rng = None
    rank, world = rank_of(cfg)
    if rank is not None:
        _barrier(folder, "start", rank, world)
    if cfg.get("capture") == "cell" or rank is not None:
        import nvtx

        nvtx.push_range(cfg["range_name"], domain=CAPTURE_DOMAIN)
        rng = True
        if rank is not None:
            nvtx.mark(f"rank {rank} of {world}", domain=CAPTURE_DOMAIN)
    progress("running")
    try:
        exec(code, ns)
    except SystemExit as e:
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)  # sys.exit("message") prints its message, as Python does
        status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        progress("exited", status=status)
    except BaseException:
        _print_user_traceback((str(code_path),))
        status = EXIT_CELL_ERROR
        if rank is not None:  # the other ranks must not wait for this one at the end barrier
            (folder / ".ranks").mkdir(exist_ok=True)
            (folder / ".ranks" / f"error.{rank}").touch()
    finally:
        if rank is not None:
            _barrier(folder, "end", rank, world)
        if rng:
            nvtx.pop_range(domain=CAPTURE_DOMAIN)
        for h in handles:
            h.remove()
        sys.stdout.flush()
        sys.stderr.flush()
    progress("finished", status=status)

    returns = cfg.get("returns") or []
    if returns and (not rank or cfg.get("return_all")):  # rank 0's, or every rank's with --return-all
        from .state import dumps_returns

        data, warnings = dumps_returns(tuple(returns), ns)
        name = f"returns.rank{rank}.pkl" if cfg.get("return_all") else "returns.pkl"
        (folder / name).write_bytes(data)
        for w in warnings:
            print(f"nsight-magic: {w}", file=sys.stderr)
    return status


def main(argv: list[str]) -> int:
    folder = Path(argv[0]).resolve()
    cfg = json.loads((folder / "run.json").read_text())
    # nsys starts its target with umask 0; files the cell writes should get the notebook's permissions.
    if "umask" in cfg:
        os.umask(cfg["umask"])
    sfx = rank_suffix(rank_of(cfg)[0])
    _redirect_output(folder / f"stdout{sfx}.txt", folder / f"stderr{sfx}.txt")
    progress = _Progress(folder / f"progress{sfx}.jsonl")
    progress("importing")
    ns = new_namespace(cfg)
    status = run_setup(folder / "setup.py", ns, progress) or load_variables(folder, ns, progress)
    if status:
        return status
    return run_cell(folder, cfg, ns, progress)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
