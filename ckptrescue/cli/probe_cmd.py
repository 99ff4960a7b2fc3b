"""``ckptrescue probe | salvage | rank``: generated from the checkpoint wing's actions; their
text and exit codes are ``checkpoints/render.py``'s, this module only registers them."""

from __future__ import annotations

import typer

from ckptrescue.checkpoints import render
from ckptrescue.checkpoints.outputs import ProbeOutput, RankOutput, SalvageOutput
from ckptrescue.cli.from_action import CASE, JSON, Command, StepResult, add_command
from ckptrescue.cli.output import show


def render_probe(result: StepResult) -> int:
    out: ProbeOutput = result.out
    return show(render.probe(out), json=result.options[JSON], data=result.outputs)


def render_salvage(result: StepResult) -> int:
    out: SalvageOutput = result.out
    record = out.salvaged[0]
    return show(render.salvage(record), json=result.options[JSON],
                data=SalvageOutput.public_record(record))


def render_rank(result: StepResult) -> int:
    out: RankOutput = result.out
    return show(render.rank(out), json=result.options[JSON], data=result.outputs)


COMMANDS = {
    "probe": Command("probe", render_probe),
    "salvage": Command("salvage", render_salvage),
    # a one-step run has no probe step: rank records the probe findings itself
    "rank": Command("rank", render_rank, order=("run_dir", CASE, "load", "jobs", "scheduler",
                                               "endpoint_url", "eval", "eval_min", "eval_max",
                                               "eval_timeout", "eval_memory_mb",
                                               "eval_metric_regex", JSON)),
}


def register(app: typer.Typer) -> None:
    for name, command in COMMANDS.items():
        add_command(app, name, command)
