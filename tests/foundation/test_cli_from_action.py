"""Declare once, one route: every command that has an engine action is generated from its
ArgSpecs (cli/from_action.py) and runs through the engine, with --case or a temporary case."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import typer.main
from cli_helpers import invoke
from typer.testing import CliRunner

from ckptrescue.actions import registry
from ckptrescue.cli import from_action
from ckptrescue.cli.main import app

REPO = Path(__file__).resolve().parents[2]
OPTIONS_OF_EVERY_COMMAND = {"case_dir", "as_json", "help"}
PRESENTATION = {"arg_dry_run", "arg_known_good", "arg_no_progress", "arg_allow_empty"}  # not action arguments


def generated_commands() -> dict[str, Any]:
    """Action name -> the click command generated for it."""
    found: dict[str, Any] = {}

    def walk(cmd: Any) -> None:
        action = getattr(getattr(cmd, "callback", None), "ckptrescue_action", None)
        if action:
            found[action] = cmd
        for child in getattr(cmd, "commands", {}).values():
            walk(child)

    walk(typer.main.get_command(app))
    return found


def test_every_action_with_a_command_line_is_generated() -> None:
    described = {name for name, cls in registry().items() if cls.description}
    assert described == set(generated_commands())
    # the eleven that forked on --case, the ten that needed it, and the eleven added since
    # (trainstate, gate, dataset profile/compare/quarantine, store verify/history/preflight/
    # preserve/restore, manifest update), and those of issue #31 (manifest diff, resume
    # safe-globals, hub verify, resume keys, reassemble, world-size, replicas)
    assert len(described) == 39


def test_no_command_module_forks_around_the_engine() -> None:
    for path in (REPO / "ckptrescue" / "cli").glob("*.py"):
        text = path.read_text()
        assert "bridge" not in text and "native" not in text, path.name
    assert not (REPO / "ckptrescue" / "cli" / "bridge.py").exists()


def test_each_command_parameter_is_an_argspec_or_presentation() -> None:
    for name, cmd in generated_commands().items():
        action = registry()[name]
        specs = {from_action._py_name(s): s for s in action.args if s.cli}
        for param in cmd.params:
            if param.name in specs:
                spec = specs[param.name]
                if spec.positional:
                    assert param.param_type_name == "argument", (name, spec.name)
                else:
                    assert spec.option in param.opts, (name, spec.name, param.opts)
                    assert param.help == spec.help, (name, spec.name)
            elif param.name.startswith("deprecated_"):  # an old spelling, hidden, same argument
                assert param.hidden and param.opts[0].lstrip("-").replace("-", "_") \
                    == param.name.removeprefix("deprecated_"), (name, param.name)
            else:
                assert param.name in OPTIONS_OF_EVERY_COMMAND | PRESENTATION, (name, param.name)
        shown = {p.name for p in cmd.params}
        assert set(specs) <= shown, (name, set(specs) - shown)


def test_negative_boolean_flag_maps_to_the_action_argument() -> None:
    from ckptrescue.cli.probe_cmd import COMMANDS

    probe = registry()["probe"]
    base = {"paths": [Path("a.pt")], "case_dir": None, "as_json": False}
    args, options = from_action.split_values(COMMANDS["probe"], probe,
                                             {**base, "arg_numeric": True, "arg_load": True})
    assert args["numeric"] is False and args["load"] is True and args["paths"] == ["a.pt"]
    args, _ = from_action.split_values(COMMANDS["probe"], probe, base)
    assert args["numeric"] is True and args["load"] is False
    assert options == {"json": False, "case": None}


def test_without_case_the_step_runs_in_a_temporary_case_that_is_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    empty = tmp_path / "run"
    empty.mkdir()
    seen: list[Path] = []
    real_create = from_action.open_case

    def spy(mode: str, case_dir: Path | None, *, title: str) -> Any:
        ctx = real_create(mode, case_dir, title=title)
        case = ctx.__enter__()
        seen.append(case.root)
        return _Exit(ctx, case)

    monkeypatch.setattr(from_action, "open_case", spy)
    result = invoke("probe", str(empty), "--json")
    assert result.returncode == 1, result.stderr
    assert '"checkpoints": []' in result.stdout
    assert "no checkpoints found" in result.stderr
    assert seen and seen[0].is_relative_to(scratch)
    records = [r["action"] for r in _records_of(seen[0])] if seen[0].exists() else []
    assert records == []  # removed when the command ended
    assert os.listdir(scratch) == []
    assert os.listdir(empty) == []


class _Exit:
    def __init__(self, ctx: Any, case: Any) -> None:
        self.ctx, self.case = ctx, case

    def __enter__(self) -> Any:
        return self.case

    def __exit__(self, *exc: Any) -> None:
        records = list(self.case.records())
        assert [r["action"] for r in records][:3] == ["case.created", "run.started",
                                                       "step.started"]
        assert any(r["action"] == "step.finished" for r in records)
        self.ctx.__exit__(*exc)


def _records_of(root: Path) -> list[dict[str, Any]]:
    from ckptrescue.record.case import Case

    return list(Case.open(root).records())


def test_a_failed_step_ends_the_command_with_its_own_error(tmp_path: Path) -> None:
    from ckptrescue.checkpoints.salvage import salvage
    from ckptrescue.errors import CkptRescueError

    missing = tmp_path / "missing.pt"
    with pytest.raises(CkptRescueError) as direct:
        salvage(missing, tmp_path / "out", case=None)
    result = CliRunner().invoke(app, ["salvage", str(missing), str(tmp_path / "out2")])
    exc = result.exception
    assert isinstance(exc, CkptRescueError), result.output
    assert (exc.message, exc.exit_code, exc.hint) == (
        direct.value.message, direct.value.exit_code, direct.value.hint)
    shown = invoke("salvage", str(missing), str(tmp_path / "out3"))
    assert shown.returncode == int(direct.value.exit_code)
    assert shown.stderr.splitlines()[0] == f"ckptrescue: error: {direct.value.message}"


def test_help_comes_from_the_action() -> None:
    probe = registry()["probe"]
    result = CliRunner().invoke(app, ["probe", "--help"])
    assert result.exit_code == 0

    def flat(text: str) -> str:
        return " ".join(text.split())

    shown = flat(result.stdout)
    assert flat(probe.description) in shown
    assert probe.examples[0] in shown
    for spec in probe.args:
        if spec.cli and not spec.positional:
            assert spec.option in shown and flat(spec.help) in shown
