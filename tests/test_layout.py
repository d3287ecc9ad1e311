"""The package's shape, read from its own imports (module level and inside functions alike): the layers of the
pipeline, the two sides of the process boundary, no import circles."""
from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "nsight_magic"

# Lowest first.  A module may import from its own layer and the ones below, never from a higher one.
LAYERS = (
    ("errors", "version", "inside"),                      # shared by both sides of the process boundary
    # what the user asked for and set, the tools, profile folders
    ("options", "settings", "thresholds", "tools", "store", "baselines", "heap"),
    ("profilers", "readers"),                              # record and finish a run; read report files
    ("analysis",),
    ("views",),
    # the facade: a reader's data with analysis and views on top; its verdict and findings kept beside the report
    ("report", "saved_analysis"),
    ("jobs",),
    # the Python API and its front ends ("" = __init__)
    ("run", "background", "frontend", "magics", "magic_args", "cell_output", "cell_display", "cell_run", "cli",
     "inplace_kernel", "idle", "memory_room", ""),
)


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        rel = p.relative_to(PACKAGE).with_suffix("").parts
        out[".".join(rel[:-1] if rel[-1] == "__init__" else rel)] = p
    return out


@functools.lru_cache(maxsize=None)
def _parsed(path: Path) -> tuple[str, ast.Module]:
    """A module's text and syntax tree, parsed once for all the tests here."""
    text = path.read_text()
    return text, ast.parse(text)


@functools.lru_cache(maxsize=1)
def _imports() -> tuple[tuple[str, str, int, str], ...]:
    """(importer, imported module, line, the import's source line) for every import of our own modules."""
    modules = _modules()
    out = []
    for name, path in modules.items():
        text, tree = _parsed(path)
        lines = text.splitlines()
        is_pkg = path.name == "__init__.py"
        here = name.split(".") if name else []
        base = here if is_pkg else here[:-1]
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    pkg = base[:len(base) - node.level + 1]
                    mod = ".".join(pkg + ([node.module] if node.module else []))
                elif (node.module or "").startswith("nsight_magic"):
                    mod = node.module[len("nsight_magic"):].lstrip(".")
                else:
                    continue
                for a in node.names:
                    sub = f"{mod}.{a.name}".lstrip(".")
                    targets.append(sub if sub in modules else mod)
            elif isinstance(node, ast.Import):
                targets = [a.name[len("nsight_magic"):].lstrip(".") for a in node.names
                           if a.name.startswith("nsight_magic")]
            for t in targets:
                if t != name:
                    out.append((name, t, node.lineno, lines[node.lineno - 1]))
    return tuple(out)


def _layer(module: str) -> int:
    top = module.split(".")[0] if module else ""
    for i, names in enumerate(LAYERS):
        if top in names:
            return i
    raise AssertionError(f"nsight_magic.{module} is in no layer of tests/test_layout.py: add it")


def test_every_module_has_a_layer():
    for m in _modules():
        _layer(m)


def test_the_profiled_process_side_imports_nothing_from_the_notebook_side():
    bad = [f"nsight_magic.{a}:{line} imports nsight_magic.{b}" for a, b, line, _ in _imports()
           if a.startswith("inside") and not b.startswith("inside") and b not in ("errors", "version")]
    assert not bad, bad


def test_no_import_goes_up_a_layer():
    up = [f"nsight_magic.{a}:{line} -> nsight_magic.{b}" for a, b, line, _ in _imports()
          if _layer(b) > _layer(a)]
    assert not up, f"imports from a lower layer up to a higher one: {up}"


def test_no_import_circles():
    """No cycle among modules, lazy imports included."""
    modules = _modules()
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for a, b, _, _ in _imports():
        edges[a].add(b)
    # a package's __init__ that re-exports its modules is not a circle with them: count only module -> module
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(modules):
        if m not in state:
            cycle = visit(m)
            assert cycle is None, " -> ".join(f"nsight_magic.{c}" if c else "nsight_magic" for c in cycle)


def test_javascript_and_css_are_package_files_not_python_strings():
    """The browser side lives in views/assets/ (read with importlib.resources): no script or style of more than
    two lines in a Python string, where no linter or editor reads it."""
    import re

    code = re.compile(r"\bconst |\blet |\bfunction\s*\(|=>|[.#][\w-]+\s*\{[^}]*:[^}]*;")
    found = []
    for p in PACKAGE.rglob("*.py"):
        tree = _parsed(p)[1]
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if id(node) in docs:
                continue
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            else:
                continue
            if text.count("\n") >= 2 and code.search(text):
                found.append(f"{p.relative_to(PACKAGE)}:{node.lineno}")
    assert not found, f"JavaScript or CSS in Python strings (move it to nsight_magic/views/assets/): {found}"


def test_no_module_imports_another_modules_private_names():
    """A leading underscore means "this module's own": what another module needs is public (issue 49 found 25)."""
    found = []
    for p in PACKAGE.rglob("*.py"):
        for node in ast.walk(_parsed(p)[1]):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("nsight_magic")):
                found += [f"{p.relative_to(PACKAGE)}:{node.lineno} {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert not found, found


def test_the_modules_imported_ahead_of_the_first_profile_exist():
    """background.import_finish_stage imports them in a thread and ignores failures: a renamed module would
    silently make the first profile slower (readers.report_api did, when the facade moved)."""
    from nsight_magic.background import FINISH_MODULES

    assert all(f"{m}" in _modules() for m in FINISH_MODULES), [m for m in FINISH_MODULES if m not in _modules()]


def test_docs_layout_names_every_module():
    """docs/layout.md is the map a newcomer reads: every module of the package is named there (by its file name),
    so a new one is placed and described when it is added."""
    import re

    text = (PACKAGE.parent / "docs" / "layout.md").read_text()
    missing = [name for name, p in _modules().items()
               if name and p.stem != "__init__" and not re.search(rf"\b{re.escape(p.stem)}\b", text)]
    assert not missing, f"docs/layout.md names none of {missing}"


# what reads or writes files: the store (store.py) and the readers do; analysis and views get data and return data
_FILE_METHODS = {"read_text", "write_text", "read_bytes", "write_bytes", "exists", "is_file", "is_dir", "iterdir",
                 "glob", "rglob", "stat", "lstat", "mkdir", "unlink", "rmdir", "touch", "symlink_to",
                 "readlink", "open"}  # not resolve(): thresholds.resolve is no file's
_FILE_MODULES = {"os", "shutil", "tempfile", "glob", "pickle", "sqlite3"}
_FILE_CALLS = {"open", "read_report", "open_report", "read_nsys", "open_nsys_report"}


def _file_io(tree: ast.Module) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [(node.lineno, f"import {n}") for n in names if n.split(".")[0] in _FILE_MODULES and not
                      getattr(node, "level", 0)]
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in _FILE_CALLS:
                found.append((node.lineno, f"{f.id}()"))
            elif isinstance(f, ast.Attribute) and f.attr in _FILE_METHODS | {"load"} - {"open"}:
                if f.attr == "load" and not (isinstance(f.value, ast.Name) and f.value.id in ("json", "pickle")):
                    continue
                found.append((node.lineno, f".{f.attr}()"))
    return found


def test_analysis_and_views_read_and_write_no_file():
    """Analysis is pure and the views are fed: a folder's files (the cell, run.json, annotations, the Files tab)
    come from store.py, reports from the readers, and pages are written by store.write_page."""
    bad = []
    for name, path in _modules().items():
        # views/assets reads the package's own JavaScript and CSS, no user's file
        if name.split(".")[0] not in ("analysis", "views") or name == "views.assets":
            continue
        bad += [f"nsight_magic/{path.relative_to(PACKAGE)}:{line}: {what}" for line, what in _file_io(_parsed(path)[1])]
    assert not bad, "file I/O in analysis/ or views/ (move it to store.py or a reader):\n" + "\n".join(bad)


# mypy's --strict as flags of one module section (what `strict = true` turns on that a section may set)
STRICT_FLAGS = ("disallow_any_generics", "disallow_subclassing_any", "disallow_untyped_calls", "disallow_untyped_defs",
                "disallow_incomplete_defs", "check_untyped_defs", "disallow_untyped_decorators", "warn_return_any",
                "no_implicit_reexport", "strict_equality", "extra_checks")


def test_analysis_and_views_are_held_to_the_strict_type_checker():
    """pyproject.toml's [tool.mypy] (run by scripts/test.sh, so by CI) holds analysis/ and views/ to --strict's
    flags, and none of their modules is among the debts it skips."""
    import tomllib

    mypy = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["mypy"]
    sections = mypy.get("overrides", [])
    for part in ("analysis", "views"):
        held = [s for s in sections if f"nsight_magic.{part}.*" in s.get("module", ())]
        assert held, f"no [[tool.mypy.overrides]] for nsight_magic.{part}.*"
        loose = [f for f in STRICT_FLAGS if not any(s.get(f) is True for s in held)]
        assert not loose, f"nsight_magic.{part}.* is not held to {', '.join(loose)}"
    skipped = [m for s in sections if s.get("ignore_errors") for m in s.get("module", ())
               if m.split(".")[1:2] in (["analysis"], ["views"])]
    assert not skipped, f"analysis/views modules among the type checker's debts: {skipped}"
