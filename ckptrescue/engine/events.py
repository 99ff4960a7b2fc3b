"""Events the engine emits while it runs a plan (past tense, frozen).

The CLI prints them, the TUI posts them as messages, tests assert on them. No adapter computes a
finding: findings arrive as :class:`FindingEmitted`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ckptrescue.model import Finding


@dataclass(frozen=True)
class Event:
    step_id: str = ""


@dataclass(frozen=True)
class RunStarted(Event):
    playbook: str = ""
    run_key: str = ""
    steps: tuple[str, ...] = ()


@dataclass(frozen=True)
class StepStarted(Event):
    action: str = ""
    title: str = ""


@dataclass(frozen=True)
class StepOutput(Event):
    text: str = ""


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class FindingEmitted(Event):
    finding: Finding | None = None


@dataclass(frozen=True)
class GateReached(Event):
    prompt: str = ""
    answered: bool | None = None


@dataclass(frozen=True)
class StepSkipped(Event):
    reason: str = ""


@dataclass(frozen=True)
class StepFinished(Event):
    status: str = "ok"  # ok, findings, failed, refused, cancelled
    summary: str = ""
    outputs: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    # a step that could not do its job: its error's exit code and hint, and what it had found
    # before (``partial``), so a front end reports it as the error itself would have
    exit_code: int | None = None
    hint: str | None = None
    partial: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunFinished(Event):
    status: str = "ok"  # ok, findings, failed, stopped, cancelled
    answer: str = ""
    failed_step: str | None = None
