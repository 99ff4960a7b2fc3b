"""Smoke test of the real `ckptrescue tui` binary in a real terminal (tmux, 80x24).

Keys are sent with send-keys and the screen is read with capture-pane: create a case, choose
"Corrupted checkpoint", type the run directory, preview, go, and read the answer line — which
must be the answer the engine recorded in the case. The tmux session is killed in ``finally``.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from cli_helpers import EXE

from ckptrescue.engine.answer import answer_line
from ckptrescue.record.case import Case


def capture(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True,
                          text=True, timeout=10).stdout


def wait_screen(session: str, needle: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = capture(session)
        if needle in screen:
            return screen
        time.sleep(0.25)  # a real terminal: poll the pane
    raise AssertionError(f"{needle!r} never appeared; last screen:\n{screen}")


def keys(session: str, *sequence: str) -> None:
    for key in sequence:  # one at a time, as a person types: focus moves between keys
        subprocess.run(["tmux", "send-keys", "-t", session, key], check=True, timeout=10)
        time.sleep(0.15)


@pytest.mark.needs_tool("tmux")
def test_real_binary_in_tmux(run_dir: Path, tmp_path: Path) -> None:
    session = f"ckptrescue-tui-{uuid.uuid4().hex[:8]}"
    cases = tmp_path / "cases"
    cases.mkdir()
    env = f"XDG_STATE_HOME={tmp_path / 'state'}"
    command = f"env {env} TERM=xterm-256color {EXE} tui --cases-root {cases}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "24",
                    command], check=True, timeout=10, env={**os.environ, "TMUX": ""})
    try:
        first = wait_screen(session, "Recent cases", 30)
        assert "Open a case directory" in first and "^p palette" in first
        keys(session, "smoke", "Tab", "tmux smoke", "Tab", "pytest", "C-n")
        wait_screen(session, "What happened?", 20)
        keys(session, "Down", "Enter")
        wait_screen(session, "run_dir (path, required)", 20)
        keys(session, str(run_dir))
        wait_screen(session, "✓ ok", 10)
        keys(session, "F5")
        plan = wait_screen(session, "The plan: every step", 20)
        assert "probe [probe]" in plan
        keys(session, "g")
        wait_screen(session, "Run (y)", 10)
        keys(session, "y")
        done = wait_screen(session, "answer: resume from", 120)
        assert "run probe-checkpoints: findings" in done
        keys(session, "C-q")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            alive = subprocess.run(["tmux", "has-session", "-t", session], capture_output=True,
                                   timeout=10).returncode == 0
            if not alive:
                break
            time.sleep(0.25)
        assert not alive, "ctrl+q must quit the TUI"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True, timeout=10)
    case = Case.open(cases / "smoke")
    assert case.manifest["title"] == "tmux smoke"
    answer = answer_line(case)
    assert answer.startswith("resume from step-100.pt")
    flat = " ".join(done.split())
    assert " ".join(f"answer: {answer}".split())[:60] in flat
