"""The scenario list's right pane describes the highlighted entry's playbook: the first one as
the screen opens, the next when the highlight moves, the first again when it comes back. (The
screen's first highlight repeats what its mount described; the pane is not built twice for it,
which the first screen's time to draw paid.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tui_testlib import drive, wait_for

from ckptrescue.record.case import Case


def test_the_pane_follows_the_highlight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from textual.widgets import Static

    from ckptrescue.playbook import load
    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.scenarios import SCENARIOS
    from ckptrescue.tui.screens.scenario import ScenarioScreen

    loaded: list[str] = []
    real = load.load_file

    def counting(path: Path) -> Any:
        loaded.append(path.stem)
        return real(path)

    monkeypatch.setattr(load, "load_file", counting)
    app = make_app(Case.create(tmp_path / "case", title="t"))
    seen: list[str] = []

    def pane() -> str:
        return str(app.screen.query_one("#about-text", Static).render())

    async def script(pilot: Any) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, ScenarioScreen), 10, "scenarios")
        await wait_for(pilot, lambda: "Proposed playbook" in pane(), 10, "the first description")
        seen.append(pane())
        await pilot.pause()
        assert loaded == [SCENARIOS[0].playbook]  # the mount's; its first highlight loads none
        for key in ("down", "up"):
            before = pane()
            await pilot.press(key)
            await wait_for(pilot, lambda b=before: pane() != b, 10, f"the pane after {key}")
            seen.append(pane())

    drive(app, script)
    first, second = SCENARIOS[0], SCENARIOS[1]
    assert first.playbook != second.playbook
    assert seen[0].startswith(first.hint)
    assert f"Proposed playbook: {first.playbook}" in seen[0]
    assert seen[1].startswith(second.hint)
    assert f"Proposed playbook: {second.playbook}" in seen[1]
    assert seen[2] == seen[0]
    assert loaded == [first.playbook, second.playbook, first.playbook]
