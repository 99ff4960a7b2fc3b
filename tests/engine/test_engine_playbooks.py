"""The engine and playbook layer with foundation actions (exec, confirm, case.verify, report):
linting names file and line, dry runs show commands, gates stop non-interactive runs, and an
interrupted run resumes without repeating finished steps."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from cli_helpers import (
    EXE,  # noqa: E402
    invoke,
)

from ckptrescue.engine import executor as engine
from ckptrescue.engine.events import GateReached, RunFinished, StepFinished, StepSkipped, StepStarted
from ckptrescue.errors import PlaybookError
from ckptrescue.playbook import load
from ckptrescue.playbook.lint import lint
from ckptrescue.record.case import Case


def book(tmp_path: Path, text: str, name: str = "pb.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


GOOD = """\
schema: 1
name: good
parameters:
  - name: target
    type: directory
steps:
  - id: listing
    action: exec
    with: {argv: [ls, -la, $target]}
  - id: gate
    action: confirm
    with: {prompt: "continue with $target?"}
  - id: again
    action: exec
    with: {argv: [stat, "${listing.stdout_sha256}"]}
    when: {equals: ["${listing.returncode}", 1]}
  - id: verify
    action: case.verify
"""


def test_events_in_order_and_skipped_when(tmp_path: Path) -> None:
    plan = engine.prepare(load.load_file(book(tmp_path, GOOD)), {"target": str(tmp_path)})
    plan.answers_yes = True
    case = Case.create(tmp_path / "case")
    events = list(engine.run(plan, case=case))
    kinds = [(type(e).__name__, e.step_id) for e in events
             if isinstance(e, StepStarted | StepFinished | StepSkipped)]
    assert kinds == [("StepStarted", "listing"), ("StepFinished", "listing"),
                     ("StepStarted", "gate"), ("StepFinished", "gate"),
                     ("StepSkipped", "again"),
                     ("StepStarted", "verify"), ("StepFinished", "verify")]
    assert isinstance(events[-1], RunFinished) and events[-1].status == "ok"
    actions = [r["action"] for r in case.records()]
    assert actions.count("step.started") == 3 and actions.count("step.finished") == 3
    assert case.verify().ok


def test_gate_stops_non_interactive_run_then_resumes(tmp_path: Path) -> None:
    pb = book(tmp_path, GOOD)
    c = tmp_path / "case"
    first = invoke("playbook", "run", str(pb), "--case", str(c), "-p", f"target={tmp_path}")
    assert first.returncode == 2
    assert "stopped at confirm gate 'gate'" in first.stderr
    second = invoke("playbook", "run", str(pb), "--case", str(c), "-p", f"target={tmp_path}",
                    "--yes")
    assert second.returncode == 0, second.stderr
    assert "listing skipped: already finished" in second.stdout  # the transcript: stdout
    case = Case.open(c)
    runs = [r for r in case.records("tool.run") if r["details"]["argv"][0] == "ls"]
    assert len(runs) == 1, "the finished exec step must not run twice"


def test_dry_run_prints_every_command(tmp_path: Path) -> None:
    pb = book(tmp_path, GOOD)
    res = invoke("playbook", "run", str(pb), "--case", str(tmp_path / "c"),
                 "-p", f"target={tmp_path}", "--dry-run")
    assert res.returncode == 0
    assert f"$ ls -la {tmp_path}" in res.stdout
    assert "confirm: continue with" in res.stdout
    assert not (tmp_path / "c").exists(), "a dry run creates nothing"


@pytest.mark.parametrize(("text", "line", "needle"), [
    ("schema: 1\nname: x\nsteps:\n  - id: a\n    action: imagine\n", 4, "unknown action 'imagine'"),
    ("schema: 1\nname: x\nsteps:\n  - id: a\n    action: exec\n    with: {argv: [ls, $nope]}\n",
     4, "$nope is not a declared parameter"),
    ("schema: 1\nname: x\nsteps:\n  - id: a\n    action: exec\n    with: {argv: [ls, '${b.stdout}']}\n"
     "  - id: b\n    action: exec\n    with: {argv: [ls]}\n", 4, "refers to a later step 'b'"),
    ("schema: 1\nname: x\nsteps:\n  - id: a\n    action: exec\n    with:\n"
     "      argv: [fsck, -y, /dev/sda1]\n",
     7, "the safety guard refuses fsck -y /dev/sda1"),
    ("schema: 1\nname: x\nsteps:\n  - id: a\n    action: exec\n    with: {argv: [ls], colour: red}\n",
     6, "has no argument 'colour'"),
    ("schema: 1\nname: x\nsteps:\n  - id: a\n    action: confirm\n", 4, "needs argument 'prompt'"),
    ("schema: 1\nname: x\nsteps:\n  - id: a\n    action: exec\n    with: {argv: 'ls -la'}\n",
     4, "argv as a list"),
])
def test_lint_names_file_line_and_problem(tmp_path: Path, text: str, line: int,
                                          needle: str) -> None:
    path = book(tmp_path, text)
    problems = [str(p) for p in lint(load.load_file(path))]
    assert any(p.startswith(f"{path}:{line}:") and needle in p for p in problems), problems
    res = invoke("playbook", "lint", str(path))
    assert res.returncode == 2 and needle in res.stderr


@pytest.mark.parametrize(("text", "needle"), [
    ("schema: 1\nname: x\nsteps:\n  - id: a\n    action: exec\n    colour: red\n",
     ":6: step 'a': unknown key 'colour'"),
    ("schema: 2\nname: x\nsteps: []\n", ":1: schema must be 1"),
    ("schema: 1\nname: x\nparameters:\n  - {name: p, type: blockdev}\nsteps:\n"
     "  - {id: a, action: case.verify}\n", "unknown type 'blockdev'"),
    ("schema: 1\nname: [x\n", "not valid YAML"),
])
def test_malformed_playbooks_fail_to_load_with_location(tmp_path: Path, text: str,
                                                        needle: str) -> None:
    path = book(tmp_path, text)
    with pytest.raises(PlaybookError, match=needle.replace("[", r"\[").replace("'", "'")):
        load.load_file(path)
    res = invoke("playbook", "run", str(path), "--case", str(tmp_path / "c"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.startswith("ckptrescue: error:")


def test_parameters_validated_before_anything_runs(tmp_path: Path) -> None:
    pb = book(tmp_path, GOOD)
    res = invoke("playbook", "run", str(pb), "--case", str(tmp_path / "c"),
                 "-p", "target=/no/such/dir")
    assert res.returncode == 2 and "is not an existing directory" in res.stderr
    assert not (tmp_path / "c").exists()
    res = invoke("playbook", "run", str(pb), "--case", str(tmp_path / "c"))
    assert res.returncode == 2 and "missing required parameter target" in res.stderr


SLOW = """\
schema: 1
name: slow
steps:
  - id: one
    action: exec
    with: {argv: [echo, one]}
  - id: two
    action: exec
    with: {argv: [sleep, "3"]}
  - id: three
    action: exec
    with: {argv: [echo, three]}
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_interrupted_run_resumes_without_repeating(tmp_path: Path, sig: int) -> None:
    pb = book(tmp_path, SLOW)
    c = tmp_path / "case"
    proc = subprocess.Popen([EXE, "playbook", "run", str(pb), "--case", str(c)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (c / "audit.jsonl").exists() and b'"step":"two"' in (c / "audit.jsonl").read_bytes():
            break
        time.sleep(0.1)
    if sig == signal.SIGINT:
        os.kill(proc.pid, signal.SIGINT)  # Ctrl-C: the CLI exits 130, partial results kept
        assert proc.wait(timeout=60) == 130
        assert b"interrupted" in proc.stderr.read()  # type: ignore[union-attr]
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    case = Case.open(c)
    assert case.verify().ok
    # second run (in process: only the interrupted one needs a process of its own): step one
    # is not repeated; two and three run (the same command, so two sleeps again)
    res = invoke("playbook", "run", str(pb), "--case", str(c))
    assert res.returncode == 0, res.stderr
    assert "one skipped: already finished" in res.stdout
    echo_runs = [r for r in case.records("tool.run") if r["details"]["argv"] == ["echo", "one"]]
    assert len(echo_runs) == 1
    finished = [r["details"]["step"] for r in case.records("step.finished")]
    assert finished.count("one") == 1 and finished.count("three") == 1


def test_refused_exec_step_fails_run_with_exit_3(tmp_path: Path) -> None:
    # lint refuses it first; a step built at run time (CLI single step) is refused by the runner
    plan = engine.single_step("exec", {"argv": ["wipefs", "-a", "/dev/sdz"]})
    case = Case.create(tmp_path / "case")
    events = list(engine.run(plan, case=case))
    fin = [e for e in events if isinstance(e, StepFinished)][0]
    assert fin.status == "refused" and "erases" in (fin.error or "")
    assert any(r["action"] == "tool.refused" for r in case.records())


def test_step_outputs_are_artifacts_and_answer_is_logged(tmp_path: Path) -> None:
    plan = engine.single_step("exec", {"argv": ["echo", "hi"]})
    case = Case.create(tmp_path / "case")
    list(engine.run(plan, case=case))
    fin = next(case.records("step.finished"))
    sha = fin["details"]["outputs_sha256"]
    assert json.loads(case.read_artifact(sha))["stdout"] == "hi\n"
    assert next(case.records("run.finished"))["details"]["answer"]


def test_gate_event_without_answer_is_stopped(tmp_path: Path) -> None:
    plan = engine.prepare(load.load_file(book(tmp_path, GOOD)), {"target": str(tmp_path)})
    case = Case.create(tmp_path / "case")
    events = list(engine.run(plan, case=case, confirm=lambda prompt: None))
    assert any(isinstance(e, GateReached) and e.answered is None for e in events)
    assert events[-1].status == "stopped"  # type: ignore[attr-defined]


def test_completed_run_reruns_afresh(tmp_path: Path) -> None:
    pb = book(tmp_path, GOOD)
    c = tmp_path / "case"
    argv = ["playbook", "run", str(pb), "--case", str(c), "-p", f"target={tmp_path}", "--yes"]
    assert invoke(*argv).returncode == 0
    second = invoke(*argv)
    assert second.returncode == 0 and "skipped: already finished" not in second.stderr
    runs = [r for r in Case.open(c).records("tool.run") if r["details"]["argv"][0] == "ls"]
    assert len(runs) == 2, "a completed run is not resumed: running it again runs it again"


def test_answer_says_when_nothing_could_be_examined(tmp_path: Path) -> None:
    plan = engine.single_step("exec", {"argv": ["wipefs", "-a", "/dev/sdz"]})
    case = Case.create(tmp_path / "case")
    events = list(engine.run(plan, case=case))
    assert events[-1].answer.startswith("nothing could be examined")  # type: ignore[attr-defined]


def test_lint_checks_default_and_literal_argument_types(tmp_path: Path) -> None:
    path = book(tmp_path, """\
schema: 1
name: types
parameters:
  - {name: n, type: integer, default: "ten"}
steps:
  - id: p
    action: probe
    with: {paths: notalist, load: "yes"}
  - id: r
    action: rank
    with: {run_dir: 42}
""")
    problems = [str(p) for p in lint(load.load_file(path))]
    assert any(":4:" in p and "'ten' is not an integer" in p for p in problems), problems
    assert any("'paths' must be a list" in p for p in problems)
    assert any("'load' must be true or false" in p for p in problems)
    assert any("'run_dir' must be text" in p for p in problems)
