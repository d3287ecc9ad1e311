"""`%%nsys --lines`: the cell's lines as NVTX ranges, for a line-profiler view of where the time goes.

`instrument(source, filename)` compiles the cell with every top-level statement, and every statement in the body of
a top-level for / while / with (async too), wrapped in an NVTX range "L<n>: <the line, cut>" of the domain
LINE_DOMAIN, n in the editor's numbers (`first_line`: the number of the cell's first line, 2 under %%nsys).  The
wrapping is an AST transform that keeps every node's original position, so tracebacks name the user's own line
numbers; `break` and `continue` inside a wrapped body leave its range as any `with` does.
"""
from __future__ import annotations

import ast

LINE_DOMAIN = "cell lines"
HELPER = "__nsight_magic_line__"
MAX_TEXT = 60
_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)


def label(lineno: int, text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"L{lineno}: " + (first if len(first) <= MAX_TEXT else first[: MAX_TEXT - 1] + "…")


class _Wrap(ast.NodeTransformer):
    def __init__(self, source: str, first_line: int = 1):
        self.source = source
        self.offset = first_line - 1

    def _wrap(self, stmt: ast.stmt) -> ast.stmt:
        text = ast.get_source_segment(self.source, stmt) or ""
        name = ast.Constant(label(stmt.lineno + self.offset, text))
        call = ast.Call(func=ast.Name(HELPER, ast.Load()), args=[name], keywords=[])
        node = ast.With(items=[ast.withitem(context_expr=call)], body=[stmt])
        for n in (node, call, call.func, call.args[0], node.items[0]):
            ast.copy_location(n, stmt)
            n.end_lineno, n.end_col_offset = stmt.lineno, stmt.col_offset
        return node

    def body(self, stmts: list[ast.stmt], nested: bool) -> list[ast.stmt]:
        out = []
        for s in stmts:
            if isinstance(s, ast.ImportFrom) and s.module == "__future__":
                out.append(s)
                continue
            if not nested and isinstance(s, _LOOPS):
                s.body = self.body(s.body, nested=True)
                if getattr(s, "orelse", None):
                    s.orelse = self.body(s.orelse, nested=True)
            out.append(self._wrap(s))
        return out


def transform(source: str, first_line: int = 1) -> ast.Module:
    tree = ast.parse(source)
    tree.body = _Wrap(source, first_line).body(tree.body, nested=False)
    return ast.fix_missing_locations(tree)


def instrument(source: str, filename: str, first_line: int = 1):
    """The cell compiled with its lines in NVTX ranges; run it in a namespace that holds helpers()."""
    return compile(transform(source, first_line), filename, "exec")


def helpers() -> dict:
    """The names the instrumented code needs in its namespace."""
    import nvtx

    def line(text):
        return nvtx.annotate(text, domain=LINE_DOMAIN)

    return {HELPER: line}
