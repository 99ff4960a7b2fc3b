"""Report test fixtures: the cases of ``conftest_cases`` (plain builders the TUI tests share)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest_cases import EVIL, EVIL_MD, add_step, make_full_case, make_hostile_case  # noqa: E402

from ckptrescue.record.case import Case  # noqa: E402

__all__ = ["EVIL", "EVIL_MD", "add_step"]


@pytest.fixture
def hostile_case(tmp_path: Path) -> Case:
    return make_hostile_case(tmp_path)


@pytest.fixture
def full_case(hostile_case: Case) -> Case:
    return make_full_case(hostile_case)
