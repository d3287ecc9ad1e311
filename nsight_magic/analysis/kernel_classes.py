"""What the GPU spends its time on: kernels classified from their names, and the precision of the matrix kernels.

Kernel names say a lot: cuBLAS and cuDNN name their kernels after the instruction set and the types
(`sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma_...`: fp32 on the CUDA cores; `sm90_xmma_gemm_f32f32_tf32f32_...`: TF32
on the tensor cores; `cutlass_80_tensorop_bf16_s16816gemm_bf16_..._align2`: bf16 on the tensor cores, operands
aligned to 2 elements), PyTorch names its own (`vectorized_elementwise_kernel`, `reduce_kernel`,
`multi_tensor_apply_kernel`), NCCL, flash attention and CUB theirs.  The spec below is data, checked in order; the
first class whose pattern matches a name wins.

    classify(names)       -> one row per name: cls, family (gemm/conv/...), precision, tensor_cores, align_elems
    kernel_classes(report) -> per class: kernels, time_ns, pct of kernel time (the views and the verdict use it)
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..readers.contract import NsysFrames
from . import text as tx
from .frame_memo import per_frame
from .text import without_parameters

# (class, regex on the demangled name): checked in this order
CLASSES = (
    ("nccl", r"(?i)^(?:void )?nccl"),
    ("attention", r"(?i)flash|fmha|attention|_sdpa|xformers|mha_"),
    ("conv", r"(?i)fprop|dgrad|wgrad|convolve|implicit_gemm|winograd|conv2d|convolution|_conv_"),
    ("gemm", r"(?i)gemm|gemv|nvjet|\bmatmul|cutlass.*(?:tensorop|simt)|cublas(?:Lt)?::|splitKreduce|_mma"),
    ("normalization", r"(?i)batch_?norm|bn_fw|bn_bw|layer_?norm|group_?norm|rms_?norm|instance_?norm|GammaBeta"),
    ("softmax", r"(?i)softmax"),
    ("optimizer", r"(?i)multi_tensor_apply|fused_adam|fused_sgd|_foreach_|FusedAdam|adam_|sgd_"),
    ("layout", r"(?i)nchwToNhwc|nhwcToNchw|transpose|convertTensor|permute|direct_copy|copy_kernel|_copy_|cat_|"
               r"CatArray"),
    ("indexing", r"(?i)index|gather|scatter|nonzero|masked|DeviceSelect|DeviceCompact|take_|embedding|write_indices"),
    ("sort", r"(?i)sort|topk|unique"),
    ("reduction", r"(?i)reduce|reduction|norm_kernel|DeviceReduce|sum_kernel|mean_kernel|argmax|argmin|cumsum|scan"),
    ("elementwise", r"(?i)elementwise|Functor|cupy_|_kernel_impl|fill|activation|relu|gelu|silu|sigmoid|tanh|dropout"),
)
MATRIX = ("gemm", "conv", "attention")
CLASSIFY_CHARS = 1000  # of a kernel's name read by the patterns (classify)

# precision of matrix kernels from the type tokens of their names, checked in order
PRECISIONS = (
    ("fp8", r"(?i)e4m3|e5m2|fp8|f8f8"),
    # cuBLAS `dgemm`/`f64f64`, CUTLASS `tensorop_d884gemm` (fp64 MMA on the tensor cores), `dmma`
    ("fp64", r"(?i)dgemm|f64f64|_fp64|double|tensorop_d\d|_d884|dmma"),
    ("tf32", r"(?i)tf32"),
    ("bf16", r"(?i)bf16|bfloat16"),
    ("fp16", r"(?i)f16|half|h16816|hgemm|_h884|_h1688"),  # after bf16: what is left with "f16" is fp16
    ("fp32", r"(?i)f32f32_f32f32|sgemm|ffma|simt|fp32|float"),
)
# how the kernel uses the GPU: tensor cores (MMA instructions) or the CUDA cores (FFMA)
TENSOR_CORE_RX = r"(?i)tensorop|tensor\d+x\d+x\d+|hmma|imma|wgmma|warpgroup|s16816|h16816|nvjet|tf32|bf16|f16f16|fp8|e4m3"
SIMT_RX = r"(?i)ffma|simt|sgemm|implicit_convolve_sgemm|gemmSN|gemv"
ALIGN_RX = re.compile(r"(?i)align(?:a)?(\d+)")  # cutlass `_align2`, xmma `_aligna4` (operand A's alignment, elements)
# bytes per element: operands aligned to fewer than 16 bytes miss the tensor cores' fast loads
ELEM_BYTES = {"fp8": 1, "bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4, "fp64": 8}


def classify(names: tx.Column) -> pd.DataFrame:
    """Per distinct name: cls, family ('matrix' for GEMM/conv/attention, else cls), precision (fp8 ... fp32, or
    '' when the name does not say), tensor_cores (True/False, NA unknown), align_elems (NaN when unnamed)."""
    u = list(dict.fromkeys(_distinct(names)[1]))  # a few hundred names: Python's re on each, once
    # what a name says of its class, precision and alignment is in its start (the kernel's name and first template
    # arguments): a template name of 60 kB would cost each pattern milliseconds (seen: 3,000 of them, 10 minutes)
    cut = [v[:CLASSIFY_CHARS] for v in u]

    def hits(rx: str, texts: list[str] = cut) -> np.ndarray:
        r = re.compile(rx)
        return np.fromiter((r.search(v) is not None for v in texts), bool, len(u))

    cls = np.full(len(u), "other", object)
    free = np.ones(len(u), bool)
    for c, rx in CLASSES:
        hit = free & hits(rx)
        cls[hit] = c
        free &= ~hit
    matrix = np.isin(cls, MATRIX)
    # a type token names the data where it is a template argument, not a function's parameter (tx.without_parameters)
    typed = [without_parameters(v) for v in cut]
    precision = np.full(len(u), "", object)
    left = matrix.copy()
    for p, rx in PRECISIONS:
        hit = left & hits(rx, typed)
        precision[hit] = p
        left &= ~hit
    tc = hits(TENSOR_CORE_RX)
    simt = hits(SIMT_RX) & ~hits(r"(?i)tf32|tensorop")
    tensor = pd.array(tc & ~simt, dtype="boolean")
    tensor[~matrix | (~tc & ~simt)] = pd.NA
    # fp32 kernels that are not SIMT: cuBLAS's sm90 "f32f32_tf32f32" ones are TF32 and matched above
    align = [ALIGN_RX.search(v) for v in cut]
    return pd.DataFrame({"name": pd.Series(u, dtype=object), "cls": cls, "family": np.where(matrix, "matrix", cls),
                         "precision": precision, "tensor_cores": tensor,
                         "align_elems": np.array([float(m.group(1)) if m else np.nan for m in align], float)})


def _distinct(names: tx.Column) -> tuple[np.ndarray, list[str]]:
    """Codes per row and the distinct names as text: factorized first (a categorical column's codes), so the text
    work is per name, not per kernel."""
    names = pd.Series(names)
    if names.isna().any():  # a kernel without a name (a damaged export): '' (class 'other')
        names = names.astype(object).fillna("")
    codes, uniq = pd.factorize(names, sort=False)
    return codes, [str(v) for v in np.asarray(uniq, dtype=object)]


def _per_row(per_name: pd.Series, row: np.ndarray) -> pd.Categorical:
    """A value per distinct name spread to the rows, as codes (a million kernels, a dozen classes)."""
    codes, values = pd.factorize(per_name.to_numpy(object))
    return pd.Categorical.from_codes(codes[row], categories=values)


@per_frame
def with_classes(kernels: pd.DataFrame) -> pd.DataFrame:
    """The kernels frame with cls, precision, tensor_cores and align_elems per row (classified once per name, and
    once per frame: several rules ask about the same report's kernels)."""
    if kernels.empty:
        return kernels.assign(cls=pd.Series(dtype=object), precision=pd.Series(dtype=object),
                              tensor_cores=pd.array([], dtype="boolean"), align_elems=pd.Series(dtype=float))
    codes, u = _distinct(kernels["name"])
    c = classify(u)
    row = pd.Index(c["name"]).get_indexer(u).take(codes)
    return kernels.assign(cls=_per_row(c["cls"], row), precision=_per_row(c["precision"], row),
                          # values and mask taken per row: a million-long object array converted took 20 ms
                          tensor_cores=pd.arrays.BooleanArray(c["tensor_cores"].to_numpy(bool, na_value=False)[row],
                                                              c["tensor_cores"].isna().to_numpy()[row]),
                          align_elems=c["align_elems"].to_numpy(float)[row])


def kernel_classes(report: NsysFrames, window: tuple[int, int] | None = None) -> pd.DataFrame:
    """Kernel time per class (in `window` when given): cls, kernels, time_ns, pct of all kernel time, and for the
    matrix classes time on tensor cores (tc_ns) and per precision (precision column, '' when unnamed)."""
    k = report.kernels
    cols = ["cls", "precision", "kernels", "time_ns", "tc_ns", "pct"]
    if k.empty:
        return pd.DataFrame(columns=cols)
    if window is not None:
        a, b = window
        k = k[(k["start_ns"] < b) & (k["end_ns"] > a)]
    k = with_classes(k)
    dur = k["duration_ns"].to_numpy(np.int64)
    g = pd.DataFrame({"cls": k["cls"].to_numpy(), "precision": k["precision"].to_numpy(), "time_ns": dur,
                      "tc_ns": np.where(k["tensor_cores"].fillna(False).to_numpy(bool), dur, 0)})
    out = g.groupby(["cls", "precision"], sort=False).agg(kernels=("time_ns", "size"), time_ns=("time_ns", "sum"),
                                                         tc_ns=("tc_ns", "sum")).reset_index()
    out["pct"] = 100.0 * out["time_ns"] / max(int(dur.sum()), 1)
    return out.sort_values("time_ns", ascending=False, kind="stable").reset_index(drop=True)[cols]


# dense matrix throughput (TFLOP/s) by compute capability: fp64, CUDA cores fp32, tensor cores tf32 and bf16/fp16, from
# NVIDIA's data sheets of each architecture's data-center part (V100, A100, A10/A40-class, L4/L40-class, H100).
# fp64: the tensor cores' where the GPU has fp64 MMA (V100: none; GA102/AD102: 1/64 of fp32)
THROUGHPUT: dict[tuple[int, int], dict[str, float | None]] = {
    (7, 0): {"fp64": 7.8, "fp32": 15.7, "tf32": None, "bf16": 125.0},
    (8, 0): {"fp64": 19.5, "fp32": 19.5, "tf32": 156.0, "bf16": 312.0},
    (8, 6): {"fp64": 0.6, "fp32": 37.4, "tf32": 74.8, "bf16": 149.7},
    (8, 9): {"fp64": 1.4, "fp32": 90.5, "tf32": 90.5, "bf16": 181.0},
    (9, 0): {"fp64": 66.9, "fp32": 66.9, "tf32": 494.7, "bf16": 989.4},
}


def throughput(report: NsysFrames) -> dict[str, float | None] | None:
    """The first GPU's row of THROUGHPUT (by compute capability, the nearest lower one known), or None."""
    g = report.gpus
    if g.empty or "compute_major" not in g:
        return None
    try:
        cc = (int(g["compute_major"].iloc[0]), int(g["compute_minor"].iloc[0]))
    except (TypeError, ValueError):
        return None
    known = [k for k in sorted(THROUGHPUT) if k <= cc]
    return THROUGHPUT[known[-1]] if known else None
