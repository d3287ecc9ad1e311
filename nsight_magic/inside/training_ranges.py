"""NVTX ranges every profiled PyTorch cell gets: one around each optimizer step and each zero_grad (profiled side).

    "Adam.step [foreach]"            the optimizer's class and how its update runs: foreach (a few multi-tensor
                                     kernels), fused (one kernel), or single-tensor (kernels per parameter)
    "Adam.zero_grad [set_to_none=False]" / "Module.zero_grad [set_to_none=True]"

They are what the advice needs to name an optimizer run tensor by tensor or gradients zeroed instead of dropped,
and they show where a step's optimizer time goes on the timeline; two ranges per step cost nothing measurable.  They
live in TRAINING_DOMAIN, which the analysis never takes for the user's steps.  Installed only when torch is already
imported (by the setup code, or by the variables sent), removed after the cell.
"""
from __future__ import annotations

import functools
import sys

TRAINING_DOMAIN = "nsight-magic training"


def _nvtx():
    """(push(name), pop()) into TRAINING_DOMAIN (nvtx's Domain fast path where it exists)."""
    import nvtx

    if hasattr(nvtx, "get_domain"):
        domain = nvtx.get_domain(TRAINING_DOMAIN)
        attrs: dict = {}

        def push(name):
            a = attrs.get(name)
            if a is None:
                a = attrs[name] = domain.get_event_attributes(message=name)
            domain.push_range(a)

        return push, domain.pop_range
    return (lambda name: nvtx.push_range(name, domain=TRAINING_DOMAIN)), \
        (lambda: nvtx.pop_range(domain=TRAINING_DOMAIN))


def implementation(optimizer) -> str:
    """How an optimizer's step updates its parameters: "fused", "foreach" or "single-tensor" (torch's own rule: a
    flag left at None means foreach when every parameter is on a GPU)."""
    groups = getattr(optimizer, "param_groups", None) or [{}]
    g = {**getattr(optimizer, "defaults", {}), **groups[0]}
    if g.get("fused"):
        return "fused"
    foreach = g.get("foreach")
    if foreach is None:
        params = [p for grp in groups for p in grp.get("params", [])]
        foreach = bool(params) and all(getattr(p, "is_cuda", False) for p in params) and "foreach" in g
    return "foreach" if foreach else "single-tensor"


class TrainingRanges:
    """Installs the ranges (see the module docstring); remove() takes them off again."""

    def __init__(self):
        self._undo: list = []

    def install(self) -> "TrainingRanges":
        torch = sys.modules.get("torch")
        if torch is None or not hasattr(torch, "optim"):
            return self
        push, pop = _nvtx()
        try:
            from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                               register_optimizer_step_pre_hook)
        except ImportError:
            return self
        names: dict = {}

        def before(opt, args, kwargs):
            key = (type(opt), id(opt))
            name = names.get(key)
            if name is None:
                name = names[key] = f"{type(opt).__name__}.step [{implementation(opt)}]"
            push(name)

        def after(opt, args, kwargs):
            pop()

        self._undo += [register_optimizer_step_pre_hook(before).remove,
                       register_optimizer_step_post_hook(after).remove]
        for owner in (torch.optim.Optimizer, torch.nn.Module):
            self._wrap_zero_grad(owner, push, pop)
        return self

    def _wrap_zero_grad(self, owner, push, pop) -> None:
        original = owner.__dict__.get("zero_grad")
        if original is None:
            return
        label = "Module" if owner.__name__ == "Module" else None

        @functools.wraps(original)
        def zero_grad(obj, set_to_none: bool = True):
            push(f"{label or type(obj).__name__}.zero_grad [set_to_none={bool(set_to_none)}]")
            try:
                return original(obj, set_to_none)
            finally:
                pop()

        setattr(owner, "zero_grad", zero_grad)
        self._undo.append(lambda: setattr(owner, "zero_grad", original))

    def remove(self) -> None:
        while self._undo:
            try:
                self._undo.pop()()
            except Exception:  # noqa: BLE001 - taking our ranges off must never fail the cell
                pass
