"""The one engine: runs a plan of built-in actions and emits events.

The CLI, the TUI and playbooks all drive :func:`run`; none of them runs tools on its own. Every
step's start and end are audit records (``step.started`` / ``step.finished``) carrying the run
key, so an interrupted run (Ctrl-C, SIGKILL) resumes from the case's own log with the same command
and does not repeat finished steps. Step outputs are stored as write-once artifacts.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.actions import registry
from ckptrescue.engine.action import ActionResult, StepContext
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
from ckptrescue.errors import CkptRescueError, PlaybookError
from ckptrescue.model import Finding
from ckptrescue.playbook import describe, load, params
from ckptrescue.playbook.lint import lint
from ckptrescue.playbook.schema import REF_RE, Playbook, Step
from ckptrescue.record import findings_table
from ckptrescue.record.audit import canonical
from ckptrescue.record.case import Case


@dataclass
class Plan:
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
    step: Step
    lines: list[str] = field(default_factory=list)
    when: Any = None
    condition: str = ""           # ``when`` in words (playbook/describe.py); "" when none
    decided: bool | None = None   # what the parameters alone decide (None: the run decides)


def prepare(playbook: Playbook | str | Path, given: dict[str, Any]) -> Plan:
    """Load, lint and bind parameters; raises PlaybookError naming file and line."""
    if not isinstance(playbook, Playbook):
        playbook = load.load_file(load.resolve(str(playbook)))
    problems = lint(playbook)
    if problems:
        detail = "; ".join(str(p) for p in problems[:3])
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        raise PlaybookError(f"playbook does not lint: {detail}{more}")
    return Plan(playbook=playbook, params=params.bind(playbook, given))


def single_step(action: str, args: dict[str, Any], *, step_id: str | None = None) -> Plan:
    """A one-step plan (how the CLI's direct commands drive the engine)."""
    step = Step(id=step_id or action.replace(".", "-"), action=action, args=args)
    digest = hashlib.sha256(canonical({"action": action, "args": args})).hexdigest()
    book = Playbook(name=f"cli-{action}", title=action, description="", parameters=(),
                    steps=(step,), source="<cli>", digest=digest)
    return Plan(playbook=book, params={}, resumable=False)


# ---- references -------------------------------------------------------------------------------

class _Unresolved(Exception):  # noqa: N818
    pass


def _lookup(path: str, values: dict[str, Any], outputs: dict[str, dict[str, Any]]) -> Any:
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


def resolve(value: Any, values: dict[str, Any], outputs: dict[str, dict[str, Any]]) -> Any:
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


def evaluate_when(cond: Any, values: dict[str, Any], outputs: dict[str, dict[str, Any]],
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
    actions = registry()
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

def finished_steps(case: Case, run_key: str) -> dict[str, dict[str, Any]]:
    """Steps of an unfinished earlier attempt of ``run_key``: step id -> step.finished details.

    Only an attempt that did not complete (interrupted, killed, stopped at a gate, failed) is
    resumed. Once a run of the same command has completed, running it again starts afresh:
    its finished steps (a released mount, a written report) must not be taken as still valid.
    """
    done: dict[str, dict[str, Any]] = {}
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


def load_outputs(case: Case, details: dict[str, Any]) -> dict[str, Any]:
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


def _run(
    plan: Plan,
    *,
    case: Case,
    runner: Any,
    cancel: threading.Event | None,
    confirm: Callable[[str], bool | None] | None,
    resume: bool | None,
) -> Iterator[Event]:
    from ckptrescue.effects.runner import SubprocessRunner

    runner = runner or SubprocessRunner(case)
    cancel = cancel or threading.Event()
    actions = registry()
    book = plan.playbook
    if resume is None:
        resume = plan.resumable
    done = finished_steps(case, plan.run_key) if resume else {}
    outputs: dict[str, dict[str, Any]] = {}
    statuses: dict[str, str] = {}
    plan_actions = tuple(actions[s.action] for s in book.steps if s.action in actions)
    case.log("run.started", {"run_key": plan.run_key, "playbook": book.name,
                             "source": book.source, "digest": book.digest,
                             "params": plan.params, "resumed": bool(done)})
    yield RunStarted(playbook=book.name, run_key=plan.run_key,
                     steps=tuple(s.id for s in book.steps))
    run_status = "ok"
    failed_step: str | None = None

    def gate(prompt: str) -> bool | None:
        if plan.answers_yes:
            return True
        return confirm(prompt) if confirm else None

    for step in book.steps:
        if cancel.is_set():
            run_status = "cancelled"
            break
        if step.id in done:
            outputs[step.id] = load_outputs(case, done[step.id])
            statuses[step.id] = done[step.id]["status"]
            if statuses[step.id] == "findings" and run_status == "ok":
                run_status = "findings"  # what the earlier attempt found still stands
            yield StepSkipped(step_id=step.id, reason="already finished (resumed run)")
            continue
        try:
            go = evaluate_when(step.when, plan.params, outputs, statuses)
        except (_Unresolved, TypeError, ValueError) as exc:
            go = False
            yield StepSkipped(step_id=step.id, reason=f"condition not evaluable: {exc}")
            statuses[step.id] = "skipped"
            continue
        if not go:
            statuses[step.id] = "skipped"
            case.log("step.skipped", {"run_key": plan.run_key, "step": step.id,
                                      "reason": "when condition false"})
            yield StepSkipped(step_id=step.id, reason="condition is false")
            continue
        action = actions[step.action]()
        yield StepStarted(step_id=step.id, action=step.action, title=step.title or action.summary)
        try:
            args = type(action).with_defaults(resolve(step.args, plan.params, outputs))
        except _Unresolved as exc:
            result = ActionResult(status="failed", error=str(exc))
            args = {}
        else:
            result = None
        case.log("step.started", {"run_key": plan.run_key, "step": step.id,
                                  "action": step.action, "args": _jsonable(args)})
        case.commit()  # group commit: what led up to the step is on disk before it runs
        if result is None:
            ctx = StepContext(case=case, runner=runner, step_id=step.id, cancel=cancel,
                              confirm=gate, outputs=outputs, plan_actions=plan_actions)
            try:
                gen = action.run(ctx, args)
                while True:
                    try:
                        event = next(gen)
                    except StopIteration as stop:
                        result = stop.value or ActionResult()
                        break
                    if isinstance(event, GateReached) and event.answered is None:
                        result = ActionResult(status="stopped", error=event.prompt)
                        gen.close()
                        yield event
                        break
                    yield event
            except CkptRescueError as exc:
                result = ActionResult(status="refused" if exc.exit_code == 3 else "failed",
                                      error=exc.message, exit_code=int(exc.exit_code),
                                      hint=exc.hint)
            except KeyboardInterrupt:
                case.log("step.interrupted", {"run_key": plan.run_key, "step": step.id})
                raise
            except Exception as exc:  # an action bug must not lose the case
                result = ActionResult(status="failed", error=f"{type(exc).__name__}: {exc}")
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
            outputs[step.id] = stored
        statuses[step.id] = result.status
        case.log("step.finished", {"run_key": plan.run_key, "step": step.id,
                                   "action": step.action,
                                   "output_type": type(action).output_type.__name__,
                                   "status": result.status,
                                   "summary": result.summary, "error": result.error,
                                   "findings": len(result.findings), "outputs_sha256": sha},
                 artifacts=[sha] if sha else None)
        case.commit()  # the step's records, synced once
        yield StepFinished(step_id=step.id, status=result.status, summary=result.summary,
                           outputs=outputs.get(step.id, {}), error=result.error,
                           exit_code=result.exit_code, hint=result.hint,
                           partial={} if step.id in outputs else stored)
        if result.status == "stopped":
            run_status, failed_step = "stopped", step.id
            break
        if result.status == "cancelled" or cancel.is_set():
            run_status, failed_step = "cancelled", step.id
            break
        if result.status in {"failed", "refused"}:
            if step.on_failure == "stop":
                run_status, failed_step = "failed", step.id
                break
            run_status = "findings" if run_status == "ok" else run_status
        elif result.status == "findings" and run_status == "ok":
            run_status = "findings"
    from ckptrescue.engine.answer import answer_line

    answer = answer_line(case)
    case.log("run.finished", {"run_key": plan.run_key, "status": run_status,
                              "failed_step": failed_step, "answer": answer})
    yield RunFinished(status=run_status, answer=answer, failed_step=failed_step)


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
