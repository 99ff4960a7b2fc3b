"""The questions of issue #31 from the TUI: "Files verify but the run will not resume" proposes the
resume-checks playbook and "A Hugging Face model will not load offline" the hub-cache playbook;
their parameter forms are generated from the playbooks, and a guided run of resume-checks on a
real DeepSpeed step reaches the same answer as the CLI."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from cli_helpers import invoke
from tui_testlib import drive, wait_for

from ckptrescue.record.case import Case
from ckptrescue.tui.scenarios import SCENARIOS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "families"))


def _index(key: str) -> int:
    return next(i for i, s in enumerate(SCENARIOS) if s.key == key)


@pytest.mark.parametrize(("key", "playbook", "fields"), [
    ("resume", "resume-checks", {"run_dir", "checkpoint", "reference", "expected_keys",
                                 "step_dir", "reassembly_plan", "replica", "ranks"}),
    ("hub", "hub-cache", {"cache"}),
])
def test_scenario_proposes_the_playbook_with_its_form(key: str, playbook: str, fields: set[str],
                                                      tmp_path: Path) -> None:
    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.params import ParamsScreen
    from ckptrescue.tui.screens.scenario import ScenarioScreen

    app = make_app(Case.create(tmp_path / "case", title="tui"))
    seen: dict[str, object] = {}

    async def script(pilot) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, ScenarioScreen), 10, "scenarios")
        await pilot.press(*(["down"] * _index(key)), "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ParamsScreen), 10, "parameters")
        seen["playbook"] = app.screen.playbook.name
        seen["fields"] = set(app.screen.fields)
        await pilot.press("ctrl+q")

    drive(app, script)
    assert seen["playbook"] == playbook
    assert seen["fields"] == fields


def test_guided_resume_checks_reach_the_cli_answer(tmp_path: Path) -> None:
    pytest.importorskip("deepspeed")
    from f1_build import built
    from textual.widgets import Input

    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.params import ParamsScreen
    from ckptrescue.tui.screens.plan import PlanScreen
    from ckptrescue.tui.screens.run import RunScreen
    from ckptrescue.tui.screens.scenario import ScenarioScreen

    step = tmp_path / "global_step3"
    shutil.copytree(built("deepspeed") / "zero2" / "global_step3", step)
    app = make_app(Case.create(tmp_path / "case", title="tui"))
    seen: dict[str, object] = {}

    async def script(pilot) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, ScenarioScreen), 10, "scenarios")
        await pilot.press(*(["down"] * _index("resume")), "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ParamsScreen), 10, "parameters")
        app.screen.query_one("#p-run_dir", Input).value = str(step)
        app.screen.query_one("#p-ranks", Input).value = "1"
        await pilot.pause()
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen), 10, "plan preview")
        await pilot.press("g")
        await pilot.pause()
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, RunScreen), 10, "run screen")
        run = app.screen
        await wait_for(pilot, lambda: run.final is not None, 240, "the run to finish")
        seen["final"] = run.final
        await pilot.press("ctrl+q")

    drive(app, script)
    cli = invoke("playbook", "run", "resume-checks", "--case", str(tmp_path / "cli"), "--yes",
                 "--json", "-p", f"run_dir={step}", "-p", "ranks=1")
    answer = json.loads(cli.stdout)["answer"]
    assert seen["final"].answer == answer
    assert "ds_to_universal" in answer and "safe globals" in answer
