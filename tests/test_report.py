"""The facade (nsight_magic.report): a reader's data held by composition, what can be done with it on top."""
from __future__ import annotations

import pandas as pd

from conftest import DATA
from nsight_magic.readers import read_report
from nsight_magic.readers.contract import NsysTables
from nsight_magic.readers.ncu import NcuData
from nsight_magic.readers.nsys import NsysData
from nsight_magic.report import NcuReport, NsysReport, as_report, open_report

NSYS = DATA / "nsys_h100_a_cuda_nvtx.sqlite"
NCU_PAGES = DATA / "ncu_h100_module0_raw.csv"


def test_the_facade_holds_the_readers_data_and_says_which_tool():
    with open_report(NSYS) as rep:
        assert type(rep) is NsysReport and type(rep.data) is NsysData
        assert rep.tool == rep.data.tool == "nsys"
        assert isinstance(rep.data, NsysTables)  # the contract analysis and views are typed against
        # the data's frames, summaries and meta, as they are (one object, one connection)
        assert rep.kernels is rep.data.kernels
        assert rep.kernel_summary().equals(rep.data.kernel_summary())
        assert rep.meta is rep.data.meta
        assert repr(rep).startswith("<NsysReport ") and "kernel_summary" in dir(rep) and "findings" in dir(rep)
        # what is set on the report is set on its data, which the analysis is handed: a frame swapped in counts
        rep.kernels = rep.kernels.iloc[:0]
        assert rep.data.kernels.empty
        assert rep.kernel_classes().empty
        assert as_report(rep) is rep and as_report(rep.data).data is rep.data
    assert rep.data._con is None  # `with` closed the data's connection


def test_an_ncu_report_is_the_same_kind_of_facade():
    rep = open_report(NCU_PAGES)
    assert type(rep) is NcuReport and type(rep.data) is NcuData and rep.tool == rep.data.tool == "ncu"
    assert isinstance(rep.kernels, pd.DataFrame) and len(rep.kernels) and rep.kernels is rep.data.kernels
    assert repr(rep).startswith("NcuReport(")
    assert [f.rule for f in rep.findings()] == [f.rule for f in as_report(read_report(NCU_PAGES)).findings()]


def test_the_facade_and_its_data_share_one_run_of_the_rules():
    """The view is handed the facade and `report.findings()` hands on its data: the rules run once for both."""
    from nsight_magic.analysis import nsys_findings

    with open_report(NSYS) as rep:
        first = nsys_findings(rep)
        assert first and all(a is b for a, b in zip(rep.findings(), first))
        assert len(rep.findings()) == len(first)
