"""No template expansion of values: the engine substitutes parameters once, in playbook text
the user wrote; a value typed on the command line (a path holding ``$``, ``${…}``, ``{{…}}``,
``%``, backslashes) reaches every action exactly as typed. The list of actions and their
arguments comes from the action registry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ckptrescue.actions import registry
from ckptrescue.cli.from_action import literal
from ckptrescue.engine import executor as engine

HOSTILE = ["run/step$ata", "a/${x}/b", "{{ x }}.pt", "100%s%n%%.bin", "C:\\w\\$x\\\\y",
           "$$", "$", "${", "x$1y", "$HOME/$(id)/`id`"]
TEXT_TYPES = {"path", "location", "string", "any"}
CLI = str(Path(sys.executable).with_name("ckptrescue"))


def _hostile_args(action: type) -> dict[str, object]:
    args: dict[str, object] = {}
    for i, spec in enumerate(action.args):
        value = HOSTILE[i % len(HOSTILE)]
        if spec.type in TEXT_TYPES:
            args[spec.name] = value
        elif spec.type == "list":
            args[spec.name] = [value, HOSTILE[(i + 1) % len(HOSTILE)]]
        elif spec.type == "mapping":
            args[spec.name] = {"k": value}
    return args


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_action_gets_command_line_values_exactly_as_typed(name: str) -> None:
    action = registry()[name]
    args = _hostile_args(action)
    plan = engine.single_step(name, literal(args))
    step = plan.playbook.steps[0]
    assert engine.resolve(step.args, plan.params, {}) == args


def test_a_playbook_parameter_is_substituted_once_never_in_its_value() -> None:
    values = {"dir": "run/step$ata/${x}/{{y}}"}
    assert engine.resolve("$dir/model.pt", values, {}) == "run/step$ata/${x}/{{y}}/model.pt"
    assert engine.resolve("${dir}", values, {}) == values["dir"]


def test_probe_of_a_path_holding_dollar_signs_through_the_cli(tmp_path: Path) -> None:
    run = tmp_path / "run" / "step$ata"
    run.mkdir(parents=True)
    (run / "notes{{x}}%s.txt").write_text("not a checkpoint\n")
    r = subprocess.run([CLI, "probe", str(run)], capture_output=True, text=True, timeout=300)
    assert "is not a parameter" not in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert r.returncode in (0, 1, 2), r.stderr
