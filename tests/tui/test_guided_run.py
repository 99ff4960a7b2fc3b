"""A whole guided run driven with Textual's Pilot, on real torch checkpoints with real damage.

start (create a case) -> "Corrupted checkpoint" -> probe-checkpoints -> run_dir validated inline
-> plan preview -> go -> run -> findings tree -> report. The TUI must reach the same answer and
verdicts as `ckptrescue playbook run ... --json` on the same run directory, and leave the
evidence unchanged.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from cli_helpers import EXE
from tui_testlib import drive, screen_text, tree_hash, tree_labels, wait_for

from ckptrescue.engine.answer import answer_line, latest_checkpoints
from ckptrescue.record.case import Case


def cli_run(run_dir: Path, case_dir: Path) -> dict:
    res = subprocess.run([EXE, "playbook", "run", "probe-checkpoints", "--case", str(case_dir),
                          "-p", f"run_dir={run_dir}", "--json"], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 1, res.stderr  # done, problems found
    return json.loads(res.stdout)


def test_guided_run_reaches_the_cli_verdicts(run_dir: Path, tmp_path: Path) -> None:
    from textual.widgets import Input, Tree

    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.findings import FindingsScreen
    from ckptrescue.tui.screens.params import ParamsScreen
    from ckptrescue.tui.screens.plan import PlanScreen
    from ckptrescue.tui.screens.report import ReportScreen
    from ckptrescue.tui.screens.run import RunScreen
    from ckptrescue.tui.screens.scenario import ScenarioScreen

    before = tree_hash(run_dir)
    cases = tmp_path / "cases"
    cases.mkdir()
    app = make_app(None, cases_root=cases)
    seen: dict[str, object] = {}

    async def script(pilot) -> None:
        # start: create a case under cases_root
        await pilot.press(*"inc-1")
        app.screen.query_one("#title", Input).value = "run 7 will not resume"
        app.screen.query_one("#examiner", Input).value = "pytest"
        await pilot.press("ctrl+n")
        await wait_for(pilot, lambda: isinstance(app.screen, ScenarioScreen), 10, "scenarios")
        assert (cases / "inc-1" / "case.json").is_file()
        # what happened: corrupted checkpoint -> probe-checkpoints
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ParamsScreen), 10, "parameters")
        assert app.screen.playbook.name == "probe-checkpoints"
        # inline validation: a bad path is named, before anything runs
        field = app.screen.query_one("#p-run_dir", Input)
        field.value = str(tmp_path / "no-such-run")
        await pilot.pause()
        assert "does not exist" in screen_text(app)
        await pilot.press("f5")
        assert isinstance(app.screen, ParamsScreen), "a bad parameter must not reach the plan"
        field.value = str(run_dir)
        await pilot.pause()
        await pilot.press("f5")
        await wait_for(pilot, lambda: isinstance(app.screen, PlanScreen), 10, "plan preview")
        plan_text = screen_text(app)
        assert f"static probe (zip/CRC/pickle scan/numerics) of {run_dir}" in plan_text
        assert "salvage [salvage]" in plan_text and "render the html report" in plan_text
        assert not list((cases / "inc-1").glob("report.*")), "the preview runs nothing"
        # go: explicit confirm, then the run
        await pilot.press("g")
        await pilot.pause()
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, RunScreen), 10, "run screen")
        run = app.screen
        await wait_for(pilot, lambda: run.final is not None, 240, "the run to finish")
        seen["final"] = run.final
        seen["statuses"] = dict(run.query_one("#steps").statuses)
        seen["run_text"] = screen_text(app)
        # findings
        await pilot.press("f7")
        await wait_for(pilot, lambda: isinstance(app.screen, FindingsScreen)
                       and app.screen.model is not None, 60, "findings")
        seen["tree"] = tree_labels(app.screen.query_one(Tree))
        seen["findings_text"] = screen_text(app)
        # report
        await pilot.press("f8")
        await wait_for(pilot, lambda: isinstance(app.screen, ReportScreen)
                       and "report written" in screen_text(app), 60, "report")
        seen["report_text"] = screen_text(app)
        await pilot.press("ctrl+q")

    drive(app, script)

    case = Case.open(cases / "inc-1")
    final = seen["final"]
    assert final.status == "findings"
    assert seen["statuses"] == {"probe": "findings", "rank": "ok", "salvage": "findings",
                                "report": "ok"}
    # the same answer as the CLI on the same evidence, and as the case itself says
    cli = cli_run(run_dir, tmp_path / "cli-case")
    assert final.answer == cli["answer"] == answer_line(case)
    assert final.answer.startswith("resume from step-100.pt")
    assert f"answer: {final.answer}" in seen["run_text"]
    # verdicts in the tree are the case's (and the CLI case's) verdicts
    tui_verdicts = {Path(p).name: c.verdict for p, c in latest_checkpoints(case).items()}
    cli_verdicts = {Path(p).name: c.verdict
                    for p, c in latest_checkpoints(Case.open(tmp_path / "cli-case")).items()}
    assert tui_verdicts == cli_verdicts == {"step-100.pt": "intact", "step-200.pt": "damaged",
                                            "step-300.pt": "truncated"}
    labels = seen["tree"]
    for name, verdict in tui_verdicts.items():
        assert any(name in label and f"[{verdict}]" in label for label in labels), (name, labels)
    damaged = latest_checkpoints(case)[str(run_dir / "step-200.pt")].damaged_tensors
    assert damaged and all(any(t in label and "[damaged]" in label for label in labels)
                           for t in damaged)
    assert f"resume from: {run_dir / 'step-100.pt'}" in seen["findings_text"]
    # the report and the case verification
    report = cases / "inc-1" / "report.html"
    assert f"report written: {report.resolve()}" in seen["report_text"]
    assert "case verify: OK" in seen["report_text"]
    assert report.is_file() and case.verify().ok
    # evidence unchanged
    assert tree_hash(run_dir) == before
