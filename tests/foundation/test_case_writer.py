"""One writer per case, and a record that stays true under crashes: real processes on one case,
real SIGKILLs, the derived files (evidence.json, seal.json, index.jsonl) against the log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import run_cli

from ckptrescue.errors import CaseError
from ckptrescue.record.audit import AuditLog
from ckptrescue.record.case import Case

_ADD_EVIDENCE = """
import sys
from pathlib import Path
from ckptrescue.record.case import Case
case = Case.open(Path(sys.argv[1]))
tag, n = sys.argv[2], int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()
for i in range(n):
    case.add_evidence(kind="s3-object", source=f"s3://bucket/{tag}/{i}", acquired_how="test")
"""

_HOLD = """
import sys, time
from pathlib import Path
from ckptrescue.record.case import Case
case = Case.open(Path(sys.argv[1]))
with case.writer():
    case.log("holder.started", {})
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
    case.log("holder.done", {})
"""


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def test_two_processes_adding_evidence_get_distinct_ids_from_the_chain(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "c")
    procs = [subprocess.Popen([sys.executable, "-c", _ADD_EVIDENCE, str(case.root), tag, "40"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=_env(CKPTRESCUE_CASE_WAIT="60"))
             for tag in ("a", "b")]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    for proc in procs:  # release both at once
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
    for proc in procs:
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
    items = case.evidence()
    assert [i.id for i in items] == [f"E{n:03d}" for n in range(1, 81)]
    assert sorted(i.source for i in items) == sorted(
        f"s3://bucket/{t}/{i}" for t in "ab" for i in range(40))
    assert json.loads((case.root / "evidence.json").read_text()) == [i.to_json() for i in items]
    report = case.verify()
    assert report.ok, report.all_problems
    assert not [n for n in report.notes if "evidence.json" in n]


def test_a_second_writer_fails_with_one_line_naming_the_holder(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "c")
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(case.root), "30"],
                              stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"holding"
        start = time.monotonic()
        res = run_cli("case", "seal", str(case.root), env_extra={"CKPTRESCUE_CASE_WAIT": "1"})
        waited = time.monotonic() - start
        assert res.returncode == 2, res.stderr
        first = res.stderr.splitlines()[0]
        assert f"pid {holder.pid}" in first and "another process is writing" in first
        assert "python -c" in first  # the holder's command, as it was started
        assert "Traceback" not in res.stderr
        assert waited >= 1.0
    finally:
        holder.kill()
        holder.wait()
    assert not (case.root / "seal.json").exists()
    report = case.verify()
    assert report.ok, report.all_problems


def test_a_second_writer_waits_for_a_short_holder(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "c")
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(case.root), "1.0"],
                              stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"holding"
        res = run_cli("case", "seal", str(case.root), env_extra={"CKPTRESCUE_CASE_WAIT": "30"})
        assert res.returncode == 0, res.stderr
    finally:
        holder.wait(timeout=60)
    actions = [r["action"] for r in case.records()]
    # the seal comes after everything the first writer wrote
    assert actions[-3:] == ["holder.started", "holder.done", "case.sealed"]
    assert case.verify().ok


def test_a_killed_holder_releases_the_case(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "c")
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(case.root), "60"],
                              stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline().strip() == b"holding"
    holder.kill()
    holder.wait()
    with Case.open(case.root).writer() as again:  # no stale lock
        again.log("after.holder.died", {})
    assert case.verify().ok


# ---- the derived files ------------------------------------------------------------------------

def _sealed(tmp_path: Path) -> tuple[Case, str]:
    case = Case.create(tmp_path / "c", title="t")
    case.add_evidence(kind="image", source="/tmp/x.img", acquired_how="test")
    case.log("step", {"i": 1})
    return case, case.seal()


def test_removed_seal_file_is_re_derived_and_the_case_stays_sealed(tmp_path: Path) -> None:
    case, _head = _sealed(tmp_path)
    saved = (case.root / "seal.json").read_text()
    (case.root / "seal.json").unlink()
    report = Case.open(case.root).verify()
    assert report.ok, report.all_problems
    assert any("seal.json is missing" in n for n in report.notes)
    fresh = Case.open(case.root)
    assert fresh.sealed
    with pytest.raises(CaseError, match="sealed"):
        fresh.log("more", {})
    assert (case.root / "seal.json").read_text() == saved  # re-derived by the writer


def test_rm_seal_then_a_command_is_refused_and_verify_stays_green(tmp_path: Path) -> None:
    case, head = _sealed(tmp_path)
    (case.root / "seal.json").unlink()
    target = tmp_path / "w.pt"
    target.write_bytes(b"not a checkpoint")
    res = run_cli("probe", str(target), "--case", str(case.root))
    assert res.returncode != 0 and "sealed" in res.stderr
    ok = run_cli("case", "verify", str(case.root), "--expect-head", head)
    assert ok.returncode == 0, ok.stdout


def test_forged_append_with_seal_head_updated_is_detected(tmp_path: Path) -> None:
    case, _head = _sealed(tmp_path)
    forged = AuditLog(case.audit.path).append("finding", {"finding": {"code": "X"}})
    seal = json.loads((case.root / "seal.json").read_text())
    seal.update(seq=forged["seq"], head=forged["hash"], time=forged["time"])
    (case.root / "seal.json").write_text(json.dumps(seal))
    report = Case.open(case.root).verify()
    assert not report.ok
    assert any("appended after the seal" in p for p in report.all_problems)


def test_forged_second_seal_after_forged_records_is_detected(tmp_path: Path) -> None:
    case, _head = _sealed(tmp_path)
    (case.root / "seal.json").unlink()
    log = AuditLog(case.audit.path)
    log.append("evidence.added", {"item": {"id": "E002"}})
    resealed = log.append("case.sealed", {})
    (case.root / "seal.json").write_text(json.dumps(
        {"seq": resealed["seq"], "head": resealed["hash"], "time": resealed["time"]}))
    report = Case.open(case.root).verify()
    assert not report.ok
    assert any("2 record(s) were appended after the seal" in p for p in report.all_problems)


def test_log_cut_back_before_its_seal_is_detected_while_seal_json_remains(
        tmp_path: Path) -> None:
    case, head = _sealed(tmp_path)
    lines = case.audit.path.read_bytes().splitlines(keepends=True)
    case.audit.path.write_bytes(b"".join(lines[:-1]))  # the case.sealed record removed
    report = Case.open(case.root).verify()
    assert not report.ok
    assert any("truncated or rewritten after sealing" in p for p in report.all_problems)
    # removing seal.json too is the documented limit: only the head kept out of band shows it
    (case.root / "seal.json").unlink()
    assert Case.open(case.root).verify().ok
    assert not Case.open(case.root).verify(expect_head=head).ok


def test_evidence_json_deleted_behind_or_edited(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "c")
    for i in range(3):
        case.add_evidence(kind="image", source=f"/tmp/{i}.img", acquired_how="test")
    inventory = json.loads((case.root / "evidence.json").read_text())
    (case.root / "evidence.json").unlink()
    report = Case.open(case.root).verify()
    assert report.ok and any("evidence.json is missing" in n for n in report.notes)
    (case.root / "evidence.json").write_text(json.dumps(inventory[:2]))  # a crash's leftover
    report = Case.open(case.root).verify()
    assert report.ok and any("2 of the 3" in n for n in report.notes)
    edited = [dict(inventory[0], sha256="00" * 32), *inventory[1:]]
    (case.root / "evidence.json").write_text(json.dumps(edited))
    report = Case.open(case.root).verify()
    assert not report.ok and "evidence.json" in report.all_problems[0]
    (case.root / "evidence.json").unlink()
    Case.open(case.root).log("next.write", {})  # any writer re-derives it
    assert json.loads((case.root / "evidence.json").read_text()) == inventory


def test_index_deleted_is_rebuilt_edited_is_detected(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "c")
    for i in range(5):
        case.add_evidence(kind="image", source=f"/tmp/{i}.img", acquired_how="test")
        case.log("tool.run", {"i": i})
    index = case.root / "index.jsonl"
    original = index.read_bytes()
    index.unlink()
    fresh = Case.open(case.root)
    assert [e.id for e in fresh.evidence()] == [f"E00{i}" for i in range(1, 6)]
    assert fresh.verify().ok
    fresh.log("next.write", {})
    rebuilt = index.read_bytes()
    assert [x for x in rebuilt.splitlines() if b"evidence.added" in x] == \
        [x for x in original.splitlines() if b"evidence.added" in x]
    lines = index.read_bytes().splitlines(keepends=True)
    index.write_bytes(b"".join(lines[:2] + lines[3:]))  # one evidence record left out
    report = Case.open(case.root).verify()
    assert not report.ok and "index.jsonl" in report.all_problems[0]


_EVIDENCE_LOOP = """
import sys
from pathlib import Path
from ckptrescue.record.case import Case
case = Case.open(Path(sys.argv[1]))
print("ready", flush=True)
i = 0
while True:
    case.add_evidence(kind="s3-object", source=f"s3://b/{i}", acquired_how="loop",
                      details={"pad": "x" * (i * 37 % 900)})
    case.log("tool.run", {"i": i})
    i += 1
"""


def test_sigkill_at_many_points_never_raises_a_false_tamper_alarm(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "c")
    for attempt in range(25):
        proc = subprocess.Popen([sys.executable, "-c", _EVIDENCE_LOOP, str(case.root)],
                                stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(0.05 + 0.013 * attempt)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        report = Case.open(case.root).verify()
        assert report.ok, (attempt, report.all_problems)
    items = Case.open(case.root).evidence()
    assert len(items) > 25
    assert [i.id for i in items] == [f"E{n:03d}" for n in range(1, len(items) + 1)]
    Case.open(case.root).log("after.crashes", {})
    assert json.loads((case.root / "evidence.json").read_text()) == [i.to_json() for i in items]
    assert Case.open(case.root).verify().ok
