"""Many findings of one kind are one finding and a per-tensor table (nothing lost), and the
readers of a case (answer, outputs, report) find what they need without replaying the log."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli_helpers import run_cli

from ckptrescue.model import Finding, Severity
from ckptrescue.record import findings_table
from ckptrescue.record.audit import AuditLog
from ckptrescue.record.case import Case

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tensorflow"))
from bundlewriter import write_bundle  # noqa: E402


def _finding(i: int, code: str = "TB002", evidence: str = "/x/ckpt.data") -> Finding:
    return Finding(code, Severity.ERROR, f"t{i}: CRC32C mismatch", evidence=evidence,
                   offset=16 * i, length=16, source="tensorbundle", tensors=(f"t{i}",))


def test_plan_folds_only_large_groups_and_keeps_order() -> None:
    few = [_finding(i, code="TB010") for i in range(3)]
    many = [_finding(i) for i in range(findings_table.AGGREGATE_OVER + 1)]
    other = [_finding(i, evidence="/y/ckpt.data") for i in range(2)]
    planned = findings_table.plan([few[0], many[0], *other, *many[1:], *few[1:]])
    assert [type(p).__name__ for p in planned] == ["Finding", "Group", "Finding", "Finding",
                                                   "Finding", "Finding"]
    group = planned[1]
    assert isinstance(group, findings_table.Group) and group.members == many
    summary = group.summary("ab" * 32)
    assert summary.details["aggregated"] == len(many)
    assert summary.details["ranges"] == [[0, 16 * len(many)]]  # touching ranges merged
    assert summary.severity is Severity.ERROR and summary.code == "TB002"


def test_merge_ranges() -> None:
    assert findings_table.merge_ranges([(0, 4), (4, 8), (10, 12), (11, 20)]) == \
        [(0, 8), (10, 20)]


@pytest.fixture
def damaged_bundle(tmp_path: Path) -> Path:
    prefix = tmp_path / "run" / "ckpt"
    prefix.parent.mkdir()
    write_bundle(prefix, 300)
    data = prefix.with_name("ckpt.data-00000-of-00001")
    raw = bytearray(data.read_bytes())
    for i in range(0, 4 * 150, 4):  # flip one bit in the first bytes: the first tensors fail
        raw[i] ^= 0x01
    data.write_bytes(bytes(raw))
    return prefix


def test_probe_records_one_finding_and_a_table_listing_every_tensor(
        tmp_path: Path, damaged_bundle: Path) -> None:
    case_dir = tmp_path / "case"
    Case.create(case_dir)
    res = run_cli("probe", str(damaged_bundle), "--case", str(case_dir), "--json")
    assert res.returncode == 1, res.stderr
    listed = json.loads(res.stdout)["checkpoints"][0]["damaged_tensors"]
    assert len(listed) > findings_table.AGGREGATE_OVER
    case = Case.open(case_dir)
    crc = [f for f in case.findings() if f.code == "TB002"]
    assert len(crc) == 1
    summary = crc[0]
    assert summary.details["aggregated"] == len(listed)
    table = findings_table.table_of(summary)
    assert table is not None and table in {r["details"]["sha256"]
                                           for r in case.records("artifact.stored")}
    rows = list(findings_table.rows(case, summary))
    assert sorted(t for r in rows for t in r.tensors) == sorted(listed)  # nothing lost
    assert [r.title for r in findings_table.rows(case, summary, start=5, limit=3)] == \
        [r.title for r in rows[5:8]]
    assert len(list(findings_table.expand(case, case.findings()))) >= len(listed)
    report = case.verify()
    assert report.ok, report.all_problems
    out = tmp_path / "report.md"
    made = run_cli("report", str(case_dir), "--format", "md", "--output", str(out))
    assert made.returncode in (0, 1), made.stderr
    text = out.read_text()
    assert f"artifacts/{table}" in text and rows[0].tensors[0] in text


def test_answer_and_outputs_do_not_replay_the_log(tmp_path: Path, damaged_bundle: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptrescue.checkpoints.outputs import ProbeOutput
    from ckptrescue.engine.answer import answer_line
    from ckptrescue.engine.case_outputs import outputs_of

    case_dir = tmp_path / "case"
    case = Case.create(case_dir)
    with case.writer():
        for i in range(3000):  # what a long incident leaves: many records no reader needs
            case.log("tool.run", {"argv": ["true"], "i": i})
    assert run_cli("probe", str(damaged_bundle), "--case", str(case_dir)).returncode == 1
    (case_dir / "index.jsonl").unlink()  # derived: rebuilt from the log when missing

    def no_replay(self: AuditLog) -> None:
        raise AssertionError("the whole log was replayed")

    fresh = Case.open(case_dir)
    fresh.records("step.finished")  # first look: the index is rebuilt (one read of the log)
    list(fresh.records("step.finished"))
    monkeypatch.setattr(AuditLog, "records", no_replay)
    assert "ckpt damaged" in answer_line(fresh)
    assert len(outputs_of(fresh, ProbeOutput)) == 1
    assert [e.id for e in fresh.evidence()] == []
