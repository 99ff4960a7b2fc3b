"""``ckptrescue exec --case DIR -- CMD ARGS...``: an ad-hoc read-only command, generated from the
``exec`` action (a one-step plan on the engine, recorded like any playbook step)."""

from __future__ import annotations

import sys
from typing import Any

import typer

from ckptrescue.cli.from_action import CASE, JSON, Command, StepResult, add_command
from ckptrescue.cli.output import emit_json
from ckptrescue.engine.action import ActionArgs, ArgSpec
from ckptrescue.engine.outputs import ExecOutput
from ckptrescue.errors import ExitCode


def dry_run(args: ActionArgs, options: dict[str, Any], plan: Any) -> int | None:
    """``--dry-run``: show what would run, run nothing."""
    from ckptrescue.engine import executor as engine

    if not options["dry_run"]:
        return None
    for line in engine.dry_run(plan)[0].lines:
        sys.stdout.write(f"would run: {line}\n")
    return 0


def _for(stream: Any, data: bytes) -> bytes:
    """The tool's output as written to ``stream``: on a terminal, names in it (an ``ls`` of
    evidence whose file names hold escape sequences) are shown, never obeyed — every control
    character but newline and tab made visible (``\\x1b``); into a pipe or a file, the tool's
    bytes as they are (the artifact holds them either way)."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not tty:
        return data
    from ckptrescue.display import shown_text

    return shown_text(data.decode("utf-8", "surrogateescape")).encode("utf-8")


def render_exec(result: StepResult) -> int:
    argv = list(result.args["argv"])
    if result.status == "refused":
        if result.options[JSON]:
            emit_json({"argv": argv, "refused": result.error})
        sys.stderr.write(f"ckptrescue: refused: {result.error}\n")
        return int(ExitCode.REFUSED)
    if result.status not in {"ok", "findings"}:  # timed out: nothing to show but the error
        sys.stderr.write(f"ckptrescue: error: {result.error}\n")
        return int(ExitCode.FAILURE)
    out: ExecOutput = result.out
    if result.options[JSON]:
        emit_json({"argv": argv, "returncode": out.returncode,
                   "stdout_sha256": out.stdout_sha256, "stderr_sha256": out.stderr_sha256})
    else:
        for sha, stream in ((out.stdout_sha256, sys.stdout.buffer),
                            (out.stderr_sha256, sys.stderr.buffer)):
            if sha:
                stream.write(_for(stream, result.case.read_artifact(sha)))
                stream.flush()
        sys.stderr.write(f"[ckptrescue] exit {out.returncode}; stdout artifact "
                         f"{out.stdout_sha256}\n")
        run = list(result.case.records("tool.run"))[-1:]
        if run and run[0]["details"].get("truncated"):
            sys.stderr.write("[ckptrescue] output exceeded the cap and was truncated "
                             "(the audit log records it)\n")
    return 0 if out.returncode == 0 else int(ExitCode.FINDINGS)


EXEC = Command(
    "exec", render_exec, case="required", fixed={"allow_nonzero": True},
    extras=(ArgSpec("dry_run", "boolean", default=False, help="Show what would run."),),
    order=(CASE, "argv", "timeout_s", "dry_run", JSON), before=dry_run, renders_failures=True,
    context_settings={"allow_interspersed_args": False})


def register(app: typer.Typer) -> None:
    add_command(app, "exec", EXEC)
