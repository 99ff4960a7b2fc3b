"""Keyboard-first: the command palette reaches the screens, ctrl+t switches light/dark, and a
missing case directory is a one-line message on the start screen, not a crash."""

from __future__ import annotations

from pathlib import Path

from tui_testlib import drive, screen_text, wait_for

from ckptrescue.record.case import Case


def test_palette_opens_report_and_theme_toggles(tmp_path: Path) -> None:
    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.report import ReportScreen

    case = Case.create(tmp_path / "case", title="palette")
    app = make_app(case)
    seen: dict[str, str] = {}

    async def script(pilot) -> None:
        await pilot.pause()
        seen["theme0"] = app.theme
        await pilot.press("ctrl+t")
        seen["theme1"] = app.theme
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"Report")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ReportScreen)
                       and "report written" in screen_text(app), 60, "report via the palette")
        seen["text"] = screen_text(app)

    drive(app, script)
    assert {seen["theme0"], seen["theme1"]} == {"textual-dark", "textual-light"}
    assert f"report written: {(tmp_path / 'case' / 'report.html').resolve()}" in seen["text"]
    assert "case verify: OK" in seen["text"]


def test_open_missing_case_is_one_line(tmp_path: Path) -> None:
    from textual.widgets import Input

    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.start import StartScreen

    app = make_app(None, cases_root=tmp_path)
    seen: dict[str, object] = {}

    async def script(pilot) -> None:
        await pilot.pause()
        app.screen.query_one("#case-dir", Input).value = str(tmp_path / "nope")
        await pilot.press("ctrl+o")
        await pilot.pause()
        seen["screen"] = app.screen
        seen["text"] = screen_text(app)

    drive(app, script)
    assert isinstance(seen["screen"], StartScreen)
    assert f"{tmp_path / 'nope'}: not a case directory" in seen["text"]
    assert not (tmp_path / "nope").exists()


def test_recent_cases_are_remembered_and_reopen(tmp_path: Path) -> None:
    from textual.widgets import OptionList

    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.scenario import ScenarioScreen

    case = Case.create(tmp_path / "INC-7", title="node died mid-checkpoint", examiner="carol")

    async def first(pilot) -> None:
        await pilot.pause()
        await pilot.press("ctrl+q")

    drive(make_app(case), first)  # opening a case remembers it
    app = make_app(None)
    seen: dict[str, object] = {}

    async def second(pilot) -> None:
        await pilot.pause()
        options = app.screen.query_one("#recent", OptionList)
        seen["options"] = [str(options.get_option_at_index(i).prompt)
                           for i in range(options.option_count)]
        options.focus()
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ScenarioScreen), 10, "reopen")
        seen["case"] = app.case.root

    drive(app, second)
    assert seen["options"] == [f"{case.root.resolve()}  node died mid-checkpoint (carol)"]
    assert seen["case"] == case.root.resolve()
