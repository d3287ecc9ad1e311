"""analysis/text.py's Arrow paths give what Python's `re` gives: a regex's groups over millions of distinct names
(emit_nvtx numbers every call), and a search with RE2 twins; the names a few rows hold, not their categories."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from nsight_magic.analysis import text as tx
from nsight_magic.analysis.enclosing import EMITTED_TAG, EMITTED_TWINS, emitted
from nsight_magic.analysis.ops import _EMITTED_RE2, _NAME, _NAME_RE2, EMITTED

# names where RE2 and Python's `re` could part: Unicode digits and spaces, a trailing newline, commas, brackets,
# empty groups, a name of numbers
ODD = ["aten::mm, seq = \u0663, op_id = 4", "aten::mm, seq = 12, op_id = 4\n", "aten::mm\n", ", seq = 1",
       "aten::mm, seq = 1, op_id = 2, sizes = [[1, 2], []], input_op_ids = [(1, 0)]", "aten::mm, sizes = ",
       "aten::mm, op_id = 1, op_id = 2", "aten::mm, seq = 99999999999999999999999", "a b, seq = 1",
       "aten::mm\u00a0x", "aten::mm\u2003[backward of aten::addmm]", "aten::mm [backward of aten::addmm] (4x4)",
       "aten::mm [backward of ] (4x4)", "aten::mm (", "aten::mm (x)\n", "[x", "", "nan", "\u0663\u0664",
       "autograd::engine::evaluate_function: AddmmBackward0, op_id = 6", "x, seq = 1, op_id = 2, sizes = [[1]]\n",
       "aten::to, seq = 7, op_id = \u0665", "step 3, epoch 1", "aten::mm, seq =  1"]


def _names(n: int) -> list[str]:
    """n emit_nvtx-like names, each call numbered, plus the odd ones."""
    ops = ["aten::mm", "aten::addmm", "AddmmBackward0", "autograd::engine::evaluate_function: MmBackward0"]
    made = [f"{ops[i % 4]}, seq = {i // 3}, op_id = {i}" + (", sizes = [[32, 64], []]" if i % 5 else "")
            for i in range(n)]
    return made + ODD


def _python(rx: re.Pattern[str], values: list) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {g: [] for g in rx.groupindex}
    for v in values:
        m = rx.match(str(v))
        for g in out:
            out[g].append((m.group(g) or "") if m else "")
    return out


def test_extract_gives_what_pythons_re_gives_on_every_row():
    names = _names(5000)
    rows = pd.Series(pd.Categorical(names + names[::7] + [None]))
    for rx, arrow in ((EMITTED, _EMITTED_RE2), (_NAME, _NAME_RE2)):
        codes, groups = tx.extract(rows, rx, arrow)
        want = _python(rx, ["nan" if v is None or v is np.nan else v for v in rows.astype(object)])
        for g, texts in groups.items():
            assert np.asarray(texts.to_pylist(), dtype=object)[codes].tolist() == want[g], g


def test_extract_reads_numbers_as_their_text_and_values_other_than_categoricals():
    codes, groups = tx.extract(pd.Series([7, 8, 7]), re.compile(r"^(?P<d>\d)$"), r"^(?P<d>[0-9])$")
    assert np.asarray(groups["d"].to_pylist(), dtype=object)[codes].tolist() == ["7", "8", "7"]


def test_contains_with_twins_gives_what_pythons_re_gives():
    names = _names(6000)  # more distinct values than text.LOOP_MAX: the Arrow path
    got = tx.contains(pd.Series(pd.Categorical(names)), EMITTED_TAG, twins=EMITTED_TWINS)
    assert got.tolist() == [re.search(EMITTED_TAG, v) is not None for v in names]
    nv = pd.DataFrame({"name": pd.Categorical(names), "domain": pd.Categorical([None] * len(names))})
    assert emitted(nv).tolist() == got.tolist()


def test_distinct_keeps_only_the_names_its_rows_hold():
    col = pd.Series(pd.Categorical(["b", "d", None, "b"], categories=["a", "b", "c", "d"]))
    codes, values = tx.distinct(col)
    assert values.tolist() == ["b", "d"] and codes.tolist() == [0, 1, -1, 0]
    codes, values = tx.distinct(col.astype(object))
    assert [values[c] if c >= 0 else None for c in codes] == ["b", "d", None, "b"]


def test_a_steps_stem_ignores_categories_no_row_holds():
    from nsight_magic.analysis.steps import stem

    labels = pd.Series(pd.Categorical(["step 1", "step 2"], categories=[f"op {i}" for i in range(50)]
                                      + ["step 1", "step 2"]))
    st = stem(labels)
    assert st.tolist() == ["step #", "step #"] and list(st.cat.categories) == ["step #"]
