"""Confirm gates answered in a modal, a safe cancel, and resume — on the real engine and runner.

A small playbook (ls, a confirm gate, a 3-second sleep, case verify) runs in the run screen:
"not now" at the gate stops the run; resume asks again; cancel during the sleep ends the run as
cancelled; resume skips every finished step (ls runs once in the whole case) and finishes.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from tui_testlib import drive, wait_for

from ckptrescue.engine import executor as engine
from ckptrescue.playbook import load
from ckptrescue.record.case import Case

GATED = """\
schema: 1
name: gated
parameters:
  - {name: target, type: directory}
steps:
  - id: listing
    action: exec
    with: {argv: [ls, -la, $target]}
  - id: gate
    action: confirm
    with: {prompt: "continue with $target?"}
  - id: slow
    action: exec
    with: {argv: [sleep, "3"]}
    on_failure: continue
  - id: verify
    action: case.verify
"""


def test_gate_cancel_and_resume(tmp_path: Path) -> None:
    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.gate import GateModal
    from ckptrescue.tui.screens.run import RunScreen

    book = tmp_path / "gated.yaml"
    book.write_text(textwrap.dedent(GATED))
    target = tmp_path / "target"
    target.mkdir()
    plan = engine.prepare(load.load_file(book), {"target": str(target)})
    case = Case.create(tmp_path / "case", title="gates")
    app = make_app(case)
    finals: list[str] = []

    async def script(pilot) -> None:
        await pilot.pause()
        screen = RunScreen(plan)
        await app.push_screen(screen)
        # the gate, in a modal: "not now" stops the run (resumable)
        await wait_for(pilot, lambda: isinstance(app.screen, GateModal), 60, "the gate")
        assert app.screen.prompt == f"continue with {target}?"
        await pilot.press("escape")
        await wait_for(pilot, lambda: screen.final is not None, 60, "stop at the gate")
        finals.append(screen.final.status)
        assert screen.final.failed_step == "gate"
        # resume: the gate asks again; yes; cancel during the sleep
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, GateModal), 60, "the gate again")
        assert screen.query_one("#steps").statuses["listing"] == "resumed"
        await pilot.press("y")
        await wait_for(pilot, lambda: screen.query_one("#steps").statuses["slow"] == "running",
                       60, "the slow step")
        await pilot.press("c")
        await wait_for(pilot, lambda: screen.final is not None, 60, "the cancel")
        finals.append(screen.final.status)
        statuses = dict(screen.query_one("#steps").statuses)
        assert statuses["verify"] == "pending", "nothing runs after a cancel"
        # resume again: finished steps are skipped, the cancelled one runs again
        await pilot.press("r")
        await wait_for(pilot, lambda: screen.final is not None and screen.final.status == "ok",
                       60, "the resumed run")
        finals.append(screen.final.status)
        final_statuses = dict(screen.query_one("#steps").statuses)
        assert final_statuses == {"listing": "resumed", "gate": "resumed", "slow": "ok",
                                  "verify": "ok"}
        await pilot.press("ctrl+q")

    drive(app, script)
    assert finals == ["stopped", "cancelled", "ok"]
    runs = [r["details"]["argv"][0] for r in case.records("tool.run")]
    assert runs.count("ls") == 1, "a finished step must not run again on resume"
    assert runs.count("sleep") == 2
    assert len(list(case.records("gate.confirmed"))) == 1
    assert [r["details"]["status"] for r in case.records("run.finished")] == finals
    assert case.verify().ok


def test_quit_during_a_gate_ends_the_run_cleanly(tmp_path: Path) -> None:
    """ctrl+q while a gate waits: the worker gets "no answer", the run is recorded as stopped
    (resumable) and the app exits without hanging."""
    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.gate import GateModal
    from ckptrescue.tui.screens.run import RunScreen

    book = tmp_path / "gated.yaml"
    book.write_text(textwrap.dedent(GATED))
    target = tmp_path / "target"
    target.mkdir()
    plan = engine.prepare(load.load_file(book), {"target": str(target)})
    case = Case.create(tmp_path / "case", title="quit")
    app = make_app(case)

    async def script(pilot) -> None:
        await pilot.pause()
        await app.push_screen(RunScreen(plan))
        await wait_for(pilot, lambda: isinstance(app.screen, GateModal), 60, "the gate")
        await pilot.press("ctrl+q")

    drive(app, script)
    finished = [r["details"] for r in case.records("run.finished")]
    assert [(d["status"], d["failed_step"]) for d in finished] == [("stopped", "gate")]
    assert case.verify().ok
