"""A one-step command (``exec``, and every direct command with ``--case``) is a new run each
time: running the same argv again after an attempt that exited non-zero runs it again instead of
taking it for a resume of the first attempt (issue 20: ``exec`` three times exited 1, 4, 1)."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import invoke

from ckptrescue.engine import executor as engine
from ckptrescue.engine.events import StepFinished, StepSkipped
from ckptrescue.record.case import Case


def test_same_exec_argv_three_times_runs_three_times(tmp_path: Path) -> None:
    case_dir = tmp_path / "case"
    assert invoke("case", "new", str(case_dir)).returncode == 0
    missing = str(tmp_path / "nonexistent")
    codes = []
    for _ in range(3):
        proc = invoke("exec", "--case", str(case_dir), "--", "cat", missing)
        assert "internal error" not in proc.stderr, proc.stderr
        assert "exit 1" in proc.stderr, proc.stderr
        codes.append(proc.returncode)
    assert codes == [1, 1, 1]
    runs = [r for r in Case.open(case_dir).records("tool.run")
            if r["details"]["argv"][:2] == ["cat", missing]]
    assert len(runs) == 3, "each exec ran the command"


def test_single_step_plan_resumes_only_when_asked(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "case")
    plan = engine.single_step("exec", {"argv": ["echo", "hi"]})
    # an attempt that finished its step but not the run (the consumer stopped reading events)
    first = engine.run(plan, case=case)
    next(e for e in first if isinstance(e, StepFinished))
    first.close()
    again = list(engine.run(engine.single_step("exec", {"argv": ["echo", "hi"]}), case=case))
    assert not any(isinstance(e, StepSkipped) for e in again)
    assert [e.status for e in again if isinstance(e, StepFinished)] == ["ok"]
    resumed = list(engine.run(plan, case=case, resume=True))
    assert not any(isinstance(e, StepSkipped) for e in resumed), "the second attempt completed"
    third = engine.run(plan, case=case)
    next(e for e in third if isinstance(e, StepFinished))
    third.close()
    resumed = list(engine.run(plan, case=case, resume=True))
    assert any(isinstance(e, StepSkipped) for e in resumed), "asked to resume: it resumes"


def test_exec_records_its_run_as_finished(tmp_path) -> None:
    """``ckptrescue exec`` drives the engine to the end: the run's ``run.finished`` is logged."""
    case_dir = tmp_path / "case"
    assert invoke("case", "new", str(case_dir)).returncode == 0
    assert invoke("exec", "--case", str(case_dir), "--", "true").returncode == 0
    case = Case.open(case_dir)
    assert len(list(case.records("run.finished"))) == 1
