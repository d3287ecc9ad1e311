"""Make an executed notebook fit to ship from the repository: its outputs name the profile folders relative to
the notebook (`nsight-profiles/NAME/`, where a user who runs it gets them), not the temporary folder the GPU
check ran it in, which exists nowhere else (issue 65); and each run of consecutive stream outputs of one stream
is one output, as JupyterLab shows it (its Trust-then-save merged them into the first and kept the rest: every
line of a training loop's log saved twice).

    python scripts/ship_notebook.py notebooks/NAME.ipynb [...]   rewrites them in place

scripts/gpu_check.py applies the same to every notebook it executes and saves.
"""
from __future__ import annotations

import re
import sys

import nbformat

# an absolute path up to a profile folder's parent: /tmp/gpu-check-x1y2/nsight-profiles/ -> nsight-profiles/
_ABSOLUTE = re.compile(r"(?<![\w.~-])/(?:[^\s\"'<>\\/]+/)*?(nsight-profiles/)")


def relative_text(text: str) -> str:
    return _ABSOLUTE.sub(r"\1", text)


def ship(nb) -> int:
    """Rewrite the outputs of `nb` (an nbformat notebook) in place; returns how many strings changed."""
    changed = 0

    def fix(value):
        nonlocal changed
        if isinstance(value, str):
            new = relative_text(value)
            changed += new != value
            return new
        if isinstance(value, list):
            return [fix(v) for v in value]
        if isinstance(value, dict):
            return {k: fix(v) for k, v in value.items()}
        return value

    for cell in nb.cells:
        for out in cell.get("outputs", []):
            for key in ("text", "data", "metadata"):
                if key in out:
                    out[key] = fix(out[key])
        if cell.get("outputs"):
            merged = merge_streams(cell.outputs)
            changed += len(cell.outputs) - len(merged)
            cell.outputs = merged
    return changed


def merge_streams(outputs: list) -> list:
    """`outputs` with each run of consecutive stream outputs of the same stream (stdout, stderr) made one."""
    out: list = []
    for o in outputs:
        prev = out[-1] if out else None
        if o.get("output_type") == "stream" and prev is not None and prev.get("output_type") == "stream" \
                and prev.get("name") == o.get("name"):
            prev["text"] = "".join(prev.get("text", "")) + "".join(o.get("text", ""))
        else:
            out.append(o)
    return out


def main() -> None:
    for name in sys.argv[1:]:
        nb = nbformat.read(name, as_version=4)
        n = ship(nb)
        nbformat.write(nb, name)
        print(f"{name}: {n} outputs rewritten or merged")


if __name__ == "__main__":
    main()
