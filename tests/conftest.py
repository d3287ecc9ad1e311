"""Shared test helpers: where the shared fixtures are, whether nsys is installed, reading NVTX names with SQL."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURES = SHARED / "fixtures"
DATA = Path(__file__).resolve().parent / "data"

requires_nsys = pytest.mark.skipif(shutil.which("nsys") is None,
                                   reason="nsys not installed (scripts/install-nsys-debian.sh)")
requires_ncu = pytest.mark.skipif(shutil.which("ncu") is None,
                                  reason="ncu not installed (scripts/install-ncu-debian.sh)")


def fixture_path(*parts: str) -> Path:
    """A file under ../shared/fixtures, or skip the test when the shared folder is absent."""
    p = FIXTURES.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"shared fixture {p} not present")
    return p


def nvtx_ranges(sqlite_path: Path) -> list[str]:
    """Names of the NVTX ranges in an nsys export, whether stored as text or through StringIds."""
    con = sqlite3.connect(sqlite_path)
    try:
        return [r[0] for r in con.execute(
            "SELECT COALESCE(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
            "WHERE n.eventType IN (59, 60) ORDER BY n.start")]
    finally:
        con.close()
