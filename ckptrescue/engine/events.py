"""Events the engine emits while it runs a plan (past tense, frozen).

Each is emitted once and read where it arrives; nothing compares two events, so their equality
is identity (``eq=False``): a generated ``__eq__`` and ``__hash__`` per class were two compiled
methods each in every command's start-up, for nothing.

The CLI prints them, the TUI posts them as messages, tests assert on them. No adapter computes a
finding: findings arrive as :class:`FindingEmitted`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ckptrescue.model import Finding


@dataclass(frozen=True, eq=False)
class Event:
    """Base: every event names the step it belongs to ('' for the run's own)."""

    step_id: str = ""


@dataclass(frozen=True, eq=False)
class RunStarted(Event):
    """A run of a playbook began: its name, run key and step ids."""

    playbook: str = ""
    run_key: str = ""
    steps: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class StepStarted(Event):
    """A step began: its action and title."""

    action: str = ""
    title: str = ""


@dataclass(frozen=True, eq=False)
class StepOutput(Event):
    """A line of text a step printed while it ran."""

    text: str = ""


@dataclass(frozen=True, eq=False)
class StepProgress(Event):
    """Progress of a long step; ``total`` may be None when unknown. Coalesce these in a UI."""

    done: float = 0.0
    total: float | None = None
    unit: str = "B"
    rate: float | None = None
    eta_s: float | None = None
    label: str = ""
    items_done: int | None = None  # files/objects done, when the work counts them
    items_total: int | None = None


@dataclass(frozen=True, eq=False)
class FindingEmitted(Event):
    """A finding a step recorded."""

    finding: Finding | None = None


@dataclass(frozen=True, eq=False)
class GateReached(Event):
    """A step asked the examiner yes or no: ``answered`` is the answer, None when none came
    (the step then stops)."""

    prompt: str = ""
    answered: bool | None = None


@dataclass(frozen=True, eq=False)
class StepSkipped(Event):
    """A step that did not run: finished by an earlier attempt, or its condition false or
    not evaluable."""

    reason: str = ""


@dataclass(frozen=True, eq=False)
class StepFinished(Event):
    """A step ended: its status, summary and outputs, or its error."""

    status: str = "ok"  # ok, findings, failed, refused, cancelled
    summary: str = ""
    outputs: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    # a step that could not do its job: its error's exit code and hint, and what it had found
    # before (``partial``), so a front end reports it as the error itself would have
    exit_code: int | None = None
    hint: str | None = None
    partial: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class RunFinished(Event):
    """The run ended: its status, the one-line answer and the step that failed, if one did."""

    status: str = "ok"  # ok, findings, failed, stopped, cancelled
    answer: str = ""
    failed_step: str | None = None


def transcript_line(event: Event) -> str | None:
    """The run transcript's line for a run or step that starts, is skipped or finishes (the same
    on the terminal and in the TUI); None for the other events, which each front end shows its
    own way."""
    if isinstance(event, RunStarted):
        return f"== run {event.playbook} ({len(event.steps)} steps, run key {event.run_key})"
    if isinstance(event, StepStarted):
        return f"-> {event.step_id} [{event.action}] {event.title}"
    if isinstance(event, StepSkipped):
        return f"-- {event.step_id} skipped: {event.reason}"
    if isinstance(event, StepFinished):
        extra = event.error or event.summary
        return f"<- {event.step_id} {event.status}" + (f": {extra}" if extra else "")
    if isinstance(event, RunFinished):
        return f"== run {event.status}" + (f" at step {event.failed_step}" if event.failed_step
                                           else "")
    return None
