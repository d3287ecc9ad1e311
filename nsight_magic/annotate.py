"""Per-module NVTX ranges for PyTorch models: `annotate_modules(model)`.

Each submodule's forward runs inside an NVTX range named by its path in the model ("0", "encoder.layer.3.attn"),
so Nsight Systems shows the module tree on the timeline and `%%ncu --module NAME` can select its kernels.
"""
from __future__ import annotations


def _nvtx_push_pop():
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    except ImportError:
        pass
    import nvtx

    return (lambda name: nvtx.push_range(name)), (lambda: nvtx.pop_range())


def annotate_modules(model, prefix: str = "", include_root: bool = False) -> list:
    """Register forward pre/post hooks that push/pop an NVTX range per submodule; returns the hook handles.

    The hooks return None on purpose: a forward pre-hook that returns a value replaces the module's input.
    Remove the ranges again with `for h in handles: h.remove()`.
    """
    push, pop = _nvtx_push_pop()
    handles = []
    for name, module in model.named_modules():
        if not name and not include_root:
            continue
        label = f"{prefix}{name or type(model).__name__}"

        def pre(mod, args, _label=label):
            push(_label)

        def post(mod, args, output):
            pop()

        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))
    return handles
