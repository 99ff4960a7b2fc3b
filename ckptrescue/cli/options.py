"""Shared ``Annotated`` option aliases."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

CaseDirOpt = Annotated[
    Path, typer.Option("--case", help="Case directory (audit log, artifacts, evidence inventory).")
]
OptionalCaseOpt = Annotated[
    Path | None,
    typer.Option("--case", help="Case directory; when given, everything is recorded in it."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]
