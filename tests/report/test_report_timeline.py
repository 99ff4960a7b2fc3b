"""The report's timeline shows what bears on the incident, inside a window around it; the rest
is counted and collapsed, and stays in full in the case and the Timesketch export."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ckptrescue.exports.records import parse_time
from ckptrescue.exports.timeline import TimelineEvent, timeline_events
from ckptrescue.record.case import Case
from ckptrescue.report import model as report_model
from ckptrescue.report import timeline as tl
from ckptrescue.report.render import render

BOOT_LINES = 300


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


def incident_case(tmp_path: Path) -> tuple[Case, dict[str, str]]:
    """A case about /dev/nvme0n1 whose kept syslog holds a boot's worth of noise, other
    devices' filesystem messages, and the lines that matter (at the incident's time)."""
    case = Case.create(tmp_path / "case", title="node gpu07: run will not resume")
    now = parse_time(case.manifest["created"])
    assert now is not None
    case.add_evidence(kind="block_device", source="/dev/nvme0n1", acquired_how="ddrescue",
                      size=1 << 30, sha256="ab" * 32)
    boot = now - timedelta(hours=3)
    lines = [f"{stamp(boot + timedelta(milliseconds=i))} gpu07 kernel: BIOS-e820: [mem "
             f"0x{i:016x}-0x{i + 4095:016x}] usable" for i in range(BOOT_LINES)]
    at = now - timedelta(minutes=20)
    wanted = {
        "io": f"{stamp(at)} gpu07 kernel: nvme0n1: I/O error, dev nvme0n1, sector 88 op "
              "0x0:(READ) flags 0x0",
        "fs": f"{stamp(at + timedelta(seconds=1))} gpu07 kernel: XFS (nvme0n1p1): Metadata "
              "CRC error detected at xfs_agf_read_verify",
        "oom": f"{stamp(at + timedelta(seconds=2))} gpu07 kernel: Out of memory: Killed "
               "process 4242 (python3) total-vm:99999kB",
        "hung": f"{stamp(at + timedelta(seconds=3))} gpu07 kernel: INFO: task python3:4243 "
                "blocked for more than 120 seconds.",
    }
    other = [
        f"{stamp(at)} gpu07 kernel: BTRFS info (device sdc1): first mount of filesystem",
        f"{stamp(at)} gpu07 kernel: EXT4-fs (nvme0n1x): a device whose name only starts "
        "like the evidence",
    ]
    old_error = (f"{stamp(now - timedelta(days=3))} gpu07 kernel: nvme0n1: I/O error, dev "
                 "nvme0n1, sector 1 op 0x0:(READ)")
    repeats = [f"{stamp(at + timedelta(seconds=10 + i))} gpu07 kernel: nvme0n1: I/O error, "
               f"dev nvme0n1, sector {1000 + 8 * i} op 0x0:(READ)" for i in range(40)]
    log = tmp_path / "messages"
    log.write_text("\n".join([old_error, *lines, *other, *wanted.values(), *repeats]) + "\n")
    case.store_artifact_file(log, name="var-log-messages", kind="log")
    return case, wanted


def test_the_timeline_keeps_what_bears_on_the_incident(tmp_path: Path) -> None:
    case, wanted = incident_case(tmp_path)
    model = report_model.build(case)
    timeline = model["timeline"]
    texts = [r["text"] for r in timeline["rows"]]
    shown = "\n".join(texts)
    for line in wanted.values():  # each line that matters, once, with why
        message = line.split(" kernel: ", 1)[1]
        assert sum(message in t for t in texts) == 1, (message, texts)
    whys = {r["why"] for r in timeline["rows"] if r["source"] == "journal"}
    assert {"I/O error", "out of memory", "hung task", "evidence device nvme0n1"} <= whys
    assert "BIOS-e820" not in shown and "sdc1" not in shown and "nvme0n1x" not in shown
    # forty near-identical I/O errors: one row, with how many and until when
    merged = [t for t in texts if "sector 1000 " in t]
    assert len(merged) == 1 and "and 39 more like it, until " in merged[0], merged
    # the rest counted by reason; the old I/O error outside the window said so
    collapsed = {c["reason"]: c["count"] for c in timeline["collapsed"]}
    assert collapsed["journal lines about nothing the incident involves"] == BOOT_LINES + 2
    assert collapsed["journal lines outside the incident window (I/O error)"] == 1
    assert timeline["collected"] == BOOT_LINES + 2 + 1 + len(wanted) + 40
    assert timeline["shown_collected"] == len(wanted) + 40
    assert timeline["collapsed_total"] == BOOT_LINES + 3
    # ... and everything stays in the case's Timesketch export
    assert sum("BIOS-e820" in e.message for e in timeline_events(case)) == BOOT_LINES


def test_times_fit_on_one_line_and_the_rest_is_collapsed_in_both_formats(
        tmp_path: Path) -> None:
    case, _ = incident_case(tmp_path)
    html = render(case, "html")
    table = html.split('data-testid="timeline"', 1)[1].split("</table>", 1)[0]
    cells = re.findall(r'<td class="mono time">([^<]*)', table)
    assert cells and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{1,3})?", c.strip())
                         for c in cells), cells
    assert re.search(r"td\.time[^{]*\{[^}]*white-space: nowrap", html)
    assert 'data-testid="timeline-collapsed"' in html and f"{BOOT_LINES + 2} journal lines " \
        "about nothing the incident involves" in html
    md = render(case, "md")
    assert "BIOS-e820" not in md and "Not shown (" in md
    assert f"- {BOOT_LINES + 2} journal lines about nothing the incident involves" in md


def event(when: datetime, message: str, source: str = "kernel", **attrs: object
          ) -> TimelineEvent:
    return TimelineEvent(time=when, source=source, timestamp_desc="Kernel log time",
                         message=message, attributes=dict(attrs))


def test_a_loop_device_counts_only_while_the_kit_held_it() -> None:
    t0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
    iso = t0.isoformat().replace("+00:00", "Z")
    records = [
        {"action": "safety.attached", "time": iso, "details": {"kind": "loop",
                                                               "name": "/dev/loop3"}},
        {"action": "safety.detached", "time": (t0 + timedelta(minutes=5)).isoformat(),
         "details": {"kind": "loop", "name": "/dev/loop3"}},
        {"action": "evidence.added", "time": iso, "details": {"item": {
            "source": "/dev/sdb1", "kind": "block_device"}}},
    ]
    subjects = tl.subjects_of(records, [{"pid": 77, "name": "torchrun", "kind": "training"}],
                              parse_time)
    assert subjects.devices == {"sdb1", "sdb"} and "loop3" in subjects.held
    before = event(t0 - timedelta(minutes=1), "loop3: detected capacity change")
    during = event(t0 + timedelta(minutes=1), "XFS (loop3): Mounting V5 Filesystem")
    disk = event(t0 - timedelta(days=2), "sd 0:0:0:0: [sdb] Attached SCSI disk")
    job = event(t0, "trainer step 10 written", source="journal", pid="77")
    assert tl.classify(before, subjects) is None
    assert tl.classify(during, subjects) == "evidence device loop3"
    assert tl.classify(disk, subjects) == "evidence device sdb"
    assert tl.classify(job, subjects) == "the job"
    assert tl.classify(event(t0, "sdba: a different disk"), subjects) is None


def test_the_window_opens_before_the_first_damaged_checkpoint_but_at_most_a_day() -> None:
    created = datetime(2026, 1, 2, tzinfo=UTC)
    start, _, why = tl.incident_window(created, created, [created - timedelta(hours=5)])
    assert start == created - timedelta(hours=6) and "damaged checkpoint" in why
    start, _, why = tl.incident_window(created, created, [created - timedelta(days=9)])
    assert start == created - timedelta(days=1) and "a day before" in why
    start, _, _ = tl.incident_window(created, created, [])
    assert start == created - timedelta(hours=1)


def test_the_json_report_carries_the_window(tmp_path: Path) -> None:
    case, _ = incident_case(tmp_path)
    model = json.loads(report_model.to_json(report_model.build(case)))
    window = model["timeline"]["window"]
    assert window["start"] < window["end"] and window["why"]


def _loop_evidence_subjects(t0: datetime, events: list[TimelineEvent]) -> tl.Subjects:
    """/dev/loop0 given as evidence at ``t0`` (attached by someone else before that)."""
    records = [{"action": "evidence.added", "time": t0.isoformat(), "details": {"item": {
        "source": "/dev/loop0", "kind": "block_device"}}}]
    subjects = tl.subjects_of(records, [], parse_time)
    assert "loop0" in subjects.devices
    subjects.learn_attaches(events)
    return subjects


def _attaches(start: datetime, n: int, spacing_s: float) -> list[TimelineEvent]:
    """Other jobs attaching loop1..loopN."""
    return [event(start + timedelta(seconds=k * spacing_s),
                  f"loop{k + 1}: detected capacity change from 0 to 16384") for k in range(n)]


def test_a_loop_line_where_the_kernel_may_have_dropped_the_attach_is_not_called_the_evidences(
        ) -> None:
    t0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
    old_attach = event(t0 - timedelta(minutes=30), "loop0: detected capacity change from 0 to 1")
    old_error = event(t0 - timedelta(minutes=29), "XFS (loop0): Mounting V5 Filesystem")
    burst = _attaches(t0 - timedelta(minutes=10), 10, 0.1)  # the limit spent: loop0's attach
    after = event(t0 - timedelta(minutes=5), "EXT4-fs (loop0): mounted filesystem")  # may be lost
    subjects = _loop_evidence_subjects(t0, [old_attach, old_error, *burst, after])
    why = tl.classify(old_error, subjects)
    assert why is not None and why.startswith("evidence device loop0, or an earlier use of loop0")
    # after the spent window closed, a line about loop0 is the evidence's again
    assert tl.classify(after, subjects) == "evidence device loop0"


def test_without_a_spent_limit_a_loop_line_since_its_attach_is_the_evidences() -> None:
    t0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
    old_attach = event(t0 - timedelta(minutes=30), "loop0: detected capacity change from 0 to 1")
    line = event(t0 - timedelta(minutes=29), "XFS (loop0): Mounting V5 Filesystem")
    for others in (_attaches(t0 - timedelta(minutes=10), 9, 0.1),  # nine: not spent
                   _attaches(t0 - timedelta(minutes=10), 10, 0.7),  # ten over 6.3 s
                   _attaches(t0 + timedelta(minutes=1), 12, 0.1)):  # after it was evidence
        subjects = _loop_evidence_subjects(t0, [old_attach, line, *others])
        assert tl.classify(line, subjects) == "evidence device loop0"


def test_a_spent_window_followed_by_an_unannounced_attach_dropped_nothing() -> None:
    t0 = datetime(2026, 1, 1, 12, tzinfo=UTC)
    old_attach = event(t0 - timedelta(minutes=30), "loop0: detected capacity change from 0 to 1")
    line = event(t0 - timedelta(minutes=29), "XFS (loop0): Mounting V5 Filesystem")
    burst = _attaches(t0 - timedelta(minutes=10), 10, 0.1)
    later = event(t0 - timedelta(minutes=9), "loop11: detected capacity change from 0 to 8")
    notice = event(t0 - timedelta(minutes=9), "set_capacity_and_notify: 2 callbacks suppressed")
    subjects = _loop_evidence_subjects(t0, [old_attach, line, *burst, later])
    assert tl.classify(line, subjects) == "evidence device loop0"
    notice.order = (0, -1)  # printed just before the line that got through
    subjects = _loop_evidence_subjects(t0, [old_attach, line, *burst, notice, later])
    why = tl.classify(line, subjects)
    assert why is not None and why.startswith("evidence device loop0, or an earlier use")
