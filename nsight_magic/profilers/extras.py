"""What a recording holds beyond the trace: Python call stacks (issue 45) and device memory (issue 48).

    samples   the profiled process samples its threads' Python call stacks during the cell
              (inside/python_samples.py): which of the user's code the host ran, at any moment
    history   when the profiled process uses torch, its caching allocator's history around the cell
              (inside/memory_history.py): what the program held on the GPU, block by block, with Python stacks
    memory    nsys's record of every device allocation and free (`--cuda-memory-usage=true`): every library's,
              not only torch's

Measured (benchmarks/recording_cost.py; H100, nsys 2025.3.1, a transformer training step of 16.3 ms): the
allocator's history +0.4% a step (its snapshot 0.1 s after the cell), nsys's --cuda-memory-usage +34-39%, nsys's
own Python sampling (--python-sampling) +2-4% a step but `nsys stop` 4-5 s longer, and its 2025.3 SQLite export
holds none of the Python frames.  So samples (ours) and the history are on by default, `--memory` adds nsys's own
device-memory record, `--no-samples` / `--no-memory` leave them out; asked for where nsys cannot, the output says
why.  What nsys takes where is read from its own --help (tools.nsys_switches): `nsys profile` takes everything; a
warm or in-place session gives `nsys launch` what it takes and `nsys start` the rest.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..tools.argv import flag_name

MEMORY = ("--cuda-memory-usage=true",)
GRAPH_NODES = ("--cuda-graph-trace=node",)


@dataclass(frozen=True)
class Extras:
    samples: bool = False          # Python call stacks sampled in the profiled process
    memory: bool = False           # nsys's --cuda-memory-usage
    history: bool = False          # torch's allocator history in the profiled process (when it uses CUDA)
    args: tuple[str, ...] = ()     # nsys switches, in the order given
    notes: tuple[str, ...] = ()    # why something asked for is not recorded
    gpu_metrics: bool = False      # nsys samples the GPU's counters (--gpu-metrics-devices)

    def config(self) -> dict:
        """What run.json says the profiled process records (read by inside/child.py and the views)."""
        return {"samples": self.samples, "memory": self.memory, "history": self.history,
                "gpu_metrics": self.gpu_metrics}


def gpu_metrics_request(trace: str, switches: frozenset[str], help_text: str = "", missing: str = ""
                        ) -> tuple[tuple[str, ...], str | None]:
    """The switch that samples the GPU's counters, as this nsys spells it: `--gpu-metrics-devices` (2023.2+; its
    `cuda-visible` where the help names it: the GPUs the program sees), `--gpu-metrics-device` (2022.x); or ((),
    the line that says why not: no GPU visible (CUDA not traced), or `missing` when this nsys has neither)."""
    if "cuda" not in {t.strip() for t in trace.split(",")}:
        return (), "GPU metrics were not sampled: no GPU is visible"
    if "--gpu-metrics-devices" in switches:
        return (f"--gpu-metrics-devices={'cuda-visible' if 'cuda-visible' in help_text else 'all'}",), None
    if "--gpu-metrics-device" in switches:
        return ("--gpu-metrics-device=all",), None
    return (), f"GPU metrics were not sampled: {missing}"


GPU_METRICS_SWITCHES = ("--gpu-metrics-devices", "--gpu-metrics-device")


def choose(samples: bool | None, memory: bool | None, trace: str, switches: frozenset[str],
           user_args=(), version: str | None = None, gpu_metrics: bool = False, help_text: str = "") -> Extras:
    """What to record: `samples` as asked (None: yes), `memory` as asked (None: torch's allocator history only;
    True: nsys's record too), `switches` the nsys switches available (`nsys profile`'s), `user_args` the user's own
    --nsys-args (which win)."""
    given = {flag_name(a) for a in user_args if a.startswith("-")}
    traced = {t.strip() for t in trace.split(",")}
    args: list[str] = []
    notes: list[str] = []
    if memory and "--cuda-memory-usage" not in given:
        if "cuda" not in traced:
            notes.append("device memory is recorded with CUDA tracing, on a GPU (--trace cuda,...)")
        elif "--cuda-memory-usage" not in switches:
            notes.append(f"nsys's device-memory record was not made: nsys {version or ''} has no "
                         "--cuda-memory-usage".replace("  ", " "))
        else:
            args += MEMORY
    # the kernels inside CUDA graphs: nsys's default (graph) lists a graph's launch as one interval and none of its
    # kernels; node tracing cost 6% more for 20 replays of a 24-kernel graph (3.67 -> 3.89 ms, H100, one run each:
    # tests/data/gpu_features/README.md) and nothing where no graph runs
    if "cuda" in traced and "--cuda-graph-trace" in switches and "--cuda-graph-trace" not in given:
        args += GRAPH_NODES
    nsys_memory = "--cuda-memory-usage" in given or any(a in MEMORY for a in args)
    metrics = bool(given & set(GPU_METRICS_SWITCHES))
    if gpu_metrics and not metrics:
        got, why = gpu_metrics_request(trace, switches, help_text,
                                       f"nsys {version or ''} has no --gpu-metrics-devices".replace("  ", " "))
        args += got
        metrics = bool(got)
        if why:
            notes.append(why)
    return Extras(samples is not False, nsys_memory, memory is not False, tuple(args), tuple(notes), metrics)


def split_for_session(args, launch_switches: frozenset[str]) -> tuple[list[str], list[str]]:
    """(what `nsys launch` takes, what `nsys start` takes) of `args`."""
    launch, start = [], []
    for a in args:
        (launch if flag_name(a) in launch_switches else start).append(a)
    return launch, start
