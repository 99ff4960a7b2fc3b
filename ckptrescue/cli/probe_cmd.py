"""``ckptrescue probe | salvage | rank``: generated from the checkpoint wing's actions; their
text and exit codes are ``checkpoints/render.py``'s, this module only registers them."""

from __future__ import annotations

import typer

from ckptrescue.checkpoints import render
from ckptrescue.checkpoints.outputs import SalvageOutput
from ckptrescue.cli.from_action import CASE, JSON, Command, StepResult, add_command, renders
from ckptrescue.cli.output import show


def render_salvage(result: StepResult) -> int:
    out: SalvageOutput = result.out
    record = out.salvaged[0]
    return show(render.salvage(record), json=result.options[JSON],
                data=SalvageOutput.public_record(record))


COMMANDS = {
    "probe": Command("probe", renders(render.probe)),
    "salvage": Command("salvage", render_salvage),
    # a one-step run has no probe step: rank records the probe findings itself
    "rank": Command("rank", renders(render.rank),
                    order=("run_dir", CASE, "load", "jobs", "scheduler", "endpoint_url", "eval",
                           "eval_min", "eval_max", "eval_timeout", "eval_memory_mb",
                           "eval_metric_regex", JSON)),
}


def register(app: typer.Typer) -> None:
    for name, command in COMMANDS.items():
        add_command(app, name, command)
