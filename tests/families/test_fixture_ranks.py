"""How the family writers start their ranks (``fixtures.families.run_ranks``): forked after the
imports (``preload``, and ``late`` where installed), and never left behind. A rank that hangs
fails the build within its deadline and is killed; a writer killed with -9 takes its ranks with
it (a hung rank, waiting for its peers, used to outlive a killed build)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from process_helpers import still_running

psutil = pytest.importorskip("psutil")
pytest.importorskip("torch")
REPO = Path(__file__).resolve().parents[2]

WRITER = r"""
import builtins, os, sys, time
from pathlib import Path
from fixtures.families import run_ranks

def rank(index, out, hang):
    # a forked rank has the writer's memory: what the writer set after starting, and torch
    # imported; a spawned rank would start a fresh interpreter
    Path(out, f"inherited{index}").write_text(str(getattr(builtins, "WRITER_PID", "")))
    # what run_ranks imported late (colorsys) is there; a late module that is not installed
    # was skipped
    Path(out, f"late{index}").write_text(str("colorsys" in sys.modules))
    Path(out, f"rank{index}").write_text(str(os.getpid()))
    if hang and index == 1:
        time.sleep(600)

builtins.WRITER_PID = os.getpid()
assert "colorsys" not in sys.modules
run_ranks(rank, (sys.argv[1], sys.argv[2] == "hang"), 2, preload=("torch",),
          deadline_s=float(sys.argv[3]), late=("colorsys", "no_such_package.module"))
print("DONE")
"""


def _writer(out: Path, mode: str, deadline: float) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(out), mode, str(deadline)],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _ranks(out: Path, timeout: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = sorted(out.glob("rank*"))
        if len(files) == 2 and all(f.read_text() for f in files):
            return [int(f.read_text()) for f in files]
        time.sleep(0.05)
    raise AssertionError("the ranks never started")


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_ranks_are_forked_and_finish(tmp_path: Path) -> None:
    proc = _writer(tmp_path, "ok", 120)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and out.strip() == "DONE", err[-2000:]
    pids = [int(f.read_text()) for f in sorted(tmp_path.glob("rank*"))]
    assert len(pids) == 2 and proc.pid not in pids and still_running(pids) == []
    assert {f.read_text() for f in tmp_path.glob("inherited*")} == {str(proc.pid)}
    assert [f.read_text() for f in sorted(tmp_path.glob("late*"))] == ["True", "True"]


def test_a_hung_rank_fails_the_build_at_its_deadline_and_is_killed(tmp_path: Path) -> None:
    proc = _writer(tmp_path, "hang", 3)
    pids = _ranks(tmp_path)
    try:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode != 0 and "DONE" not in out
        assert "still running after 3 s: killed" in err, err[-2000:]
        assert still_running(pids) == []
    finally:
        _kill([proc.pid, *pids])


def test_a_writer_killed_with_9_leaves_no_rank(tmp_path: Path) -> None:
    proc = _writer(tmp_path, "hang", 600)
    pids = _ranks(tmp_path)
    try:
        proc.kill()
        proc.wait(timeout=30)
        assert still_running(pids) == []
    finally:
        _kill(pids)
