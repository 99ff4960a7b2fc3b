"""The one engine: runs a plan of built-in actions and emits events.

The CLI, the TUI and playbooks all drive :func:`run`; none of them runs tools on its own. Every
step's start and end are audit records (``step.started`` / ``step.finished``) carrying the run
key, so an interrupted run (Ctrl-C, SIGKILL) resumes from the case's own log with the same command
and does not repeat finished steps. Step outputs are stored as write-once artifacts.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.actions import ACTIONS
from ckptrescue.engine.action import ActionArgs, ActionResult, StepContext
from ckptrescue.engine.case_outputs import type_modules
from ckptrescue.engine.events import (
    Event,
    FindingEmitted,
    GateReached,
    RunFinished,
    RunStarted,
    StepFinished,
    StepSkipped,
    StepStarted,
)
from ckptrescue.errors import CkptRescueError, PlaybookError, os_error_line
from ckptrescue.model import Finding, JsonObject
from ckptrescue.playbook.schema import REF_RE, Playbook, Step
from ckptrescue.record import findings_table
from ckptrescue.record.audit import canonical
from ckptrescue.record.case import Case


@dataclass
class Plan:
    """A playbook and its parameters, ready to run; ``run_key`` names the run (the same
    playbook with the same parameters has the same key)."""

    playbook: Playbook
    params: dict[str, Any]
    run_key: str = ""
    answers_yes: bool = False
    # A playbook run resumes an unfinished earlier attempt of the same command; a one-step
    # command (``single_step``) is a new run unless the caller asks to resume.
    resumable: bool = True

    def __post_init__(self) -> None:
        if not self.run_key:
            blob = canonical({"playbook": self.playbook.digest, "params": self.params})
            self.run_key = hashlib.sha256(blob).hexdigest()[:16]


@dataclass
class DryRunStep:
    """What ``--dry-run`` shows of one step: the commands it would run and its condition."""

    step: Step
    lines: list[str] = field(default_factory=list)
    when: Any = None
    condition: str = ""           # ``when`` in words (playbook/describe.py); "" when none
    decided: bool | None = None   # what the parameters alone decide (None: the run decides)


def prepare(playbook: Playbook | str | Path, given: dict[str, Any]) -> Plan:
    """Load, lint and bind parameters; raises PlaybookError naming file and line."""
    from ckptrescue.playbook import load, params  # a playbook's, not a command's: not at start
    from ckptrescue.playbook.lint import lint

    if not isinstance(playbook, Playbook):
        playbook = load.load_file(load.resolve(str(playbook)))
    problems = lint(playbook)
    if problems:
        detail = "; ".join(str(p) for p in problems[:3])
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        raise PlaybookError(f"playbook does not lint: {detail}{more}")
    return Plan(playbook=playbook, params=params.bind(playbook, given))


def single_step(action: str, args: ActionArgs, *, step_id: str | None = None) -> Plan:
    """A one-step plan (how the CLI's direct commands drive the engine)."""
    step = Step(id=step_id or action.replace(".", "-"), action=action, args=args)
    digest = hashlib.sha256(canonical({"action": action, "args": args})).hexdigest()
    book = Playbook(name=f"cli-{action}", title=action, description="", parameters=(),
                    steps=(step,), source="<cli>", digest=digest)
    return Plan(playbook=book, params={}, resumable=False)


# ---- references -------------------------------------------------------------------------------

class _Unresolved(Exception):  # noqa: N818
    pass


def _lookup(path: str, values: dict[str, Any], outputs: dict[str, JsonObject]) -> Any:
    head, *rest = path.split(".")
    if not rest:
        if head not in values:
            raise _Unresolved(f"${head} is not a parameter")
        return values[head]
    if head not in outputs:
        raise _Unresolved(f"${{{path}}}: step {head!r} has no outputs (skipped or failed?)")
    cur: Any = outputs[head]
    for key in rest:
        if isinstance(cur, dict) and key in cur:
            cur = cur[key]
        elif isinstance(cur, list) and key.isdigit() and int(key) < len(cur):
            cur = cur[int(key)]
        else:
            raise _Unresolved(f"${{{path}}}: step {head!r} has no output {key!r}")
    return cur


def resolve(value: Any, values: dict[str, Any], outputs: dict[str, JsonObject]) -> Any:
    if isinstance(value, dict):
        return {k: resolve(v, values, outputs) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, values, outputs) for v in value]
    if not isinstance(value, str):
        return value
    whole = REF_RE.fullmatch(value)
    if whole and whole.group(0) != "$$":
        return _lookup(whole.group(1) or whole.group(2), values, outputs)

    def sub(m: Any) -> str:
        if m.group(0) == "$$":
            return "$"
        got = _lookup(m.group(1) or m.group(2), values, outputs)
        return "" if got is None else str(got)

    return REF_RE.sub(sub, value)


def evaluate_when(cond: Any, values: dict[str, Any], outputs: dict[str, JsonObject],
                  statuses: dict[str, str]) -> bool:
    if cond is None:
        return True
    if isinstance(cond, str):
        return bool(resolve(cond, values, outputs))
    (op, operand), = cond.items()
    if op == "all":
        return all(evaluate_when(c, values, outputs, statuses) for c in operand)
    if op == "any":
        return any(evaluate_when(c, values, outputs, statuses) for c in operand)
    if op == "step_status":
        return statuses.get(operand["step"], "skipped") == operand["is"]
    val = resolve(operand, values, outputs)
    if op == "truthy":
        return bool(val)
    if op == "falsy":
        return not val
    if op == "empty":
        return not val
    if op == "nonempty":
        return bool(val)
    a, b = val
    if op == "equals":
        return bool(a == b)
    if op == "not_equals":
        return bool(a != b)
    if op == "gt":
        return bool(float(a) > float(b))
    if op == "lt":
        return bool(float(a) < float(b))
    raise PlaybookError(f"unknown when operator {op}")


# ---- dry run ----------------------------------------------------------------------------------

def dry_run(plan: Plan) -> list[DryRunStep]:
    """Every step with the commands it would run (step-output references stay symbolic)."""
    from ckptrescue.playbook import describe

    actions = ACTIONS
    out: list[DryRunStep] = []
    for step in plan.playbook.steps:
        action = actions[step.action]()

        def partial(value: Any) -> Any:
            if isinstance(value, dict):
                return {k: partial(v) for k, v in value.items()}
            if isinstance(value, list):
                return [partial(v) for v in value]
            if isinstance(value, str):
                try:
                    return resolve(value, plan.params, {})
                except _Unresolved:
                    return value
            return value

        args = type(action).with_defaults(partial(step.args))
        decided = None
        if step.when is not None and not describe.depends_on_steps(step.when):
            try:
                decided = evaluate_when(step.when, plan.params, {}, {})
            except (_Unresolved, PlaybookError, TypeError, ValueError):
                decided = None
        out.append(DryRunStep(step=step, lines=action.plan(args), when=step.when,
                              condition=describe.when_text(step.when)
                              if step.when is not None else "", decided=decided))
    return out


# ---- running ----------------------------------------------------------------------------------

def finished_steps(case: Case, run_key: str) -> dict[str, JsonObject]:
    """Steps of an unfinished earlier attempt of ``run_key``: step id -> step.finished details.

    Only an attempt that did not complete (interrupted, killed, stopped at a gate, failed) is
    resumed. Once a run of the same command has completed, running it again starts afresh:
    its finished steps (a released mount, a written report) must not be taken as still valid.
    """
    done: dict[str, JsonObject] = {}
    ends = sorted([*case.records("step.finished"), *case.records("run.finished")],
                  key=lambda r: int(r["seq"]))  # read through the index, not a replay
    for record in ends:
        details = record.get("details", {})
        if details.get("run_key") != run_key:
            continue
        action = record["action"]
        if action == "run.finished" and details.get("status") in {"ok", "findings"}:
            done = {}  # that attempt completed: nothing to resume from it
        elif action == "step.finished" and details.get("status") in {"ok", "findings"}:
            done[details["step"]] = details
    return done


def load_outputs(case: Case, details: JsonObject) -> JsonObject:
    sha = details.get("outputs_sha256")
    if not sha:
        return {}
    return dict(json.loads(case.read_artifact(sha)))


def run(
    plan: Plan,
    *,
    case: Case,
    runner: Any = None,
    cancel: threading.Event | None = None,
    confirm: Callable[[str], bool | None] | None = None,
    resume: bool | None = None,
) -> Iterator[Event]:
    """Run every step of ``plan``, yielding events; findings are also recorded in ``case``.

    ``confirm(prompt)`` answers confirm gates: True (go on), False (stop), None (no answer:
    non-interactive). ``plan.answers_yes`` answers every gate with yes. ``resume`` (default:
    ``plan.resumable``) skips the steps an unfinished earlier attempt of the same run key
    finished; a one-step plan therefore starts afresh unless ``resume=True`` is passed, so that
    running the same command twice runs it twice. A step that raised one of the kit's errors
    ends ``failed`` (``refused`` for a guard refusal) and its ``StepFinished`` carries that
    error's message, exit code and hint: front ends report it from the event alone.
    """
    with case.writer():  # one writer per case for the whole run; records in batches
        yield from _run(plan, case=case, runner=runner, cancel=cancel, confirm=confirm,
                        resume=resume)


class RunnerWhenUsed:
    """The case's :class:`~ckptrescue.effects.runner.SubprocessRunner`, made (and the safety
    guard imported) when a step first runs a command: most steps run none."""

    def __init__(self, case: Case) -> None:
        self._case = case
        self._runner: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._runner is None:
            from ckptrescue.effects.runner import SubprocessRunner

            self._runner = SubprocessRunner(self._case)
        return getattr(self._runner, name)


def _run(
    plan: Plan,
    *,
    case: Case,
    runner: Any,
    cancel: threading.Event | None,
    confirm: Callable[[str], bool | None] | None,
    resume: bool | None,
) -> Iterator[Event]:
    state = _RunState(plan, case, runner or RunnerWhenUsed(case), cancel or threading.Event(),
                      confirm, plan.resumable if resume is None else resume)
    yield state.start()
    for step in plan.playbook.steps:
        if state.cancel.is_set():
            state.run_status = "cancelled"
            break
        skipped = state.skip(step)
        if skipped is not None:
            yield skipped
            continue
        result = yield from state.execute(step)
        yield from state.finish_step(step, result)
        if state.settle(step, result):
            break
    yield state.finish()


class _RunState:
    """One run of a plan, step by step (:func:`run`): which steps an earlier attempt finished,
    each step's outputs and status, the run's status so far."""

    def __init__(self, plan: Plan, case: Case, runner: Any, cancel: threading.Event,
                 confirm: Callable[[str], bool | None] | None, resume: bool) -> None:
        self.plan, self.case, self.runner, self.cancel = plan, case, runner, cancel
        self.confirm = confirm
        self.actions = ACTIONS
        self.done = finished_steps(case, plan.run_key) if resume else {}
        self.outputs: dict[str, JsonObject] = {}
        self.statuses: dict[str, str] = {}
        self.plan_actions = tuple(self.actions[s.action] for s in plan.playbook.steps
                                  if s.action in self.actions)
        self.run_status = "ok"
        self.failed_step: str | None = None

    def gate(self, prompt: str) -> bool | None:
        if self.plan.answers_yes:
            return True
        return self.confirm(prompt) if self.confirm else None

    def start(self) -> RunStarted:
        book = self.plan.playbook
        self.case.log("run.started", {"run_key": self.plan.run_key, "playbook": book.name,
                                      "source": book.source, "digest": book.digest,
                                      "params": self.plan.params, "resumed": bool(self.done)})
        return RunStarted(playbook=book.name, run_key=self.plan.run_key,
                          steps=tuple(s.id for s in book.steps))

    def skip(self, step: Step) -> StepSkipped | None:
        """Why ``step`` does not run (finished by an earlier attempt, its condition false or
        not evaluable), recorded; None when it runs."""
        if step.id in self.done:
            self.outputs[step.id] = load_outputs(self.case, self.done[step.id])
            self.statuses[step.id] = self.done[step.id]["status"]
            if self.statuses[step.id] == "findings" and self.run_status == "ok":
                self.run_status = "findings"  # what the earlier attempt found still stands
            return StepSkipped(step_id=step.id, reason="already finished (resumed run)")
        try:
            go = evaluate_when(step.when, self.plan.params, self.outputs, self.statuses)
        except (_Unresolved, TypeError, ValueError) as exc:
            self.statuses[step.id] = "skipped"
            return StepSkipped(step_id=step.id, reason=f"condition not evaluable: {exc}")
        if go:
            return None
        self.statuses[step.id] = "skipped"
        self.case.log("step.skipped", {"run_key": self.plan.run_key, "step": step.id,
                                       "reason": "when condition false"})
        return StepSkipped(step_id=step.id, reason="condition is false")

    def execute(self, step: Step) -> Generator[Event, None, ActionResult]:
        """``step.started`` recorded, then the action run with its arguments resolved."""
        action = self.actions[step.action]()
        yield StepStarted(step_id=step.id, action=step.action, title=step.title or action.summary)
        try:
            args = type(action).with_defaults(resolve(step.args, self.plan.params, self.outputs))
        except _Unresolved as exc:
            result: ActionResult | None = ActionResult(status="failed", error=str(exc))
            args = {}
        else:
            result = None
        self.case.log("step.started", {"run_key": self.plan.run_key, "step": step.id,
                                       "action": step.action, "args": _jsonable(args)})
        self.case.commit()  # group commit: what led up to the step is on disk before it runs
        if result is None:
            ctx = StepContext(case=self.case, runner=self.runner, step_id=step.id,
                              cancel=self.cancel, confirm=self.gate, outputs=self.outputs,
                              plan_actions=self.plan_actions)
            try:
                result = yield from self._drive(step, action, ctx, args)
            finally:
                # a warm loader's zygote ends with the step: no process of the kit outlives
                # the step that started it (one loading for another step ends after that load);
                # none runs where the module was never imported (a step that loaded nothing)
                if "ckptrescue.effects.warm_sandbox" in sys.modules:  # (an import another
                    # thread has under way finishes first)
                    from ckptrescue.effects.warm_sandbox import close_all

                    close_all()
        return result

    def _drive(self, step: Step, action: Any, ctx: StepContext, args: ActionArgs
               ) -> Generator[Event, None, ActionResult]:
        """The action's events passed on until it returns; an unanswered gate stops it; its
        errors become its result (an action bug must not lose the case)."""
        try:
            gen = action.run(ctx, args)
            while True:
                try:
                    event = next(gen)
                except StopIteration as stop:
                    return stop.value or ActionResult()
                if isinstance(event, GateReached) and event.answered is None:
                    gen.close()
                    yield event
                    return ActionResult(status="stopped", error=event.prompt)
                yield event
        except CkptRescueError as exc:
            return ActionResult(status="refused" if exc.exit_code == 3 else "failed",
                                error=exc.message, exit_code=int(exc.exit_code), hint=exc.hint)
        except KeyboardInterrupt:
            self.case.log("step.interrupted", {"run_key": self.plan.run_key, "step": step.id})
            raise
        except OSError as exc:  # a path the system refused (a file where a folder must be,
            # a full disk): the failure of the environment, said as one
            return ActionResult(status="failed", error=os_error_line(exc))
        except Exception as exc:  # noqa: BLE001 - an action bug must not lose the case
            return ActionResult(status="failed", error=f"{type(exc).__name__}: {exc}")

    def finish_step(self, step: Step, result: ActionResult) -> Iterator[Event]:
        """The step's findings, outputs and ``step.finished`` (naming its output type)."""
        case = self.case
        written = record(case, result, name=f"{step.id}.findings")
        for finding in written:  # as recorded: many of one kind are one finding and its table
            yield FindingEmitted(step_id=step.id, finding=finding)
        sha = None
        stored = _jsonable(result.outputs) if result.outputs else {}
        if result.outputs:
            sha = case.store_artifact(json.dumps(stored, sort_keys=True).encode(),
                                      name=f"{step.id}.outputs.json",
                                      kind=f"result:{step.action}")
        if result.status in {"ok", "findings"}:
            self.outputs[step.id] = stored
        self.statuses[step.id] = result.status
        case.log("step.finished", {"run_key": self.plan.run_key, "step": step.id,
                                   "action": step.action,
                                   "output_type": self.actions[step.action].output_type.__name__,
                                   "output_modules": type_modules(
                                       self.actions[step.action].output_type),
                                   "status": result.status,
                                   "summary": result.summary, "error": result.error,
                                   "findings": len(result.findings), "outputs_sha256": sha},
                 artifacts=[sha] if sha else None)
        case.commit()  # the step's records, synced once
        yield StepFinished(step_id=step.id, status=result.status, summary=result.summary,
                           outputs=self.outputs.get(step.id, {}), error=result.error,
                           exit_code=result.exit_code, hint=result.hint,
                           partial={} if step.id in self.outputs else stored)

    def settle(self, step: Step, result: ActionResult) -> bool:
        """The run's status after ``step``; True when the run ends here."""
        if result.status == "stopped":
            self.run_status, self.failed_step = "stopped", step.id
            return True
        if result.status == "cancelled" or self.cancel.is_set():
            self.run_status, self.failed_step = "cancelled", step.id
            return True
        if result.status in {"failed", "refused"}:
            if step.on_failure == "stop":
                self.run_status, self.failed_step = "failed", step.id
                return True
            self.run_status = "findings" if self.run_status == "ok" else self.run_status
        elif result.status == "findings" and self.run_status == "ok":
            self.run_status = "findings"
        return False

    def finish(self) -> RunFinished:
        """``run.finished`` with the case's one-line answer."""
        from ckptrescue.engine.answer import answer_line

        answer = answer_line(self.case)
        self.case.log("run.finished", {"run_key": self.plan.run_key, "status": self.run_status,
                                       "failed_step": self.failed_step, "answer": answer})
        return RunFinished(status=self.run_status, answer=answer, failed_step=self.failed_step)


def record(case: Case, result: ActionResult, *, name: str = "findings") -> list[Finding]:
    """The one place a step's results are written into the case: its artifacts, then its audit
    records in order with its findings where the step marked them (else after the last one);
    more than ``findings_table.AGGREGATE_OVER`` findings of one kind in a row are one finding
    naming a table of them (``name``: the table artifact's name). The step's outputs and
    ``step.finished`` follow (in :func:`run`). Returns the step's findings as recorded (those
    a library recorded itself, ``findings_recorded``, as they are)."""
    for artifact in result.artifacts:
        if artifact.path is not None:
            sha = case.store_artifact_file(Path(artifact.path), name=artifact.name,
                                           kind=artifact.kind)
        else:
            sha = case.store_artifact(artifact.data or b"", name=artifact.name,
                                      kind=artifact.kind)
        if sha != artifact.sha256:  # the file changed between hashing and storing
            raise CkptRescueError(f"artifact {artifact.name}: content changed while stored")
    findings = [] if result.findings_recorded else list(result.findings)
    # consecutive findings are recorded together: many of one kind become one finding and a
    # per-tensor table (record/findings_table.py)
    waiting: list[Finding] = []
    written: list[Finding] = []
    for event in result.audit:
        if event.is_findings_marker:
            waiting += findings
            findings = []
        elif event.action == "finding" and not event.artifacts \
                and isinstance(event.details.get("finding"), dict):
            waiting.append(Finding.from_json(event.details["finding"]))
        else:
            written += findings_table.write(case, waiting, name=name)
            waiting = []
            case.log(event.action, event.details, artifacts=list(event.artifacts) or None)
    written += findings_table.write(case, waiting + findings, name=name)
    if result.findings_recorded and not written:
        return list(result.findings)  # the library recorded them itself
    return written


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
