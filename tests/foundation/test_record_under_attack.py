"""The case record against a tamperer and a busy machine: forms of attack the first round did
not try. Real processes, real files, the real CLI; each test names what a responder relies on.

- ``case verify`` while another process writes never cries tamper;
- an artifact replaced by a symlink (to a device that never ends, to a copy outside the case,
  to a FIFO) is a problem, never followed;
- the case's own files are never written through a symlink planted in the case (the writer
  lock pointing at evidence);
- a forged, chain-valid record of the wrong shape makes ``verify`` report, never crash;
- a record whose bytes were rewritten with the same meaning (spaces, a duplicate key, CRLF, a
  byte-order mark) is an edit, also with ``index.jsonl`` gone;
- details keyed by integers never raise a false alarm;
- the report and the next writer read the log, not an edited ``index.jsonl``, and never show an
  edited findings table as the case's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_helpers import run_cli

from ckptrescue.record.audit import canonical, record_hash
from ckptrescue.record.case import Case

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tensorflow"))
from bundlewriter import write_bundle  # noqa: E402


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def damaged_bundle(tmp_path: Path) -> Path:
    """A TensorBundle whose first 150 variables fail their CRC32C (bit flips, no CPU math)."""
    prefix = tmp_path / "run" / "ckpt"
    prefix.parent.mkdir()
    write_bundle(prefix, 300)
    data = prefix.with_name("ckpt.data-00000-of-00001")
    raw = bytearray(data.read_bytes())
    for i in range(0, 4 * 150, 4):
        raw[i] ^= 0x01
    data.write_bytes(bytes(raw))
    return prefix


@pytest.fixture
def probed(tmp_path: Path, damaged_bundle: Path) -> Path:
    case_dir = tmp_path / "case"
    Case.create(case_dir)
    res = run_cli("probe", str(damaged_bundle), "--case", str(case_dir))
    assert res.returncode == 1, res.stderr
    assert Case.open(case_dir).verify().ok
    return case_dir


# ---- a reader beside a writer ------------------------------------------------------------------

_WRITER = """
import sys
from pathlib import Path
from ckptrescue.record.case import Case
case = Case.open(Path(sys.argv[1]))
print("ready", flush=True)
for i in range(int(sys.argv[2])):
    case.add_evidence(kind="s3-object", source=f"s3://b/{i}", acquired_how="loop")
case.seal()
"""


def test_verify_while_another_process_writes_never_cries_tamper(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "c")
    # a case with a large artifact: verify hashes it between reading the log and the files
    # derived from it, as a real incident's case (images, mapfiles) makes it do
    case.store_artifact(bytes(range(256)) * (96 * 1024), name="big.bin")
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(case.root), "60"],
                              stdout=subprocess.PIPE, env=dict(os.environ))
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == b"ready"
        alarms: list[list[str]] = []
        rounds = 0
        while writer.poll() is None or rounds < 3:
            report = Case.open(case.root).verify()
            rounds += 1
            if not report.ok:
                alarms.append(report.all_problems)
            if rounds > 400:
                break
    finally:
        writer.kill()
        writer.wait()
    assert writer.returncode == 0
    assert not alarms, alarms[:3]
    assert Case.open(case.root).sealed


# ---- symlinks in the case ----------------------------------------------------------------------

def _table_artifact(case_dir: Path) -> Path:
    case = Case.open(case_dir)
    tables = [r["details"]["sha256"] for r in case.records("artifact.stored")
              if r["details"].get("kind") == "findings.table"]
    assert tables
    return case.artifact_path(tables[0])


@pytest.mark.parametrize("target", ["/dev/zero", "copy", "fifo"])
def test_an_artifact_replaced_by_a_symlink_or_a_fifo_is_a_problem_never_followed(
        probed: Path, tmp_path: Path, target: str) -> None:
    artifact = _table_artifact(probed)
    if target == "fifo":
        artifact.unlink()
        os.mkfifo(artifact)
    else:
        if target == "copy":
            outside = tmp_path / "outside"
            shutil.copyfile(artifact, outside)  # the same bytes, held outside the case
            target = str(outside)
        artifact.unlink()
        artifact.symlink_to(target)
    start = time.monotonic()
    res = run_cli("case", "verify", str(probed), timeout=120)
    assert time.monotonic() - start < 60
    assert res.returncode == 1, res.stdout + res.stderr
    assert artifact.name in res.stdout and "not a regular file" in res.stdout
    assert "Traceback" not in res.stderr


def test_the_writer_lock_is_never_written_through_a_symlink(
        probed: Path, damaged_bundle: Path) -> None:
    evidence = damaged_bundle.with_name("ckpt.index")
    before = _digest(evidence)
    lock = probed / ".writer.lock"
    lock.unlink()
    lock.symlink_to(evidence)
    res = run_cli("probe", str(damaged_bundle), "--case", str(probed))
    assert _digest(evidence) == before  # evidence never changes
    assert res.returncode == 2, res.stderr
    assert ".writer.lock" in res.stderr.splitlines()[0] and "Traceback" not in res.stderr


def test_the_log_is_never_written_through_a_symlink(probed: Path, tmp_path: Path,
                                                     damaged_bundle: Path) -> None:
    elsewhere = tmp_path / "elsewhere.jsonl"
    log = probed / "audit.jsonl"
    shutil.copyfile(log, elsewhere)
    before = _digest(elsewhere)
    log.unlink()
    log.symlink_to(elsewhere)
    res = run_cli("probe", str(damaged_bundle), "--case", str(probed))
    assert _digest(elsewhere) == before
    assert res.returncode in (2, 4) and "Traceback" not in res.stderr
    assert "audit.jsonl" in res.stderr.splitlines()[0]
    verified = run_cli("case", "verify", str(probed))
    assert verified.returncode == 1 and "audit.jsonl" in verified.stdout


# ---- forged records of the wrong shape ---------------------------------------------------------

def _forge_append(case_dir: Path, *records: dict[str, object], garbage: bytes = b"") -> None:
    """Append chain-valid records (hashes recomputed: what anyone can do to an unsealed case)."""
    log = case_dir / "audit.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    last = json.loads(lines[-1])
    data = garbage
    for body in records:
        record = {"seq": last["seq"] + 1, "time": "2026-01-01T00:00:00.000000Z",
                  "actor": "x@y", "prev": last["hash"], **body}
        record["hash"] = record_hash(record)
        data += canonical(record) + b"\n"
        last = record
    with open(log, "ab") as fh:
        fh.write(data)


FORGED: dict[str, tuple[list[dict[str, object]], bytes]] = {
    "evidence without an item": ([{"action": "evidence.added", "details": {}}], b""),
    "evidence item a list": ([{"action": "evidence.added", "details": {"item": [1]}}], b""),
    "details a list": ([{"action": "finding", "details": []}], b""),
    "a seal without details": ([{"action": "case.sealed", "details": None}], b""),
    "a torn-tail ack of the wrong shape": ([{"action": "audit.torn_tail", "details": []}],
                                           b"torn bytes\n"),
    "artifacts a string": ([{"action": "x", "details": {}, "artifacts": "abc"}], b""),
    "an artifact outside the case": ([{"action": "x", "details": {},
                                        "artifacts": ["../case.json"]}], b""),
    "outputs outside the case": ([{"action": "step.finished",
                                   "details": {"output_type": "ProbeOutput",
                                               "outputs_sha256": "../case.json"}}], b""),
}


@pytest.mark.parametrize("name", sorted(FORGED))
def test_a_forged_record_of_the_wrong_shape_is_reported_never_a_crash(
        probed: Path, name: str) -> None:
    records, garbage = FORGED[name]
    _forge_append(probed, *records, garbage=garbage)
    res = run_cli("case", "verify", str(probed))
    assert res.returncode in (0, 1), res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr
    if name in {"an artifact outside the case", "artifacts a string",
                "a torn-tail ack of the wrong shape", "evidence without an item",
                "evidence item a list"}:
        assert res.returncode == 1, res.stdout
    made = run_cli("report", str(probed), "-o", "-")
    assert made.returncode in (0, 1), made.stderr
    assert "Traceback" not in made.stderr


# ---- bytes rewritten, meaning kept ---------------------------------------------------------------

def _rewrite_line(mutate: Callable[[bytes], bytes]) -> Callable[[list[bytes]], list[bytes]]:
    def rewrite(lines: list[bytes]) -> list[bytes]:
        return [*lines[:2], mutate(lines[2]), *lines[3:]]
    return rewrite


SAME_MEANING: dict[str, Callable[[list[bytes]], list[bytes]]] = {
    "spaces": _rewrite_line(lambda raw: json.dumps(json.loads(raw)).encode() + b"\n"),
    "a duplicate key read by first-key parsers": _rewrite_line(
        lambda raw: b'{"action":"case.sealed",' + raw[1:]),
    "CRLF": _rewrite_line(lambda raw: raw[:-1] + b"\r\n"),
    "trailing blanks": _rewrite_line(lambda raw: raw[:-1] + b"  \n"),
    "keys reordered": _rewrite_line(
        lambda raw: json.dumps(dict(reversed(list(json.loads(raw).items()))),
                               separators=(",", ":"), ensure_ascii=False).encode() + b"\n"),
    "escaped unicode": _rewrite_line(lambda raw: raw.replace(b'"seq"', b'"\\u0073eq"')),
    "a byte-order mark": lambda lines: [b"\xef\xbb\xbf" + lines[0], *lines[1:]],
}


@pytest.mark.parametrize("name", sorted(SAME_MEANING))
def test_a_record_rewritten_with_the_same_meaning_is_an_edit(probed: Path, name: str) -> None:
    log = probed / "audit.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    changed = b"".join(SAME_MEANING[name](lines))
    assert changed != log.read_bytes()
    log.write_bytes(changed)
    (probed / "index.jsonl").unlink()  # derived: its absence is no alarm by itself
    res = run_cli("case", "verify", str(probed))
    assert res.returncode == 1, res.stdout


@pytest.mark.parametrize("action", [["case.sealed"], {"a": 1}, 7, None])
def test_a_record_whose_action_is_not_a_name_is_skipped_and_named(probed: Path,
                                                                   action: object) -> None:
    """An edit that makes a record's action a list, an object, a number or null: verify names
    the edit in one line, and the readers (report, exports) skip the record, never crash."""
    log = probed / "audit.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    record = json.loads(lines[1])
    record["action"] = action
    lines[1] = json.dumps(record, separators=(",", ":")).encode() + b"\n"
    log.write_bytes(b"".join(lines))
    res = run_cli("case", "verify", str(probed))
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    for fmt in ("json", "md", "timeline", "case-uco"):
        out = run_cli("report", str(probed), "--format", fmt, "-o", "-")
        assert "Traceback" not in out.stderr and "internal error" not in out.stderr, out.stderr


def test_details_keyed_by_integers_never_raise_a_false_alarm(tmp_path: Path) -> None:
    case = Case.create(tmp_path / "c")
    record = case.log("ranks.seen", {"by_rank": {9: "ok", 10: "torn", 2: "ok"}})
    case.commit()
    report = Case.open(case.root).verify()
    assert report.ok, report.all_problems
    assert list(Case.open(case.root).records("ranks.seen")) == [record]


# ---- readers trust the log, not what is derived from it ------------------------------------------

_MODEL = """
import json, sys
from ckptrescue.record.case import Case
from ckptrescue.report.model import build
model = build(Case.open(sys.argv[1]))
print(json.dumps({"counts": model["finding_counts"], "ok": model["verification"]["ok"],
                  "text": json.dumps(model["findings_by_severity"])}))
"""


def _report_findings(case_dir: Path) -> tuple[dict[str, int], bool, str]:
    """What the report shows, built by a fresh process (no reader state carried over)."""
    out = subprocess.run([sys.executable, "-c", _MODEL, str(case_dir)], capture_output=True,
                         text=True, check=True).stdout
    data = json.loads(out)
    return dict(data["counts"]), bool(data["ok"]), str(data["text"])


def test_the_report_reads_the_log_not_an_edited_index(probed: Path) -> None:
    counts, ok, _ = _report_findings(probed)
    assert ok and counts.get("error")
    index = probed / "index.jsonl"
    kept = [x for x in index.read_bytes().splitlines(keepends=True) if b'"finding"' not in x]
    index.write_bytes(b"".join(kept))  # the finding's line removed; the last line still agrees
    edited_counts, edited_ok, _ = _report_findings(probed)
    assert not edited_ok  # verify names the edit ...
    assert edited_counts == counts  # ... and the report still shows what the log holds


_ADD_ONE = """
import sys
from ckptrescue.record.case import Case
print(Case.open(sys.argv[1]).add_evidence(kind="s3-object", source="s3://b/3",
                                          acquired_how="test").id)
"""


def test_the_next_writer_takes_evidence_ids_from_the_log_not_an_edited_index(
        tmp_path: Path) -> None:
    case = Case.create(tmp_path / "c")
    for i in range(3):
        case.add_evidence(kind="s3-object", source=f"s3://b/{i}", acquired_how="test")
    index = case.root / "index.jsonl"
    lines = index.read_bytes().splitlines(keepends=True)
    first = next(i for i, x in enumerate(lines) if b'"evidence.added"' in x)
    index.write_bytes(b"".join(lines[:first] + lines[first + 1:]))
    added = subprocess.run([sys.executable, "-c", _ADD_ONE, str(case.root)], capture_output=True,
                           text=True, check=True).stdout
    assert added.strip() == "E004"
    fresh = Case.open(case.root)
    assert [e.id for e in fresh.evidence()] == ["E001", "E002", "E003", "E004"]
    assert fresh.verify().ok


def test_the_report_never_shows_an_edited_findings_table(probed: Path) -> None:
    table = _table_artifact(probed)
    _, _, original = _report_findings(probed)
    assert "CRC32C mismatch" in original
    data = table.read_bytes().replace(b"CRC32C mismatch", b"FORGED ROW")
    table.chmod(0o644)
    table.write_bytes(data)
    _, ok, text = _report_findings(probed)
    assert not ok
    assert "FORGED ROW" not in text


def test_a_file_name_that_is_not_utf8_is_recorded_never_a_crash(
        tmp_path: Path, damaged_bundle: Path) -> None:
    run = damaged_bundle.parent
    os.rename(run / "ckpt.index", os.path.join(os.fsencode(run), b"ckpt\xff.index"))
    case_dir = tmp_path / "case"
    Case.create(case_dir)
    res = run_cli("probe", str(run), "--case", str(case_dir))
    assert res.returncode in (0, 1), res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr
    assert run_cli("case", "verify", str(case_dir)).returncode == 0
    made = run_cli("report", str(case_dir), "-o", "-")
    assert made.returncode in (0, 1), made.stderr
