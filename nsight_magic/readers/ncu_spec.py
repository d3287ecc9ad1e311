"""Which ncu metric fills which `NcuData.kernels` column: data, not code.

Metric names changed across ncu versions and the details page shows labels instead of names, so each column lists
candidates; the first one present for a kernel wins.
- raw: metric names (ncu_report, `--page raw`). A tuple entry means "the sum of these" (all must be present);
  "name*32" scales (sectors are 32 bytes).
- details: (section name prefix, label) rows of `--page details`, accepted only in the column's base unit.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelColumn:
    name: str
    raw: tuple = ()
    details: tuple = ()
    unit: str | None = None  # base unit required of details rows (labels repeat across sections with other units)


SOL = "GPU Speed Of Light"
MWA = "Memory Workload Analysis"
LAUNCH = "Launch Statistics"
OCC = "Occupancy"

KERNEL_COLUMNS: tuple[KernelColumn, ...] = (
    KernelColumn("grid_size", ("launch__grid_size",), ((LAUNCH, "Grid Size"),)),
    KernelColumn("block_size", ("launch__block_size",), ((LAUNCH, "Block Size"),)),
    KernelColumn("registers_per_thread", ("launch__registers_per_thread",), ((LAUNCH, "Registers Per Thread"),)),
    # What the kernel asked for (static + dynamic), not the driver's reserved share.
    KernelColumn(
        "shared_mem_bytes",
        (("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic"),),
        (((LAUNCH, "Static Shared Memory Per Block"), (LAUNCH, "Dynamic Shared Memory Per Block")),),
        "byte/block",
    ),
    KernelColumn("duration_ns", ("gpu__time_duration.sum", "gpu__time_duration.avg"), ((SOL, "Duration"),), "ns"),
    KernelColumn(
        "sm_throughput_pct",
        ("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
        ((SOL, "Compute (SM) Throughput"), (SOL, "Compute (SM) [%]"), (SOL, "SM [%]"), (SOL, "SOL SM")),
        "%",
    ),
    KernelColumn(
        "memory_throughput_pct",
        ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",),
        ((SOL, "Memory Throughput"), (SOL, "Memory [%]"), (SOL, "SOL Memory")),
        "%",
    ),
    KernelColumn(
        "dram_throughput_pct",
        ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
         "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
        ((SOL, "DRAM Throughput"), (SOL, "SOL DRAM")),
        "%",
    ),
    KernelColumn(
        "achieved_occupancy_pct",
        ("sm__warps_active.avg.pct_of_peak_sustained_active",),
        ((OCC, "Achieved Occupancy"),),
        "%",
    ),
    KernelColumn(
        "theoretical_occupancy_pct",
        ("sm__maximum_warps_per_active_cycle_pct",),
        ((OCC, "Theoretical Occupancy"),),
        "%",
    ),
    KernelColumn("waves_per_sm", ("launch__waves_per_multiprocessor",), ((LAUNCH, "Waves Per SM"),)),
    KernelColumn("dram_bytes_read", ("dram__bytes_read.sum", "dram__sectors_read.sum*32")),
    KernelColumn("dram_bytes_write", ("dram__bytes_write.sum", "dram__sectors_write.sum*32")),
    KernelColumn("l1_hit_pct", ("l1tex__t_sector_hit_rate.pct",), ((MWA, "L1/TEX Hit Rate"),), "%"),
    KernelColumn("l2_hit_pct", ("lts__t_sector_hit_rate.pct",), ((MWA, "L2 Hit Rate"),), "%"),
    # L2 <-> device memory traffic, the number behind the Memory Chart's L2 -> Device Memory link.
    KernelColumn(
        "l2_dram_bytes",
        (
            "dram__bytes.sum",
            ("dram__bytes_read.sum", "dram__bytes_write.sum"),
            ("dram__sectors_read.sum*32", "dram__sectors_write.sum*32"),
        ),
    ),
    # Helper, not a kernels column: the details page only has the DRAM byte rate (`dram__bytes.sum.per_second`);
    # rate x duration gives l2_dram_bytes where no byte count was collected.
    KernelColumn("_dram_bytes_per_s", ("dram__bytes.sum.per_second",), ((MWA, "Memory Throughput"),), "byte/s"),
)

# Column order of NcuData.kernels (issue 5).
KERNEL_FRAME_COLUMNS = (
    "id", "name", "short_name", "nvtx", "grid_size", "block_size", "registers_per_thread", "shared_mem_bytes",
    "duration_ns", "sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "achieved_occupancy_pct",
    "theoretical_occupancy_pct", "waves_per_sm", "dram_bytes_read", "dram_bytes_write", "l1_hit_pct", "l2_hit_pct",
    "l2_dram_bytes",
)
INT_COLUMNS = ("grid_size", "block_size", "registers_per_thread")
METRIC_FRAME_COLUMNS = ("kernel_id", "section", "metric", "unit", "value", "text")
RULE_FRAME_COLUMNS = ("kernel_id", "section", "rule", "type", "message", "speedup_pct", "speedup_type")


def raw_metric_names() -> set[str]:
    """Every raw metric name the spec may read (to fetch only these from ncu_report)."""
    names: set[str] = set()
    for col in KERNEL_COLUMNS:
        for cand in col.raw:
            for part in cand if isinstance(cand, tuple) else (cand,):
                names.add(part.split("*")[0])
    return names
