"""What the TUI tests import: Pilot helpers, screen text, the fixed directory's place and the
nested-run flag (``conftest.py`` holds the fixtures; a test module importing ``conftest`` by name
would get whichever folder's conftest pytest loaded last when several folders are collected)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

FIXED = Path("/tmp/ckptrescue-tui-tests")
NESTED = "CKPTRESCUE_TUI_NESTED"  # set by test_cpu_independent for its inner pytest run


def tree_hash(path: Path) -> str:
    digest = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(f.relative_to(path)).encode())
        digest.update(f.read_bytes())
    return digest.hexdigest()


def drive(app: Any, script: Callable[[Any], Awaitable[None]]) -> None:
    """Run ``script(pilot)`` against ``app`` headless at 80x24 (no pytest-asyncio needed)."""

    async def main() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await script(pilot)

    asyncio.run(main())


async def wait_for(pilot: Any, condition: Callable[[], bool], timeout: float = 120.0,
                   what: str = "condition") -> None:
    """Let the app process messages until ``condition()`` holds (Pilot.pause, no sleeps)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await pilot.pause(0.05)


def screen_text(app: Any) -> str:
    """Every Static/Label/Log/Tree text on the current screen, for plain assertions."""
    from textual.widgets import Log, Static, Tree

    parts: list[str] = []
    for widget in app.screen.query("*"):
        if isinstance(widget, Static):
            parts.append(str(widget.render()))
        elif isinstance(widget, Log):
            parts.extend(widget.lines)
        elif isinstance(widget, Tree):
            parts.extend(tree_labels(widget))
    return "\n".join(parts)


def tree_labels(tree: Any) -> list[str]:
    out: list[str] = []

    def walk(node: Any) -> None:
        for child in node.children:
            out.append(str(child.label))
            walk(child)

    walk(tree.root)
    return out
