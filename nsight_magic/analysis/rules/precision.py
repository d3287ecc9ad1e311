"""The GPU's matrix kernels (GEMM, convolution) when the GPU sets the pace: fp32 on the CUDA cores instead of the
tensor cores, operands not aligned for the tensor cores, and many small elementwise kernels (analysis.kernel_classes
reads all of it from the kernels' names).

These are GPU-side: they apply when the verdict is GPU-bound (when the host or the copies set the pace, faster
kernels would not shorten the loop: the breakdown's own findings come first).  Their time at stake is the GPU time
the fix saves beyond the time the host paced the GPU anyway (kernels.gpu_side_saving).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from .. import text as tx
from ..bottleneck import bottleneck
from ..kernel_classes import ELEM_BYTES, MATRIX, throughput, with_classes
from .common import Context, Finding, estimate_words, evidence, ranges_of
from .kernels import gpu_side_saving

UNKNOWN_TF32_RATIO = 8.0   # A100's tf32 / fp32 throughput, for a GPU not in kernel_classes.THROUGHPUT
MISALIGNED_SAVING = 0.5    # misaligned tensor-core GEMMs ran at about half the speed of aligned ones (H100, bf16,
#                            width 4100 against 4104: 1.05 ms against 0.44 ms per product; tests/data/planted)
UNKNOWN_FP64_RATIO = 8.0   # H100's tf32 / fp64 tensor-core throughput, for a GPU not in kernel_classes.THROUGHPUT
FP64_BYTES_SAVING = 0.5    # a memory-bound kernel on float32 instead of float64: half the bytes
# element types in names: PyTorch's and CUB's template arguments, CuPy's suffixes (looked for outside the functions'
# parameter lists: `normal_kernel(..., double mean, double std)` draws float32 numbers)
_DOUBLE = r"\bdouble\b|float64"
_BYTES_BOUND = r"(?i)gemv|splitKreduce"  # matrix-vector products and split-K reductions: memory-bound


def _gpu_bound(ctx: Context) -> bool:
    return bottleneck(ctx.report).kind == "gpu"


def _matrix(ctx: Context) -> pd.DataFrame:
    cache = ctx.memo.setdefault("matrix", {})
    if "k" not in cache:
        k = ctx.report.kernels
        cache["k"] = with_classes(k) if len(k) else k
    return cache["k"]


def _ratio(ctx: Context, fast: str, slow: str) -> float | None:
    """The report's GPU's throughput in `fast` over `slow` (kernel_classes.THROUGHPUT); None where not known."""
    t = throughput(ctx.report) or {}
    a, b = t.get(fast), t.get(slow)
    return a / b if a and b else None


def _holding(ctx: Context, rule: str,
             select: Callable[[pd.DataFrame], np.ndarray]) -> tuple[pd.DataFrame, pd.DataFrame, float] | None:
    """In a GPU-bound loop: (the classified kernels, those `select(kernels)` picks, all kernels' time) when the
    picked ones hold at least the rule's `min_gpu_pct` of kernel time; else None."""
    if not _gpu_bound(ctx):
        return None
    k = _matrix(ctx)
    if k.empty:
        return None
    m = k[select(k)]
    total = float(k["duration_ns"].sum())
    if m.empty or m["duration_ns"].sum() * 100 / max(total, 1) < ctx.th[f"{rule}.min_gpu_pct"]:
        return None
    return k, m, total


def _gpu_name(ctx: Context) -> str:
    return str(ctx.report.gpus["name"].iloc[0]) if len(ctx.report.gpus) else "this GPU"


def rule_fp32_gemm(ctx: Context) -> list[Finding]:
    """Matrix kernels in fp32 on the CUDA cores (FFMA, SIMT) holding the time of a GPU-bound loop: TF32 or bf16
    would run them on the tensor cores."""
    got = _holding(ctx, "fp32_gemm", lambda k: k["cls"].isin(("gemm", "conv")).to_numpy()
                   & (k["precision"] == "fp32").to_numpy()
                   & (k["tensor_cores"].fillna(True) == False).to_numpy())  # noqa: E712 - nullable boolean
    if got is None:
        return []
    _, m, total = got
    ratio = _ratio(ctx, "tf32", "fp32") or UNKNOWN_TF32_RATIO
    at_stake = gpu_side_saving(ctx, m, np.full(len(m), 1 - 1 / ratio))
    share = m["duration_ns"].sum() * 100 / total
    ev = evidence(m, m["name"], {"precision": m["precision"], "cls": m["cls"]})
    gpu = _gpu_name(ctx)
    return [Finding(
        "fp32_gemm", ctx.severity(at_stake),
        f"fp32 matrix products on the CUDA cores take {share:.0f}% of kernel time (no tensor cores)",
        f"{len(ev)} GEMM/convolution kernels ran in fp32 on the CUDA cores (their names say ffma/simt/sgemm), in a "
        f"loop the GPU sets the pace of. {gpu} runs TF32 on its tensor cores about {ratio:.0f}x faster than fp32 "
        "(and bf16 twice that again); PyTorch leaves TF32 off for matrix products by default.",
        "Allow TF32 for matrix products (same fp32 storage, 10-bit mantissa inside the product): "
        "`torch.set_float32_matmul_precision('high')` (or `torch.backends.cuda.matmul.allow_tf32 = True`; "
        "convolutions: `torch.backends.cudnn.allow_tf32 = True`), or train in bf16: `with torch.autocast('cuda', "
        "dtype=torch.bfloat16):` around the forward pass.",
        at_stake, estimate_words(ctx, f"these kernels' time x (1 - 1/{ratio:.1f}), the GPU's TF32 over fp32 "
                                      "throughput, beyond the time the host paced the GPU"), ev, ranges_of(ev))]


def rule_fp64_compute(ctx: Context) -> list[Finding]:
    """Kernels in float64 holding the time of a GPU-bound loop: matrix products in fp64 (the tensor cores' fp64
    rate, or 1/64 of fp32 on GPUs without fp64 units) and elementwise or reduction kernels on doubles (twice the
    bytes of fp32).  Usually not chosen: numpy arrays are float64, and `torch.from_numpy` keeps it."""
    got = _holding(ctx, "fp64_compute", lambda k: np.where(k["cls"].isin(MATRIX).to_numpy(),
                                                           (k["precision"] == "fp64").to_numpy(),
                                                           tx.contains_in_types(k["name"], _DOUBLE)))
    if got is None:
        return []
    _, m, total = got
    ratio = _ratio(ctx, "tf32", "fp64") or UNKNOWN_FP64_RATIO
    in_matrix = (m["cls"].isin(MATRIX)).to_numpy()
    flops = in_matrix & ~tx.contains(m["name"], _BYTES_BOUND, regex=True)  # the tensor cores' rate applies
    at_stake = gpu_side_saving(ctx, m, np.where(flops, 1 - 1 / ratio, FP64_BYTES_SAVING))
    share = m["duration_ns"].sum() * 100 / total
    mshare = m.loc[in_matrix, "duration_ns"].sum() * 100 / total
    ev = evidence(m, m["name"], {"precision": np.where(in_matrix, "fp64", "double"), "cls": m["cls"]})
    gpu = _gpu_name(ctx)
    return [Finding(
        "fp64_compute", ctx.severity(at_stake),
        f"float64 kernels take {share:.0f}% of kernel time ({mshare:.0f}% in fp64 matrix products)",
        f"{len(ev)} kernels computed in float64 (matrix products named f64/d884/dgemm, elementwise and reduction "
        f"kernels on `double`), in a loop the GPU sets the pace of. {gpu} runs fp32 matrix products with TF32 about "
        f"{ratio:.0f}x faster than fp64, and every float64 tensor moves twice the bytes of a float32 one. Deep "
        "learning rarely needs float64; it usually comes from numpy (its default dtype), which `torch.from_numpy` "
        "and `torch.tensor(array)` keep, or from `.double()` / `torch.set_default_dtype(torch.float64)`.",
        "Convert at the source: `torch.from_numpy(a).float()` (or `a.astype(np.float32)`), `model.float()`, and no "
        "float64 default dtype; then allow TF32 (`torch.set_float32_matmul_precision('high')`) or train in bf16 "
        "(`torch.autocast('cuda', dtype=torch.bfloat16)`). Keep float64 only where the numerics need it (and check "
        "the loss curve after the change).",
        at_stake, estimate_words(ctx, f"the fp64 matrix products' time x (1 - 1/{ratio:.1f}), the GPU's TF32 over "
                                      f"fp64 throughput, and the other float64 kernels' time (memory-bound: "
                                      f"elementwise, reductions, matrix-vector) x {FP64_BYTES_SAVING:g} (half the "
                                      "bytes), beyond the time the host paced the GPU"), ev, ranges_of(ev))]


def rule_gemm_alignment(ctx: Context) -> list[Finding]:
    """Tensor-core matrix kernels whose operands are aligned to fewer than 16 bytes (cuBLAS/CUTLASS name the
    alignment: `_align2` on bf16 is 4 bytes): a dimension that is not a multiple of 8 (fp16/bf16) or 4 (tf32)."""
    def misaligned(k: pd.DataFrame) -> np.ndarray:
        aligned_bytes = k["align_elems"].astype(float) * k["precision"].map(ELEM_BYTES).astype(float)
        # fp64 MMA kernels are aligned to one element by design: fp64_compute's fix applies to them instead
        return np.asarray((k["tensor_cores"].fillna(False) == True).to_numpy()  # noqa: E712
                          & (aligned_bytes < 16).to_numpy() & (k["precision"] != "fp64").to_numpy())

    got = _holding(ctx, "gemm_alignment", misaligned)
    if got is None:
        return []
    _, m, total = got
    at_stake = gpu_side_saving(ctx, m, np.full(len(m), MISALIGNED_SAVING))
    share = m["duration_ns"].sum() * 100 / total
    ev = evidence(m, m["name"], {"precision": m["precision"], "align_elems": m["align_elems"]})
    first = ev.iloc[0]
    mult = {1: 16, 2: 8, 4: 4, 8: 2}.get(int(ELEM_BYTES.get(first["precision"], 2)), 8)
    return [Finding(
        "gemm_alignment", ctx.severity(at_stake),
        f"Tensor-core matrix products with misaligned operands take {share:.0f}% of kernel time",
        f"{len(ev)} {first['precision'] or ''} GEMM kernels ran with operands aligned to "
        f"{int(first['align_elems'])} elements ({int(first['align_elems'] * ELEM_BYTES.get(first['precision'], 2))} "
        "bytes; their names say `align`): the fast tensor-core kernels need 16-byte aligned rows, which a matrix "
        f"dimension that is not a multiple of {mult} breaks. cuBLAS then picks slower kernels.",
        f"Pad the dimensions (hidden sizes, vocabulary, batch x sequence) to multiples of {mult} (64 is better "
        "still): `nn.Linear(4100, ...)` -> 4104; pad the vocabulary to a multiple of 64; `--ops shapes` shows the "
        "products' shapes.",
        at_stake, estimate_words(ctx, f"these kernels' time x {MISALIGNED_SAVING:g} (aligned ones ran about twice "
                                      "as fast), beyond the time the host paced the GPU"), ev, ranges_of(ev))]


def _stream_order(k: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The kernels in stream order (by device, stream, start) and, in that order, whether each runs on the same
    stream as the one before it."""
    cols = [c for c in ("device_id", "stream_id") if c in k]
    order = np.lexsort([k["start_ns"].to_numpy()] + [k[c].to_numpy() for c in reversed(cols)])
    same = np.ones(max(len(k) - 1, 0), bool)
    for c in cols:
        v = k[c].to_numpy()[order]
        same &= v[1:] == v[:-1]
    return order, same


def score_matrix_work(k: pd.DataFrame) -> np.ndarray:
    """Per kernel (classified): part of attention computed unfused, the score matrix written out.  The kernels
    between two matrix products on a stream (a run) that holds a softmax: the scale, mask and dropout around it,
    forward and backward.  A fused attention kernel (flash, cuDNN's SDPA) does all of it on chip."""
    if k.empty:
        return np.zeros(0, bool)
    order, same = _stream_order(k)
    cls = k["cls"].to_numpy(object)[order]
    matrix = np.isin(cls, MATRIX)
    # a new run at each matrix kernel and at each change of stream
    run = np.cumsum(np.r_[True, ~same | matrix[1:] | matrix[:-1]])
    soft = pd.Series(cls == "softmax").groupby(run).transform("any").to_numpy(bool)
    mine = soft & ~matrix & np.isin(cls, ("softmax", "elementwise", "layout", "reduction"))
    out = np.zeros(len(k), bool)
    out[order] = mine
    return out


def _score_work(ctx: Context, k: pd.DataFrame) -> np.ndarray:
    """score_matrix_work of the report's classified kernels (_matrix), once for both rules that ask."""
    cache = ctx.memo.setdefault("matrix", {})
    if "score" not in cache:
        cache["score"] = score_matrix_work(k)
    score: np.ndarray = cache["score"]
    return score


def _attention_holds(ctx: Context) -> bool:
    return "attention_unfused" in ctx.fired  # (it runs before elementwise_fusion)


def rule_attention_unfused(ctx: Context) -> list[Finding]:
    """Attention written out (`softmax(q @ k.T * scale) @ v`) holding the time of a GPU-bound loop: the score
    matrix goes through memory several times, which F.scaled_dot_product_attention's fused kernels avoid."""
    got = _holding(ctx, "attention_unfused", lambda k: _score_work(ctx, k))
    if got is None:
        return []
    k, m, total = got
    at_stake = gpu_side_saving(ctx, m)
    share = m["duration_ns"].sum() * 100 / total
    soft = m[(m["cls"] == "softmax").to_numpy()]
    ev = evidence(m, m["name"], {"cls": m["cls"]})
    fused = int((k["cls"] == "attention").sum())
    return [Finding(
        "attention_unfused", ctx.severity(at_stake),
        f"Attention computed unfused: softmax over a score matrix and its elementwise work take {share:.0f}% of "
        "kernel time",
        f"{len(soft)} softmax kernels (forward and backward) run between matrix products with {len(m) - len(soft)} "
        "elementwise kernels beside them (the scale, mask, dropout): attention written out as `softmax(q @ k.T * "
        "scale) @ v` writes the sequence x sequence score matrix to memory and reads it back at each of these steps, "
        "in a loop the GPU sets the pace of."
        + (f" {fused} fused attention kernels run elsewhere in the loop." if fused else ""),
        "Use the fused kernel: `torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=..., "
        "dropout_p=..., is_causal=...)` (flash, cuDNN or memory-efficient attention: the score matrix stays on chip), "
        "`nn.MultiheadAttention`, or in Hugging Face models `attn_implementation=\"sdpa\"`; `torch.compile` fuses "
        "the elementwise steps at least.",
        at_stake, estimate_words(ctx, "these kernels' time (a fused kernel does their work inside the products), "
                                      "beyond the time the host paced the GPU"), ev, ranges_of(ev))]


def _in_chains(k: pd.DataFrame, mask: np.ndarray) -> np.ndarray:
    """`mask` kept only for kernels next to another masked kernel of another name on their stream: a chain fusion
    can make one kernel of.  A lone elementwise kernel between two products has nothing to fuse with, nor has a
    loop launching one such kernel per iteration (the same name back to back: iterations, not a chain)."""
    order, same = _stream_order(k)
    m = mask[order]
    names = pd.factorize(k["name"])[0][order]
    # kernel i and i+1: both masked, one after the other on a stream, two operations
    pair = m[1:] & m[:-1] & same & (names[1:] != names[:-1])
    chained = np.zeros(len(k), bool)
    chained[:-1] |= pair
    chained[1:] |= pair
    out = np.zeros(len(k), bool)
    out[order] = chained
    return out


def _chain_saving(k: pd.DataFrame, chained: np.ndarray) -> np.ndarray:
    """Per kernel, the share of its time fusing its chain removes: (n - 1) / n in a chain of n kernels (a run of
    chained kernels one after the other on a stream).  Each elementwise kernel reads and writes whole tensors; one
    fused kernel makes one such pass for the chain (about what torch.compile's fusion does)."""
    order, same = _stream_order(k)
    c = chained[order]
    start = np.r_[True, ~(c[1:] & c[:-1] & same)]
    run = np.cumsum(start)
    n = np.bincount(run[c], minlength=run.max() + 1)[run] if c.any() else np.ones(len(k), np.int64)
    out = np.zeros(len(k))
    out[order] = np.where(c, (n - 1) / np.maximum(n, 1), 0.0)
    return out


def rule_elementwise_fusion(ctx: Context) -> list[Finding]:
    """Chains of elementwise and normalisation kernels (one after the other on a stream) in a GPU-bound loop, when
    fusing each chain into one kernel would remove at least elementwise_fusion.min_saving_pct of kernel time."""
    if not _gpu_bound(ctx):
        return []
    k = _matrix(ctx)
    if k.empty:
        return []
    # attention's score-matrix work is attention_unfused's (a fused kernel removes it, not a fused chain)
    chained = _in_chains(k, k["cls"].isin(("elementwise", "normalization", "softmax", "reduction")).to_numpy()) \
        & ~(_score_work(ctx, k) if _attention_holds(ctx) else np.zeros(len(k), bool))
    saving = _chain_saving(k, chained)
    total = float(k["duration_ns"].sum())
    saved = float((k["duration_ns"].to_numpy(float) * saving).sum())
    if not chained.any() or saved * 100 / max(total, 1) < ctx.th["elementwise_fusion.min_saving_pct"]:
        return []
    m = k[chained]
    at_stake = gpu_side_saving(ctx, m, saving[chained])
    share = m["duration_ns"].sum() * 100 / total
    ev = evidence(m, m["name"], {"cls": m["cls"]})
    top = ev.groupby("name")["duration_ns"].sum().sort_values(ascending=False).head(3)
    mx = k[k["cls"].isin(MATRIX).to_numpy()]["duration_ns"].sum() * 100 / max(total, 1)
    return [Finding(
        "elementwise_fusion", ctx.severity(at_stake),
        f"{len(ev)} elementwise and normalisation kernels take {share:.0f}% of kernel time",
        f"Memory-bound kernels (activations, additions, normalisations, reductions) take {share:.0f}% of a GPU-bound "
        f"loop's kernel time against {mx:.0f}% for the matrix products; each reads and writes whole tensors, one "
        f"after the other. Fused, each chain would make one pass instead of several: {saved * 100 / total:.0f}% of "
        "kernel time less. Most time: " + "; ".join(f"{n[:70]} ({v / 1e6:,.1f} ms)" for n, v in top.items()) + ".",
        "Fuse them: `model = torch.compile(model)` (chains of elementwise ops become one kernel), fused layers "
        "(`nn.LayerNorm` / `F.layer_norm` rather than normalisation written out, `F.scaled_dot_product_attention`, "
        "fused optimizers `fused=True`), and bf16 autocast halves their bytes.",
        at_stake, estimate_words(ctx, "these kernels' time x (n - 1) / n in a chain of n (the memory passes fusion "
                                      "removes), beyond the time the host paced the GPU"), ev, ranges_of(ev))]
