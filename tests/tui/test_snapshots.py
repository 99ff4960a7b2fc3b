"""SVG snapshots of the main screens at 80x24 (pytest-textual-snapshot).

Deterministic by construction: the cases and the run directory live at fixed paths under
/tmp/ckptrescue-tui-tests, torch saves use fixed seeds, the screens show no clock, no timestamps
and no hashes, and inputs do not blink in headless runs. Update with ``--snapshot-update`` only
after reading the diff report.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tui_testlib import FIXED, wait_for

from ckptrescue.record.case import Case


def fresh_case(name: str, title: str = "run 7 will not resume") -> Case:
    root = FIXED / "cases" / name
    if root.exists():
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    return Case.create(root, title=title, examiner="alice")


def probed_case(run_dir: Path, name: str) -> Case:
    """A case where probe-checkpoints already ran (driven through the engine, as the CLI does)."""
    from ckptrescue.engine import executor as engine

    case = fresh_case(name)
    for _ in engine.run(engine.prepare("probe-checkpoints", {"run_dir": str(run_dir)}),
                        case=case):
        pass
    return case


def test_start_screen(snap_compare) -> None:
    """Start: case directory, title/examiner, open/create, recent cases under the root."""
    from ckptrescue.tui.app import make_app

    root = FIXED / "start-root"
    if root.exists():
        shutil.rmtree(root)
    Case.create(root / "INC-041", title="loss went NaN after restart", examiner="bob")
    Case.create(root / "INC-042", title="run 7 will not resume", examiner="alice")
    assert snap_compare(make_app(None, cases_root=root))


def test_scenario_screen(snap_compare) -> None:
    """What happened? The proposal for a disk or node failure."""
    from ckptrescue.tui.app import make_app

    assert snap_compare(make_app(fresh_case("scenario")))


def test_params_inline_error(snap_compare) -> None:
    """probe-checkpoints parameters with a run directory that does not exist."""
    from ckptrescue.tui.app import make_app

    app = make_app(fresh_case("params"))

    async def before(pilot) -> None:
        await pilot.press("down", "enter")
        await pilot.pause()
        await pilot.press(*"/no/such/run")

    assert snap_compare(app, run_before=before)


def test_plan_preview(snap_compare, run_dir: Path) -> None:
    """Every step and every command, before anything runs."""
    from textual.widgets import Input

    from ckptrescue.tui.app import make_app

    app = make_app(fresh_case("plan"))

    async def before(pilot) -> None:
        await pilot.press("down", "enter")
        await pilot.pause()
        app.screen.query_one("#p-run_dir", Input).value = str(run_dir)
        await pilot.press("f5")

    assert snap_compare(app, run_before=before)


def test_run_screen_finished(snap_compare, run_dir: Path) -> None:
    """The step list with final statuses, the log and the answer line."""
    from textual.widgets import Input

    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.run import RunScreen

    app = make_app(fresh_case("run"))

    async def before(pilot) -> None:
        await pilot.press("down", "enter")
        await pilot.pause()
        app.screen.query_one("#p-run_dir", Input).value = str(run_dir)
        await pilot.press("f5")
        await pilot.pause()
        await pilot.press("g")
        await pilot.pause()
        await pilot.press("y")
        await wait_for(pilot, lambda: isinstance(app.screen, RunScreen)
                       and app.screen.final is not None, 120, "the run")

    assert snap_compare(app, run_before=before)


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light"])
def test_findings_screen(snap_compare, run_dir: Path, theme: str) -> None:
    """Evidence -> checkpoint -> tensor tree with verdicts, and a finding's details."""
    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.findings import FindingsScreen

    app = make_app(probed_case(run_dir, f"findings-{theme}"))

    async def before(pilot) -> None:
        app.theme = theme
        await pilot.press("f7")
        await wait_for(pilot, lambda: isinstance(app.screen, FindingsScreen)
                       and app.screen.model is not None, 60, "findings")
        await pilot.press("down", "down", "down", "down")

    assert snap_compare(app, run_before=before)
