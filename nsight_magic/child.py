"""The profiled process: `python -m nsight_magic.child <profile folder>`, started under nsys/ncu.

Order: redirect output into the folder, run the remembered setup code, load the sent variables, then run the cell
inside an NVTX range named after the profile (the capture range with `--capture cell`), then pickle `--return` values.
Exit status: 0 ok, 1 the cell raised, 3 the setup code raised, 4 the state could not be loaded.
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


def _annotate(ann: dict, ns: dict, folder: Path) -> None:
    """--modules / --functions: NVTX ranges for the models in the namespace and the named functions, before the
    cell runs (outside the capture).  A problem is reported and the cell runs anyway; annotations.json lists the
    range names (the views tell module ranges from other ones with it)."""
    made = {}
    if ann.get("modules") is not None:
        try:
            from .annotate import annotate_namespace

            made["modules"] = annotate_namespace(ns, depth=ann["modules"] or None).names
        except Exception as e:  # noqa: BLE001 - say it, run the cell without module ranges
            print(f"nsight-magic: --modules: {e}", file=sys.stderr)
    if ann.get("functions"):
        try:
            from .annotate import annotate_functions

            made["functions"] = annotate_functions(ann["functions"]).names
        except Exception as e:  # noqa: BLE001
            print(f"nsight-magic: --functions: {e}", file=sys.stderr)
    if made:
        (folder / "annotations.json").write_text(_dumps(made, indent=1) + "\n")


def main(argv: list[str]) -> int:
    folder = Path(argv[0]).resolve()
    cfg = json.loads((folder / "run.json").read_text())
    # nsys starts its target with umask 0; files the cell writes should get the notebook's permissions.
    if "umask" in cfg:
        os.umask(cfg["umask"])
    _redirect_output(folder / "stdout.txt", folder / "stderr.txt")
    progress = _Progress(folder / "progress.jsonl")
    progress("importing")

    # Same module search path as the notebook: its folder first.
    script = cfg.get("script")
    # Python puts the script's folder first on the path; for a cell, the notebook's folder.
    sys.path.insert(0, str(Path(script).resolve().parent) if script else (cfg.get("cwd") or os.getcwd()))
    ns: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    if script:
        sys.argv = [script, *cfg.get("script_args", [])]
        ns["__file__"] = script

    setup = folder / "setup.py"
    if setup.exists() and setup.read_text().strip():
        try:
            _exec_file(setup, ns)
        except BaseException:
            _print_user_traceback((str(setup),))
            progress("setup-error")
            return EXIT_SETUP_ERROR

    blob = folder / "vars.pkl"
    if blob.exists():
        try:
            from .state import unpack_variables

            ns.update(unpack_variables(blob.read_bytes()))
        except BaseException as e:
            print(f"nsight-magic: the sent variables could not be loaded: {type(e).__name__}: {e}", file=sys.stderr)
            progress("state-error")
            return EXIT_STATE_ERROR

    code_path = Path(script) if script else folder / "cell.py"
    ann = cfg.get("annotations") or {}
    _annotate(ann, ns, folder)
    if ann.get("lines"):
        from .line_ranges import helpers, instrument

        ns.update(helpers())
        code = instrument(code_path.read_text(), str(code_path))
    else:
        code = compile(code_path.read_text(), str(code_path), "exec")
    status = 0
    rng = None
    if cfg.get("capture") == "cell":
        import nvtx

        nvtx.push_range(cfg["range_name"], domain=CAPTURE_DOMAIN)
        rng = True
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
    finally:
        if rng:
            nvtx.pop_range(domain=CAPTURE_DOMAIN)
        sys.stdout.flush()
        sys.stderr.flush()
    progress("finished", status=status)

    returns = cfg.get("returns") or []
    if returns:
        from .state import dumps_returns

        data, warnings = dumps_returns(tuple(returns), ns)
        (folder / "returns.pkl").write_bytes(data)
        for w in warnings:
            print(f"nsight-magic: {w}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
