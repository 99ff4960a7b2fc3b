"""``ckptrescue trainstate`` and ``ckptrescue gate``: generated from their actions; this module
registers them; their text and exit codes are ``datasets/render.py``'s."""

from __future__ import annotations

import typer

from ckptrescue.cli.from_action import Command, add_command, renders
from ckptrescue.datasets import render


def register(app: typer.Typer) -> None:
    add_command(app, "trainstate", Command("trainstate", renders(render.trainstate)))
    add_command(app, "gate", Command("gate", renders(render.gate)))
