"""HTML and Markdown render the same report model: the same sections, in the same order, with
the same titles, taken from one list (``ckptrescue.report.model.SECTIONS``); hostile names
cannot add a heading or break a Markdown table."""

from __future__ import annotations

import html as htmllib
import re
from pathlib import Path

import pytest

from ckptrescue.record.case import Case
from ckptrescue.report import model as report_model
from ckptrescue.report.render import render

TEMPLATES = Path(__file__).resolve().parents[2] / "reports" / "templates"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "report.md"


def html_sections(html: str) -> list[tuple[str, str]]:
    """(anchor, title) of every ``<section id=...><h2>...</h2>`` in order."""
    found = re.findall(r'<section id="([^"]*)">\s*<h2>(.*?)</h2>', html, re.S)
    assert len(found) == html.count("<h2>"), "an <h2> outside a section"
    return [(anchor, " ".join(htmllib.unescape(title).split())) for anchor, title in found]


def md_titles(md: str) -> list[str]:
    return [line[3:].strip() for line in md.splitlines() if line.startswith("## ")]


def expected(case: Case) -> list[report_model.Section]:
    return [s for s in report_model.sections(report_model.build(case)) if s.shown]


def test_full_case_same_sections_in_both_formats(full_case: Case) -> None:
    model = report_model.build(full_case)
    sections = report_model.sections(model)
    # the fixture is realistic enough that every section has something to show
    assert all(s.has_content for s in sections), [s.name for s in sections if not s.has_content]
    html, md = render(full_case, "html"), render(full_case, "md")
    titles = [s.title for s in sections]
    assert [t for _, t in html_sections(html)] == titles
    assert md_titles(md) == titles
    assert [a for a, _ in html_sections(html)] == [s.anchor for s in sections]
    assert {"Salvage", "Object store", "Kernel-enforced guarantees"} <= set(titles)
    assert "Commands run (1) and refused (1)" in titles
    # the model's list is in the JSON report too
    assert model["sections"] == [s.to_json() for s in sections]


def test_bare_case_same_sections_in_both_formats(case: Case) -> None:
    shown = expected(case)
    names = [s.name for s in shown]
    assert "salvage" not in names and "s3" not in names and "checkpoints" not in names
    titles = [s.title for s in shown]
    assert [t for _, t in html_sections(render(case, "html"))] == titles
    assert md_titles(render(case, "md")) == titles


def test_every_section_with_content_appears_in_both(hostile_case: Case) -> None:
    model = report_model.build(hostile_case)
    with_content = [s.title for s in report_model.sections(model) if s.has_content]
    html_t = [t for _, t in html_sections(render(hostile_case, "html"))]
    md_t = md_titles(render(hostile_case, "md"))
    assert html_t == md_t
    for title in with_content:
        assert title in html_t and title in md_t, title


@pytest.mark.parametrize("name", ["report.html.j2", "report.md.j2"])
def test_each_template_has_one_branch_per_section_in_model_order(name: str) -> None:
    source = (TEMPLATES / name).read_text()
    branches = re.findall(r'\{% (?:el)?if s\.name == "([a-z0-9_]+)" %\}', source)
    assert branches == [n for n, *_ in report_model.SECTIONS]
    assert "unknown_section(s.name)" in source
    # titles come from the model only: no hand-written section heading
    heading = r"<h2>(?!\{\{ s\.title \}\})" if name.endswith("html.j2") else r"^## (?!\{\{)"
    assert not re.search(heading, source, re.M)


def test_a_section_without_a_template_branch_fails_loudly(
        case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_model, "SECTIONS",
                        (*report_model.SECTIONS, ("bogus", "Bogus", True, lambda m: True)))
    for fmt in ("html", "md"):
        with pytest.raises(ValueError, match="bogus"):
            render(case, fmt)


def test_markdown_tables_keep_their_columns_with_hostile_names(full_case: Case) -> None:
    md = render(full_case, "md")
    assert "injected heading" in md and "\n## injected" not in md
    cells = lambda line: len(re.findall(r"(?<!\\)\|", line))  # noqa: E731
    table: list[str] = []
    for line in [*md.splitlines(), ""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            assert len({cells(row) for row in table}) == 1, table
            table = []
    for line in md.splitlines():  # no value starts a line: every line is template text
        assert not line.startswith(("<", "x|y", "| a | b")), line


def test_docs_list_the_sections() -> None:
    text = DOCS.read_text()
    listed = re.findall(r"^\| \d+ \| (.+?) \| `([a-z0-9_]+)` \|", text, re.M)
    assert [n for _, n in listed] == [n for n, *_ in report_model.SECTIONS]
    titles = [t.replace("N", "{commands}", 1).replace("N", "{refusals}", 1)
              for t, _ in listed]
    assert titles == [t for _, t, *_ in report_model.SECTIONS]


def test_markdown_text_cannot_form_a_link_or_break_a_table() -> None:
    from ckptrescue.report.render import _md_text

    text = _md_text("[click](http://x) | `code`\n## heading <b>")
    assert "](" not in text.replace("\\]", "")  # no unescaped link syntax survives
    assert "\\[" in text and "\\|" in text and "`" not in text and "\n" not in text
    assert "<b>" not in text


def test_new_sections_show_what_a_responder_acts_on(full_case: Case) -> None:
    html, md = render(full_case, "html"), render(full_case, "md")
    # the pointer fix, spelled out, and the bad rank named
    assert "write <code>global_step2</code>" in " ".join(html.split())
    assert "`global_step2` into it" in md and "zero_pp_rank_1_" in md
    # the spot check marks the value that drove the flag, in both formats
    assert 'class="mono marked"' in html and "empty" in html
    assert "** (empty)" in md
    # the training-state finding and the frozen tensor
    assert "TS001" in html and "TS001" in md and ">yes<" in html
    assert "&lt;script&gt;" in html and "<script>alert" not in html


def test_markdown_findings_each_on_its_own_line(full_case: Case) -> None:
    """Found by a responder reading report.md: every finding after the first of an item, and
    the next item's heading, ran on in one line (``…@ 4758528+1024### E002 — image``)."""
    from cli_helpers import invoke

    r = invoke("report", str(full_case.root), "-f", "md", "-o", "-")
    assert r.returncode == 0, r.stderr
    section = r.stdout.split("\n## Findings\n", 1)[1].split("\n## ", 1)[0]
    severities = ("**info**", "**warning**", "**error**", "**critical**")
    recorded = [f for g in report_model.build(full_case)["findings_grouped"]
                for o in g["objects"] for f in o["findings"]]
    finding_lines = [ln for ln in section.splitlines() if ln.startswith("  - **")]
    assert len(finding_lines) == len(recorded)
    for line in section.splitlines():
        assert "###" not in line or line.startswith("### "), line
        assert sum(line.count(f"- {s}") for s in severities) <= 1, line
