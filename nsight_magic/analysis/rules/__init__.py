"""The rules of the findings, one family per module: copies, host (syncs, input, OS waits), idle (twins of nsys's
GPU rules, start-up), kernels (launches, layouts, grids), comm (ranks), notes.  Each rule takes a Context
(common.py) and returns Findings whose time at stake comes from the report's diagnosis (analysis.bottleneck)."""
from __future__ import annotations

from .comm import rule_collective_wait, rule_nccl_share
from .common import Context, Finding, SEVERITY_ORDER, severity
from .copies import rule_cuda_memcpy_async, rule_cuda_memcpy_sync, rule_cuda_memset_sync, rule_serialized_copy
from .host import rule_cuda_api_sync, rule_host_wait, rule_input_wait
from .idle import rule_gpu_gaps, rule_gpu_time_util, rule_startup
from .kernels import rule_launch_bound, rule_layout_transpose, rule_undersized_launch
from .notes import rule_nvtx_other_thread

# In the order they run: causes first, then the twins of nsys's GPU rules (symptoms: their time at stake is what
# the causes found before them do not explain).
NSYS_RULES = {
    "collective_wait": rule_collective_wait,
    "cuda_memcpy_async": rule_cuda_memcpy_async,
    "cuda_memcpy_sync": rule_cuda_memcpy_sync,
    "cuda_memset_sync": rule_cuda_memset_sync,
    "cuda_api_sync": rule_cuda_api_sync,
    "input_wait": rule_input_wait,
    "host_wait": rule_host_wait,
    "launch_bound": rule_launch_bound,
    "layout_transpose": rule_layout_transpose,
    "undersized_launch": rule_undersized_launch,
    "serialized_copy": rule_serialized_copy,
    "nccl_share": rule_nccl_share,
    "startup": rule_startup,
    "gpu_gaps": rule_gpu_gaps,
    "gpu_time_util": rule_gpu_time_util,
    "nvtx_other_thread": rule_nvtx_other_thread,
}
# nsys analyze's names for its rules: 2023+ / 2022.4
NSYS_ANALYZE_NAMES = {
    "cuda_memcpy_async": "cuda-async-memcpy", "cuda_memcpy_sync": "cuda-sync-memcpy",
    "cuda_memset_sync": "cuda-sync-memset", "cuda_api_sync": "cuda-sync-api", "gpu_gaps": "gpu-starv",
    "gpu_time_util": "gpu-low-util",
}

__all__ = ["NSYS_RULES", "NSYS_ANALYZE_NAMES", "Context", "Finding", "SEVERITY_ORDER", "severity"]
