"""`--ops`: every PyTorch operator the cell runs, forward and backward, in an NVTX range (profiled-process side).

On CUDA builds PyTorch makes the ranges itself, in C++: torch.autograd.profiler.emit_nvtx (EmitNvtx below; about
a third of the dispatch mode's cost per operator).  It opens a range at every dispatcher call, composite operators
included (aten::linear around aten::t and aten::addmm); one NVTX mark lists the operators that are composite
(CompositeImplicitAutograd), so that the reader shows the operators a dispatch mode would see.  On CPU-only builds,
without NVTX in PyTorch, a dispatch mode makes them (OpRanges):

A TorchDispatchMode sees each ATen operator as it reaches a kernel (after autograd and composite decomposition:
`aten::addmm`, not `aten::linear`), on CPU and CUDA builds alike, and wraps it in a push/pop range of the domain
OPS_DOMAIN.  Backward operators run on autograd's thread, which inherits the mode; their range names the forward
operator they belong to, from the autograd node being executed ("AddmmBackward0" belongs to aten::addmm), the link
PyTorch Profiler makes with sequence numbers.  With shapes=True the inputs' shapes are part of the name.

Outputs and gradients are unchanged: the mode calls each operator with its own arguments and returns its result.
The ranges make readers.nsys's report.ops_summary(): GPU time per operator from the kernels each one launched.
"""
from __future__ import annotations

import re

OPS_DOMAIN = "nsight-magic ops"
COMPOSITE_MARK = "emit_nvtx composite operators: "  # + names, space-separated, in marks of OPS_DOMAIN
MARK_CHARS = 2000                                   # per mark (long NVTX strings are split)
SKIP_NAMESPACES = ("profiler::",)  # record_function's own enter/exit calls (the optimizers' step marks)
BACKWARD_OF = " [backward of "   # "aten::mm [backward of aten::addmm]"
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


class OpsError(ValueError):
    """--ops cannot run here; the message says why and what to do."""


def forward_op_of(node_name: str) -> str | None:
    """The forward operator an autograd node belongs to: 'AddmmBackward0' -> 'aten::addmm',
    'NativeLayerNormBackward0' -> 'aten::native_layer_norm'; None for nodes that are not an operator's."""
    m = re.match(r"^([A-Za-z0-9]+?)Backward\d*$", node_name)
    if not m:
        return None
    return "aten::" + _CAMEL.sub("_", m.group(1)).lower()


def _shapes(args) -> str:
    out = []
    for a in args:
        shape = getattr(a, "shape", None)
        if shape is not None:
            out.append("x".join(map(str, shape)) or "scalar")
        elif isinstance(a, (list, tuple)) and a and all(hasattr(x, "shape") for x in a):
            out.append("[" + ", ".join("x".join(map(str, x.shape)) for x in a) + "]")
    return ", ".join(out)


def _nvtx():
    """(push(name), pop()) into OPS_DOMAIN.  nvtx >= 0.2.11 has a Domain object whose event attributes can be made
    once per name (its documented fast path, a few times cheaper per call); older ones take the plain calls."""
    import nvtx

    if hasattr(nvtx, "get_domain"):
        domain = nvtx.get_domain(OPS_DOMAIN)
        attrs: dict = {}
        push_attr, pop = domain.push_range, domain.pop_range

        def push(name):
            a = attrs.get(name)
            if a is None:
                a = attrs[name] = domain.get_event_attributes(message=name)
            push_attr(a)

        return push, pop
    return (lambda name: nvtx.push_range(name, domain=OPS_DOMAIN)), (lambda: nvtx.pop_range(domain=OPS_DOMAIN))


def check_not_compiled(namespace: dict) -> None:
    """--ops on a torch.compile'd model sees the compiled graph's calls, not the model's operators: refuse."""
    for k, v in namespace.items():
        if type(v).__name__ == "OptimizedModule" or (hasattr(v, "_orig_mod") and hasattr(v, "forward")):
            raise OpsError(f"{k} is torch.compile'd: its operators run inside compiled graphs, not one by one; "
                           f"profile the uncompiled model with --ops (or drop --ops for the compiled one)")


class OpRanges:
    """Context manager: every operator dispatched while it is active gets an NVTX range (see the module doc)."""

    def __init__(self, shapes: bool = False):
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        push, pop = _nvtx()
        current_node = torch._C._current_autograd_node
        names: dict = {}
        with_shapes = shapes
        quiet = self._quiet = [False]  # warm(): operators pass through without a range

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if quiet[0]:
                    return func(*args, **(kwargs or {}))
                node = current_node()
                key = (func, node.name() if node is not None else None)
                name = names.get(key)
                if name is None:
                    name = func._schema.name  # "aten::addmm"
                    fwd = forward_op_of(key[1]) if key[1] else None
                    if fwd:
                        name += f"{BACKWARD_OF}{fwd}]"
                    if name.startswith(SKIP_NAMESPACES):
                        name = ""
                    names[key] = name
                if not name:  # bookkeeping, no operator of the model's
                    return func(*args, **(kwargs or {}))
                if with_shapes:
                    name = f"{name} ({_shapes(args)})"
                push(name)
                try:
                    return func(*args, **(kwargs or {}))
                finally:
                    pop()

        self._mode = _Mode()

    def warm(self) -> None:
        """One operator through the mode, with no range: torch wraps a mode's __torch_dispatch__ so that its first
        call imports torch._dynamo (and sympy): 1.2 s on this CPU machine, 6.4 s on the H100's host
        (scripts/gpu_check.py --only ops_warm), 5.2 s of a planted cell's first step in its profile.  Done before
        the capture, none of it lands in the cell."""
        import torch

        self._quiet[0] = True
        try:
            with self._mode:
                torch.zeros(())
        finally:
            self._quiet[0] = False

    def __enter__(self):
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self._mode.__exit__(*exc)


def composite_operators() -> list[str]:
    """Operator names (no overload) whose every functional overload is CompositeImplicitAutograd (out= variants,
    which a model rarely calls, aside): they decompose above the dispatcher's lower keys, so a dispatch mode never
    sees them; emit_nvtx does."""
    import torch

    cia = torch._C._dispatch_get_registrations_for_dispatch_key("CompositeImplicitAutograd")
    every = getattr(torch._C, "_dispatch_get_all_op_names", lambda: cia)()
    overloads: dict = {}
    for n in every:
        if not re.search(r"\.(?:\w+_)?out$", n):
            overloads.setdefault(n.split(".")[0], set()).add(n)
    implicit = set(cia)
    return sorted(b for b, names in overloads.items() if names and names <= implicit)


def emit_nvtx_available() -> bool:
    """PyTorch can make the ranges itself: a CUDA build (its NVTX profiler mode needs one)."""
    try:
        import torch

        return bool(torch.version.cuda) and torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - no torch, or a broken one: the dispatch mode (or nothing) then
        return False


class EmitNvtx:
    """Context manager: PyTorch's emit_nvtx for the cell, after one mark per MARK_CHARS of the composite operators'
    names (see the module doc).  Not warmed as OpRanges is: on the H100 its first use in a process cost 0.02 s and a
    second one 4.4 s, after which torch._dynamo was loaded (scripts/gpu_check.py --only ops_warm); the cell's use is
    its first."""

    def __init__(self, shapes: bool = False):
        import torch

        self._shapes = shapes
        self._ctx = torch.autograd.profiler.emit_nvtx(record_shapes=shapes)
        self._names = composite_operators()
        self._instead = None

    def __enter__(self):
        import sys

        import nvtx

        try:
            self._ctx.__enter__()
        except Exception as e:  # noqa: BLE001 - a CPU-only build (no CUDA, no NVTX in its profiler): the dispatch mode
            print(f"nsight-magic: --ops: PyTorch's emit_nvtx is not available here ({str(e).splitlines()[0]}); "
                  f"using the dispatch mode", file=sys.stderr)
            self._instead = OpRanges(shapes=self._shapes)
            self._instead.__enter__()
            return self
        chunk: list[str] = []
        size = 0
        for n in self._names + [None]:
            if n is None or size + len(n) + 1 > MARK_CHARS:
                if chunk:
                    nvtx.mark(COMPOSITE_MARK + " ".join(chunk), domain=OPS_DOMAIN)
                chunk, size = [], 0
            if n is not None:
                chunk.append(n)
                size += len(n) + 1
        return self

    def __exit__(self, *exc):
        if self._instead is not None:
            return self._instead.__exit__(*exc)
        return self._ctx.__exit__(*exc)
