"""A confirm gate of the playbook, answered in a modal: yes, no (declined) or not now."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static

from ckptrescue.tui.screens.frames import QuestionBox


class GateModal(QuestionBox[bool | None]):
    """y: go on; n: decline (the step fails, the run stops); escape: not now (stopped, resumable)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(None)", "Not now"),
    ]

    def __init__(self, step_id: str, prompt: str) -> None:
        super().__init__()
        self.step_id = step_id
        self.prompt = prompt

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("Confirm gate", classes="title")
            yield Static(self.prompt, id="gate-prompt", markup=False)
            with Horizontal():
                yield Button("Yes (y)", id="yes", variant="warning")
                yield Button("No (n)", id="no", variant="error")
                yield Button("Not now (esc)", id="later")

    def action_answer(self, value: bool | None) -> None:
        self.dismiss(value)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss({"yes": True, "no": False}.get(event.button.id or ""))
