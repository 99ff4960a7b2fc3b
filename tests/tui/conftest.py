"""TUI test fixtures: a small damaged torch run (real saves) and isolation of the user's
recent-cases file. What the tests import (Pilot helpers, ``FIXED``, ``NESTED``) is in
``tui_testlib.py``.

The snapshot tests need byte-identical screens on every run, so their run directory and case live
at fixed paths under ``/tmp/ckptrescue-tui-tests`` (rebuilt per session), never under
``tmp_path`` whose name changes.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from tui_testlib import FIXED, NESTED  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The TUI remembers recent cases in $XDG_STATE_HOME: never the tester's own."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


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
