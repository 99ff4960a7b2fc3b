"""``ckptrescue resume ...``: what a run needs to resume that no loader tells it (issue #31),
generated from the resume.* actions; their text is ``checkpoints/render.py``'s."""

from __future__ import annotations

import typer

from ckptrescue.checkpoints import render
from ckptrescue.cli.from_action import Command, add_command, add_group, renders

RESUME_HELP = ("What a run needs to resume that no loader tells it: the exact "
               "safe-globals list, key mismatches, missing ranks, world size, "
               "replicas.")


def register(app: typer.Typer) -> None:
    resume_app = add_group(app, "resume", RESUME_HELP)
    add_command(resume_app, "safe-globals",
                Command("resume.safe_globals", renders(render.safe_globals)))
    add_command(resume_app, "keys", Command("resume.keys", renders(render.keys)))
    add_command(resume_app, "reassemble",
                Command("resume.reassemble", renders(render.reassemble)))
    add_command(resume_app, "world-size",
                Command("resume.world_size", renders(render.world_size)))
    add_command(resume_app, "replicas", Command(  # --replica DIR (repeated): the old spelling
        "resume.replicas", renders(render.replicas), optional=("replicas",),
        deprecated={"--replica": "replicas"}))
