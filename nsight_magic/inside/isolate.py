"""`python -m nsight_magic.inside.isolate CMD...`: run CMD with a private /dev/shm and /tmp/nvidia.

Started by `unshare --pid --fork --mount-proc` (see tools.isolation_prefix).  nsys keeps shared memory and
session files keyed by process id there; in a PID namespace those ids restart at 1 and would collide with
files left by other runs, so each run gets its own fresh copies (the mounts vanish with the namespace).
"""
from __future__ import annotations

import os
import subprocess
import sys

PRIVATE_DIRS = ("/dev/shm", "/tmp/nvidia")


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m nsight_magic.inside.isolate CMD [ARGS...]")
    for target in PRIVATE_DIRS:
        os.makedirs(target, exist_ok=True)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=1777", "tmpfs", target],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            # Without private copies nsys can collide with files of other runs ("Agent launcher failed"):
            # fail, so that tools.isolation_prefix() falls back to running without a namespace.
            print(f"nsight-magic: could not mount a private {target}: {proc.stderr.strip()}", file=sys.stderr)
            sys.exit(97)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
