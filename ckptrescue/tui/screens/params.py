"""Parameters of the chosen playbook, validated inline; the evidence picker; then the plan.

The form's fields come from ``ArgSpec``s (``tui/form.py``): the playbook's parameters as specs,
rendered and checked the way an action's own arguments are."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from textual import on
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Checkbox, Input, Label, Static

from ckptrescue.display import shown
from ckptrescue.engine.action import ArgSpec
from ckptrescue.errors import CkptRescueError
from ckptrescue.tui import form
from ckptrescue.tui.widgets.fields import FieldCheckbox, FieldInput, after_typed
from ckptrescue.tui.widgets.footer import Footer
from ckptrescue.tui.widgets.header import Header

if TYPE_CHECKING:
    from ckptrescue.playbook.schema import Parameter, Playbook


def check_value(param: Parameter | ArgSpec, raw: str) -> tuple[bool, str]:
    """(ok, message) for one typed value, using the playbook layer's own validation."""
    spec = param if isinstance(param, ArgSpec) else form.parameter_spec(param)
    return form.check_value(spec, raw)


class ParamsScreen(Screen[None]):
    """One input per parameter; messages update as you type; F5 previews the plan."""

    DEFAULT_CSS = """
    ParamsScreen #form { height: 1fr; padding: 0 1; }
    ParamsScreen .param-label { margin-top: 1; }
    ParamsScreen .param-row { height: 3; }
    ParamsScreen .param-row Input { width: 1fr; }
    ParamsScreen .param-row Button { width: 12; min-width: 12; }
    ParamsScreen .check { height: auto; }
    ParamsScreen .param-switch { margin-top: 1; }
    ParamsScreen #actions { height: 3; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f2", "pick", "Pick evidence"),
        Binding("f5", "preview", "Plan preview"),
        Binding("escape", "app.pop_screen", "Back"),
        # Enter in a field moves on at once (a priority binding, handled before the next key is
        # routed): typing straight on never lands in the field just left, and a checkbox passed
        # with Enter keeps its value
        Binding("enter", "next_field", "Next field", show=False, priority=True),
    ]

    def __init__(self, playbook: Playbook, values: dict[str, str] | None = None) -> None:
        super().__init__()
        self.playbook = playbook
        self.initial = values or {}
        self.fields = {f.name: f for f in form.playbook_fields(playbook)}

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"{self.playbook.name}: {self.playbook.title}", classes="title",
                     markup=False)
        with VerticalScroll(id="form"):
            if not self.fields:
                yield Static("This playbook takes no parameters.", classes="hint")
            for f in self.fields.values():
                if f.is_switch:
                    yield FieldCheckbox(f.label, value=self.initial.get(f.name, f.initial)
                                   .strip().lower() in {"true", "yes", "1", "on"},
                                   id=f"p-{f.name}", classes="param-switch")
                    continue
                yield Label(f.label, classes="param-label", markup=False)
                with Horizontal(classes="param-row"):
                    yield FieldInput(value=self.initial.get(f.name, f.initial), id=f"p-{f.name}",
                                placeholder=f.placeholder)
                    if f.picker:
                        pick = Button("Pick (F2)", id=f"pick-{f.name}")
                        pick.can_focus = False  # Tab goes field to field; F2 or a click picks
                        yield pick
                yield Static("", id=f"c-{f.name}", classes="check", markup=False)
            yield Static("", id="form-error", classes="error", markup=False)
            with Horizontal(id="actions"):
                yield Button("Preview the plan (F5)", id="preview", variant="primary")
        yield Footer()

    def on_mount(self) -> None:
        for field in self.query(Input):
            field.cursor_blink = not self.app.is_headless
        for f in self.fields.values():
            self._check(f)
        controls = self._controls()
        if controls:
            controls[0].focus()

    def _controls(self) -> list[Input | Checkbox]:
        """The form's fields in order (text boxes and checkboxes)."""
        return [w for w in self.query("#form Input, #form Checkbox")
                if isinstance(w, Input | Checkbox)]

    # -- validation --------------------------------------------------------------------------
    def _param(self, input_id: str | None) -> form.FormField | None:
        if not input_id or not input_id.startswith(("p-", "pick-")):
            return None
        return self.fields.get(input_id.split("-", 1)[1])

    def _check(self, param: form.FormField) -> bool:
        if param.is_switch:
            return True  # a checkbox holds yes or no: nothing to check
        raw = self.query_one(f"#p-{param.name}", Input).value
        ok, message = form.check_value(param.spec, raw)
        check = self.query_one(f"#c-{param.name}", Static)
        check.update(("✓ " if ok else "✗ ") + shown(message))
        check.set_class(ok, "ok")
        check.set_class(not ok, "error")
        return ok

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        param = self._param(event.input.id)
        if param is not None:
            self._check(param)

    def action_next_field(self) -> None:
        """Enter in a field (a text box or a checkbox: space toggles it, Enter never does): the
        next field, or the plan after the last one."""
        focused = self.focused
        controls = self._controls()
        if not isinstance(focused, Input | Checkbox) or focused not in controls:
            raise SkipAction()  # buttons: their own Enter
        index = controls.index(focused)
        if index + 1 < len(controls):
            self.set_focus(controls[index + 1])  # now (Widget.focus() would wait for the queue)
        else:  # the plan, once every field holds what was typed before this Enter; the keys
            self.app.hold_keys()  # type: ignore[attr-defined] - typed on wait for it
            after_typed(controls, self._preview_if_current)

    def _preview_if_current(self) -> None:
        if not (self.is_current and self.action_preview()):
            self.app.release_keys()  # type: ignore[attr-defined] - staying: the form's error

    def values(self) -> dict[str, str]:
        out = {}
        for name, f in self.fields.items():
            if f.is_switch:
                out[name] = "true" if self.query_one(f"#p-{name}", Checkbox).value else "false"
            else:
                out[name] = self.query_one(f"#p-{name}", Input).value.strip()
        return out

    # -- evidence picker ----------------------------------------------------------------------
    def action_pick(self, name: str | None = None) -> None:
        from ckptrescue.tui.screens.pickers import BROWSE, DevicePicker, PathPicker

        param = self.fields.get(name) if name else self._param(
            self.focused.id if self.focused else None)
        if param is None:
            param = next((f for f in self.fields.values() if f.picker), None)
        if param is None or not param.picker:
            self.notify("No evidence parameter here; type the value.", severity="warning")
            return
        field = self.query_one(f"#p-{param.name}", Input)
        kind = param.spec.type

        def chosen(value: str | None) -> None:
            if value == BROWSE:
                self.app.push_screen(PathPicker(kind, field.value), chosen)
            elif value:
                field.value = value
                field.focus()

        if param.picker == "devices":
            self.app.push_screen(DevicePicker(kind), chosen)
        else:
            self.app.push_screen(PathPicker(kind, field.value), chosen)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "preview":
            self.action_preview()
        elif event.button.id and event.button.id.startswith("pick-"):
            self.action_pick(event.button.id.split("-", 1)[1])

    # -- on to the plan ---------------------------------------------------------------------------
    def action_preview(self) -> bool:
        """Open the plan preview; False (the form shows why) when the values do not make one."""
        from ckptrescue.engine import executor as engine
        from ckptrescue.tui.screens.plan import PlanScreen

        bad = [f.name for f in self.fields.values() if not self._check(f)]
        error = self.query_one("#form-error", Static)
        if bad:
            error.update(f"Fix {', '.join(bad)} first.")
            self.query_one(f"#p-{bad[0]}", Input).focus()
            return False
        given: dict[str, Any] = {k: v for k, v in self.values().items() if v}
        try:
            plan = engine.prepare(self.playbook, given)
        except CkptRescueError as exc:
            error.update(exc.message)
            return False
        error.update("")
        self.app.push_screen(PlanScreen(plan))
        return True
