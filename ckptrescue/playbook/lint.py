"""Static checks of a playbook before anything runs, each naming the file and the line.

Rejects unknown actions, unknown/missing action arguments, references to undeclared parameters,
to unknown or later steps, malformed ``when`` conditions, and any ``exec`` command the safety
guard refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ckptrescue.actions import ACTIONS
from ckptrescue.engine.argtypes import arg_type
from ckptrescue.errors import PlaybookError
from ckptrescue.playbook.params import convert
from ckptrescue.playbook.schema import ID_RE, WHEN_OPS, Playbook, references


@dataclass(frozen=True)
class LintProblem:
    source: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.message}"


def lint(playbook: Playbook) -> list[LintProblem]:
    problems: list[LintProblem] = []
    actions = ACTIONS
    params = {p.name for p in playbook.parameters}
    seen: list[str] = []
    all_ids = [s.id for s in playbook.steps]

    def add(line: int, message: str) -> None:
        problems.append(LintProblem(playbook.source, line, message))

    for param in playbook.parameters:
        if param.default is not None and param.type in _SCALAR_TYPES:
            try:
                convert(param.type, param.name, param.default)
            except PlaybookError as exc:
                add(param.line, f"default of parameter {param.name!r}: {exc.message}")
    for step in playbook.steps:
        if not ID_RE.match(step.id):
            add(step.line, f"step id {step.id!r} must start with a letter and use [A-Za-z0-9_-]")
        if step.id in seen:
            add(step.line, f"step id {step.id!r} is used twice")
        action = actions.get(step.action)
        if action is None:
            add(step.line, f"step {step.id!r}: unknown action {step.action!r} "
                           f"(known: {', '.join(actions)})")
        else:
            known = action.arg_names()
            for key in step.args:
                if key not in known:
                    add(step.arg_lines.get(key, step.line),
                        f"step {step.id!r}: action {step.action} has no argument {key!r} "
                        f"(it takes: {', '.join(sorted(known)) or 'none'})")
            for spec in action.args:
                if spec.name in step.args:
                    problem = _literal_type_problem(spec.type, step.args[spec.name])
                    if problem:
                        add(step.arg_lines.get(spec.name, step.line),
                            f"step {step.id!r}: argument {spec.name!r} {problem}")
                if spec.required and spec.name not in step.args:
                    add(step.line, f"step {step.id!r}: action {step.action} needs argument "
                                   f"{spec.name!r}")
        for kind, ref in references([step.args, step.when]):
            if kind == "param" and ref not in params:
                add(step.line, f"step {step.id!r}: ${ref} is not a declared parameter")
            if kind == "step":
                target = ref.split(".", 1)[0]
                if target in params and target not in all_ids:
                    add(step.line, f"step {step.id!r}: ${{{ref}}}: parameters have no fields")
                elif target not in all_ids:
                    add(step.line, f"step {step.id!r}: ${{{ref}}} refers to unknown step "
                                   f"{target!r}")
                elif target not in seen:
                    add(step.line, f"step {step.id!r}: ${{{ref}}} refers to a later step "
                                   f"{target!r}")
        if step.when is not None:
            for message in _check_when(step.when, seen):
                add(step.line, f"step {step.id!r}: when: {message}")
        if step.action == "exec":
            argv = step.args.get("argv")
            if not isinstance(argv, list) or not argv or not all(
                isinstance(a, str | int | float) for a in argv
            ):
                add(step.line, f"step {step.id!r}: exec needs argv as a list of strings "
                               "(never shell text)")
            else:
                if references(argv[0]):
                    add(step.line, f"step {step.id!r}: the command name must be literal")
                from ckptrescue import guard  # only for a playbook that runs commands

                concrete = [_placeholder(str(a)) for a in argv]
                decision = guard.check(concrete)
                if not decision.allowed:
                    add(step.arg_lines.get("argv", step.line),
                        f"step {step.id!r}: the safety guard refuses {' '.join(map(str, argv))}: "
                        f"{decision.reason}")
        seen.append(step.id)
    return problems


_SCALAR_TYPES = {"integer", "boolean", "string", "s3_url"}


def _literal_type_problem(kind: str, value: Any) -> str | None:
    """A type problem with a literal argument value (references are checked at run time)."""
    if isinstance(value, str) and references(value):
        return None
    return arg_type(kind).literal_problem(value)


def _placeholder(arg: str) -> str:
    if not references(arg):
        return arg
    return "/nonexistent/placeholder"


def _check_when(cond: Any, seen: list[str]) -> list[str]:
    if isinstance(cond, str):
        return []  # a single reference: truthy
    if not isinstance(cond, dict) or len(cond) != 1:
        return ["a condition is a mapping with one operator "
                f"({', '.join(sorted(WHEN_OPS))})"]
    (op, operand), = cond.items()
    if op not in WHEN_OPS:
        return [f"unknown operator {op!r} (one of {', '.join(sorted(WHEN_OPS))})"]
    if op in {"all", "any"}:
        if not isinstance(operand, list):
            return [f"{op} takes a list of conditions"]
        return [m for sub in operand for m in _check_when(sub, seen)]
    if op in {"equals", "not_equals", "gt", "lt"} and (
        not isinstance(operand, list) or len(operand) != 2
    ):
        return [f"{op} takes a list of two values"]
    if op == "step_status":
        if not isinstance(operand, dict) or set(operand) != {"step", "is"}:
            return ["step_status takes {step: ID, is: ok|findings|failed|skipped}"]
        if operand["step"] not in seen:
            return [f"step_status refers to {operand['step']!r}, which is not an earlier step"]
    return []
