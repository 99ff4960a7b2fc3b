"""``ckptrescue hub verify``: the Hugging Face hub cache checked offline (issue #31), generated
from the hub.verify action; its text is ``datasets/render.py``'s."""

from __future__ import annotations

import typer

from ckptrescue.cli.from_action import Command, add_command, renders
from ckptrescue.datasets import render

hub_app = typer.Typer(help="The Hugging Face hub cache, verified offline.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    add_command(hub_app, "verify", Command(  # --cache DIR: the old spelling
        "hub.verify", renders(render.hub_verify), optional=("cache",),
        deprecated={"--cache": "cache"}))
    app.add_typer(hub_app, name="hub")
