"""``ckptrescue exec --case DIR -- CMD ARGS...``: an ad-hoc read-only command, as a one-step plan
of the ``exec`` action on the engine (so it is recorded like any playbook step)."""

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
    from ckptrescue import engine
    from ckptrescue.case import Case
    from ckptrescue.events import StepFinished

    plan = engine.single_step("exec", {"argv": list(argv), "timeout_s": timeout,
                                       "allow_nonzero": True})
    if dry_run:
        for line in engine.dry_run(plan)[0].lines:
            sys.stdout.write(f"would run: {line}\n")
        return 0
    case = Case.open(case_dir)
    events = list(engine.run(plan, case=case))  # to the end: the run is recorded as finished
    finished = next(e for e in events if isinstance(e, StepFinished))
    if finished.status == "refused":
        if as_json:
            emit_json({"argv": list(argv), "refused": finished.error})
        sys.stderr.write(f"ckptrescue: refused: {finished.error}\n")
        return int(ExitCode.REFUSED)
    out = finished.outputs
    if finished.status == "failed" and not out:
        sys.stderr.write(f"ckptrescue: error: {finished.error}\n")
        return int(ExitCode.FAILURE)
    if as_json:
        emit_json({"argv": list(argv), "returncode": out.get("returncode"),
                   "stdout_sha256": out.get("stdout_sha256"),
                   "stderr_sha256": out.get("stderr_sha256")})
    else:
        for key, stream in (("stdout_sha256", sys.stdout.buffer), ("stderr_sha256",
                                                                     sys.stderr.buffer)):
            if out.get(key):
                stream.write(case.read_artifact(out[key]))
                stream.flush()
        sys.stderr.write(f"[ckptrescue] exit {out.get('returncode')}; stdout artifact "
                         f"{out.get('stdout_sha256')}\n")
        run = list(case.records("tool.run"))[-1:]
        if run and run[0]["details"].get("truncated"):
            sys.stderr.write("[ckptrescue] output exceeded the cap and was truncated "
                             "(the audit log records it)\n")
    if finished.status == "failed":
        sys.stderr.write(f"ckptrescue: {finished.error}\n")
        return int(ExitCode.FAILURE)
    return 0 if out.get("returncode") == 0 else int(ExitCode.FINDINGS)


def register(app: typer.Typer) -> None:
    app.command("exec", context_settings={"allow_interspersed_args": False})(exec_command)
