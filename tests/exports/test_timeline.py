"""The timeline: the kit's actions, logs, S3 versions and CloudTrail on one time axis, in
order, written in Timesketch's import format with attacker text kept as data."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from exports_testlib import HOSTILE_KEY, HOSTILE_LOG, tree_sha256

from ckptrescue.exports.timeline import (
    CORE_FIELDS,
    log_form,
    parse_journal_json,
    parse_log_lines,
    safe_cell,
    timeline_events,
    write_timesketch_csv,
    write_timesketch_jsonl,
)

COLLECTED = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_timeline_merges_every_source_in_time_order(incident: dict[str, Any]) -> None:
    case = incident["case"]
    before = tree_sha256(case.root), tree_sha256(incident["evidence"])
    events = timeline_events(case)
    assert (tree_sha256(case.root), tree_sha256(incident["evidence"])) == before
    times = [e.time for e in events]
    assert times == sorted(times)
    assert {"ckptrescue", "journal", "s3", "cloudtrail"} <= {e.source for e in events}
    # the kit's own actions: every audit record but artifact.stored, each once
    kit = [e for e in events if e.source == "ckptrescue"]
    stored = sum(1 for r in case.records() if r["action"] == "artifact.stored")
    assert len(kit) == len(list(case.records())) - stored
    assert {e.attributes["code"] for e in kit if e.attributes["action"] == "finding"} == {
        f.code for f in case.findings()}
    # S3: both versions at their LastModified; the preserved one is not listed twice
    versions = [e for e in events if e.source == "s3"]
    assert sorted(e.attributes["version_id"] for e in versions) == sorted(
        [incident["v1"], incident["v2"]])
    assert all(e.attributes["key"] == HOSTILE_KEY for e in versions)
    # CloudTrail: correlated by s3 history and read from the raw file kept in the case, once
    trail = [e for e in events if e.source == "cloudtrail"]
    assert [(e.time.isoformat(), e.attributes["principal"].rsplit("/", 1)[1]) for e in trail] == [
        ("2026-11-29T10:00:00+00:00", "trainer"), ("2026-11-29T11:00:00+00:00", "rogue-sync")]
    # the syslog kept as an artifact: times read, the BSD line without year says so
    logs = [e for e in events if e.source == "journal"]
    io_error = next(e for e in logs if "I/O error" in e.message)
    assert io_error.time == datetime(2026, 11, 29, 10, 59, 58, tzinfo=UTC)
    assert io_error.attributes["host"] == "gpu07" and io_error.time_exact
    bsd = next(e for e in logs if "rclone sync" in e.message)
    assert not bsd.time_exact and "no year" in bsd.time_note
    # the incident reads in order: v1 written, the kernel error, the rogue write, the kit after
    order = [e.message for e in events if e.time < COLLECTED]
    assert order.index(io_error.message) < order.index(next(
        e.message for e in trail if "rogue-sync" in e.attributes["principal"]))


def test_timesketch_jsonl_and_csv_have_the_mandatory_fields(incident: dict[str, Any],
                                                           tmp_path: Path) -> None:
    events = timeline_events(incident["case"])
    jsonl, table = tmp_path / "timeline.jsonl", tmp_path / "timeline.csv"
    assert write_timesketch_jsonl(events, jsonl) == len(events)
    assert write_timesketch_csv(events, table) == len(events)
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(rows) == len(events)
    for row in rows:
        assert list(row)[:4] == list(CORE_FIELDS)
        assert row["message"] and row["timestamp_desc"]
        moment = datetime.fromisoformat(row["datetime"])
        assert moment.tzinfo is not None
        assert row["timestamp"] == int(moment.timestamp() * 1_000_000) or abs(
            row["timestamp"] - moment.timestamp() * 1_000_000) < 2
        assert all(isinstance(v, str | int | float | bool) for v in row.values())
    with open(table, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames is not None and reader.fieldnames[:4] == list(CORE_FIELDS)
        table_rows = list(reader)
    assert [r["datetime"] for r in table_rows] == [r["datetime"] for r in rows]
    assert all(r["message"] and r["timestamp_desc"] for r in table_rows)


def test_csv_cells_cannot_be_formulas_and_jsonl_keeps_the_text(incident: dict[str, Any],
                                                              tmp_path: Path) -> None:
    events = timeline_events(incident["case"])
    table, jsonl = tmp_path / "t.csv", tmp_path / "t.jsonl"
    write_timesketch_csv(events, table)
    write_timesketch_jsonl(events, jsonl)
    with open(table, newline="", encoding="utf-8") as fh:
        cells = [cell for row in csv.reader(fh) for cell in row]
    assert not [c for c in cells if c[:1] in {"=", "+", "-", "@", "\t", "\r"}]
    assert "'" + HOSTILE_KEY in cells and "'" + HOSTILE_LOG in cells
    text = jsonl.read_text()
    rows = [json.loads(line) for line in text.splitlines()]
    assert any(r.get("key") == HOSTILE_KEY for r in rows)  # data, verbatim
    assert any(r["message"] == HOSTILE_LOG for r in rows)
    assert safe_cell("-1") == "'-1" and safe_cell("@SUM(A1)") == "'@SUM(A1)"
    assert safe_cell("a\x00b") == "a\\x00b" and safe_cell({"x": [1]}) == '{"x": [1]}'


def test_log_forms_and_their_times() -> None:
    assert log_form(["dmesg", "-x", "--time-format", "iso"]) == "dmesg"
    assert log_form(["journalctl", "-k", "-o", "json"]) == "journal-json"
    assert log_form(["journalctl", "--output=json"]) == "journal-json"
    assert log_form(["journalctl", "-k", "-o", "short-iso"]) == "journal-short"
    assert log_form(["lsblk"]) is None
    dmesg = ("kern  :err   : 2026-11-29T10:59:58,123456+00:00 blk_update_request: I/O error, "
             "dev sdb, sector 2048\n"
             "2026-11-29T10:59:59,000001+0000 EXT4-fs (sdb1): error count since last fsck: 1\n"
             "kern  :info  : 2026-11-29T11:00:00,000000+00:00 XFS (dm-0): metadata I/O error\n"
             "      continuation of the XFS message\n"
             "[  123.456789] nvme nvme0: I/O 12 QID 3 timeout, aborting\n"
             "[Sun Nov 29 11:00:05 2026] sd 0:0:0:0: [sdb] Medium Error\n")
    events = list(parse_log_lines(dmesg, COLLECTED, {}, 1, source="kernel", form="dmesg"))
    assert [e.time_exact for e in events] == [True, True, True, False, False]
    assert events[0].attributes["level"] == "err"
    assert events[0].time == datetime(2026, 11, 29, 10, 59, 58, 123456, tzinfo=UTC)
    assert events[1].message.startswith("EXT4-fs (sdb1):")  # not read as host + identifier
    assert events[2].message.endswith("continuation of the XFS message")
    assert events[3].time == COLLECTED and "seconds since boot" in events[3].time_note
    assert events[3].attributes["seconds_since_boot"] == 123.456789
    assert "no time zone" in events[4].time_note
    short = ("-- Boot 0123 --\n"
             "2026-11-29T10:59:58+0000 gpu07 kernel: nvme0n1: I/O error\n"
             "2026-11-29T10:59:58.500000+00:00 gpu07 slurmd[77]: job 42 step 0 done\n")
    events = list(parse_log_lines(short, COLLECTED, {}, 1, source="journal", form="syslog"))
    assert [(e.attributes["identifier"], e.message) for e in events] == [
        ("kernel", "nvme0n1: I/O error"), ("slurmd", "job 42 step 0 done")]
    assert events[1].attributes["pid"] == "77"
    journal = "\n".join(json.dumps(e) for e in [
        {"__REALTIME_TIMESTAMP": "1795950000000000", "MESSAGE": "XFS (dm-0): Corruption",
         "_TRANSPORT": "kernel", "_HOSTNAME": "gpu07", "PRIORITY": "3"},
        {"__REALTIME_TIMESTAMP": "1795950001000000", "MESSAGE": list(b"bytes \xff here"),
         "_TRANSPORT": "journal", "SYSLOG_IDENTIFIER": "trainer"},
        {"MESSAGE": "no time"}]) + "\nnot json\n"
    events = list(parse_journal_json(journal, COLLECTED, {}, 1))
    assert [e.source for e in events] == ["kernel", "journal", "journal", "journal"]
    assert events[0].time == datetime.fromtimestamp(1795950000, UTC)
    assert events[1].message == "bytes \ufffd here"
    assert [e.time_exact for e in events] == [True, True, False, False]
    assert all(e.time == COLLECTED for e in events[2:])
