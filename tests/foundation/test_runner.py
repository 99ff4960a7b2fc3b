"""The guarded runner against real processes: argv only, refusal recorded, timeouts, output caps,
stdout/stderr as artifacts, minimal environment, secrets redacted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptrescue.effects.runner import Secret, SubprocessRunner, ToolCall
from ckptrescue.errors import ToolMissingError
from ckptrescue.record.case import Case
from fixtures.det import det_bytes


def _records(case: Case, action: str) -> list[dict]:
    return [r for r in case.records() if r["action"] == action]


def test_allowed_command_runs_and_outputs_become_artifacts(case: Case) -> None:
    runner = SubprocessRunner(case)
    result = runner.run(ToolCall.of("echo", "hello world"))
    assert result.returncode == 0 and result.stdout == "hello world\n"
    assert case.read_artifact(result.stdout_sha256) == b"hello world\n"
    run = _records(case, "tool.run")[-1]
    assert run["details"]["argv"] == ["echo", "hello world"]
    assert result.stdout_sha256 in run["artifacts"]
    assert _records(case, "tool.version")[0]["details"]["tool"] == "echo"
    assert case.verify().ok


def test_refused_command_never_runs_and_is_recorded(case: Case, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    runner = SubprocessRunner(case)
    result = runner.run(ToolCall.of("touch", str(marker)))
    assert result.refused and not marker.exists()
    refused = _records(case, "tool.refused")[-1]
    assert refused["details"]["reason"] == result.refused


def test_shell_text_is_one_argument_not_a_shell(case: Case, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    result = SubprocessRunner(case).run(ToolCall.of("echo", f"x; touch {marker}"))
    assert result.stdout.strip() == f"x; touch {marker}"
    assert not marker.exists()


def test_timeout_kills_the_process_group(case: Case) -> None:
    result = SubprocessRunner(case).run(ToolCall.of("sleep", "30", timeout_s=0.5))
    assert result.timed_out and result.duration_s < 10
    assert _records(case, "tool.run")[-1]["details"]["timed_out"] is True


def test_output_cap_truncates_and_flags(case: Case, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(det_bytes(300_000, 1))
    result = SubprocessRunner(case).run(ToolCall.of("cat", str(big), max_output_bytes=10_000))
    assert result.truncated
    assert len(case.read_artifact(result.stdout_sha256)) == 10_000
    assert result.returncode == 0


def test_nonzero_exit_is_data_not_an_exception(case: Case) -> None:
    result = SubprocessRunner(case).run(ToolCall.of("ls", "/definitely/not/here"))
    assert result.returncode != 0 and "No such file" in result.stderr


def test_missing_tool_raises_one_line_error(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ToolMissingError, match="not installed"):
        SubprocessRunner(case).run(ToolCall.of("xfs_info", "/dev/null"))


def test_environment_is_minimal_and_c_locale(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "topsecret")
    runner = SubprocessRunner(case)
    runner.run(ToolCall.of("grep", "-c", "", "/proc/self/environ"))
    env = Path("/proc/self/environ")  # not ours; check via the child's output instead
    assert env.exists()
    result = runner.run(ToolCall.of("cat", "/proc/self/environ"))
    child_env = dict(kv.split("=", 1) for kv in result.stdout.split("\0") if "=" in kv)
    assert child_env["LC_ALL"] == "C"
    assert "AWS_SECRET_ACCESS_KEY" not in child_env


def test_secret_arguments_are_redacted_in_the_log(case: Case) -> None:
    result = SubprocessRunner(case).run(ToolCall(argv=("echo", Secret("hunter2"))))
    assert result.stdout.strip() == "hunter2"
    log = case.audit.path.read_text()
    assert "hunter2" not in log and "****" in log


def test_dry_run_runs_nothing_and_logs_nothing(case: Case, tmp_path: Path) -> None:
    before = len(list(case.records()))
    result = SubprocessRunner(case, dry_run=True).run(ToolCall.of("ls", str(tmp_path)))
    assert result.dry_run and result.returncode is None
    assert len(list(case.records())) == before


def test_writing_into_evidence_is_refused(case: Case, tmp_path: Path) -> None:
    evidence = tmp_path / "disk.img"
    evidence.write_bytes(b"\0" * 4096)
    case.add_evidence(kind="image", source=str(evidence), acquired_how="test")
    result = SubprocessRunner(case).run(
        ToolCall.of("dd", "if=/dev/zero", f"of={evidence}", "count=1"))
    assert result.refused and "evidence" in result.refused
    assert evidence.read_bytes() == b"\0" * 4096


def test_audit_record_has_required_fields(case: Case) -> None:
    SubprocessRunner(case).run(ToolCall.of("true"))
    rec = _records(case, "tool.run")[-1]
    for key in ("argv", "executable", "cwd", "returncode", "duration_s", "stdout_sha256",
                "stderr_sha256", "truncated", "timed_out"):
        assert key in rec["details"], key
    assert json.dumps(rec)


_INTERRUPTED = """
import sys
from ckptrescue.record.case import Case
from ckptrescue.effects.runner import SubprocessRunner, ToolCall
case = Case.open(sys.argv[1])
print("ready", flush=True)
SubprocessRunner(case).run(ToolCall.of("sleep", "987.5"))
"""


def test_ctrl_c_never_leaves_the_tool_running(case: Case) -> None:
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-c", _INTERRUPTED, str(case.root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    time.sleep(0.2)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "sleep 987.5" not in ps
    assert any(r["action"] == "tool.interrupted" for r in case.records())
    assert case.verify().ok


def test_a_renamed_program_given_as_a_path_is_refused(case: Case, tmp_path: Path) -> None:
    import shutil

    fake = tmp_path / "bin" / "cat"
    fake.parent.mkdir()
    fake.symlink_to(shutil.which("touch"))  # "cat" that is really touch
    marker = tmp_path / "created"
    result = SubprocessRunner(case).run(ToolCall.of(str(fake), str(marker)))
    assert result.refused and "not the cat installed" in result.refused
    assert not marker.exists()
    real = SubprocessRunner(case).run(ToolCall.of(shutil.which("cat"), "/proc/version"))
    assert real.returncode == 0 and "Linux" in real.stdout


def test_tools_never_write_the_case_records(case: Case) -> None:
    before = case.audit.path.read_bytes()
    result = SubprocessRunner(case).run(ToolCall.of(
        "dd", "if=/dev/zero", f"of={case.audit.path}", "count=1", "conv=notrunc"))
    assert result.refused and "case's own records" in result.refused
    assert case.audit.path.read_bytes().startswith(before)
    assert case.verify().ok
