"""Analysis: pure functions over reader DataFrames -> verdicts, findings, tables (no I/O, no plotting).

The functions a report's methods call (the facade, nsight_magic.report):"""
from __future__ import annotations

from .bottleneck import bottleneck
from .findings import findings_frame, nsys_findings
from .gpu_memory import memory_summary
from .kernel_classes import kernel_classes
from .ncu_findings import ncu_findings
from .ops import ops_summary

__all__ = ["bottleneck", "findings_frame", "kernel_classes", "memory_summary", "nsys_findings", "ncu_findings",
           "ops_summary"]
