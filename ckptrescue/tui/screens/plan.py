"""The whole plan before anything runs: every step, its condition, every command it runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Static

from ckptrescue.display import shown_text
from ckptrescue.tui.screens.frames import QuestionBox
from ckptrescue.tui.widgets.footer import Footer
from ckptrescue.tui.widgets.header import Header

if TYPE_CHECKING:
    from ckptrescue.engine.executor import DryRunStep, Plan


def plan_lines(plan: Plan) -> list[str]:
    """The dry run as text (the same content as ``playbook run --dry-run``), in words: values
    and conditions as a person reads them, never a Python repr."""
    from ckptrescue.engine import executor as engine
    from ckptrescue.playbook.describe import value_text

    lines = [f"playbook {plan.playbook.name}   run key {plan.run_key}", "parameters:"]
    for name, value in plan.params.items():
        lines.append(f"  {name}: {value_text(value)}")
    lines.append("steps:")
    for i, d in enumerate(engine.dry_run(plan), 1):
        lines.append(f"{i:>2}. {d.step.id} [{d.step.action}]{condition_suffix(d)}")
        for line in d.lines:
            lines.append(f"      $ {line}")
    return lines


def condition_suffix(d: DryRunStep) -> str:
    """``   — only when s3_url is given (skipped with these parameters)``."""
    if not d.condition:
        return ""
    verdict = "" if d.decided is None else (
        " (runs with these parameters)" if d.decided else " (skipped with these parameters)")
    return f"   — only when {d.condition}{verdict}"


class ConfirmRun(QuestionBox[bool]):
    """The explicit go: y runs, n/escape goes back."""

    DEFAULT_CSS = """
    ConfirmRun > Vertical { width: 64; }
    ConfirmRun Button { margin-right: 2; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "dismiss(True)", "Run"),
        Binding("n,escape", "dismiss(False)", "Back"),
    ]

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(shown_text(self.text), markup=False)
            with Horizontal():
                yield Button("Run (y)", id="yes", variant="warning")
                yield Button("Back (n)", id="no")

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class PlanScreen(Screen[None]):
    """Plan preview; g asks for the go and starts the run."""

    DEFAULT_CSS = """
    PlanScreen #plan { height: 1fr; border: round $primary; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("g", "go", "Go: run this plan"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self, plan: Plan) -> None:
        super().__init__()
        self.plan = plan

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("The plan: every step and every command it will run. Nothing has run yet.",
                     classes="title")
        with VerticalScroll(id="plan"):
            yield Static(shown_text("\n".join(plan_lines(self.plan))), id="plan-text",
                         markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#plan").focus()

    def action_go(self) -> None:
        case = getattr(self.app, "case", None)
        steps = len(self.plan.playbook.steps)
        text = (f"Run {self.plan.playbook.name} ({steps} steps) in case "
                f"{case.root.name if case else '?'}?\n\nConfirm gates inside the playbook will "
                "still ask before imaging or copying. Evidence is only read.")

        def answered(go: bool | None) -> None:
            if go:
                from ckptrescue.tui.screens.run import RunScreen

                self.app.switch_screen(RunScreen(self.plan))

        self.app.push_screen(ConfirmRun(text), answered)
