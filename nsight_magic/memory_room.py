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


def check_room(report, again: str, *more) -> None:
    """Raise TooLarge, the reports closed, when reading, analysing and drawing `report` (opened, its tables not yet
    read), and the reports in `more` held with it (a comparison's other side), would need more memory than there
    is room for.  `again`: the command that loads them, for the message."""
    from .readers.nsys_rows import event_rows

    held = [(r, p) for r in (report, *more) if getattr(r, "tool", "nsys") == "nsys"  # Nsight Compute: a few
            and (p := getattr(getattr(r, "data", r), "sqlite_path", None)) is not None]  # thousand kernels at most
    if not held:
        return
    events = sum(event_rows(Path(p)) for _, p in held)
    need = BASE_BYTES * (len(held) - 1) + need_bytes(events)
    room, source = room_bytes()
    if room is None or need <= room:
        return
    for r in (report, *more):
        data = getattr(r, "data", r)
        if callable(getattr(data, "close", None)):
            data.close()
    where = f"{room / 1e9:.1f} GB {source}" if source == "available" else f"{room / 1e9:.1f} GB ({source})"
    paths = [str(p) for _, p in held]
    what = (f"{Path(paths[0]).name} holds" if len(paths) == 1 else
            " and ".join(Path(p).name for p in paths) + " hold")
    outside = (f"`nsys stats {paths[0]}` summarises it outside the kernel" if len(paths) == 1 else
               "`nsight-magic diff` compares them outside the kernel")
    it, was, its = ("it", "it was", "its") if len(paths) == 1 else ("them", "they were", "their")
    raise TooLarge(f"{what} {events:,} events: reading and drawing {it} would take about {need / 1e9:.1f} GB of "
                   f"this kernel's memory, more than its {where}, so {was} not loaded ({its} files are unchanged); "
                   f"`{again} --force` loads {it} anyway, {outside}")
