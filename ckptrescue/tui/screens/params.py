"""Parameters of the chosen playbook, validated inline; the evidence picker; then the plan."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Footer, Header, Input, Label, Static

from ckptrescue.errors import CkptRescueError
from ckptrescue.tui.scenarios import EVIDENCE_TYPES

if TYPE_CHECKING:
    from ckptrescue.playbook.schema import Parameter, Playbook


def check_value(param: Parameter, raw: str) -> tuple[bool, str]:
    """(ok, message) for one typed value, using the playbook layer's own validation."""
    from ckptrescue.playbook import params

    if not raw.strip():
        if param.default is not None:
            return True, f"default: {param.default!r}"
        if param.required:
            return False, "required"
        return True, "optional"
    try:
        value = params.convert(param.type, param.name, raw.strip())
    except CkptRescueError as exc:
        return False, exc.message
    return True, "ok" if str(value) == raw.strip() else f"ok: {value}"


class ParamsScreen(Screen[None]):
    """One input per parameter; messages update as you type; F5 previews the plan."""

    DEFAULT_CSS = """
    ParamsScreen #form { height: 1fr; padding: 0 1; }
    ParamsScreen .param-label { margin-top: 1; }
    ParamsScreen .param-row { height: 3; }
    ParamsScreen .param-row Input { width: 1fr; }
    ParamsScreen .param-row Button { width: 12; min-width: 12; }
    ParamsScreen .check { height: auto; }
    ParamsScreen #actions { height: 3; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f2", "pick", "Pick evidence"),
        Binding("f5", "preview", "Plan preview"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self, playbook: Playbook, values: dict[str, str] | None = None) -> None:
        super().__init__()
        self.playbook = playbook
        self.initial = values or {}

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"{self.playbook.name}: {self.playbook.title}", classes="title",
                     markup=False)
        with VerticalScroll(id="form"):
            if not self.playbook.parameters:
                yield Static("This playbook takes no parameters.", classes="hint")
            for p in self.playbook.parameters:
                need = "required" if p.required and p.default is None else "optional"
                yield Label(f"{p.name} ({p.type}, {need}): {p.description}",
                            classes="param-label", markup=False)
                with Horizontal(classes="param-row"):
                    default = "" if p.default in (None, "") else str(p.default)
                    yield Input(value=self.initial.get(p.name, default), id=f"p-{p.name}",
                                placeholder=p.type)
                    if p.type in EVIDENCE_TYPES:
                        yield Button("Pick (F2)", id=f"pick-{p.name}")
                yield Static("", id=f"c-{p.name}", classes="check", markup=False)
            yield Static("", id="form-error", classes="error", markup=False)
            with Horizontal(id="actions"):
                yield Button("Preview the plan (F5)", id="preview", variant="primary")
        yield Footer()

    def on_mount(self) -> None:
        for field in self.query(Input):
            field.cursor_blink = not self.app.is_headless
        for p in self.playbook.parameters:
            self._check(p)
        inputs = list(self.query(Input))
        if inputs:
            inputs[0].focus()

    # -- validation --------------------------------------------------------------------------
    def _param(self, input_id: str | None) -> Parameter | None:
        if not input_id or not input_id.startswith(("p-", "pick-")):
            return None
        return self.playbook.parameter(input_id.split("-", 1)[1])

    def _check(self, param: Parameter) -> bool:
        raw = self.query_one(f"#p-{param.name}", Input).value
        ok, message = check_value(param, raw)
        check = self.query_one(f"#c-{param.name}", Static)
        check.update(("✓ " if ok else "✗ ") + message)
        check.set_class(ok, "ok")
        check.set_class(not ok, "error")
        return ok

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        param = self._param(event.input.id)
        if param is not None:
            self._check(param)

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        inputs = list(self.query(Input))
        index = inputs.index(event.input)
        if index + 1 < len(inputs):
            inputs[index + 1].focus()
        else:
            self.action_preview()

    def values(self) -> dict[str, str]:
        return {p.name: self.query_one(f"#p-{p.name}", Input).value.strip()
                for p in self.playbook.parameters}

    # -- evidence picker ----------------------------------------------------------------------
    def action_pick(self, name: str | None = None) -> None:
        from ckptrescue.tui.screens.pickers import BROWSE, DevicePicker, PathPicker

        param = self.playbook.parameter(name) if name else self._param(
            self.focused.id if self.focused else None)
        if param is None:
            param = next((p for p in self.playbook.parameters if p.type in EVIDENCE_TYPES), None)
        if param is None or param.type not in EVIDENCE_TYPES:
            self.notify("No evidence parameter here; type the value.", severity="warning")
            return
        field = self.query_one(f"#p-{param.name}", Input)

        def chosen(value: str | None) -> None:
            if value == BROWSE:
                self.app.push_screen(PathPicker(param.type, field.value), chosen)
            elif value:
                field.value = value
                field.focus()

        if EVIDENCE_TYPES[param.type] == "devices":
            self.app.push_screen(DevicePicker(param.type), chosen)
        else:
            self.app.push_screen(PathPicker(param.type, field.value), chosen)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "preview":
            self.action_preview()
        elif event.button.id and event.button.id.startswith("pick-"):
            self.action_pick(event.button.id.split("-", 1)[1])

    # -- on to the plan ---------------------------------------------------------------------------
    def action_preview(self) -> None:
        from ckptrescue import engine
        from ckptrescue.tui.screens.plan import PlanScreen

        bad = [p.name for p in self.playbook.parameters if not self._check(p)]
        error = self.query_one("#form-error", Static)
        if bad:
            error.update(f"Fix {', '.join(bad)} first.")
            self.query_one(f"#p-{bad[0]}", Input).focus()
            return
        given: dict[str, Any] = {k: v for k, v in self.values().items() if v}
        try:
            plan = engine.prepare(self.playbook, given)
        except CkptRescueError as exc:
            error.update(exc.message)
            return
        error.update("")
        self.app.push_screen(PlanScreen(plan))
