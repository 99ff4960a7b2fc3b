"""``ckptrescue report CASE_DIR [--format html|md|json] [-o FILE]``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ckptrescue.cli.output import info


def report(
    case_dir: Annotated[Path, typer.Argument(help="Case directory.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="html, md or json.")] = "html",
    out: Annotated[Path | None, typer.Option("-o", "--output",
                                             help="Output file ('-' for stdout).")] = None,
) -> None:
    """Render the incident report from the case alone (nothing is re-run).

    The HTML report is one self-contained file (inline CSS and SVG, nothing fetched).

    Example:

        ckptrescue report /cases/INC-042 --format html -o /cases/INC-042/report.html
    """
    from ckptrescue.case import Case
    from ckptrescue.report.render import check_output, render

    case = Case.open(case_dir)
    if out is not None and str(out) != "-":
        check_output(case, out)
    text = render(case, fmt)
    if out is None or str(out) == "-":
        sys.stdout.write(text)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    info(f"report written: {out.resolve()}")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
