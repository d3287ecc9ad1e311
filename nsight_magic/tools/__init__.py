"""NVIDIA's tools as nsight-magic runs them: where nsys and ncu are, their versions, their command lines, and the
machine they run on (visible GPUs, the PID namespace nsys is isolated in).  Argv lists only, never shell strings.

    find.py    an environment variable, PATH, then the usual install folders
    nsys.py    Nsight Systems: nsys, QdstrmImporter, import and export, the NVTX version pitfall
    ncu.py     Nsight Compute: ncu, its options and argv, CSV import, failure messages
    argv.py    pass-through flags (--nsys-args, --ncu-args): split, owned flags refused
    system.py  visible GPUs, the PID namespace nsys runs in, processes by their /proc entries
    cache.py   this user's private cache folder; the tools' --version and --help answers kept there
"""
from __future__ import annotations

from .find import find_executable, version_tuple
from .nsys import (NSYS_ENV, export_sqlite, find_nsys, find_qdstrm_importer, import_qdstrm, nsys_help, nsys_switches,
                   nsys_trace_values, nsys_version, nvtx_pitfall)
from .system import (ISOLATE_ENV, gpu_names, gpu_visible, identity_alive, isolated_argv, isolation_prefix,
                     jupyter_kernel_id, orphan_guard, parent_pid, process_identity)

__all__ = ["find_executable", "version_tuple", "NSYS_ENV", "export_sqlite", "find_nsys", "find_qdstrm_importer",
           "import_qdstrm", "nsys_help", "nsys_switches", "nsys_trace_values", "nsys_version", "nvtx_pitfall",
           "ISOLATE_ENV", "gpu_names",
           "gpu_visible", "isolated_argv", "isolation_prefix", "orphan_guard", "parent_pid", "process_identity",
           "identity_alive",
           "jupyter_kernel_id"]
