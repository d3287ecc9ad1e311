"""Whether a report fits in the kernel's memory, asked before it is read: a kernel that runs out of memory dies
with everything the user had in it.

Reading, analysing and drawing a report holds memory in proportion to its events (the rows of its activity and
NVTX tables): `%nsys_load` of 10M kernels with their 13M API calls and 4.6M other events (28.7M rows) peaked at
13.2 GB, 3.15M NVTX ranges at 1.04 GB (benchmarks/view.py, benchmarks/load_memory.py; about 460 and 330 bytes an
event).  `check_room` refuses, in one line that says what to do, a report whose estimate exceeds the memory this
machine has available (within its cgroup's limit), or the memory_limit_gb setting; `--force` loads it anyway.
"""
from __future__ import annotations

from pathlib import Path

from .errors import ReportError
from .settings import setting

BYTES_PER_EVENT = 460     # the larger of the two measured above
BASE_BYTES = 300_000_000  # the view's page, Bokeh's document and the analysis's own tables


class TooLarge(ReportError):
    """A report needs more memory than the kernel has room for; nothing was read."""


def available_bytes() -> int | None:
    """Memory this process could still take: the system's MemAvailable, within its cgroup's limit (a container's);
    None where neither can be read (not Linux)."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    v1 = "/sys/fs/cgroup/memory/memory."
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),  # cgroup v2, then v1
                         (v1 + "limit_in_bytes", v1 + "usage_in_bytes")):
        try:
            text = Path(limit).read_text().strip()
            if text != "max" and int(text) < 1 << 60:  # v1 writes a huge number for "no limit"
                found.append(max(int(text) - int(Path(usage).read_text().strip()), 0))
            break
        except (OSError, ValueError):
            continue
    return min(found) if found else None


def room_bytes() -> tuple[int | None, str]:
    """(bytes a report may take, what sets it): the memory_limit_gb setting, else what is available."""
    limit = setting("memory_limit_gb")
    if limit is not None:
        return int(limit * 1e9), "the memory_limit_gb setting"
    return available_bytes(), "available"


def need_bytes(events: int) -> int:
    return BASE_BYTES + BYTES_PER_EVENT * events


def check_room(report, again: str) -> None:
    """Raise TooLarge, the report closed, when reading, analysing and drawing `report` (opened, its tables not yet
    read) would need more memory than there is room for.  `again`: the command that loads it, for the message."""
    data = getattr(report, "data", report)
    path = getattr(data, "sqlite_path", None)
    if getattr(report, "tool", "nsys") != "nsys" or path is None:
        return  # Nsight Compute reports hold a few thousand kernels at most
    from .readers.nsys_rows import event_rows

    events = event_rows(Path(path))
    need = need_bytes(events)
    room, source = room_bytes()
    if room is None or need <= room:
        return
    if callable(getattr(data, "close", None)):
        data.close()
    where = f"{room / 1e9:.1f} GB {source}" if source == "available" else f"{room / 1e9:.1f} GB ({source})"
    raise TooLarge(f"{Path(path).name} holds {events:,} events: reading and drawing it would take about "
                   f"{need / 1e9:.1f} GB of this kernel's memory, more than its {where}, so it was not loaded "
                   f"(its files are unchanged); `{again} --force` loads it anyway, `nsys stats {path}` summarises "
                   "it outside the kernel")
