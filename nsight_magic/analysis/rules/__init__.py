"""The rules of the findings, one family per module: copies, round_trip (data through the host and back), host
(syncs, input, OS waits), host_calls (the allocator, module loading, implicit syncs), host_code (code that launches
nothing), pytorch (PyTorch's anti-patterns), growth (steps slower and slower), kernels (launches, layouts, grids),
precision (fp32 and misaligned matrix kernels, fusion), idle
(twins of nsys's GPU rules, start-up), comm (ranks), notes.  Each rule takes a Context (common.py) and returns
Findings whose time at stake comes from the report's diagnosis (analysis.bottleneck).  Named causes run before the
generic rule of the same time (launch_bound, cuda_api_sync, the copy twins) and claim what they explain, so that
each nanosecond is counted once."""
from __future__ import annotations

from .autotune import rule_autotune
from .comm import rule_collective_wait, rule_nccl_share
from .common import Context, Finding, SEVERITY_ORDER, severity
from .copies import (rule_cuda_memcpy_async, rule_cuda_memcpy_sync, rule_cuda_memset_sync, rule_serialized_copy,
                     rule_small_copies)
from .host import rule_cuda_api_sync, rule_host_wait, rule_input_wait
from .host_calls import rule_allocator_churn, rule_implicit_sync, rule_module_loading
from .growth import rule_growing_steps
from .host_code import rule_host_code
from .idle import rule_gpu_gaps, rule_gpu_time_util, rule_startup
from .kernels import rule_launch_bound, rule_layout_transpose, rule_undersized_launch
from .memory import rule_memory_fragmentation, rule_memory_growth, rule_near_capacity, rule_out_of_memory
from .notes import rule_cuda_graphs, rule_gpu_metrics, rule_nvtx_other_thread
from .precision import (rule_attention_unfused, rule_elementwise_fusion, rule_fp32_gemm, rule_fp64_compute,
                        rule_gemm_alignment)
from .pytorch import (rule_conv_bias_bn, rule_extra_copy, rule_optimizer_single_tensor, rule_python_loop,
                      rule_zero_grad_not_none)
from .round_trip import rule_host_round_trip

# In the order they run: causes first, then the twins of nsys's GPU rules (symptoms: their time at stake is what
# the causes found before them do not explain).
NSYS_RULES = {
    "out_of_memory": rule_out_of_memory,
    "collective_wait": rule_collective_wait,
    "extra_copy": rule_extra_copy,
    "host_round_trip": rule_host_round_trip,
    "cuda_memcpy_async": rule_cuda_memcpy_async,
    "cuda_memcpy_sync": rule_cuda_memcpy_sync,
    "cuda_memset_sync": rule_cuda_memset_sync,
    "implicit_sync": rule_implicit_sync,
    "small_copies": rule_small_copies,
    "autotune": rule_autotune,
    "cuda_api_sync": rule_cuda_api_sync,
    "growing_steps": rule_growing_steps,
    "allocator_churn": rule_allocator_churn,
    "module_loading": rule_module_loading,
    "input_wait": rule_input_wait,
    "optimizer_single_tensor": rule_optimizer_single_tensor,
    "zero_grad_not_none": rule_zero_grad_not_none,
    "python_loop": rule_python_loop,
    "host_code": rule_host_code,
    "host_wait": rule_host_wait,
    "launch_bound": rule_launch_bound,
    "fp32_gemm": rule_fp32_gemm,
    "fp64_compute": rule_fp64_compute,
    "gemm_alignment": rule_gemm_alignment,
    "conv_bias_bn": rule_conv_bias_bn,
    "attention_unfused": rule_attention_unfused,
    "elementwise_fusion": rule_elementwise_fusion,
    "layout_transpose": rule_layout_transpose,
    "undersized_launch": rule_undersized_launch,
    "serialized_copy": rule_serialized_copy,
    "nccl_share": rule_nccl_share,
    "startup": rule_startup,
    "gpu_gaps": rule_gpu_gaps,
    "gpu_time_util": rule_gpu_time_util,
    "nvtx_other_thread": rule_nvtx_other_thread,
    "gpu_metrics": rule_gpu_metrics,
    "cuda_graphs": rule_cuda_graphs,
    "memory_growth": rule_memory_growth,
    "memory_near_capacity": rule_near_capacity,
    "memory_fragmentation": rule_memory_fragmentation,
}
# a cell that failed: its finding comes before any time saved
FAILURES = frozenset({"out_of_memory"})
# findings about memory, not time (their time at stake is 0)
MEMORY_RULES = frozenset({"out_of_memory", "memory_growth", "memory_near_capacity", "memory_fragmentation"})
# the rules whose fix changes the kernels themselves (the rest change what the host does)
GPU_SIDE = frozenset({"fp32_gemm", "fp64_compute", "gemm_alignment", "conv_bias_bn", "attention_unfused",
                      "elementwise_fusion", "layout_transpose", "undersized_launch"})
# nsys analyze's names for its rules: 2023+ / 2022.4
NSYS_ANALYZE_NAMES = {
    "cuda_memcpy_async": "cuda-async-memcpy", "cuda_memcpy_sync": "cuda-sync-memcpy",
    "cuda_memset_sync": "cuda-sync-memset", "cuda_api_sync": "cuda-sync-api", "gpu_gaps": "gpu-starv",
    "gpu_time_util": "gpu-low-util",
}

__all__ = ["FAILURES", "GPU_SIDE", "MEMORY_RULES", "NSYS_RULES", "NSYS_ANALYZE_NAMES", "Context", "Finding", "SEVERITY_ORDER", "severity"]
