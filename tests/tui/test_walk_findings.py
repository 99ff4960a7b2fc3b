"""Every node of the findings tree, highlighted one by one over a case that has every kind of
result (hostile names included): no node may crash the screen; and a crash of the TUI exits
non-zero."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tui_testlib import drive, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))

from conftest_cases import make_full_case, make_hostile_case  # noqa: E402


def _nodes(tree: Any) -> list[Any]:
    out: list[Any] = []

    def walk(node: Any) -> None:
        for child in node.children:
            out.append(child)
            walk(child)

    walk(tree.root)
    return out


def test_every_node_of_the_findings_tree_shows_its_details(tmp_path: Path) -> None:
    from textual.widgets import Static, Tree

    from ckptrescue.tui.app import make_app
    from ckptrescue.tui.screens.findings import FindingsScreen

    case = make_full_case(make_hostile_case(tmp_path))
    app = make_app(case)
    seen: dict[str, str] = {}

    async def script(pilot: Any) -> None:
        await pilot.pause()
        screen = FindingsScreen()
        await app.push_screen(screen)
        await wait_for(pilot, lambda: screen.model is not None, 60, "the case data")
        tree = screen.query_one("#tree", Tree)
        for node in _nodes(tree):
            node.expand()
        await pilot.pause()
        for node in _nodes(tree):
            tree.move_cursor(node)
            await pilot.pause()
            assert app.screen is screen, f"the screen changed at {node.label}"
            seen[str(node.label)] = str(screen.query_one("#detail", Static).render())
        await pilot.press("ctrl+q")

    drive(app, script)
    assert app.return_code in (0, None)
    salvaged = next(v for k, v in seen.items() if k.startswith("salvaged"))
    assert "lost: 1" in salvaged and "CRC" in salvaged  # lost items are objects
    multirank = next(v for k, v in seen.items() if k.startswith("multi-rank"))
    assert "write global_step2" in multirank and "zero_pp_rank_1_" in multirank
    spot = next(v for k, v in seen.items() if k.startswith("spot check"))
    assert ">>" in spot and "(empty)" in spot and "seed 3" in spot
    assert any("training state" in k for k in seen)


def test_a_crash_exits_non_zero(tmp_path: Path, monkeypatch: Any) -> None:
    from cli_helpers import invoke

    from ckptrescue.tui.screens import findings

    def boom(*_a: Any, **_k: Any) -> list[str]:
        raise TypeError("sequence item 0: expected str instance, dict found")

    # the first screen's detail pane calls this: the app fails as it did on the salvaged leaf
    monkeypatch.setattr(findings.FindingsScreen, "_detail_lines", boom)
    from ckptrescue.tui import app as tui_app

    original = tui_app.make_app

    def make_app(*args: Any, **kwargs: Any) -> Any:
        app = original(*args, **kwargs)
        real_run = app.run

        def run(**kw: Any) -> Any:
            async def script() -> None:
                async with app.run_test(size=(80, 24)) as pilot:
                    await pilot.pause()
                    await app.push_screen(findings.FindingsScreen())
                    await pilot.pause(0.5)
            import asyncio

            try:
                asyncio.run(script())
            except Exception:  # noqa: BLE001 - run_test re-raises; the app's code is what counts
                pass
            return None
        app.run = run  # type: ignore[method-assign]
        del real_run
        return app

    monkeypatch.setattr(tui_app, "make_app", make_app)
    result = invoke("tui", "--case", str(tmp_path / "case"), "--new")
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "stopped on an error" in result.stderr
