"""Automatic NVTX ranges: per PyTorch module (`annotate_modules`) and per function (`annotate_functions`).

`annotate_modules(model)` gives each submodule a forward range named by its path in the model ("0",
"encoder.layers.3.attn") and a backward range ("encoder.layers.3.attn [backward]"), so Nsight Systems shows the
module tree on the timeline, the NVTX table projects each module's forward and backward GPU time, and
`%%ncu --module NAME` can select its kernels.  Forward ranges are push/pop ranges (the module nesting); backward
ranges are start/end ranges opened when the first gradient reaches the module's outputs and closed when the
gradients of its inputs and parameters are computed (autograd calls both on its own thread).  No hook returns a
value (a forward pre-hook that returns one replaces the module's input) and no tensor is wrapped, so outputs and
gradients are those of the unannotated model, in-place layers included.

`annotate_functions(["torch.optim.Optimizer.step", ...])` wraps functions, methods, class/static methods and
generator functions in a range named after them; for a generator the range spans each `next()`, not its lifetime.
Both return a handle: `.remove()` undoes everything; as a context manager it undoes it on exit.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import re
import weakref

from ..errors import OptionError

BACKWARD_SUFFIX = " [backward]"


class AnnotationError(OptionError):
    """A model or function cannot be annotated; the message says why and what to do instead."""


class Annotation:
    """Undo handle of annotate_modules / annotate_functions (also a context manager)."""

    def __init__(self, undo=(), names=(), models=(), skipped=(), types=None):
        self._undo = list(undo)
        self.names = list(names)  # the NVTX range names it adds (module paths, function names)
        self.types = dict(types or {})  # range name -> its module's class (annotate_modules), models' by variable
        self.models = list(models)    # annotate_namespace: the variable names of the models annotated
        self.skipped = list(skipped)  # ... and (variable name, why) of the modules it could not annotate

    def remove(self) -> None:
        while self._undo:
            self._undo.pop()()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()

    def __len__(self):
        return len(self.names)

    def __repr__(self):
        return f"<nsight_magic annotation: {len(self.names)} range name(s), {'active' if self._undo else 'removed'}>"


def _nvtx():
    """(push, pop, start, end): PyTorch's NVTX on a CUDA build, else the nvtx package (CPU-only machines)."""
    try:
        import torch

        if torch.cuda.is_available():
            n = torch.cuda.nvtx
            return n.range_push, n.range_pop, n.range_start, n.range_end
    except ImportError:
        pass
    import nvtx

    return (lambda name: nvtx.push_range(name)), (lambda: nvtx.pop_range()), \
        (lambda name: nvtx.start_range(name)), (lambda rid: nvtx.end_range(rid))


def _tensors(obj):
    """The tensors in a module's inputs or outputs (nested tuples, lists, dicts)."""
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x)


def _check_model(model) -> None:
    import torch

    if type(model).__name__ == "OptimizedModule" or hasattr(model, "_orig_mod"):
        raise AnnotationError(
            "this model is torch.compile'd: its compiled graphs do not run module hooks one by one; annotate the "
            "model before torch.compile (annotate_modules(model); model = torch.compile(model)) or profile the "
            "uncompiled model")
    if isinstance(model, torch.jit.ScriptModule):
        raise AnnotationError("this model is TorchScript (torch.jit.script/trace): scripted modules do not run "
                              "Python hooks; annotate the eager model instead")
    if not isinstance(model, torch.nn.Module):
        raise AnnotationError(f"annotate_modules takes a torch.nn.Module, not {type(model).__name__}")


def annotate_modules(model, depth: int | None = None, include=None, prefix: str = "", include_root: bool = False,
                     backward: bool = True, root_label: str | None = None) -> Annotation:
    """Forward (and backward) NVTX ranges for the submodules of `model`; see the module docstring.

    depth: only modules at most this many levels below the model (1 = its direct children).
    include: a regex (or list of them) a module's path must match (re.search), e.g. "attn|mlp".
    prefix: put before every path (e.g. "model." when several models are annotated).
    root_label: the model's own range name with include_root (default: its class name).
    Returns a handle whose .remove() takes every hook away (.names: the forward range names)."""
    _check_model(model)
    push, pop, start, end = _nvtx()
    pats = [include] if isinstance(include, str) else list(include or [])
    rx = [re.compile(p) for p in pats]
    handles, names, types = [], [], {}
    for name, module in model.named_modules():
        if not name and not include_root:
            continue
        level = name.count(".") + 1 if name else 0
        if depth is not None and level > depth:
            continue
        if rx and not any(r.search(name) for r in rx):
            continue
        label = f"{prefix}{name}" if name else (root_label or f"{prefix}{type(model).__name__}")
        names.append(label)
        types[label] = type(module).__name__

        def pre(mod, args, _label=label):
            push(_label)

        def post(mod, args, output, _label=label):
            pop()
            if backward:
                _backward_range(mod, args, output, _label + BACKWARD_SUFFIX, start, end)

        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))
    model._nsight_magic_annotated = True

    def undo_mark():
        model.__dict__.pop("_nsight_magic_annotated", None)

    return Annotation([undo_mark] + [h.remove for h in reversed(handles)], names, types=types)


# Per tensor that a module's backward range waits on: the ranges its gradient ends (the modules it is an input of)
# and opens (the modules it is an output of), and the one hook of ours on it.  The hook ends those ranges, the
# innermost first, then opens these, the outermost first (a parent module registers after its children, whose
# outputs it shares): backward ranges nest as the forward ones do, and a layer's range closes before the layer
# below opens its own.  Found by the tensor's id while the tensor lives (a weak reference guards against a reused
# id); the hook holds the entry, never the tensor, so a forward that is never backpropagated frees its
# activations as without us.
_ENTRIES: dict[int, tuple] = {}
MAX_PENDING = 64  # callbacks kept on a tensor that no backward reaches (a parameter, forwards under grad mode)


def _entry(t) -> dict:
    found = _ENTRIES.get(id(t))
    if found is not None and found[0]() is t:
        return found[1]
    if len(_ENTRIES) > 4096:  # entries of tensors freed without a backward
        for key in [k for k, (ref, _) in _ENTRIES.items() if ref() is None]:
            _ENTRIES.pop(key, None)
    entry: dict = {"ends": [], "begins": []}
    key = id(t)

    def fired(_grad) -> None:
        ends, begins = entry["ends"], entry["begins"]
        entry["ends"], entry["begins"] = [], []
        entry["hook"].remove()  # one backward, one firing: the next forward sets its own
        if _ENTRIES.get(key, (None, None))[1] is entry:
            _ENTRIES.pop(key, None)
        for cb in ends:
            cb(key)
        for cb in reversed(begins):
            cb()

    entry["hook"] = t.register_hook(fired)
    _ENTRIES[key] = (weakref.ref(t), entry)
    return entry


def _backward_range(module, args, output, label, start, end) -> None:
    """Open `label` when the first gradient reaches the module's outputs, close it when the gradients of its inputs
    are computed (of its parameters when no input needs one: the first layer).  Parameter gradients are accumulated
    whenever autograd gets to them, often after the module before has done its backward work: waiting for them made
    a layer's range span the next layers'.  Tensor hooks only (no wrapped outputs), removed once they fired."""
    import torch

    if not torch.is_grad_enabled():
        return
    outs = [t for t in _tensors(output) if t.requires_grad and t.grad_fn is not None]
    if not outs:
        return
    # an input the module changed in place is its output too: its gradient opens the range, it cannot close it
    out_ids = {id(t) for t in outs}
    ins = [t for t in _tensors(args) if t.requires_grad and id(t) not in out_ids] or \
        [p for p in module.parameters() if p.requires_grad]
    ins = list({id(t): t for t in ins}.values())
    state: dict = {"left": len(ins), "waits": bool(ins), "done": set()}

    def begin() -> None:
        if state.get("began"):
            return
        state["began"] = True
        state["id"] = start(label)
        if not state["waits"]:  # nothing to wait for: the range marks where the backward reached the module
            end(state.pop("id"))

    def finish_one(key: int) -> None:  # one input's gradient is in: the range ends with the last
        if key in state["done"]:
            return
        state["done"].add(key)
        state["left"] -= 1
        if state["left"] <= 0 and "id" in state:
            end(state.pop("id"))

    for t in outs:
        e = _entry(t)
        e["begins"] = [*e["begins"][-MAX_PENDING:], begin]
    for t in ins:
        e = _entry(t)
        e["ends"] = [*e["ends"][-MAX_PENDING:], finish_one]


def annotate_namespace(namespace: dict, depth: int | None = None) -> Annotation:
    """annotate_modules for every nn.Module among a namespace's values (a model and its submodules once); several
    models get their variable name as prefix.  Used by `%%nsys --modules` in the profiled process."""
    try:
        import torch
    except ImportError:
        return Annotation()
    found, skipped = [], []
    for k, v in [*namespace.items(), *_held_modules(namespace, torch.nn.Module)]:
        if not isinstance(v, torch.nn.Module) or k.startswith("_"):
            continue
        if type(v).__name__ == "OptimizedModule" or hasattr(v, "_orig_mod"):
            skipped.append((k, "torch.compile'd: call nsight_magic.annotate_modules(model) before torch.compile "
                               "(in the setup code), or profile the uncompiled model"))
        elif isinstance(v, torch.jit.ScriptModule):
            skipped.append((k, "TorchScript runs no module hooks: annotate the model before scripting it"))
        else:
            found.append((k, v))
    inner = set()
    for _, m in found:  # a model that is a submodule of another found one is annotated through it
        inner |= {id(s) for s in m.modules() if s is not m}
    tops, seen = [], set()
    for k, m in found:
        if id(m) not in inner and id(m) not in seen:
            seen.add(id(m))
            tops.append((k, m))
    undo, names, models, types = [], [], [], {}
    for k, m in tops:
        types[k] = type(m).__name__  # the model itself, by its variable: the root of its module tree
        if getattr(m, "_nsight_magic_annotated", False):  # the user's own annotate_modules call already did it
            models.append(k)
            continue
        # a model without submodules (a loss module such as nn.CrossEntropyLoss) gets its own range, by its name
        leaf = next(iter(m.children()), None) is None
        a = annotate_modules(m, depth=depth, prefix=f"{k}." if len(tops) > 1 else "", include_root=leaf,
                             root_label=k)
        undo.append(a.remove)
        names += a.names
        types.update(a.types)
        models.append(k)
    return Annotation(undo, names, models, skipped, types)


MAX_HELD_ATTRS = 256  # of one object's attributes looked at for models


def _held_modules(namespace: dict, module_type) -> list:
    """("trainer.model", module) for the modules one level inside the namespace's other objects (a Trainer, a
    config, a dataclass that holds the model): what --modules would miss where only the holder is sent."""
    import types

    out = []
    for k, v in list(namespace.items()):
        if k.startswith("_") or isinstance(v, (module_type, type, types.ModuleType, types.FunctionType,
                                               types.BuiltinFunctionType, types.MethodType)):
            continue
        try:
            attrs = vars(v)
        except TypeError:  # no __dict__ (builtins, slots)
            continue
        if not isinstance(attrs, dict):
            continue
        for a, av in list(attrs.items())[:MAX_HELD_ATTRS]:
            if isinstance(a, str) and not a.startswith("_") and isinstance(av, module_type):
                out.append((f"{k}.{a}", av))
    return out


# ---- functions -------------------------------------------------------------------------------------------------

def _resolve(path: str):
    """'pkg.mod.Class.attr' -> (owner, attr name): the longest importable module prefix, then attributes."""
    parts = path.split(".")
    if len(parts) < 2:
        raise AnnotationError(f"{path!r}: give a dotted path such as module.function or module.Class.method")
    for i in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for p in parts[i:-1]:
                owner = getattr(owner, p)
        except AttributeError as e:
            raise AnnotationError(f"{path!r}: {e}") from None
        if not hasattr(owner, parts[-1]):
            raise AnnotationError(f"{path!r}: {getattr(owner, '__name__', owner)!s} has no attribute {parts[-1]!r}")
        return owner, parts[-1]
    raise AnnotationError(f"{path!r}: no importable module at its start; check the spelling")


def _wrap(fn, label: str, push, pop):
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(*a, **k):
            g = fn(*a, **k)
            send, value = g.send, None
            while True:
                push(label)
                try:
                    item = send(value)
                except StopIteration as stop:
                    pop()
                    return stop.value
                except BaseException:
                    pop()
                    raise
                pop()
                try:
                    value, send = (yield item), g.send
                except GeneratorExit:
                    g.close()
                    raise
                except BaseException as exc:  # thrown in: pass it on inside a range of its own
                    value, send = None, (lambda _v, exc=exc: g.throw(exc))
        return gen

    @functools.wraps(fn)
    def wrapper(*a, **k):
        push(label)
        try:
            return fn(*a, **k)
        finally:
            pop()

    return wrapper


def annotate_functions(paths, push=None, pop=None) -> Annotation:
    """Wrap each dotted path (function, method, classmethod, staticmethod, generator function) in an NVTX range
    named after it; see the module docstring.  A builtin that cannot be patched raises AnnotationError (and
    nothing stays patched)."""
    if isinstance(paths, str):
        paths = [p.strip() for p in paths.split(",") if p.strip()]
    if push is None or pop is None:
        push, pop = _nvtx()[:2]
    undo, names = [], []
    try:
        for path in paths:
            owner, attr = _resolve(path)
            raw = inspect.getattr_static(owner, attr)
            label = path.rsplit(".", 2)[-2] + "." + attr if inspect.isclass(owner) else path
            if isinstance(raw, staticmethod):
                new = staticmethod(_wrap(raw.__func__, label, push, pop))
            elif isinstance(raw, classmethod):
                new = classmethod(_wrap(raw.__func__, label, push, pop))
            elif callable(raw):
                new = _wrap(raw, label, push, pop)
            else:
                raise AnnotationError(f"{path!r} is a {type(raw).__name__}, not a function: nothing to wrap")
            try:
                setattr(owner, attr, new)
            except (TypeError, AttributeError) as e:
                raise AnnotationError(f"cannot patch {path} ({e}): it is built in; wrap a function of yours that "
                                      f"calls it, or put an nvtx.annotate() around the call") from None
            if inspect.isclass(owner) and attr not in owner.__dict__:
                undo.append(lambda o=owner, a=attr: delattr(o, a))  # it was inherited: remove our copy
            else:
                undo.append(lambda o=owner, a=attr, r=raw: setattr(o, a, r))
            names.append(label)
    except BaseException:
        while undo:
            undo.pop()()
        raise
    return Annotation(undo, names)
