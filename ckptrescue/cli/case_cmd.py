"""``ckptrescue case new|show|verify|seal``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ckptrescue.cli.options import JsonOpt
from ckptrescue.cli.output import emit_json, say
from ckptrescue.errors import ExitCode

case_app = typer.Typer(help="Create, inspect, verify and seal case directories.",
                       no_args_is_help=True)

CaseArg = Annotated[Path, typer.Argument(help="Case directory.")]


@case_app.command("new")
def new(
    case_dir: CaseArg,
    title: Annotated[str, typer.Option("--title", help="Incident title.")] = "",
    examiner: Annotated[str, typer.Option("--examiner", help="Who examines.")] = "",
    as_json: JsonOpt = False,
) -> None:
    """Create a case: manifest, empty evidence inventory, artifacts/ and the audit log.

    Example:

        ckptrescue case new /cases/INC-042 --title "run 7 will not resume" --examiner alice
    """
    from ckptrescue.record.case import Case

    case = Case.create(case_dir, title=title, examiner=examiner)
    if as_json:
        emit_json(case.summary())
    else:
        say(f"case {case.manifest['id']} created in {case_dir}")


@case_app.command("show")
def show(case_dir: CaseArg, as_json: JsonOpt = False) -> None:
    """Show a case's manifest, evidence, findings and audit-log head.

    Example:

        ckptrescue case show /cases/INC-042 --json
    """
    from ckptrescue.record.case import Case

    summary = Case.open(case_dir).summary()
    if as_json:
        emit_json(summary)
        return
    m = summary["manifest"]
    say(f"case      {m['id']}  {m.get('title') or '(untitled)'}")
    say(f"examiner  {m.get('examiner') or '-'}   created {m['created']} on {m['host']}")
    say(f"records   {summary['records']}   head {summary['head']}")
    say(f"sealed    {'yes' if summary['sealed'] else 'no'}   artifacts {summary['artifacts']}")
    say(f"evidence  {len(summary['evidence'])} item(s)")
    for item in summary["evidence"]:
        say(f"  {item['id']}  {item['kind']:<12} {item['source']}  sha256={item['sha256']}")
    f = summary["findings"]
    say(f"findings  {f['total']}  " + ", ".join(f"{k}={v}" for k, v in f["by_severity"].items()))


@case_app.command("verify")
def verify(
    case_dir: CaseArg,
    expect_head: Annotated[
        str | None, typer.Option("--expect-head", help="Head hash printed by `case seal`.")
    ] = None,
    as_json: JsonOpt = False,
) -> int:
    """Verify the audit chain, every record hash, and every artifact against its name.

    Exit 0 when intact; 1 naming the first broken record or the bad artifact.

    Example:

        ckptrescue case verify /cases/INC-042 --expect-head 3f1c...e9
    """
    from ckptrescue.record.case import Case

    report = Case.open(case_dir).verify(expect_head=expect_head)
    if as_json:
        emit_json(report.to_json())
    else:
        if report.ok:
            say(f"OK: {len(report.chain.records)} records, chain intact, "
                f"{report.artifacts_checked} artifacts verified; head {report.chain.head}")
        else:
            for problem in report.all_problems:
                say(f"BROKEN: {problem}")
        for note in report.chain.notes + report.notes:
            say(f"note: {note}")
    return int(ExitCode.OK if report.ok else ExitCode.FINDINGS)


@case_app.command("seal")
def seal(case_dir: CaseArg, as_json: JsonOpt = False) -> None:
    """Seal the case: record a final seal and print the head hash to keep out of band.

    Example:

        ckptrescue case seal /cases/INC-042
    """
    from ckptrescue.record.case import Case

    head = Case.open(case_dir).seal()
    if as_json:
        emit_json({"head": head})
    else:
        say(head)


def register(app: typer.Typer) -> None:
    app.add_typer(case_app, name="case")
