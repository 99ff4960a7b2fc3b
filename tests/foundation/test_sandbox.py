"""The sandbox child: results come back as data; crashes, OOM and hangs are outcomes."""

from __future__ import annotations

from ckptrescue.case import Case
from ckptrescue.effects.sandbox import run_child


def test_child_result_comes_back(case: Case) -> None:
    out = run_child("echo", {"action": "echo", "x": 1}, case=case, timeout_s=60)
    assert out.status == "ok" and out.result["echo"]["x"] == 1
    assert any(r["action"] == "sandbox.run" for r in case.records())


def test_memory_bomb_is_contained(case: Case) -> None:
    out = run_child("echo", {"action": "allocate", "mb": 2048}, case=case, memory_mb=256,
                    timeout_s=60)
    assert out.status in {"killed", "crashed"}, out


def test_hang_is_a_timeout(case: Case) -> None:
    out = run_child("echo", {"action": "sleep", "seconds": 30}, case=case, timeout_s=1)
    assert out.status == "timeout"


def test_abort_is_a_crash_with_signal(case: Case) -> None:
    out = run_child("echo", {"action": "abort"}, case=case, timeout_s=30)
    assert out.status == "crashed" and out.signal_name == "SIGABRT"


def test_exception_is_a_crash_not_ours(case: Case) -> None:
    out = run_child("echo", {"action": "raise"}, case=case, timeout_s=30)
    assert out.status == "crashed" and "ValueError: boom" in out.stderr_tail
