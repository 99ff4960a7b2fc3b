"""The fields of a TUI form, built from ``ArgSpec``s — the declaration the CLI is generated from.

A playbook's parameters become ``ArgSpec``s (:func:`parameter_spec`), an action's are its own
(:func:`action_fields`): the parameters screen renders either the same way, validates a typed
value with :func:`check_value`, and offers the evidence picker for evidence types. No Textual
here, so the form logic is tested without a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ckptrescue.engine.action import ArgSpec
from ckptrescue.engine.argtypes import BadValue, arg_type
from ckptrescue.errors import CkptRescueError

if TYPE_CHECKING:
    from ckptrescue.engine.action import Action
    from ckptrescue.playbook.schema import Parameter, Playbook


@dataclass(frozen=True)
class FormField:
    spec: ArgSpec
    label: str
    placeholder: str
    initial: str
    picker: str | None  # "devices" or "paths" for evidence, else None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def is_switch(self) -> bool:
        """A yes/no value: a checkbox on the form, never a text box holding ``False``."""
        return arg_type(self.spec.type).boolean


def parameter_spec(param: Parameter) -> ArgSpec:
    """A playbook parameter as an argument spec (its type is one of the playbook's types)."""
    return ArgSpec(param.name, param.type, required=param.required, default=param.default,
                   help=param.description)


def switch_initial(spec: ArgSpec) -> bool:
    """The checkbox's first state: the default read as a yes/no value."""
    default = spec.default
    if isinstance(default, bool):
        return default
    return str(default or "").strip().lower() in {"true", "yes", "1", "on"}


def form_field(spec: ArgSpec) -> FormField:
    need = "required" if spec.required and spec.default is None else "optional"
    if arg_type(spec.type).boolean:
        label = f"{spec.name}: {spec.help}"
    else:
        label = f"{spec.name} ({spec.type}, {need}): {spec.help}"
    if spec.advanced:
        label += " [advanced]"
    if arg_type(spec.type).boolean:
        initial = "true" if switch_initial(spec) else "false"
    else:
        initial = "" if spec.default in (None, "") else str(spec.default)
    picker = arg_type(spec.type).picker or (arg_type(spec.item).picker
                                            if spec.type == "list" else None)
    return FormField(spec=spec, label=label, placeholder=spec.type, initial=initial,
                     picker=picker)


def fields_of(specs: list[ArgSpec]) -> list[FormField]:
    """Visible fields, the advanced ones last."""
    shown = [s for s in specs if not s.hidden]
    return [form_field(s) for s in sorted(shown, key=lambda s: s.advanced)]


def playbook_fields(playbook: Playbook) -> list[FormField]:
    return fields_of([parameter_spec(p) for p in playbook.parameters])


def action_fields(action: type[Action]) -> list[FormField]:
    """The form of one action: the arguments its CLI command has."""
    return fields_of([a for a in action.args if a.cli])


def convert(spec: ArgSpec, raw: str) -> Any:
    """A typed value from the text typed into a field (raises CkptRescueError): the playbook
    parameter types as ``-p`` converts them, the others by the one table of argument types."""
    from ckptrescue.errors import UsageError
    from ckptrescue.playbook import params

    kind = arg_type(spec.type)
    if kind.parameter:
        return params.convert(spec.type, spec.name, raw)
    try:
        return kind.value(spec.name, raw)
    except BadValue as exc:
        raise UsageError(str(exc)) from None


def check_value(spec: ArgSpec, raw: str) -> tuple[bool, str]:
    """(ok, message) for one typed value, using the playbook layer's own validation."""
    from ckptrescue.playbook.describe import value_text

    if not raw.strip():
        if spec.default is not None:
            return True, f"default: {value_text(spec.default)}"
        if spec.required:
            return False, "required"
        return True, "optional"
    try:
        value = convert(spec, raw.strip())
    except CkptRescueError as exc:
        return False, exc.message
    return True, "ok" if str(value) == raw.strip() else f"ok: {value_text(value)}"
