"""State transfer between the notebook and the profiled child: free names, cloudpickle, manifest."""
from __future__ import annotations

import ast
import builtins
import io
from dataclasses import dataclass

import cloudpickle

from .errors import OptionError

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
    tree = ast.parse(source)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def bound_names(source: str) -> set[str]:
    """Names bound at any level by the code: assignments, imports, def/class, for/with/except targets."""
    tree = ast.parse(source)
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


def free_names(cell: str, setup_sources: list[str], namespace: dict) -> list[str]:
    """Names the cell reads that live in the notebook namespace and that the setup code does not define."""
    defined_by_setup: set[str] = set()
    for src in setup_sources:
        defined_by_setup |= bound_names(src)
    wanted = loaded_names(cell) - defined_by_setup - _IPYTHON_NAMES - set(dir(builtins))
    return sorted(n for n in wanted if n in namespace and not n.startswith("_i"))


def pack_variables(names: list[str], namespace: dict) -> tuple[bytes, list[SentVariable]]:
    """cloudpickle each variable; raise UnpicklableVariable naming the first that fails."""
    payload: dict[str, bytes] = {}
    manifest: list[SentVariable] = []
    for name in names:
        if name not in namespace:
            raise OptionError(f"--vars names {name!r}, which is not defined in the notebook")
        value = namespace[name]
        try:
            blob = cloudpickle.dumps(value)
        except Exception as e:  # pickling can fail with any exception type
            raise UnpicklableVariable(
                f"variable {name!r} ({type(value).__name__}) cannot be sent to the profiled process "
                f"({type(e).__name__}: {str(e)[:120]}); create it in a %%nsight_setup cell instead, "
                f"or leave it out with --vars / --no-vars") from None
        payload[name] = blob
        manifest.append(SentVariable(name, type(value).__name__, len(blob)))
    return cloudpickle.dumps(payload), manifest


def unpack_variables(blob: bytes) -> dict:
    """Inverse of pack_variables (runs in the child)."""
    return {name: cloudpickle.loads(b) for name, b in cloudpickle.loads(blob).items()}


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
    out: dict[str, bytes] = {}
    warnings: list[str] = []
    for name in names:
        if name not in namespace:
            warnings.append(f"--return {name}: the cell did not define {name!r}")
            continue
        buf = io.BytesIO()
        try:
            cloudpickle.dump(namespace[name], buf)
        except Exception as e:
            warnings.append(f"--return {name}: cannot be pickled ({type(e).__name__}: {str(e)[:120]})")
            continue
        out[name] = buf.getvalue()
    return cloudpickle.dumps(out), warnings
