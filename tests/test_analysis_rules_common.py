"""The rules' shared helpers (analysis/rules/common.py) against the plain pandas they stand for."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import DATA
from nsight_magic.analysis.rules.common import API_OF, api_of, pair_sums
from nsight_magic.report import open_report


@pytest.mark.parametrize("pairs", [1, 3])
def test_pair_sums_equal_a_groupby_by_process_and_gpu(pairs):
    rng = np.random.default_rng(pairs)
    n = 10_000
    pid = rng.choice(np.array([4100, 77, 4100 + pairs])[:pairs], n)
    dev = rng.choice(np.array([0, 1])[:min(pairs, 2)], n)
    values = rng.random(n) * 1e6
    got = pair_sums(values, pid, dev)
    want = pd.Series(values).groupby([pid, dev]).sum()
    assert got.index.tolist() == want.index.tolist()
    np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), rtol=1e-12)
    assert got.max() == pytest.approx(want.max(), rel=1e-12)


def test_pair_sums_keep_missing_keys_out_as_a_groupby_does():
    pid = pd.array([1, 1, None, 1], dtype="Int64")
    got = pair_sums([1.0, 2.0, 4.0, 8.0], pid, np.zeros(4, np.int64))
    assert got.to_dict() == {(1, 0): 11.0}


def test_api_of_some_columns_equal_those_of_all():
    rep = open_report(DATA / "nsys_h100_a_cuda_nvtx.sqlite")
    k = rep.kernels
    whole = api_of(k, rep.cuda_api)
    assert tuple(whole.columns) == API_OF and whole["api_tid"].notna().any()
    some = api_of(k, rep.cuda_api, ("api_tid", "api_start_ns"))
    assert list(some.columns) == ["api_tid", "api_start_ns"]
    pd.testing.assert_frame_equal(some, whole[["api_tid", "api_start_ns"]])
    assert list(api_of(k.iloc[:0], rep.cuda_api, ("api_tid",)).columns) == ["api_tid"]
