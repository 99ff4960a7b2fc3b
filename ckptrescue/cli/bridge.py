"""How a direct CLI command drives the engine: a one-step plan of the matching action.

``run_action`` runs the step in the case (``step.started``/``step.finished`` audit records,
outputs as artifacts, like any playbook step), prints progress on stderr, re-raises the step's
own error (so exit codes stay right), and returns the library's result object for rendering.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ckptrescue.errors import ExitCode, ToolFailedError

if TYPE_CHECKING:
    from ckptrescue.case import Case


class StepFailedError(ToolFailedError):
    """A step ended failed without a more specific error."""


def run_action(action: str, args: dict[str, Any], *, case: Case, quiet: bool = False) -> Any:
    from ckptrescue import engine
    from ckptrescue.cli.render import EventPrinter
    from ckptrescue.events import StepFinished, StepProgress

    plan = engine.single_step(action, {k: v for k, v in args.items() if v is not None})
    step_id = plan.playbook.steps[0].id
    native: dict[str, Any] = {}
    printer = EventPrinter()
    finished: StepFinished | None = None
    for event in engine.run(plan, case=case, native=native, resume=False):
        if isinstance(event, StepProgress) and not quiet:
            printer(event)
        if isinstance(event, StepFinished):
            finished = event
    error = native.get(f"{step_id}!error")
    if error is not None:
        raise error
    if step_id not in native:
        message = finished.error if finished and finished.error else f"{action} failed"
        exc = StepFailedError(message)
        if finished is not None and finished.status == "cancelled":
            exc.exit_code = ExitCode.INTERRUPT
        raise exc
    return native[step_id]
