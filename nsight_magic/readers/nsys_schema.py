"""Column specs for Nsight Systems SQLite exports: which raw column feeds which DataFrame column.

Column mapping is data (like HolisticTraceAnalysis's `hta/configs`): each `Col` names our snake_case column,
the raw column names that may hold it (first present wins: names changed between nsys versions), how to decode
it and its dtype.  `TABLES` lists, per frame, the raw table names to look for (exact names first, then the
same names with a version suffix such as `NVTX_EVENTS_V3`).

Decoders (`how`):
  int      integer column as it is
  strid    integer id into StringIds -> string (pandas Categorical)
  text     text stored in the row
  pid/tid  decoded from a serialized GlobalId (globalTid/globalPid): bits 24-47 pid, bits 0-23 tid
  gid      the raw GlobalId (kept for joins; read as unsigned 64-bit)
  enum     integer id decoded through `ENUMS[enum]` (the report's ENUM_* table if present, else the fallback)
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Col:
    name: str
    raw: tuple[str, ...]
    how: str = "int"
    dtype: str = "int64"  # int64 | Int64 (nullable) | float64 | category | string | uint64
    enum: str | None = None  # key of ENUMS for how == "enum"


@dataclass(frozen=True)
class TableSpec:
    frame: str
    tables: tuple[str, ...]  # candidate raw table names, preferred first
    cols: tuple[Col, ...]
    where: str | None = None  # SQL filter on the raw table
    extra: tuple[str, ...] = field(default=())  # raw columns read for post-processing (kept as raw_<name>)


def _c(name, *raw, how="int", dtype="int64", enum=None):
    return Col(name, tuple(raw) if raw else (name,), how, dtype, enum)


START = _c("start_ns", "start")
END = _c("end_ns", "end", dtype="Int64")
GPU_COMMON = (
    START, END,
    _c("device_id", "deviceId"),
    _c("context_id", "contextId", dtype="Int64"),
    _c("stream_id", "streamId", dtype="Int64"),
    _c("correlation_id", "correlationId", dtype="Int64"),
    _c("pid", "globalPid", how="pid"),
)
CPU_COMMON = (START, END, _c("pid", "globalTid", how="pid"), _c("tid", "globalTid", how="tid"))

KERNELS = TableSpec("kernels", ("CUPTI_ACTIVITY_KIND_KERNEL",), GPU_COMMON + (
    _c("name", "demangledName", "shortName", how="strid", dtype="category"),
    _c("short_name", "shortName", how="strid", dtype="category"),
    _c("grid_x", "gridX"), _c("grid_y", "gridY"), _c("grid_z", "gridZ"),
    _c("block_x", "blockX"), _c("block_y", "blockY"), _c("block_z", "blockZ"),
    _c("registers_per_thread", "registersPerThread"),
    _c("static_smem_bytes", "staticSharedMemory"),
    _c("dynamic_smem_bytes", "dynamicSharedMemory"),
    # --cuda-graph-trace=node: a kernel a CUDA graph replayed (its correlation id is the graph launch's); NA else
    _c("graph_node_id", "graphNodeId", dtype="Int64"),
))
MEMCPY = TableSpec("memcpy", ("CUPTI_ACTIVITY_KIND_MEMCPY",), GPU_COMMON + (
    _c("bytes", "bytes"),
    _c("kind", "copyKind", how="enum", dtype="category", enum="memcpy_kind"),
    _c("src_kind", "srcKind", how="enum", dtype="category", enum="mem_kind"),
    _c("dst_kind", "dstKind", how="enum", dtype="category", enum="mem_kind"),
    _c("src_device_id", "srcDeviceId", dtype="Int64"),
    _c("dst_device_id", "dstDeviceId", dtype="Int64"),
))
MEMSET = TableSpec("memset", ("CUPTI_ACTIVITY_KIND_MEMSET",), GPU_COMMON + (
    _c("bytes", "bytes"),
    _c("value", "value", dtype="Int64"),
    _c("mem_kind", "memKind", how="enum", dtype="category", enum="mem_kind"),
))
# --cuda-graph-trace=graph (nsys's default): a CUDA graph's launch is one row, its kernels are not listed
GRAPHS = TableSpec("graphs", ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE",), GPU_COMMON + (
    _c("graph_id", "graphId", dtype="Int64"),
    _c("graph_exec_id", "graphExecId", dtype="Int64"),
))
CUDA_API = TableSpec("cuda_api", ("CUPTI_ACTIVITY_KIND_RUNTIME",), CPU_COMMON + (
    _c("name", "nameId", how="strid", dtype="category"),
    _c("correlation_id", "correlationId", dtype="Int64"),
    _c("return_value", "returnValue", dtype="Int64"),
))
# Without nsys's instant "OS runtime libraries profiling started/stopped" markers: a warm session's report keeps
# those of every earlier recording, seconds before its own events.
OSRT = TableSpec("osrt", ("OSRT_API",), CPU_COMMON + (
    _c("name", "nameId", how="strid", dtype="category"),
    _c("return_value", "returnValue", dtype="Int64"),
    _c("nesting_level", "nestingLevel", dtype="Int64"),
), where='"end" > start')
SYNC = TableSpec("sync", ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",), GPU_COMMON + (
    _c("sync_type", "syncType", how="enum", dtype="category", enum="sync_type"),
    _c("event_id", "eventId", dtype="Int64"),
))
# nsys's own overhead (buffer flushes and the like); nsys analyze's GPU rules count it as GPU work
OVERHEAD = TableSpec("overhead", ("PROFILER_OVERHEAD",), CPU_COMMON + (
    _c("name", "nameId", how="strid", dtype="category"),))
CUBLAS = TableSpec("cublas", ("CUBLAS_EVENTS",), CPU_COMMON + (_c("name", "nameId", how="strid", dtype="category"),))
CUDNN = TableSpec("cudnn", ("CUDNN_EVENTS",), CPU_COMMON + (_c("name", "nameId", how="strid", dtype="category"),))
# NVTX rows are post-processed (name from text/textId, domain, kind, depth): these are the raw inputs.
NVTX_RAW = TableSpec("nvtx", ("NVTX_EVENTS",), CPU_COMMON + (
    _c("event_type", "eventType"),
    _c("text", "text", how="text", dtype="category"),
    _c("text_id", "textId", how="strid", dtype="category"),
    _c("domain_id", "domainId", dtype="Int64"),
    _c("color", "color", dtype="Int64"),
    _c("category", "category", dtype="Int64"),
    _c("end_global_tid", "endGlobalTid", dtype="Int64"),
    _c("global_tid", "globalTid", how="gid", dtype="uint64"),
))
THREADS = TableSpec("threads", ("ThreadNames",), (
    _c("pid", "globalTid", how="pid"), _c("tid", "globalTid", how="tid"),
    _c("name", "nameId", how="strid", dtype="category"),
    _c("priority", "priority", dtype="Int64"),
))
PROCESSES = TableSpec("processes", ("PROCESSES",), (
    _c("pid", "pid"), _c("name", "name", how="text", dtype="string"),
))
GPUS = TableSpec("gpus", ("TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU"), (
    _c("id", "id", "cuDevice", "deviceId"),
    _c("name", "name", how="text", dtype="string"),
    _c("sm_count", "smCount", "numMultiprocessors", dtype="Int64"),
    _c("memory_bytes", "totalMemory", "globalMemorySize", dtype="Int64"),
    _c("memory_bandwidth", "memoryBandwidth", "globalMemoryBandwidth", dtype="Int64"),
    _c("compute_major", "computeMajor", "computeCapabilityMajor", dtype="Int64"),
    _c("compute_minor", "computeMinor", "computeCapabilityMinor", dtype="Int64"),
    _c("bus_location", "busLocation", "pciBusId", how="text", dtype="string"),
))

ACTIVITY_SPECS = {s.frame: s for s in (KERNELS, MEMCPY, MEMSET, GRAPHS, CUDA_API, OSRT, SYNC, CUBLAS, CUDNN)}
ALL_SPECS = {**ACTIVITY_SPECS, "nvtx": NVTX_RAW, "threads": THREADS, "processes": PROCESSES, "gpus": GPUS,
             "overhead": OVERHEAD}

# Final column order of each frame (NVTX and the joined columns are built in nsys.py).
NVTX_COLUMNS = ("start_ns", "end_ns", "duration_ns", "name", "domain", "kind", "pid", "tid", "depth", "color",
                "category", "label")


def frame_columns(frame: str) -> tuple[str, ...]:
    if frame == "nvtx":
        return NVTX_COLUMNS
    cols = tuple(c.name for c in ALL_SPECS[frame].cols)
    if frame in ACTIVITY_SPECS:
        cols = cols[:2] + ("duration_ns",) + cols[2:]
    if frame == "kernels":
        cols += ("launch_tid",)
    if frame == "processes":
        cols += PROCESS_EXTRA
    return cols


PROCESS_EXTRA = ("rank", "world_size", "devices")  # NsysData.processes adds them (ranks, GPUs used)


# Renamed meta-data tables, newest name first.
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")

# Fallback ENUM values for exports that lack the ENUM_* tables (before 2022).  Values from NVIDIA's
# SQLite schema reference (CUDA_MEMCPY_KIND_*, CUDA_MEMOPR_MEMORY_KIND_*, CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_*)
# and the MemcpyOperStrs / MemKindStrs tables built into the `nsys stats` scripts.
ENUMS = {
    "memcpy_kind": ("ENUM_CUDA_MEMCPY_OPER", {
        0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
        8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "Unified HtoD", 12: "Unified DtoH", 13: "Unified DtoD",
    }),
    "mem_kind": ("ENUM_CUDA_MEM_KIND", {
        0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed", 5: "device static",
        6: "managed static", 7: "unknown",
    }),
    "sync_type": ("ENUM_CUPTI_SYNC_TYPE", {
        0: "unknown", 1: "event sync", 2: "stream wait event", 3: "stream sync", 4: "context sync",
    }),
}
# The report's ENUM tables give labels like 'CUDA_MEMCPY_KIND_HTOD'; our short label is derived from that
# name by dropping these prefixes (then the fallback table maps ids we know to our spelling).
ENUM_PREFIXES = {
    "memcpy_kind": "CUDA_MEMCPY_KIND_",
    "mem_kind": "CUDA_MEMOPR_MEMORY_KIND_",
    "sync_type": "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_",
}

# NVTX event types (ENUM_NSYS_EVENT_TYPE).  NVTXT are the same events from the older text API.
NVTX_PUSH_POP = (59, 70)
NVTX_START_END = (60, 71)
NVTX_MARK = (34, 65)
NVTX_DOMAIN_CREATE = 75
