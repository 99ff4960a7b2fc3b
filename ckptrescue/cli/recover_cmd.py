"""``ckptrescue recover``: bring back verified versions of damaged files, generated from the
recover action; its text is ``datasets/render.py``'s. Results go to stdout."""

from __future__ import annotations

import typer

from ckptrescue.cli.from_action import Command, add_command, renders
from ckptrescue.datasets import render

RECOVER = Command("recover", renders(render.recover))


def register(app: typer.Typer) -> None:
    add_command(app, "recover", RECOVER)
