"""``ckptrescue recover``: bring back verified versions of damaged files, generated from the
recover action. Results go to stdout."""

from __future__ import annotations

import typer

from ckptrescue.cli.from_action import JSON, Command, StepResult, add_command
from ckptrescue.cli.output import emit_json, say
from ckptrescue.datasets.outputs import RecoverOutput
from ckptrescue.errors import ExitCode


def _display(path: str) -> str:
    from ckptrescue.datasets.walk import display, from_json_path

    return display(from_json_path(path))


def recover_lines(out: RecoverOutput) -> list[str]:
    lines = []
    for r in out.files:
        if r["status"] == "recovered":
            lines.append(f"RECOVERED     {_display(r['path'])}  ({r['damage']}) from "
                         f"{r['source']}")
        else:
            lines.append(f"UNRECOVERABLE {_display(r['path'])}  ({r['damage']}): {r['reason']}")
    for left in out.clean_view_left_out:
        lines.append(f"LEFT OUT      {_display(left['path'])}: {left['reason']}")
    if out.plan_file:
        lines.append(f"plan:       {out.plan_file} ({len(out.plan)} replacement(s))")
        script = out.plan_script
        lines.append(f"script:     {script} (review it, then: bash {script} [DATASET-ROOT]; "
                     "the kit never runs it)")
    if out.clean_view:
        lines.append(f"clean view: {out.clean_view} ({out.clean_view_files} "
                     f"verified file(s); manifest {out.clean_view_manifest})")
    return lines


def render_recover(result: StepResult) -> int:
    out: RecoverOutput = result.out
    if result.options[JSON]:
        emit_json(result.outputs)
    else:
        for line in recover_lines(out):
            say(line)
        say(out.answer)
    return int(ExitCode.OK if out.ok else ExitCode.FINDINGS)


RECOVER = Command("recover", render_recover)


def register(app: typer.Typer) -> None:
    add_command(app, "recover", RECOVER)
