"""``ckptrescue tui [--case DIR [--new]] [--cases-root DIR]``: the guided incident cockpit
(Textual)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def tui(
    case_dir: Annotated[Path | None, typer.Option(
        "--case", help="Open this case directory (it must be one; with --new, create it).")]
    = None,
    new: Annotated[bool, typer.Option(
        "--new", help="Create the --case directory as a new case (it must not exist yet, or "
        "be empty).")] = False,
    cases_root: Annotated[Path | None, typer.Option(
        "--cases-root", help="Directory whose case folders the start screen lists.")] = None,
    title: Annotated[str, typer.Option("--title", help="Title for a new case.")] = "",
) -> int:
    """Guided TUI: what happened -> playbook -> evidence -> plan -> run -> findings -> report.

    A view over the same engine and playbooks as `playbook run`; it runs nothing on its own.
    Keys are shown at the bottom; ctrl+p opens the command palette; ctrl+q quits.

    A mistyped --case is refused rather than made into a new case: add --new to create one.

    Examples:

    \b
        ckptrescue tui --case /cases/INC-042
        ckptrescue tui --case /cases/INC-043 --new --title "run 8 loss spike"
    """
    from ckptrescue.errors import UsageError
    from ckptrescue.record.case import Case

    case = None
    if new and case_dir is None:
        raise UsageError("--new creates the --case directory: give --case DIR")
    if case_dir is not None:
        case = Case.create(case_dir, title=title) if new else Case.open(case_dir)
    from ckptrescue import imports_kept

    with imports_kept():
        from ckptrescue.tui.app import make_app

    app = make_app(case, cases_root=cases_root)
    app.run()
    code = app.return_code or 0
    if code:  # Textual printed the traceback: a crash must never look like success
        from ckptrescue.cli.output import info

        info(f"ckptrescue: the TUI stopped on an error (exit {code}); the case is unchanged "
             "by the crash: reopen it with ckptrescue tui --case")
    return int(code)


def register(app: typer.Typer) -> None:
    app.command("tui")(tui)
