"""torch's caching-allocator history around the cell (issue 48), in the profiled process.

nsys's `--cuda-memory-usage` sees what the allocator reserves from the driver (cudaMalloc / cudaFree of whole
segments); the allocator's own history says what the program held: each tensor's block allocated and freed, with
the Python stack that allocated it.  When torch has already initialised CUDA before the cell (setup code, the
notebook's warm worker, an in-place kernel), the history is recorded during the cell
(`torch.cuda.memory._record_memory_history`, Python stacks only: the cheaper kind) and its snapshot pickled into
the profile folder after the cell, outside the capture: memory_snapshot.pickle (readers/gpu_memory.py).
A cell that starts CUDA itself gets nsys's view only: starting CUDA ourselves would make a context (and hold
memory) in processes that never use the GPU.

Each allocation's Python stack is taken with the GIL, from inside the operation that had let it go: while a
Python thread of the program holds the GIL (a pure-Python metrics thread), every allocation of the loop's thread
waits for it, up to the switch interval (5 ms).  That made a planted loop 3.5x slower under %%nsys on the H200
(benchmarks/sampler_threads.py: 16.3 s against 4.6 s plain, 4.4 s without the history).  So the stacks are left
out as soon as the Python sampler sees another thread of the program running Python (a thread that only waits, as
tqdm's monitor, costs nothing and changes nothing): the events are still recorded, without their code; the
snapshot says from when (`nsight_magic.stacks_off_us`, on torch's clock).  Without samples (--no-samples) the
stacks stay.
"""
from __future__ import annotations

import inspect
import os
import pickle
import sys
import time
from pathlib import Path

SNAPSHOT = "memory_snapshot.pickle"
SLOW_S = 2.0             # a snapshot slower than this is said in the cell's output
MAX_ENTRIES = 100_000   # alloc/free events kept (a ring): about 40 MB at most with their stacks


def snapshot_name(rank: int | None = None) -> str:
    return SNAPSHOT if rank is None else f"memory_snapshot.rank{rank}.pickle"


class AllocatorHistory:
    """A handle (as annotate_cell's): remove() pickles the snapshot and stops the recording."""

    def __init__(self, torch, path: Path):
        self.torch, self.path = torch, path
        self.stacks_off_us: int | None = None  # when the stacks were left out: torch's clock (us since the epoch)

    @classmethod
    def start(cls, folder: Path, rank: int | None = None) -> "AllocatorHistory | None":
        torch = sys.modules.get("torch")
        try:
            if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
                return None
            torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES, stacks="python")
        except Exception as e:  # noqa: BLE001 - a torch without it: nsys's view only, said once
            print(f"nsight-magic: torch's allocator history is not recorded ({type(e).__name__}: {e})",
                  file=sys.stderr)
            return None
        return cls(torch, Path(folder) / snapshot_name(rank))

    def without_stacks(self) -> None:
        """Another thread of the program runs Python beside the cell's: record without stacks from now on (for
        the rest of the cell).  A torch whose recorder would clear the events so far when set again (no
        `clear_history` switch, before 2.6) keeps its stacks."""
        if self.stacks_off_us is not None:
            return
        record = self.torch.cuda.memory._record_memory_history
        try:
            if "clear_history" not in inspect.signature(record).parameters:
                return
            record(enabled="all", context=None, max_entries=MAX_ENTRIES, clear_history=False)
            self.stacks_off_us = time.time_ns() // 1000
        except Exception:  # noqa: BLE001 - the stacks stay: slower, nothing lost
            pass

    def remove(self) -> None:
        memory = self.torch.cuda.memory
        t0 = time.monotonic()
        try:
            # torch's C function itself: the Python wrapper has imported lazy torch modules on its first call (seen
            # on the H100: 8 s of torch.distributed imports in a process without an optimizer)
            try:
                snap = self.torch._C._cuda_memorySnapshot(None)
            except (AttributeError, TypeError):  # another torch: its own way
                snap = memory._snapshot()
            if self.stacks_off_us is not None and isinstance(snap, dict):
                snap["nsight_magic"] = {"stacks_off_us": self.stacks_off_us}
            tmp = self.path.with_name(self.path.name + ".part")
            with open(tmp, "wb") as f:
                pickle.dump(snap, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self.path)  # complete or absent
            took = time.monotonic() - t0
            if took > SLOW_S:
                print(f"nsight-magic: saving torch's allocator history took {took:.1f} s (--no-memory leaves it "
                      "out)", file=sys.stderr)
        except Exception as e:  # noqa: BLE001 - the profile without it
            print(f"nsight-magic: torch's allocator history could not be saved ({type(e).__name__}: {e})",
                  file=sys.stderr)
        finally:
            try:
                memory._record_memory_history(enabled=None)
            except Exception:  # noqa: BLE001
                pass
