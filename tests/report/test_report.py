"""The incident report: rendered from the case alone, self-contained, hostile names escaped,
deterministic apart from its generation time; checked in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_helpers import invoke

from ckptrescue.record.case import Case
from ckptrescue.report.render import render

EVIL = "<script>alert(1)</script>"  # as in conftest.py's hostile_case


def test_html_escapes_hostile_names_and_is_self_contained(hostile_case: Case) -> None:
    html = render(hostile_case, "html")
    assert EVIL not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert not re.search(r"<(script|link|img|iframe)\b", html, re.I)
    assert "http://" not in html.replace('http://www.w3.org/2000/svg', "")
    assert "resume from step-300.pt" in html
    assert "<svg" in html and "data-testid=\"bad-sector-map\"" in html


def test_same_case_same_report_apart_from_generation_time(hostile_case: Case) -> None:
    strip = lambda s: re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", "T", s)  # noqa: E731
    a, b = render(hostile_case, "html"), render(hostile_case, "html")
    assert strip(a) == strip(b)
    assert json.loads(render(hostile_case, "json"))["answer"].startswith("resume from")


def test_markdown_rendering_has_no_live_html(hostile_case: Case) -> None:
    md = render(hostile_case, "md")
    assert "<script>" not in md
    assert "resume from step-300.pt" in md
    assert "| [8192, 9216) |" in md


def test_report_needs_no_rerun_and_does_not_change_the_case(hostile_case: Case) -> None:
    before = hostile_case.audit.path.read_bytes()
    render(hostile_case, "html")
    assert hostile_case.audit.path.read_bytes() == before


@pytest.mark.needs_tool("chromium")
def test_html_in_headless_chromium(hostile_case: Case, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    res = invoke("report", str(hostile_case.root), "-o", str(out))
    assert res.returncode == 0, res.stderr
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'chrome'}"]
    chromium = shutil.which("chromium")
    assert chromium
    dom = subprocess.run([chromium, *flags, "--dump-dom", out.as_uri()], capture_output=True,
                         text=True, timeout=120).stdout
    assert 'data-testid="answer"' in dom and "resume from step-300.pt" in dom
    assert dom.count("<tr>") > 8  # the tables were built
    assert "alert(1)" in dom and "<script>alert" not in dom  # shown as text, never run
    png = tmp_path / "report.png"
    subprocess.run([chromium, *flags, f"--screenshot={png}", "--window-size=1200,1800",
                    out.as_uri()], capture_output=True, timeout=120, check=False)
    assert png.exists() and png.stat().st_size > 10_000


def test_report_refuses_to_overwrite_evidence_or_case_records(hostile_case: Case,
                                                              tmp_path: Path) -> None:
    evidence = tmp_path / "disk.img"
    evidence.write_bytes(b"evidence")
    hostile_case.add_evidence(kind="image", source=str(evidence), acquired_how="test")
    for target in (evidence, hostile_case.root / "audit.jsonl"):
        res = invoke("report", str(hostile_case.root), "-o", str(target))
        assert res.returncode == 3 and "report:" in res.stderr
    assert evidence.read_bytes() == b"evidence"
    assert hostile_case.verify().ok
