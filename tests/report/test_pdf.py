"""``report -f pdf``: the HTML report printed by headless Chromium, through the kit's runner,
with the case id, the audit head hash and page numbers in every page's footer."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from conftest_cases import make_full_case, make_hostile_case

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cli_helpers import run_cli  # noqa: E402

from ckptrescue.errors import ToolMissingError  # noqa: E402
from ckptrescue.report.pdf import print_pdf  # noqa: E402


@pytest.mark.needs_tool("chromium")
def test_report_pdf_has_footer_with_case_head_and_page_numbers(tmp_path: Path) -> None:
    pypdf = pytest.importorskip("pypdf")
    case = make_full_case(make_hostile_case(tmp_path))
    out = tmp_path / "out" / "incident.pdf"
    res = run_cli("report", str(case.root), "-f", "pdf", "-o", str(out))
    assert res.returncode == 0, res.stderr
    assert out.read_bytes()[:5] == b"%PDF-"
    pages = [p.extract_text() for p in pypdf.PdfReader(str(out)).pages]
    assert 1 <= len(pages) <= 20
    head = case.verify().to_json()["head"]
    for i, text in enumerate(pages, 1):
        flat = " ".join(text.split())
        assert f"page {i} of {len(pages)}" in flat, flat[:300]
        assert f"case {case.manifest['id']}" in flat and head in flat, flat[:300]
    assert "Incident report" in pages[0]
    # the report was only read: printing it added nothing to the case
    assert case.verify().to_json()["head"] == head


@pytest.mark.needs_tool("chromium")
def test_report_pdf_default_path_is_in_the_case(tmp_path: Path) -> None:
    case = make_full_case(make_hostile_case(tmp_path))
    res = run_cli("report", str(case.root), "--format", "pdf")
    assert res.returncode == 0, res.stderr
    assert (case.root / "report.pdf").read_bytes()[:5] == b"%PDF-"
    assert str((case.root / "report.pdf").resolve()) in res.stdout + res.stderr


def test_no_browser_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ToolMissingError, match="no headless Chromium"):
        print_pdf("<p>x</p>", tmp_path / "x.pdf", browsers=("ckptrescue-no-such-browser",))
    case = make_hostile_case(tmp_path)
    empty = tmp_path / "bin"
    empty.mkdir()
    res = run_cli("report", str(case.root), "-f", "pdf", "-o", str(tmp_path / "r.pdf"),
                  env_extra={"PATH": str(empty)})
    assert res.returncode == 4 and "no headless Chromium" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "r.pdf").exists()


def test_a_browser_that_writes_no_pdf_is_an_error_not_an_empty_file(tmp_path: Path) -> None:
    """A 'chromium' that exits 0 and writes nothing (or garbage) is caught."""
    fake = tmp_path / "bin" / "chromium"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nfor a in \"$@\"; do case $a in --print-to-pdf=*) "
                    "echo not-a-pdf > \"${a#--print-to-pdf=}\";; esac; done\nexit 0\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    case = make_hostile_case(tmp_path)
    out = tmp_path / "r.pdf"
    res = run_cli("report", str(case.root), "-f", "pdf", "-o", str(out),
                  env_extra={"PATH": f"{fake.parent}{os.pathsep}/usr/bin:/bin"})
    assert res.returncode == 4 and "Chromium wrote no PDF" in res.stderr, res.stderr
    assert not out.exists()
