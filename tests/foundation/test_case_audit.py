"""The case directory and its hash-chained audit log: every kind of tampering is detected and
named; a crash mid-append never makes earlier records unverifiable."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ckptrescue.errors import CaseError
from ckptrescue.model import Finding, Severity
from ckptrescue.record.audit import AuditLog, verify_lines
from ckptrescue.record.case import Case


def _populated(tmp_path: Path) -> Case:
    case = Case.create(tmp_path / "c", title="t", examiner="e")
    for i in range(5):
        case.log("step", {"i": i})
    case.store_artifact(b"tool output\n", name="out.txt", kind="stdout")
    case.add_finding(Finding("RN005", Severity.INFO, "a finding"))
    return case


def _lines(case: Case) -> list[bytes]:
    return case.audit.path.read_bytes().splitlines(keepends=True)


def _write(case: Case, lines: list[bytes]) -> None:
    case.audit.path.write_bytes(b"".join(lines))


def test_fresh_case_verifies_and_has_manifest(tmp_path: Path) -> None:
    case = _populated(tmp_path)
    report = case.verify()
    assert report.ok, report.all_problems
    m = case.manifest
    assert {"id", "title", "examiner", "created", "host", "tool_version"} <= m.keys()
    assert report.artifacts_checked == 1
    assert case.findings()[0].title == "a finding"


def test_one_byte_changed_in_any_record_is_detected(tmp_path: Path) -> None:
    case = _populated(tmp_path)
    lines = _lines(case)
    for index in range(len(lines)):
        victim = bytearray(lines[index])
        pos = victim.index(b'"time":"') + 9  # a digit inside the timestamp
        victim[pos] = ord("9") if victim[pos] != ord("9") else ord("8")
        tampered = [*lines[:index], bytes(victim), *lines[index + 1 :]]
        _write(case, tampered)
        report = case.verify()
        assert not report.ok
        assert f"seq {index}" in report.all_problems[0]
        assert "edited" in report.all_problems[0]
    _write(case, lines)
    assert case.verify().ok


def test_deleted_record_is_detected(tmp_path: Path) -> None:
    case = _populated(tmp_path)
    lines = _lines(case)
    _write(case, lines[:3] + lines[4:])
    report = case.verify()
    assert not report.ok
    assert "expected seq 3" in report.all_problems[0]


def test_swapped_records_are_detected(tmp_path: Path) -> None:
    case = _populated(tmp_path)
    lines = _lines(case)
    lines[2], lines[3] = lines[3], lines[2]
    _write(case, lines)
    report = case.verify()
    assert not report.ok
    assert "expected seq 2" in report.all_problems[0]


def test_changed_artifact_is_detected(tmp_path: Path) -> None:
    case = _populated(tmp_path)
    art = next(case.artifacts_dir.iterdir())
    os.chmod(art, 0o644)
    art.write_bytes(b"tool output, edited\n")
    report = case.verify()
    assert not report.ok
    assert art.name in report.all_problems[0] and "changed" in report.all_problems[0]


def test_deleted_artifact_is_detected(tmp_path: Path) -> None:
    case = _populated(tmp_path)
    art = next(case.artifacts_dir.iterdir())
    art.unlink()
    report = case.verify()
    assert not report.ok
    assert art.name in report.all_problems[0] and "missing" in report.all_problems[0]


def test_truncated_tail_after_seal_is_detected(tmp_path: Path) -> None:
    case = _populated(tmp_path)
    head = case.seal()
    assert case.verify(expect_head=head).ok
    lines = _lines(case)
    _write(case, lines[:-2])
    report = case.verify(expect_head=head)
    assert not report.ok
    assert any("truncated" in p for p in report.all_problems)


def test_extended_log_after_seal_is_detected(tmp_path: Path) -> None:
    case = _populated(tmp_path)
    head = case.seal()
    with pytest.raises(CaseError, match="sealed"):
        case.log("more", {})
    # removing the derived seal.json does not unseal: the log holds the case.sealed record
    (case.root / "seal.json").unlink()
    with pytest.raises(CaseError, match="sealed"):
        Case(case.root).log("sneaky", {})
    # an attacker appending a well-formed record behind the kit's back
    AuditLog(case.audit.path).append("sneaky", {})
    report = case.verify(expect_head=head)
    assert not report.ok
    assert any("extended" in p for p in report.all_problems)
    assert any("appended after the seal" in p for p in case.verify().all_problems)


def test_torn_tail_is_reported_then_chained_over(tmp_path: Path) -> None:
    case = _populated(tmp_path)
    with open(case.audit.path, "ab") as fh:
        fh.write(b'{"seq": 8, "time": "2026-')  # a crash in the middle of a write
    report = case.verify()
    assert report.ok and report.chain.torn_tail
    case.log("after.crash", {"x": 1})
    report = case.verify()
    assert report.ok, report.all_problems
    assert not report.chain.torn_tail
    assert any("chained over" in n for n in report.chain.notes)
    actions = [r["action"] for r in case.records()]
    assert actions[-2:] == ["audit.torn_tail", "after.crash"]


def test_unacknowledged_garbage_in_the_middle_is_broken(tmp_path: Path) -> None:
    case = _populated(tmp_path)
    lines = _lines(case)
    _write(case, [*lines[:2], b"garbage\n", *lines[2:]])
    assert not case.verify().ok


_APPENDER = """
import sys
from pathlib import Path
from ckptrescue.record.case import Case
case = Case.open(Path(sys.argv[1]))
print("ready", flush=True)
i = 0
while True:
    case.log("bulk", {"i": i, "pad": "x" * (i % 700)})
    i += 1
"""


def test_sigkill_during_appends_leaves_a_verifiable_case(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "c")
    for attempt in range(3):
        proc = subprocess.Popen([sys.executable, "-c", _APPENDER, str(case.root)],
                                stdout=subprocess.PIPE)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(0.3 + 0.2 * attempt)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        report = case.verify()
        assert report.ok, report.all_problems
    # the next append (after the crash) still chains correctly
    case.log("resumed", {})
    report = case.verify()
    assert report.ok, report.all_problems
    assert len(report.chain.records) > 10


def test_verify_lines_is_pure_and_counts(tmp_path: Path) -> None:
    case = _populated(tmp_path)
    report = verify_lines(case.audit.path.read_bytes())
    assert report.ok
    assert [r["seq"] for r in report.records] == list(range(len(report.records)))
    assert json.loads(_lines(case)[0])["prev"] == "0" * 64


def test_artifacts_are_write_once_and_content_addressed(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "c")
    a = case.store_artifact(b"same", name="a")
    b = case.store_artifact(b"same", name="b")
    assert a == b
    path = case.artifact_path(a)
    assert path.read_bytes() == b"same"
    assert not os.access(path, os.W_OK) or os.geteuid() == 0
    assert oct(path.stat().st_mode & 0o777) == "0o444"


def test_case_new_refuses_non_empty_dir(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "file").write_text("hi")
    with pytest.raises(CaseError, match="not empty"):
        Case.create(tmp_path / "x")


def test_evidence_inventory_is_logged(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "c")
    item = case.add_evidence(kind="image", source="/tmp/disk.img", acquired_how="ddrescue",
                             size=10, sha256="ab" * 32)
    assert item.id == "E001"
    assert json.loads((case.root / "evidence.json").read_text())[0]["source"] == "/tmp/disk.img"
    assert case.evidence_paths() == ["/tmp/disk.img"]
    assert case.verify().ok


@pytest.mark.parametrize("leftover", [
    b'{"seq": 8, "ti',                       # torn mid-record
    b'{"seq": 8, "ti\n',                     # torn, then the repair's newline, then a crash
    b'{"seq": 8, "ti\n{"seq":8,"action":"audit.to',  # crash again during the repair
    b"\n",                                   # a lone newline
])
def test_crashes_during_append_or_repair_never_break_the_chain(tmp_path: Path,
                                                               leftover: bytes) -> None:
    case = _populated(tmp_path)
    good = len(list(case.records()))
    with open(case.audit.path, "ab") as fh:
        fh.write(leftover)
    assert case.verify().ok
    case.log("after.crash", {})
    report = case.verify()
    assert report.ok, report.all_problems
    assert len(report.chain.records) == good + 2  # the acknowledgement + the new record
    acks = [r for r in case.records() if r["action"] == "audit.torn_tail"]
    assert acks and acks[-1]["details"]["length"] == len(leftover.rstrip(b"\n"))
    # and a second crash + append on top still verifies
    with open(case.audit.path, "ab") as fh:
        fh.write(b'{"broken')
    case.log("again", {})
    assert case.verify().ok


def test_edited_manifest_or_inventory_is_detected(tmp_path: Path) -> None:
    case = _populated(tmp_path)
    case.add_evidence(kind="image", source="/tmp/x.img", acquired_how="test")
    manifest = json.loads((case.root / "case.json").read_text())
    manifest["examiner"] = "mallory"
    (case.root / "case.json").write_text(json.dumps(manifest))
    report = case.verify()
    assert not report.ok and "case.json" in report.all_problems[0]
    manifest["examiner"] = "e"
    (case.root / "case.json").write_text(json.dumps(manifest))
    assert case.verify().ok
    inv = json.loads((case.root / "evidence.json").read_text())
    inv[0]["sha256"] = "00" * 32
    (case.root / "evidence.json").write_text(json.dumps(inv))
    report = case.verify()
    assert not report.ok and "evidence.json" in report.all_problems[0]
