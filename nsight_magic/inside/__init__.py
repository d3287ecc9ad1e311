"""What runs inside the profiled process (under nsys or ncu), never in the notebook's kernel.

    marks.py         the contract with the notebook's side: NVTX domain and marks, clock mark, exit codes
    child.py         `python -m nsight_magic.inside.child FOLDER`: one cell in a fresh process
    worker.py        `python -m nsight_magic.inside.worker DIR`: the warm process, setup once, then cells on command
    session_host.py  the warm session's nsys side: `nsys launch`, then `nsys start` / `stop` on command
    kernel_host.py   the first process of an in-place kernel's PID namespace: the profiler, the kernel under it
    isolate.py       a private /dev/shm and /tmp/nvidia in the PID namespace
    commands.py      one-line JSON commands through a FIFO (kernel -> host, kernel -> worker)
    state.py         the cell's free names, variables and --return values (cloudpickle)
    annotate.py      automatic NVTX ranges: modules (forward/backward), functions
    ops.py           --ops: every PyTorch operator in an NVTX range
    line_ranges.py   --lines: the cell's lines in NVTX ranges
    training_ranges.py  the optimizer's step and zero_grad in NVTX ranges
    python_samples.py   the Python stack sampler; memory_history.py: torch's allocator history

These modules may import torch and run under a profiler, so they import nothing from the notebook side of
nsight-magic (options, tools, profilers, readers, analysis, views, ...) except `nsight_magic.errors`;
tests/test_layout.py checks it.  The notebook side reads what they write through the constants of marks.py.
"""
