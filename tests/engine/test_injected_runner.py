"""One runner per run, injected: every tool a step's library code runs goes through the runner
the engine was given (StepContext.runner), so a test (or the TUI) can pass its own."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ckptrescue.effects.runner import SubprocessRunner, ToolCall, ToolResult
from ckptrescue.engine import executor as engine
from ckptrescue.record.case import Case


class RecordingRunner(SubprocessRunner):
    """Runs tools as the kit does and remembers every argv it was asked to run."""

    def __init__(self, case: Case) -> None:
        super().__init__(case)
        self.seen: list[tuple[str, ...]] = []

    def run(self, call: ToolCall, *, cancel: threading.Event | None = None) -> ToolResult:
        self.seen.append(tuple(call.argv))
        return super().run(call, cancel=cancel)


def _tool_runs(case: Case) -> list[tuple[str, ...]]:
    return [tuple(r["details"]["argv"]) for r in case.records()
            if r["action"] in {"tool.run", "tool.refused"}]


def test_triage_runs_its_tools_through_the_injected_runner(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "case")
    runner = RecordingRunner(case)
    plan = engine.single_step("triage", {"seconds": 0})
    events = list(engine.run(plan, case=case, runner=runner))
    assert events[-1].status in {"ok", "findings"}
    assert runner.seen and runner.seen[0][0] == "dmesg"
    assert _tool_runs(case) == runner.seen  # nothing ran around it


@pytest.mark.privileged
def test_fs_inspect_attaches_through_the_injected_runner(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "case")
    image = tmp_path / "blank.img"
    image.write_bytes(b"\0" * (1 << 20))
    runner = RecordingRunner(case)
    plan = engine.single_step("fs.inspect", {"target": str(image), "health": False})
    list(engine.run(plan, case=case, runner=runner))
    tools = [argv[0] for argv in runner.seen]
    assert "losetup" in tools  # the loop device: storage/loops.attach, not a runner of its own
    assert "blkid" in tools
    assert _tool_runs(case) == runner.seen
