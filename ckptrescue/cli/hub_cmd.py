"""``ckptrescue hub verify``: the Hugging Face hub cache checked offline (issue #31), generated
from the hub.verify action; its text is ``datasets/render.py``'s."""

from __future__ import annotations

import typer

from ckptrescue.cli.from_action import Command, add_command, add_group, renders
from ckptrescue.datasets import render

HUB_HELP = "The Hugging Face hub cache, verified offline."


def register(app: typer.Typer) -> None:
    hub_app = add_group(app, "hub", HUB_HELP)
    add_command(hub_app, "verify", Command(  # --cache DIR: the old spelling
        "hub.verify", renders(render.hub_verify), optional=("cache",),
        deprecated={"--cache": "cache"}))
