"""The TUI's form fields come from ArgSpecs: an action's own, or a playbook's parameters as
specs — the declaration the CLI is generated from."""

from __future__ import annotations

from ckptrescue.actions import registry
from ckptrescue.playbook.schema import Parameter
from ckptrescue.tui import form


def test_an_actions_form_is_its_command_line_arguments() -> None:
    probe = registry()["probe"]
    fields = form.action_fields(probe)
    assert [f.name for f in fields] == [a.name for a in probe.args if a.cli]
    paths = fields[0]
    assert paths.picker == "paths" and paths.label.startswith("paths (list, required): ")
    numeric = next(f for f in fields if f.name == "numeric")
    assert numeric.initial == "true" and numeric.picker is None and numeric.is_switch
    assert not paths.is_switch and "(boolean" not in numeric.label
    assert numeric.spec is next(a for a in probe.args if a.name == "numeric")


def test_a_playbook_parameter_is_rendered_like_an_argument() -> None:
    param = Parameter(name="source", type="image", description="The disk.", required=True)
    (field,) = form.fields_of([form.parameter_spec(param)])
    assert field.label == "source (image, required): The disk."
    assert field.picker == "devices" and field.placeholder == "image"


def test_values_are_checked_by_type() -> None:
    exec_action = registry()["exec"]
    timeout = next(a for a in exec_action.args if a.name == "timeout_s")
    argv = next(a for a in exec_action.args if a.name == "argv")
    assert form.check_value(timeout, "") == (True, "default: 600")
    assert form.check_value(timeout, "1.5") == (True, "ok")
    assert form.check_value(timeout, "soon")[0] is False
    assert form.check_value(argv, "") == (False, "required")
    assert form.check_value(argv, "xfs_db -r 'sb 0'") == (True, "ok: xfs_db -r 'sb 0'")
