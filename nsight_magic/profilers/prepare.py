"""cell -> profile folder: the cell, the setup code, the sent variables and run.json, before any profiler starts."""
from __future__ import annotations

import os
import platform
import re
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from .. import tools
from ..version import __version__
from ..inside import state
from ..inside.child import write_setup
from ..errors import OptionError, ToolNotFound
from ..options import RunOptions
from ..store import ProfileFolder, create_profile_folder, notebook_dir, profiles_root
from .process import RunFailed


@dataclass
class _Prepared:
    folder: ProfileFolder
    manifest: list
    cwd: Path


def _check_unicode(text: str, what: str, folder: ProfileFolder) -> None:
    """A lone surrogate is no character: no file can hold it as UTF-8, so the profiled process could not read it."""
    m = re.search("[\ud800-\udfff]", text)
    if m:
        line = text.count("\n", 0, m.start()) + 1
        raise OptionError(f"{what} holds a lone surrogate (U+{ord(m.group()):04X}, line {line}): not a character, "
                          f"so it cannot be run; retype what is there; nothing was run, the cell is kept in "
                          f"{folder.path}/")


def _check_syntax(cell: str, folder: ProfileFolder, script: str | None = None, first_line: int = 1) -> None:
    """A syntax error before anything runs, at the line as the editor numbers it (`first_line`: the number of the
    cell's first line there, 2 under a %%nsys line)."""
    try:
        compile(cell, str(folder.cell), "exec")
    except SyntaxError as e:
        if script:  # `nsight-magic profile script.py`: the script's own name and lines
            raise OptionError(f"syntax error in {Path(script).name}, line {e.lineno}: {e.msg}; nothing was run, "
                              f"a copy is kept in {folder.path}/") from None
        hint = ""
        bad = (e.text or "").lstrip()
        if bad.startswith(("%", "!")):
            hint = " (IPython magics and shell escapes do not run in the profiled process; use plain Python)"
        line = (e.lineno or 1) + first_line - 1
        raise OptionError(f"syntax error in the cell, line {line}: {e.msg}{hint}; nothing was run, "
                          f"the cell is kept in {folder.path}/") from None


def prepare(cell: str, *, name: str, directory, setup_sources=(), namespace=None, send_vars=None,
            no_vars=False, capture="cell", returns=(), script: str | None = None, script_args=(),
            cwd: Path | None = None, annotations: dict | None = None, nproc: int | None = None,
            return_all: bool = False, per_rank_reports: bool = False, cell_first_line: int = 1,
            tool: str = "nsys") -> _Prepared:
    """Create the profile folder and write everything the child needs (cell, setup, variables, run.json)."""
    root = profiles_root(directory)
    try:
        folder = ProfileFolder(create_profile_folder(root, name))
    except OSError as e:
        raise OptionError(f"cannot create a profile folder under {root} ({e.strerror or e}); "
                          f"choose another place with --dir") from None
    # which profiler the folder is for, first: a run that stops here (a syntax error) still says it
    folder.write_json(folder.run_config, {"tool": tool})
    # kept as given, a lone surrogate too (a frontend can send one), then refused in one line
    folder.cell.write_text(cell, encoding="utf-8", errors="surrogatepass")
    setup_text = write_setup(folder.setup, setup_sources)
    _check_unicode(cell, "the cell", folder)
    _check_unicode(setup_text, "the setup code", folder)
    _check_syntax(cell, folder, script, cell_first_line)
    manifest = []
    codes: dict = {}
    namespace = namespace or {}
    if not no_vars and not script:
        names = list(send_vars) if send_vars is not None else state.free_names(cell, list(setup_sources), namespace)
        try:
            blob, manifest = state.pack_variables(names, namespace,
                                                  optional=state.bound_names(cell) if send_vars is None else (),
                                                  codes=codes)
        except OptionError as e:
            raise type(e)(f"{e}; nothing was run (kept: {folder.path}/)") from None
        if manifest:
            folder.vars_blob.write_bytes(blob)
    folder.write_json(folder.vars_manifest, [v.__dict__ for v in manifest])
    cwd = Path(cwd or Path.cwd())
    folder.write_json(folder.run_config, {
        "tool": tool,
        "capture": capture,
        "range_name": folder.path.name,
        "returns": list(returns),
        "cwd": str(cwd),
        "script": script,
        "script_args": list(script_args),
        "umask": current_umask(),
        # automatic NVTX ranges made in the profiled process: modules (depth, 0 = all), functions, lines
        "annotations": annotations or {},
        "nproc": nproc,            # --nproc: ranks under torchrun (child.py's barrier and per-rank files)
        "return_all": return_all,
        "per_rank_reports": per_rank_reports,  # one nsys per rank: each rank pushes the capture range itself
        "cell_first_line": cell_first_line,    # the editor's number of the cell's first line (2 under %%nsys)
        # functions sent with the variables: [name, first line, file, "In [N]" or None] (readers/python_samples)
        "sent_code": sent_code(codes),
    })
    return _Prepared(folder, manifest, cwd)


def sent_code(codes: dict) -> list:
    """Where each sent function was defined, with the notebook cell that compiled it ("In [3]") where this runs in
    an IPython kernel: cloudpickle's copies in the profiled process say only "<dynamic-code>"."""
    labels: dict = {}
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    names = getattr(getattr(shell, "compile", None), "_filename_map", None)
    if isinstance(names, dict):
        labels = {k: f"In [{v}]" for k, v in names.items() if isinstance(k, str) and isinstance(v, int)}
    return [[name, first, file, labels.get(file)] for (name, first), file in codes.items()
            if isinstance(file, str) and not file.startswith("<frozen")]


def current_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def tool_versions(nsys_path: Path | None, tool: str, tool_version: str | None) -> dict:
    def dist(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {
        tool: tool_version,
        f"{tool}_path": str(nsys_path) if nsys_path else None,
        "nsight_magic": __version__,
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "torch": dist("torch"),
        "nvtx": dist("nvtx"),
        "gpus": tools.gpu_names(),
    }


def prepare_with_tool(cell: str, opts: RunOptions, tool: str, find, version_of, *, capture: str, setup_sources,
                       namespace, on_prepared, script: str | None = None, script_args=(),
                       annotations: dict | None = None, cell_first_line: int = 1):
    """The profile folder with everything the child needs, then the profiler and its version.

    The folder comes first so that even "nsys not found" says where the cell is kept."""
    prep = prepare(cell, name=opts.name, directory=opts.directory, setup_sources=setup_sources,
                   namespace=namespace, send_vars=opts.send_vars, no_vars=opts.no_vars, capture=capture,
                   returns=opts.return_vars, script=script, script_args=script_args, cwd=notebook_dir(),
                   annotations=annotations if annotations is not None else annotation_setup(opts),
                   nproc=getattr(opts, "nproc", None), return_all=getattr(opts, "return_all", False),
                   per_rank_reports=getattr(opts, "per_rank_reports", False), cell_first_line=cell_first_line,
                   tool=tool)
    if on_prepared:
        on_prepared(prep.manifest)
    try:
        exe = find()
        return prep, exe, version_of(exe)
    except ToolNotFound as e:
        raise RunFailed(f"{e}; nothing was run, the cell is kept in {prep.folder.path}/") from None


def annotation_setup(opts: RunOptions, modules: int | None = None) -> dict:
    """What the profiled process annotates before the cell (run.json "annotations", read by child.py)."""
    return {"modules": opts.modules if opts.modules is not None else modules, "functions": list(opts.functions),
            "lines": bool(getattr(opts, "lines", False)), "ops": getattr(opts, "ops", None)}


def load_returns(folder: ProfileFolder, messages: list[str], nproc: int | None = None,
                  return_all: bool = False) -> dict:
    """--return values: rank 0's (or the only process's); with --return-all a list per name, one per rank."""
    if return_all and nproc:
        per_rank = [_load_blob(folder.path / f"returns.rank{r}.pkl", messages) for r in range(nproc)]
        names = list(dict.fromkeys(n for d in per_rank for n in d))
        return {n: [d.get(n) for d in per_rank] for n in names}
    return _load_blob(folder.returns_blob, messages)


def _load_blob(path: Path, messages: list[str]) -> dict:
    if not path.exists():
        return {}
    try:
        return state.unpack_variables(path.read_bytes())
    except Exception as e:
        messages.append(f"--return values could not be loaded here ({type(e).__name__}: {e}); "
                        f"they are kept in {path}")
        return {}
