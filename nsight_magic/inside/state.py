"""State transfer between the notebook and the profiled child: free names, cloudpickle, manifest."""
from __future__ import annotations

import ast
import builtins
import io
import pickle
import re
import types
from dataclasses import dataclass

import cloudpickle

from ..errors import OptionError

# IPython's own names; they mean nothing in the child.
_IPYTHON_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "_", "__", "___", "_ih", "_oh", "_dh", "_i", "_ii",
                  "_iii"}


class UnpicklableVariable(OptionError):
    """A variable the cell needs cannot be sent to the child."""


@dataclass(frozen=True)
class SentVariable:
    name: str
    type: str
    size_bytes: int


def loaded_names(source: str) -> set[str]:
    """Names the code reads (ast Load context), attribute roots included."""
    return _loaded(ast.parse(source))


def _loaded(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def bound_names(source: str) -> set[str]:
    """Names bound at any level by the code: assignments, imports, def/class, for/with/except targets."""
    return _bound(ast.parse(source))


def _bound(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                out.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
    return out


_SURE_BINDINGS = (ast.Assign, ast.AnnAssign, ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef,
                  ast.ClassDef)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def assigned_before_read(source: str) -> set[str]:
    """Names the code binds at its top level, unconditionally, before any statement reads them (`t = time.time()`
    first, `print(t)` after): the cell makes its own, so the notebook's need not be sent.  A read anywhere before
    (in a loop, a branch, a function body, the assignment's own value: `x = x + 1`) keeps the name free; a binding
    inside a loop, branch or `try` may not happen and does not count."""
    read: set[str] = set()
    first: set[str] = set()
    for stmt in ast.parse(source).body:
        read |= _loaded(stmt)  # a statement's value (and a def's body) is read before its names are bound
        if isinstance(stmt, _SURE_BINDINGS) and not (isinstance(stmt, ast.AnnAssign) and stmt.value is None):
            first |= ({stmt.name} if isinstance(stmt, _DEFS) else _bound(stmt)) - read
    return first


def free_names(cell: str, setup_sources: list[str], namespace: dict) -> list[str]:
    """Names the cell reads that live in the notebook namespace and that neither the setup code defines nor the
    cell binds before it reads them."""
    defined_by_setup: set[str] = set()
    for src in setup_sources:
        defined_by_setup |= bound_names(src)
    wanted = loaded_names(cell) - defined_by_setup - assigned_before_read(cell) - _IPYTHON_NAMES - set(dir(builtins))
    # _i, _i7, _ii...: IPython's input history
    return sorted(n for n in wanted if n in namespace and not re.fullmatch(r"_i+\d*", n))


SENT_CODE_KEPT = 5000  # code objects a run names (a sent object graph may hold many functions)


class _CodePickler(cloudpickle.CloudPickler):
    """cloudpickle, noting where each function it meets was defined: it sends code objects with co_filename
    "<dynamic-code>" (cloudpickle 3.1), so the profiled process's frames no longer say which notebook cell
    defined them; `codes` maps (name, first line) -> the file the notebook compiled them from."""

    def __init__(self, file, protocol, codes: dict):
        super().__init__(file, protocol=protocol)
        self.codes = codes

    def reducer_override(self, obj):
        # functions sent by value: the notebook's own (importable ones go by reference, their files intact)
        if isinstance(obj, types.FunctionType) and len(self.codes) < SENT_CODE_KEPT and \
                getattr(obj, "__module__", None) in (None, "__main__"):
            _note_code(obj.__code__, self.codes)
        return super().reducer_override(obj)


def _note_code(code: types.CodeType, codes: dict, depth: int = 0) -> None:
    codes.setdefault((code.co_name, code.co_firstlineno), code.co_filename)
    if depth < 8:  # nested functions, lambdas and comprehensions are constants of their code
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                _note_code(c, codes, depth + 1)


def pack_variables(names: list[str], namespace: dict, optional=(), codes: dict | None = None
                   ) -> tuple[bytes, list[SentVariable]]:
    """cloudpickle the variables into one stream; raise UnpicklableVariable naming the first that fails.

    One pickler for all of them, so objects they share stay shared in the child (a model and the optimizer that
    holds its parameters).  Each manifest size is what that variable added to the stream.  Names in `optional`
    (those the cell assigns itself) are left out with no error when they cannot be pickled.  `codes`, when given,
    receives where each sent function was defined (_CodePickler).
    """
    buf = io.BytesIO()
    pickler = _CodePickler(buf, pickle.HIGHEST_PROTOCOL, {} if codes is None else codes)
    sent: list[str] = []
    manifest: list[SentVariable] = []
    for name in names:
        if name not in namespace:
            raise OptionError(f"--vars names {name!r}, which is not defined in the notebook")
        value = namespace[name]
        start = buf.tell()
        try:
            pickler.dump(value)
        except Exception as e:  # pickling can fail with any exception type
            if name in optional:
                # start again without it: the failed dump may have left entries in the pickler's memo
                return pack_variables([n for n in names if n != name], namespace, optional, codes)
            raise UnpicklableVariable(
                f"variable {name!r} ({type(value).__name__}) cannot be sent to the profiled process "
                f"({type(e).__name__}: {str(e)[:120]}); create it in a %%nsight_setup cell instead, "
                f"or leave it out with --vars / --no-vars") from None
        sent.append(name)
        manifest.append(SentVariable(name, type(value).__name__, buf.tell() - start))
    return pickle.dumps(sent) + buf.getvalue(), manifest


def unpack_variables(blob: bytes) -> dict:
    """Inverse of pack_variables (runs in the child): one unpickler, so shared objects stay shared."""
    f = io.BytesIO(blob)
    names = pickle.load(f)
    unpickler = pickle.Unpickler(f)
    return {name: unpickler.load() for name in names}


def format_size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def manifest_line(manifest: list[SentVariable]) -> str:
    """One line: 'sending 2 variables: x (int, 5 B), df (DataFrame, 1.2 MB)'."""
    if not manifest:
        return "sending no variables"
    parts = ", ".join(f"{v.name} ({v.type}, {format_size(v.size_bytes)})" for v in manifest)
    return f"sending {len(manifest)} variable{'s' if len(manifest) != 1 else ''}: {parts}"


def dumps_returns(names: tuple[str, ...], namespace: dict) -> tuple[bytes, list[str]]:
    """Pickle the requested results in the child; names that are missing or unpicklable become warnings."""
    warnings = [f"--return {n}: the cell did not define {n!r}" for n in names if n not in namespace]
    present = [n for n in names if n in namespace]
    blob, manifest = b"", []
    try:
        blob, manifest = pack_variables(present, namespace)
    except UnpicklableVariable:
        # find out which: send the rest
        good = []
        for n in present:
            try:
                cloudpickle.dumps(namespace[n])
                good.append(n)
            except Exception as e:
                warnings.append(f"--return {n}: cannot be pickled ({type(e).__name__}: {str(e)[:120]})")
        blob, manifest = pack_variables(good, namespace)
    return blob, warnings
