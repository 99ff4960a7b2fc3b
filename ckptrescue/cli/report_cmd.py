"""``ckptrescue report CASE_DIR [--format html|md|json|case-uco|timeline|timeline-csv] [-o FILE]``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ckptrescue.cli.output import info

if TYPE_CHECKING:
    from ckptrescue.record.case import Case


def report(
    case_dir: Annotated[Path, typer.Argument(help="Case directory.")],
    fmt: Annotated[str, typer.Option(
        "--format", "-f", help="html, md, json or pdf (the report; pdf is printed by headless "
        "Chromium, default CASE/report.pdf); case-uco (CASE/UCO 1.5 JSON-LD "
        "of the case); timeline or timeline-csv (Timesketch JSONL / CSV).")] = "html",
    out: Annotated[Path | None, typer.Option("-o", "--output",
                                             help="Output file ('-' for stdout).")] = None,
) -> None:
    """Render the incident report from the case alone (nothing is re-run).

    The HTML report is one self-contained file (inline CSS and SVG, nothing fetched).
    case-uco and timeline hand the case to other responders' tools (docs/exports.md): the
    investigation, evidence with hashes, provenance, actions and findings as CASE/UCO; the
    kit's actions, kernel/journal lines, S3 versions and CloudTrail events on one time axis
    for Timesketch. The hash-chained audit log stays the source of truth for both.

    Example:

        ckptrescue report /cases/INC-042 --format html -o /cases/INC-042/report.html
    """
    from ckptrescue.record.case import Case
    from ckptrescue.report.render import check_output, render

    case = Case.open(case_dir)
    if fmt == "pdf":
        from ckptrescue.report.render import write

        written = write(case, case.root / "report.pdf" if out is None or str(out) == "-"
                        else out, "pdf")
        info(f"report written: {written.resolve()}")
        return
    if out is not None and str(out) != "-":
        check_output(case, out)
    text = _export(case, fmt) if fmt in EXPORTS else render(case, fmt)
    if out is None or str(out) == "-":
        sys.stdout.write(text)
        return
    from ckptrescue.effects import beneath

    beneath.write_text(out.parent, out, text)  # a name planted at OUT is replaced, not followed
    info(f"report written: {out.resolve()}")


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
