"""`python -m nsight_magic.inside.isolate [--no-kernel-symbols] CMD...`: run CMD with a private /dev/shm and
/tmp/nvidia.

Started by `unshare --pid --fork --mount-proc` (see tools.isolation_prefix).  nsys keeps shared memory and
session files keyed by process id there; in a PID namespace those ids restart at 1 and would collide with
files left by other runs, so each run gets its own fresh copies (the mounts vanish with the namespace).

--no-kernel-symbols: an empty /proc/kallsyms in the namespace.  nsys's agent reads and parses all of it (about
120,000 kernel symbols) every time it starts, and keeps it in the raw stream, for the kernel frames of CPU samples
and context switches.  A run that records neither has no use for it: `nsys profile -t nvtx` of a 0.2 s script took
0.26-0.31 CPU-s with it hidden against 0.72-0.89 (nsys 2022.4), and its .qdstrm was 148 KB instead of 1.3 MB.
tools.isolated_argv says when it is hidden.
"""
from __future__ import annotations

import os
import subprocess
import sys

PRIVATE_DIRS = ("/dev/shm", "/tmp/nvidia")
NO_KERNEL_SYMBOLS = "--no-kernel-symbols"
KALLSYMS = "/proc/kallsyms"


def main(argv: list[str]) -> None:
    hide_symbols = argv[:1] == [NO_KERNEL_SYMBOLS]
    argv = argv[1:] if hide_symbols else argv
    if not argv:
        sys.exit(f"usage: python -m nsight_magic.inside.isolate [{NO_KERNEL_SYMBOLS}] CMD [ARGS...]")
    for target in PRIVATE_DIRS:
        os.makedirs(target, exist_ok=True)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=1777", "tmpfs", target],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            # Without private copies nsys can collide with files of other runs ("Agent launcher failed"):
            # fail, so that tools.isolation_prefix() falls back to running without a namespace.
            print(f"nsight-magic: could not mount a private {target}: {proc.stderr.strip()}", file=sys.stderr)
            sys.exit(97)
    if hide_symbols and os.path.exists(KALLSYMS):
        # only time is at stake: where the mount is refused, nsys reads the symbols as before
        subprocess.run(["mount", "--bind", "/dev/null", KALLSYMS], capture_output=True)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
