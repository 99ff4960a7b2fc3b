"""The HTML report prints to a clean PDF with headless Chromium: no table row is cut across a
page break, and the severity filter does not hide findings on paper."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest_cases import make_full_case, make_hostile_case

from ckptrescue.model import Finding, Severity
from ckptrescue.report.render import render

ROWS = 120


@pytest.mark.needs_tool("chromium")
def test_the_report_prints_without_splitting_rows(tmp_path: Path) -> None:
    pypdf = pytest.importorskip("pypdf")
    case = make_full_case(make_hostile_case(tmp_path))
    for i in range(ROWS):  # long rows: titles that wrap over several lines
        case.add_finding(Finding(
            "TZ002", Severity.ERROR if i % 3 else Severity.INFO,
            f"Ttt{i:04d} " + "a long explanation of what went wrong in this record " * 14
            + f"Zzz{i:04d}",  # the row's first and last line
            evidence=f"/mnt/run/step-{i}.pt", tensors=(f"t{i}",),
            details={"stored": f"{i:08x}", "computed": f"{i * 7:08x}"}))
    html = tmp_path / "report.html"
    html.write_text(render(case, "html"))
    pdf = tmp_path / "report.pdf"
    chromium = shutil.which("chromium")
    assert chromium
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update",
                    f"--user-data-dir={tmp_path / 'chrome'}", "--no-pdf-header-footer",
                    f"--print-to-pdf={pdf}", html.as_uri()],
                   capture_output=True, timeout=180, check=True)
    pages = [page.extract_text() for page in pypdf.PdfReader(str(pdf)).pages]
    assert 10 <= len(pages) <= 120, len(pages)
    for i in range(ROWS):
        start = [n for n, text in enumerate(pages) if f"Ttt{i:04d}" in text]
        end = [n for n, text in enumerate(pages) if f"Zzz{i:04d}" in text]
        assert start and start == end, (i, start, end)  # every row on one page, printed once
    assert not any(re.search(r"show-(info|error)", text) for text in pages)
