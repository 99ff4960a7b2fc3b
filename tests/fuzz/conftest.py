"""Fuzz run summary: cases/s and distinct finding codes, printed in pytest's terminal summary
(shown with or without ``-s``) and written to ``build/fuzz/report.json``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
for p in (str(REPO), str(REPO / "tests")):
    if p not in sys.path:
        sys.path.insert(0, p)

SUMMARY: list[str] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if SUMMARY:
        terminalreporter.section("fuzz corpus")
        for line in SUMMARY:
            terminalreporter.write_line(line)
