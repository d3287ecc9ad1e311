"""Every threshold of the findings rules, in one place: `rule.key -> default`, with what it means.

Pass others with `report.findings(thresholds={"gpu_gaps.gap_ms": 100})` or `%%nsys --advice-threshold
gpu_gaps.gap_ms=100`.  The twins of `nsys analyze` use its defaults (nsys 2022.4 and 2025.3 agree on them).
"""
from __future__ import annotations

import math

from .errors import OptionError

DEFAULTS: dict[str, float] = {
    # twins of nsys analyze (same ids as nsys 2023+; 2022.4 spells them cuda-async-memcpy, ...)
    "cuda_memcpy_sync.min_htod_bytes": 64_000,   # host-to-device copies of at most this many bytes are not flagged
    "gpu_gaps.gap_ms": 500,                       # a GPU idle at least this long (nsys: gap=500)
    "gpu_time_util.threshold_pct": 50,            # chunks with average utilization below this (nsys: threshold=50)
    "gpu_time_util.chunks": 30,                   # the GPU's span is cut into this many chunks (nsys: chunks=30)
    # ours
    "alarm.min_ms": 2,                            # a finding saving less than this in the whole cell stays low
    "launch_bound.min_kernels": 100,              # at least this many kernels shorter than their launch call
    "launch_bound.min_share_pct": 50,             # ... and that many percent of all kernels
    "launch_bound.min_idle_pct": 10,              # or the GPU waiting for launches this share of the steady state
    "layout_transpose.min_gpu_pct": 2,            # NCHW<->NHWC transposes taking at least this share of GPU time
    "undersized_launch.min_idle_pct": 10,         # SMs left idle by grids smaller than the GPU: this share of kernel time
    "undersized_launch.max_fill": 0.5,            # ... counting grids of at most this share of the SMs (one block each)
    "serialized_copy.min_copy_ms": 1,             # copies on a compute stream between its kernels, in total
    "input_wait.min_gap_ms": 1,                   # GPU idle before each step's host-to-device copy, on average
    "input_wait.min_steps": 3,                    # ... seen before at least this many copies
    "nccl_share.min_gpu_pct": 10,                 # NCCL kernels taking at least this share of GPU time
    "collective_wait.min_share_pct": 20,          # ranks waiting for a later rank: this share of NCCL kernel time
    "collective_wait.min_ms": 1,                  # ... and at least this long in total
    "collective_wait.gpu_spread_pct": 8,          # a straggler's GPU slower on the same kernels by less: alarm low
    #                                               (boards of one model differ by about this much under power
    #                                               management: Sinha et al., SC'22; code cannot gain it back)
    "host_wait.min_share_pct": 20,                # blocking OS calls covering this share of a repeated NVTX range
    "host_wait.min_ranges": 3,                    # ... in at least this many instances of it (CPU-only reports;
    #                                               with GPU work: the GPU idle while the launcher is blocked,
    #                                               a quarter of this share of the steady state)
    "startup.min_share_pct": 10,                  # time before the first step: at least this share of the capture
    "startup.min_ms": 200,                        # ... and this long
    "small_copies.min_per_step": 8,               # idle gaps a step ending with a small host-to-device copy
    "small_copies.min_share_pct": 5,              # ... holding this share of the steady state (launch and sync)
    "growing_steps.min_growth_pct": 50,           # the last quarter of the steps this much slower than the first
    "autotune.min_share_pct": 2,                  # an autotuner in the loop: the idle time between its trials
    "allocator_churn.min_share_pct": 2,           # the GPU idle while the host is in the allocator: this share
    "module_loading.min_share_pct": 2,            # ... while it loads modules (lazy loading) in the steady state
    "optimizer_single_tensor.min_share_pct": 2,   # the GPU idle during single-tensor optimizer steps
    "zero_grad_not_none.min_share_pct": 1,        # zeroing gradients (and adding into the zeros) in the window
    "python_loop.min_kernels": 64,                # a run of the same few small kernels at least this long
    "python_loop.min_share_pct": 2,               # ... whose launches leave the GPU idle this share of the window
    "host_code.min_gap_ms": 1,                    # the launching thread this long without a CUDA call, GPU idle
    "host_code.max_calls": 2,                     # ... (at most this many calls per min_gap_ms of the stretch)
    "host_code.min_share_pct": 5,                 # ... this share of the steady state in such stretches
    "conv_bias_bn.min_share_pct": 1,              # bias additions before BatchNorm and their gradients
    "fp32_gemm.min_gpu_pct": 10,                  # fp32 matrix kernels on the CUDA cores: this share of kernel time
    "fp64_compute.min_gpu_pct": 10,               # float64 kernels (matrix products, elementwise on doubles): share
    "gemm_alignment.min_gpu_pct": 5,              # tensor-core matrix kernels with operands aligned under 16 bytes
    "attention_unfused.min_gpu_pct": 10,          # softmax and the elementwise work around it between products
    "elementwise_fusion.min_saving_pct": 50,      # fusing the chains of elementwise and normalisation kernels
    #                                               would remove this share of kernel time ((n - 1) / n of a chain)
}


AT_LEAST_ONE = frozenset({"gpu_time_util.chunks"})  # a count that 0 would make meaningless


def resolve(overrides: dict | None) -> dict[str, float]:
    """DEFAULTS updated with `overrides`; an unknown key is an OptionError that lists the known ones."""
    out = dict(DEFAULTS)
    for k, v in (overrides or {}).items():
        if k not in DEFAULTS:
            raise OptionError(f"unknown advice threshold {k!r}; known: {', '.join(sorted(DEFAULTS))}")
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            raise OptionError(f"advice threshold {k} must be a number, not {v!r}") from None
        # nan, infinities and negatives would silence a rule or make it fire on everything without a word
        least = 1 if k in AT_LEAST_ONE else 0
        if not math.isfinite(out[k]) or out[k] < least:
            raise OptionError(f"advice threshold {k} must be a finite number >= {least}, not {v!r}; its default "
                              f"is {DEFAULTS[k]:g}")
    return out


def parse_assignments(items) -> dict[str, float]:
    """['gpu_gaps.gap_ms=100', ...] -> {'gpu_gaps.gap_ms': 100.0} (validated)."""
    out = {}
    for item in items or ():
        key, sep, value = str(item).partition("=")
        if not sep:
            raise OptionError(f"--advice-threshold takes RULE.KEY=VALUE, e.g. gpu_gaps.gap_ms=100 (got {item!r})")
        out[key.strip()] = value.strip()
    resolve(out)  # validates keys and values
    return {k: float(v) for k, v in out.items()}
