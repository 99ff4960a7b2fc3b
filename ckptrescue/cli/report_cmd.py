"""``ckptrescue report CASE_DIR [--format html|md|json|case-uco|timeline|timeline-csv] [-o FILE]``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ckptrescue.cli.output import say

if TYPE_CHECKING:
    from ckptrescue.record.case import Case


def report(
    case_dir: Annotated[Path, typer.Argument(help="Case directory.")],
    fmt: Annotated[str, typer.Option(
        "--format", "-f", help="html, md, json or pdf (the report; pdf is printed by headless "
        "Chromium, default CASE/report.pdf); case-uco (CASE/UCO 1.5 JSON-LD "
        "of the case); timeline or timeline-csv (Timesketch JSONL / CSV).")] = "html",
    out: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Output file ('-' for stdout). Default: CASE/report.html "
        "(report.md, report.json, case-uco.jsonld, timeline.jsonl, timeline.csv).")] = None,
) -> None:
    """Render the incident report from the case alone (nothing is re-run).

    Writes CASE/report.html (or -o FILE) and prints the path it wrote; -o - prints the report
    on stdout instead. The HTML report is one self-contained file (inline CSS and SVG, nothing
    fetched). case-uco and timeline hand the case to other responders' tools
    (docs/exports.md): the investigation, evidence with hashes, provenance, actions and
    findings as CASE/UCO; the kit's actions, kernel/journal lines, S3 versions and CloudTrail
    events on one time axis for Timesketch. The hash-chained audit log stays the source of
    truth for both.

    Examples:

    \b
        ckptrescue report /cases/INC-042
        ckptrescue report /cases/INC-042 --format md -o -
    """
    from ckptrescue.record.case import Case
    from ckptrescue.report.render import check_output, render

    case = Case.open(case_dir)
    if fmt == "pdf":
        from ckptrescue.report.render import write

        written = write(case, case.root / "report.pdf" if out is None or str(out) == "-"
                        else out, "pdf")
        say(str(written.absolute()))  # the result: where the report is
        return
    if out is None:
        out = case.root / DEFAULT_NAMES.get(fmt, f"report.{fmt}")
    if str(out) != "-":
        check_output(case, out)
    text = _export(case, fmt) if fmt in EXPORTS else render(case, fmt)
    if str(out) == "-":
        sys.stdout.write(text)
        return
    from ckptrescue.effects import beneath

    beneath.replace_output(out, text)
    say(str(out.absolute()))  # the result: where the report is


DEFAULT_NAMES = {"html": "report.html", "md": "report.md", "json": "report.json",
                 "case-uco": "case-uco.jsonld", "timeline": "timeline.jsonl",
                 "timeline-csv": "timeline.csv"}
EXPORTS = ("case-uco", "timeline", "timeline-csv")


def _export(case: Case, fmt: str) -> str:
    import tempfile

    if fmt == "case-uco":
        from ckptrescue.exports.case_uco import dumps, export_case_uco

        return dumps(export_case_uco(case))
    from ckptrescue.exports.timeline import (
        timeline_events,
        write_timesketch_csv,
        write_timesketch_jsonl,
    )

    writer = write_timesketch_csv if fmt == "timeline-csv" else write_timesketch_jsonl
    with tempfile.TemporaryDirectory(prefix="ckptrescue-timeline-") as tmp:
        path = Path(tmp) / "timeline"
        writer(timeline_events(case), path)
        return path.read_text(encoding="utf-8")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
