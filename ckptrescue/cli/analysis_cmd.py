"""``ckptrescue trainstate`` and ``ckptrescue gate``: generated from their actions; this module
only says how each shows its step's outputs and which exit code it gives."""

from __future__ import annotations

import typer

from ckptrescue.cli.from_action import Command, StepResult, add_command
from ckptrescue.cli.output import emit_json, say
from ckptrescue.datasets.outputs import GateOutput, TrainStateOutput
from ckptrescue.errors import ExitCode


def render_trainstate(result: StepResult) -> int:
    out: TrainStateOutput = result.out
    if result.options["json"]:
        emit_json(result.outputs)
    else:
        for c in out.checkpoints:
            say(f"{c['step']!s:>10}  {str(c['verdict']).upper():<10} {c['path']}")
        for f in out.findings:
            say(f"[{f['code']}] {f['title']}")
        say(out.answer)
    return int(ExitCode.FINDINGS if out.findings else ExitCode.OK)


def render_gate(result: StepResult) -> int:
    out: GateOutput = result.out
    if result.options["json"]:
        emit_json(result.outputs)
    else:
        for p in out.problems[:50]:
            say(f"    {p['path']}: {p['problem']}" + (f" ({p['finding']})"
                                                      if p.get("finding") else ""))
        if len(out.problems) > 50:
            say(f"    ... (+{len(out.problems) - 50})")
        say(("PASS: " if out.passed else "FAIL: ") + out.reason)
    return int(ExitCode.OK if out.passed else ExitCode.FINDINGS)


def register(app: typer.Typer) -> None:
    add_command(app, "trainstate", Command("trainstate", render_trainstate))
    add_command(app, "gate", Command("gate", render_gate))
