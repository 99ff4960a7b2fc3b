"""Messages the TUI's thread workers post to its screens ("attributes down, messages up").

Workers never touch widgets: they post these (``post_message`` is thread-safe) and the screen's
handlers, on the UI thread, update the widgets. Progress is coalesced with ``can_replace`` so an
imaging run cannot flood the queue.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from textual.message import Message

from ckptrescue.engine.events import Event, StepProgress


class EngineEvent(Message):
    """One event yielded by :func:`ckptrescue.engine.executor.run`."""

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event

    def can_replace(self, message: Message) -> bool:
        return (isinstance(self.event, StepProgress) and isinstance(message, EngineEvent)
                and isinstance(message.event, StepProgress)
                and message.event.step_id == self.event.step_id)


@dataclass
class GateReply:
    """Where the UI thread puts the responder's answer to a confirm gate."""

    answered: threading.Event = field(default_factory=threading.Event)
    value: bool | None = None

    def set(self, value: bool | None) -> None:
        self.value = value
        self.answered.set()


class GateAsked(Message):
    """The engine reached a confirm gate; the worker waits on ``reply``."""

    def __init__(self, step_prompt: str, reply: GateReply) -> None:
        super().__init__()
        self.prompt = step_prompt
        self.reply = reply


class RunCrashed(Message):
    """engine.run raised (a case or playbook error): one line, the run is over."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class CaseDataLoaded(Message):
    """The report model of the case, built off the UI thread, plus what groups it."""

    def __init__(self, model: dict[str, Any], mounts: list[dict[str, Any]],
                 probed_roots: list[str]) -> None:
        super().__init__()
        self.model = model
        self.mounts = mounts
        self.probed_roots = probed_roots


class ReportWritten(Message):
    """The report file and the case verification."""

    def __init__(self, path: str, verify: dict[str, Any], error: str = "") -> None:
        super().__init__()
        self.path = path
        self.verify = verify
        self.error = error


class DevicesListed(Message):
    def __init__(self, devices: list[dict[str, Any]], error: str = "") -> None:
        super().__init__()
        self.devices = devices
        self.error = error
