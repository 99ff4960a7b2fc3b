"""``ckptrescue exec --case DIR -- CMD ARGS...``: an ad-hoc read-only command through the runner."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ckptrescue.cli.options import CaseDirOpt, JsonOpt
from ckptrescue.cli.output import emit_json
from ckptrescue.errors import ExitCode


def exec_command(
    case_dir: CaseDirOpt,
    argv: Annotated[list[str], typer.Argument(help="The command and its arguments (after --).")],
    timeout: Annotated[float, typer.Option("--timeout", help="Time limit in seconds.")] = 600.0,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would run.")] = False,
    as_json: JsonOpt = False,
) -> int:
    """Run one allowlisted read-only command through the guarded runner, recorded in the case.

    Its stdout and stderr become artifacts whose SHA-256 the audit log records. A refused
    command exits 3 with a one-line reason (also in the audit log).

    Example:

        ckptrescue exec --case C -- xfs_db -r -c "sb 0" -c print disk.img
    """
    from ckptrescue.case import Case
    from ckptrescue.effects.runner import SubprocessRunner, ToolCall

    case = Case.open(case_dir)
    runner = SubprocessRunner(case, dry_run=dry_run)
    result = runner.run(ToolCall(argv=tuple(argv), timeout_s=timeout, purpose="exec"))
    if as_json:
        emit_json(result.to_json())
    if result.refused:
        sys.stderr.write(f"ckptrescue: refused: {result.refused}\n")
        return int(ExitCode.REFUSED)
    if result.dry_run:
        if not as_json:
            sys.stdout.write("would run: " + " ".join(result.argv) + "\n")
        return 0
    if not as_json:
        sys.stdout.buffer.write(result.stdout_bytes)
        sys.stderr.buffer.write(result.stderr_bytes)
        sys.stdout.flush()
        sys.stderr.write(
            f"[ckptrescue] exit {result.returncode}; stdout artifact {result.stdout_sha256}\n"
        )
    if result.timed_out:
        sys.stderr.write(f"ckptrescue: {argv[0]} timed out after {timeout}s and was killed\n")
        return int(ExitCode.FAILURE)
    return 0 if result.returncode == 0 else int(ExitCode.FINDINGS)


def register(app: typer.Typer) -> None:
    app.command("exec", context_settings={"allow_interspersed_args": False})(exec_command)
