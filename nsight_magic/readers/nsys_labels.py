"""Row labels as `nsys stats` of the report's own version prints them.

The numbers of `nsys stats` have not changed between versions; some labels have.  Each summary carries the label of
the report's version (the nsys that exported it, EXPORT_PRODUCT_VERSION) next to a canonical column that does not
change (memcpy `kind`, NVTX `name`):

| what | nsys up to the change | from the change on | change, as observed |
|---|---|---|---|
| memcpy operation (cuda_gpu_mem_*_sum, gpumem*sum) | `[CUDA memcpy HtoD]` | `[CUDA memcpy Host-to-Device]`: the report's own ENUM_CUDA_MEMCPY_OPER.label | 2023.2.3 prints HtoD, 2023.3.3 and later print the label |
| NVTX range in the default domain (nvtx_sum, nvtx_gpu_proj_sum) | `step` | `:step` (domain name, empty, then ':') | 2024.1.1 prints `step`, 2024.6.2 and later `:step`; taken to change with 2024.2 |
| NVTX range in a named domain | `Domain:step` | `Domain:step` | none |
| CUDA API names | `_vNNNN` suffix dropped | the same | none |

Reports without a version (exports before 2021) get the labels of the oldest column.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

MEMCPY_ENUM_LABEL_SINCE = (2023, 3)
NVTX_DEFAULT_DOMAIN_COLON_SINCE = (2024, 2)

# our canonical kind -> the ENUM label newer exports carry (fallback when a report lacks the label column)
ENUM_LABELS = {
    "Unknown": "Unknown", "HtoD": "Host-to-Device", "DtoH": "Device-to-Host", "HtoA": "Host-to-Array",
    "AtoH": "Array-to-Host", "AtoA": "Array-to-Array", "AtoD": "Array-to-Device", "DtoA": "Device-to-Array",
    "DtoD": "Device-to-Device", "HtoH": "Host-to-Host", "PtoP": "Peer-to-Peer",
    "Unified HtoD": "Unified Host-to-Device", "Unified DtoH": "Unified Device-to-Host",
    "Unified DtoD": "Unified Device-to-Device",
}
# nsys up to 2023.2 (MemcpyOperStrs built into its scripts)
OLD_MEMCPY_OPS = {
    "Unknown": "[CUDA memcpy Unknown]",
    "Unified HtoD": "[CUDA Unified Memory memcpy HtoD]",
    "Unified DtoH": "[CUDA Unified Memory memcpy DtoH]",
    "Unified DtoD": "[CUDA Unified Memory memcpy DtoD]",
}


def version_key(version: str | None) -> tuple[int, int] | None:
    """'2025.3.2.0' -> (2025, 3); None when unknown."""
    if not version:
        return None
    m = re.match(r"(\d{4})\.(\d+)", str(version))
    return (int(m.group(1)), int(m.group(2))) if m else None


def _since(version: str | None, since: tuple[int, int]) -> bool:
    v = version_key(version)
    return v is not None and v >= since


def memcpy_operations(kinds, version: str | None, enum_labels: dict[str, str] | None = None) -> np.ndarray:
    """nsys's Operation label for each canonical memcpy kind ('HtoD', ...; 'memset' -> '[CUDA memset]')."""
    k = pd.Series(kinds, dtype=object)
    if not len(k):
        return np.empty(0, object)
    new = _since(version, MEMCPY_ENUM_LABEL_SINCE)
    labels = {**ENUM_LABELS, **(enum_labels or {})}

    def one(x):
        if x == "memset":
            return "[CUDA memset]"
        if new:
            return f"[CUDA memcpy {labels.get(x, x)}]"
        return OLD_MEMCPY_OPS.get(x, f"[CUDA memcpy {x}]")

    return k.map(one).to_numpy(object)


def nvtx_range_labels(names: np.ndarray, has_domain: np.ndarray, version: str | None) -> np.ndarray:
    """nsys's Range label from our canonical names ('Domain:name' when the range has a domain, else 'name')."""
    out = np.asarray(names, dtype=object).copy()
    if _since(version, NVTX_DEFAULT_DOMAIN_COLON_SINCE):
        plain = ~np.asarray(has_domain, bool)
        out[plain] = np.array([":" + ("" if pd.isna(n) else str(n)) for n in out[plain]], dtype=object)
    return out
