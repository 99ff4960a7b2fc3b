"""TUI test fixtures: a small damaged torch run (real saves), Pilot helpers, and isolation of
the user's recent-cases file.

The snapshot tests need byte-identical screens on every run, so their run directory and case live
at fixed paths under ``/tmp/ckptrescue-tui-tests`` (rebuilt per session), never under
``tmp_path`` whose name changes.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import os
import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

FIXED = Path("/tmp/ckptrescue-tui-tests")


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The TUI remembers recent cases in $XDG_STATE_HOME: never the tester's own."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


NESTED = "CKPTRESCUE_TUI_NESTED"  # set by test_cpu_independent for its inner pytest run


@pytest.fixture(scope="session", autouse=True)
def _fixed_dir_owned_then_removed():  # noqa: ANN202
    """One test session at a time owns the fixed-path directory (an exclusive ``flock``: another
    run on this machine waits; under pytest-xdist every TUI test is in one worker, the ``tui``
    group of the root conftest); it is removed when the session ends (not by a nested run,
    whose outer session holds the lock and still uses the directory)."""
    if os.environ.get(NESTED) == "1":
        yield
        return
    with open(f"{FIXED}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            shutil.rmtree(FIXED, ignore_errors=True)
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def run_dir() -> Path:
    """step-100.pt intact, step-200.pt one flipped bit, step-300.pt truncated (fixed path)."""
    from runfixture import build_run

    root = FIXED / "run"
    if root.exists():
        shutil.rmtree(root)
    build_run(root)
    return root


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
