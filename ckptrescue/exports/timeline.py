"""One time axis for a case: the kit's own actions, the kernel and journal logs it collected, S3
object versions, CloudTrail events and recorded file mtimes; written for Timesketch.

Sources (all from the verified audit log and the artifacts it names; nothing is re-run):

* **the kit** (``source: ckptrescue``): every audit record except ``artifact.stored`` (the
  record that uses an artifact says more), at its own time;
* **kernel / journal**: the stdout artifact of every ``dmesg`` and ``journalctl`` the runner
  ran (``collect.logs``, ``triage``, ``exec``), parsed by the form the argv asked for —
  ``dmesg --time-format iso`` (with or without ``-x``), ``journalctl -o short-iso`` /
  ``short-iso-precise`` and ``journalctl -o json`` (``__REALTIME_TIMESTAMP``); a line whose
  time cannot be read (``dmesg``'s default seconds-since-boot, ``ctime`` or BSD-syslog forms
  without year or zone) is kept, placed at the time it was collected, and says so
  (``time_exact: false`` and ``time_note``); lines two collections share appear once;
* **S3**: every version and delete marker an ``s3 history`` listed (LastModified), and the
  object versions ``s3 preserve`` acquired as evidence;
* **CloudTrail**: the events ``s3 history`` correlated with versions, and raw CloudTrail files
  kept as artifacts (an ``artifact.stored`` whose kind or name says ``cloudtrail``);
* **file mtimes**: ``checkpoint.probed`` records carrying an ``mtime`` (probes do not record
  one today; the hook is here for when they do).

Timesketch's import format (https://timesketch.org/guides/user/import-from-json-csv/): a JSONL
or CSV file whose events carry ``message``, ``datetime`` (ISO 8601) and ``timestamp_desc``; any
other field is an attribute. We add ``timestamp`` (microseconds since the epoch, as in its
examples) and flat attributes. In the CSV, a cell that starts with ``=``, ``+``, ``-``, ``@``,
tab or carriage return is prefixed with ``'`` so that a spreadsheet shows it as text (a kernel
line or an S3 key is attacker-controlled); in the JSONL every value is a JSON string or number.
"""

from __future__ import annotations

import csv
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ckptrescue.display import shown_text
from ckptrescue.exports.records import describe_record, iso_utc, parse_time
from ckptrescue.model import JsonObject
from ckptrescue.record.audit import verify_lines, well_formed

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

# Timesketch's mandatory fields, then ours; attributes never take these names.
CORE_FIELDS = ("message", "datetime", "timestamp", "timestamp_desc")
_RESERVED = {*CORE_FIELDS, "_id", "_index", "_type", "__ts_timeline_id", "tag", "label"}
_SOURCE_RANK = {"ckptrescue": 0, "kernel": 1, "journal": 2, "s3": 3, "cloudtrail": 4, "file": 5}
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)"
_DMESG_ISO = re.compile(r"^(?:(?P<facility>[a-z0-9]+)\s*:\s*(?P<level>[a-z]+)\s*:\s*)?"
                        rf"(?P<ts>{_ISO})\s?(?P<msg>.*)$")
_DMESG_MONO = re.compile(r"^(?:(?P<facility>[a-z0-9]+)\s*:\s*(?P<level>[a-z]+)\s*:\s*)?"
                         r"\[\s*(?P<mono>\d+\.\d+)\]\s?(?P<msg>.*)$")
_CTIME = re.compile(r"^(?:(?P<facility>[a-z0-9]+)\s*:\s*(?P<level>[a-z]+)\s*:\s*)?"
                    r"\[(?P<ctime>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?"
                    r"(?P<msg>.*)$")
_SYSLOG_ISO = re.compile(rf"^(?P<ts>{_ISO})\s+(?P<host>\S+)\s+(?P<ident>[^:\[\s]+)"
                         r"(?:\[(?P<pid>\d+)\])?:\s?(?P<msg>.*)$")
_SYSLOG_BSD = re.compile(r"^(?P<stamp>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)\s+(?P<host>\S+)\s+"
                         r"(?P<ident>[^:\[\s]+)(?:\[(?P<pid>\d+)\])?:\s?(?P<msg>.*)$")


@dataclass
class TimelineEvent:
    """One event on the case's time axis.

    ``time`` is UTC. When the source's own time could not be read, ``time_exact`` is False,
    ``time`` is when the kit collected it and ``time_note`` says why.
    """

    time: datetime
    source: str  # ckptrescue, kernel, journal, s3, cloudtrail, file
    timestamp_desc: str
    message: str
    attributes: JsonObject = field(default_factory=dict)
    time_exact: bool = True
    time_note: str = ""
    order: tuple[int, int] = (0, 0)  # (audit seq, line) for a stable order at equal times

    def sort_key(self) -> tuple[datetime, int, tuple[int, int], str]:
        return (self.time, _SOURCE_RANK.get(self.source, 9), self.order, self.message)

    def to_timesketch(self) -> JsonObject:
        """The event as one Timesketch row: mandatory fields first, then flat attributes."""
        row: JsonObject = {
            "message": self.message,
            "datetime": iso_utc(self.time),
            "timestamp": _micros(self.time),
            "timestamp_desc": self.timestamp_desc,
            "source": self.source,
            "time_exact": self.time_exact,
        }
        if self.time_note:
            row["time_note"] = self.time_note
        for key, value in sorted(self.attributes.items()):
            name = _field_name(key)
            while name in row or name in _RESERVED:
                name = "attr_" + name
            row[name] = _flat(value)
        return row


# ---- the merge -------------------------------------------------------------------------------

def timeline_events(case: Case) -> list[TimelineEvent]:
    """Every event the case knows of, oldest first (read-only)."""
    chain = verify_lines(case.audit.read_bytes())
    records = [r for r in chain.records if well_formed(r)]  # others: case verify names them
    events: list[TimelineEvent] = []
    stored: dict[str, JsonObject] = {}
    for record in records:
        details = record.get("details") or {}
        if record["action"] == "artifact.stored" and isinstance(details.get("sha256"), str):
            stored.setdefault(details["sha256"], details)
    for record in records:
        events.extend(_kit_events(record))
        events.extend(_log_events(case, record, stored))
        events.extend(_s3_events(case, record))
        events.extend(_mtime_events(record))
    if not chain.ok:
        last = records[-1] if records else None
        when = parse_time(last.get("time")) if last else None
        events.append(TimelineEvent(
            time=when or datetime.fromtimestamp(0, UTC),
            source="ckptrescue", timestamp_desc="Audit chain check",
            message="audit chain BROKEN: " + "; ".join(chain.problems)
                    + " -- later records are not on this timeline",
            attributes={"problems": chain.problems},
            order=(len(records), 0)))
    return sorted(_dedupe(events), key=TimelineEvent.sort_key)


def _dedupe(events: Iterable[TimelineEvent]) -> Iterator[TimelineEvent]:
    """Kernel lines two collections share, and S3 versions or CloudTrail events seen twice,
    appear once (the first collection's)."""
    seen: set[tuple[Any, ...]] = set()
    for event in events:
        key = event.attributes.pop("_dedupe", None)
        if key is not None:
            if key in seen:
                continue
            seen.add(key)
        yield event


KIT_DESC = "Recorded in the case audit log"
_STEP = (KIT_DESC, "", {"step": "step", "step_action": "action", "status": "status"})
# audit action -> (timestamp description, the part of the details the attributes come from
# ("" = the details themselves), {attribute: key in that part})
KIT_ATTRIBUTES: dict[str, tuple[str, str, dict[str, str]]] = {
    "finding": ("Finding recorded", "finding",
                {"code": "code", "severity": "severity", "evidence": "evidence"}),
    "tool.run": ("Tool run finished", "",
                 {"argv": "argv", "returncode": "returncode", "duration_s": "duration_s",
                  "stdout_sha256": "stdout_sha256"}),
    "evidence.added": ("Evidence acquired", "item",
                       {"evidence_id": "id", "evidence_sha256": "sha256",
                        "evidence_source": "source"}),
    "step.started": _STEP,
    "step.finished": _STEP,
}


def _kit_events(record: JsonObject) -> Iterator[TimelineEvent]:
    action = str(record["action"])
    if action == "artifact.stored":
        return
    when = parse_time(record.get("time"))
    if when is None:
        return
    details = record.get("details") or {}
    attributes: JsonObject = {"action": action, "audit_seq": record["seq"],
                                  "audit_hash": record["hash"], "actor": record.get("actor")}
    desc, part, keys = KIT_ATTRIBUTES.get(action, (KIT_DESC, "", {}))
    source = (details.get(part) or {}) if part else details
    attributes.update({name: source.get(key) for name, key in keys.items()})
    yield TimelineEvent(time=when, source="ckptrescue", timestamp_desc=desc,
                        message=describe_record(record),
                        attributes={k: v for k, v in attributes.items() if v is not None},
                        order=(int(record["seq"]), 0))


# ---- kernel and journal logs -------------------------------------------------------------------

def log_form(argv: list[str]) -> str | None:
    """Which parser reads a tool's stdout: ``dmesg``, ``journal-json``, ``journal-short``."""
    if not argv:
        return None
    tool = os.path.basename(argv[0])
    if tool == "dmesg":
        return "dmesg"
    if tool != "journalctl":
        return None
    output = None
    for i, arg in enumerate(argv[1:], start=1):
        if arg in {"-o", "--output"} and i + 1 < len(argv):
            output = argv[i + 1]
        elif arg.startswith("--output="):
            output = arg.split("=", 1)[1]
        elif arg.startswith("-o") and len(arg) > 2:
            output = arg[2:]
    if output in {"json", "json-seq", "json-pretty", "json-sse"}:
        return "journal-json"
    return "journal-short"


def _log_events(case: Case, record: JsonObject, stored: dict[str, JsonObject]
                ) -> Iterator[TimelineEvent]:
    details = record.get("details") or {}
    collected = parse_time(record.get("time"))
    if collected is None:
        return
    if record["action"] == "tool.run" and details.get("returncode") == 0:
        argv = [str(a) for a in details.get("argv") or []]
        form = log_form(argv)
        sha = details.get("stdout_sha256")
        if form is None or not isinstance(sha, str):
            return
        text = _read_artifact(case, sha)
        if text is None:
            return
        origin = {"collected_by": " ".join(argv), "artifact_sha256": sha}
        if form == "journal-json":
            yield from parse_journal_json(text, collected, origin, int(record["seq"]))
        else:
            kernel = form == "dmesg" or "-k" in argv or "--dmesg" in argv
            yield from parse_log_lines(text, collected, origin, int(record["seq"]),
                                       source="kernel" if kernel else "journal",
                                       form="dmesg" if form == "dmesg" else "syslog")
    elif record["action"] == "artifact.stored":
        kind = f"{details.get('kind')} {details.get('name')}".lower()
        sha = details.get("sha256")
        if not isinstance(sha, str):
            return
        if "cloudtrail" in kind:
            yield from _cloudtrail_file_events(case, sha, int(record["seq"]))
        elif re.search(r"\b(syslog|messages|kern\.log|journal|dmesg)\b|\.log\b", kind):
            text = _read_artifact(case, sha)
            if text is not None:
                yield from parse_log_lines(text, collected, {"artifact_sha256": sha,
                                                             "artifact_name": details.get("name")},
                                           int(record["seq"]), source="journal",
                                           form="syslog")


def _read_artifact(case: Case, sha: str) -> str | None:
    try:
        return case.artifact_path(sha).read_bytes().decode("utf-8", "replace")
    except OSError:
        return None


def parse_log_lines(text: str, collected: datetime, origin: JsonObject, seq: int, *,
                    source: str, form: str = "syslog") -> Iterator[TimelineEvent]:
    """dmesg (``--time-format iso`` with or without ``-x``; the default ``[seconds]`` and
    ``ctime`` forms), ``journalctl -o short-iso[-precise]`` and syslog lines (RFC 3339 or BSD).
    Lines without a readable time are kept at ``collected`` and say so. ``form`` is
    ``dmesg`` (a leading time is the kernel's, the rest is the message) or ``syslog`` (a time,
    a host and an identifier)."""
    pending: TimelineEvent | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if not line.strip() or line.startswith("-- "):
            continue  # journalctl's "-- No entries --", "-- Boot … --"
        if pending is not None and line[:1].isspace():
            pending.message += " " + line.strip()  # a continuation of a multi-line message
            continue
        if pending is not None:
            yield pending
        pending = _log_line(line, lineno, collected, origin, seq, source=source, form=form)
    if pending is not None:
        yield pending


def _log_line(line: str, lineno: int, collected: datetime, origin: JsonObject, seq: int,
              *, source: str, form: str) -> TimelineEvent:
    attrs: JsonObject = {**origin, "line": lineno}
    when: datetime | None = None
    note = ""
    message = line
    m = _DMESG_ISO.match(line)
    s = _SYSLOG_ISO.match(line) if form == "syslog" else None
    if s:
        when = parse_time(s["ts"])
        message = s["msg"]
        attrs.update({"host": s["host"], "identifier": s["ident"], "pid": s["pid"]})
    elif m:
        when = parse_time(m["ts"])
        message = m["msg"]
        attrs.update({"facility": m["facility"], "level": m["level"]})
    elif mono := _DMESG_MONO.match(line):
        message = mono["msg"]
        attrs.update({"facility": mono["facility"], "level": mono["level"],
                      "seconds_since_boot": float(mono["mono"])})
        note = ("dmesg printed seconds since boot, not a wall-clock time (collect with "
                "--time-format iso); placed at the time it was collected")
    elif ct := _CTIME.match(line):
        message = ct["msg"]
        attrs.update({"facility": ct["facility"], "level": ct["level"],
                      "local_time": ct["ctime"]})
        note = ("dmesg ctime form has no time zone (and drifts after suspend); placed at "
                "the time it was collected")
    elif bsd := _SYSLOG_BSD.match(line):
        message = bsd["msg"]
        attrs.update({"host": bsd["host"], "identifier": bsd["ident"], "pid": bsd["pid"],
                      "local_time": bsd["stamp"]})
        note = "syslog time has no year and no time zone; placed at the time it was collected"
    else:
        note = "no time could be read from this line; placed at the time it was collected"
    attrs = {k: v for k, v in attrs.items() if v is not None}
    if when is not None:
        attrs["_dedupe"] = (source, iso_utc(when), message)
    return TimelineEvent(
        time=when or collected, source=source,
        timestamp_desc=("Kernel log time" if source == "kernel" else "Log entry time")
        if when else "Log collected (time not read from the line)",
        message=message, time_exact=when is not None, time_note=note, attributes=attrs,
        order=(seq, lineno))


def parse_journal_json(text: str, collected: datetime, origin: JsonObject, seq: int
                       ) -> Iterator[TimelineEvent]:
    """``journalctl -o json``: one object per line; the time is ``__REALTIME_TIMESTAMP``
    (microseconds since the epoch); ``MESSAGE`` may be an array of bytes."""
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        attrs: JsonObject = {**origin, "line": lineno}
        try:
            entry = json.loads(raw)
        except ValueError:
            entry = None
        if not isinstance(entry, dict):
            yield TimelineEvent(time=collected, source="journal",
                                timestamp_desc="Log collected (time not read from the line)",
                                message=raw, time_exact=False,
                                time_note="not a journal JSON object; placed at the time it was "
                                          "collected", attributes=attrs, order=(seq, lineno))
            continue
        message = _journal_text(entry.get("MESSAGE"))
        when = None
        realtime = entry.get("__REALTIME_TIMESTAMP")
        try:
            when = datetime.fromtimestamp(int(str(realtime)) / 1_000_000, UTC)
        except (TypeError, ValueError, OverflowError, OSError):
            when = None
        transport = _journal_text(entry.get("_TRANSPORT"))
        source = "kernel" if transport == "kernel" else "journal"
        for key, name in (("_HOSTNAME", "host"), ("SYSLOG_IDENTIFIER", "identifier"),
                          ("_COMM", "command"), ("_PID", "pid"), ("PRIORITY", "priority"),
                          ("_BOOT_ID", "boot_id"), ("_TRANSPORT", "transport"),
                          ("__MONOTONIC_TIMESTAMP", "monotonic_us"), ("_SYSTEMD_UNIT", "unit")):
            if key in entry:
                attrs[name] = _journal_text(entry[key])
        exact = when is not None
        if exact:
            attrs["_dedupe"] = (source, iso_utc(when), message)  # type: ignore[arg-type]
        yield TimelineEvent(
            time=when or collected, source=source,
            timestamp_desc="Kernel log time" if source == "kernel" and exact
            else "Log entry time" if exact else "Log collected (time not read from the line)",
            message=message, time_exact=exact,
            time_note="" if exact else "no __REALTIME_TIMESTAMP; placed at the time it was "
                                       "collected",
            attributes=attrs, order=(seq, lineno))


def _journal_text(value: Any) -> str:
    if isinstance(value, list) and all(isinstance(b, int) and 0 <= b < 256 for b in value):
        return bytes(value).decode("utf-8", "replace")
    return "" if value is None else str(value)


# ---- S3 and CloudTrail -----------------------------------------------------------------------

def _s3_events(case: Case, record: JsonObject) -> Iterator[TimelineEvent]:
    details = record.get("details") or {}
    seq = int(record["seq"])
    if record["action"] == "s3.history":
        bucket = urlsplit(str(details.get("url") or "")).netloc
        for sha in record.get("artifacts") or []:
            text = _read_artifact(case, sha)
            try:
                data = json.loads(text) if text else None
            except ValueError:
                data = None
            if not isinstance(data, dict):
                continue
            for key_index, key in enumerate(data.get("keys") or []):
                if not isinstance(key, dict):
                    continue
                for version in key.get("versions") or []:
                    if isinstance(version, dict):
                        yield from _version_events(bucket, str(key.get("key")), version,
                                                   key.get("known_good"), (seq, key_index))
    elif record["action"] == "evidence.added":
        item = details.get("item") or {}
        obj = (item.get("details") or {}).get("object") if item.get("kind") == "s3-object" \
            else None
        if isinstance(obj, dict):
            yield from _version_events(str(obj.get("bucket")), str(obj.get("key")), {
                "version_id": obj.get("version_id"), "last_modified": obj.get("last_modified"),
                "size": obj.get("size"), "delete_marker": False}, None, (seq, 0),
                evidence_id=item.get("id"))


def _version_events(bucket: str, key: str, version: JsonObject, known_good: Any,
                    order: tuple[int, int], evidence_id: Any = None
                    ) -> Iterator[TimelineEvent]:
    version_id = version.get("version_id")
    when = parse_time(version.get("last_modified"))
    url = f"s3://{bucket}/{key}"
    if when is not None:
        marker = bool(version.get("delete_marker"))
        attrs = {"bucket": bucket, "key": key, "version_id": version_id, "url": url,
                 "delete_marker": marker, "is_latest": version.get("is_latest"),
                 "size": version.get("size"), "known_good": version_id == known_good
                 if known_good else None, "evidence_id": evidence_id,
                 "checksum": version.get("checksum"),
                 "_dedupe": ("s3", bucket, key, version_id)}
        yield TimelineEvent(
            time=when, source="s3",
            timestamp_desc="S3 delete marker created" if marker
            else "S3 object version last modified",
            message=f"{url} {'delete marker' if marker else 'version'} {version_id}",
            attributes={k: v for k, v in attrs.items() if v is not None}, order=order)
    for event in version.get("events") or []:
        if isinstance(event, dict):
            yield from _cloudtrail_event(event, bucket, key, order)


def _cloudtrail_event(event: JsonObject, bucket: str, key: str, order: tuple[int, int]
                      ) -> Iterator[TimelineEvent]:
    when = parse_time(event.get("event_time"))
    if when is None:
        return
    attrs = {"bucket": bucket, "key": key, "version_id": event.get("version_id"),
             "event_name": event.get("event_name"), "principal": event.get("principal"),
             "source_ip": event.get("source_ip"), "user_agent": event.get("user_agent"),
             "access_key_id": event.get("access_key_id"), "event_id": event.get("event_id"),
             "request_id": event.get("request_id"), "matched_by": event.get("matched_by"),
             "cloudtrail_file": event.get("file"),
             "_dedupe": ("cloudtrail", event.get("event_id") or (
                 event.get("event_name"), iso_utc(when), bucket, key, event.get("version_id")))}
    yield TimelineEvent(
        time=when, source="cloudtrail", timestamp_desc="CloudTrail event time",
        message=f"{event.get('event_name')} s3://{bucket}/{key} by {event.get('principal')} "
                f"from {event.get('source_ip')}",
        attributes={k: v for k, v in attrs.items() if v is not None}, order=order)


def _cloudtrail_file_events(case: Case, sha: str, seq: int) -> Iterator[TimelineEvent]:
    """Raw CloudTrail files kept in the case: every event, not only S3 data events."""
    from ckptrescue.errors import CkptRescueError
    from ckptrescue.stores.s3 import cloudtrail

    try:
        raw_events = list(cloudtrail.iter_records(case.artifact_path(sha)))
    except (CkptRescueError, OSError):
        return
    for index, (raw, _file) in enumerate(raw_events):
        when = parse_time(raw.get("eventTime"))
        if when is None:
            continue
        identity = raw.get("userIdentity") if isinstance(raw.get("userIdentity"), dict) else {}
        request = raw.get("requestParameters") if isinstance(raw.get("requestParameters"),
                                                             dict) else {}
        principal = identity.get("arn") or identity.get("principalId")
        bucket, key = request.get("bucketName"), request.get("key")
        attrs = {"event_name": raw.get("eventName"), "event_source": raw.get("eventSource"),
                 "principal": principal, "source_ip": raw.get("sourceIPAddress"),
                 "user_agent": raw.get("userAgent"), "event_id": raw.get("eventID"),
                 "aws_region": raw.get("awsRegion"), "bucket": bucket, "key": key,
                 "artifact_sha256": sha,
                 "_dedupe": ("cloudtrail", raw.get("eventID") or (
                     raw.get("eventName"), iso_utc(when), bucket, key))}
        target = f" s3://{bucket}/{key}" if bucket and key else ""
        yield TimelineEvent(
            time=when, source="cloudtrail", timestamp_desc="CloudTrail event time",
            message=f"{raw.get('eventName')}{target} by {principal} from "
                    f"{raw.get('sourceIPAddress')}",
            attributes={k: v for k, v in attrs.items() if v is not None},
            order=(seq, index))


# ---- file mtimes -----------------------------------------------------------------------------

def _mtime_events(record: JsonObject) -> Iterator[TimelineEvent]:
    if record["action"] != "checkpoint.probed":
        return
    details = record.get("details") or {}
    mtime = details.get("mtime")
    when: datetime | None = None
    if isinstance(mtime, int | float) and not isinstance(mtime, bool):
        when = datetime.fromtimestamp(float(mtime), UTC)
    elif isinstance(mtime, str):
        when = parse_time(mtime)
    if when is None:
        return
    yield TimelineEvent(
        time=when, source="file", timestamp_desc="File modified (mtime)",
        message=f"{details.get('path')} modified (checkpoint, verdict {details.get('verdict')})",
        attributes={"path": details.get("path"), "verdict": details.get("verdict"),
                    "format": details.get("format"), "audit_seq": record["seq"]},
        order=(int(record["seq"]), 0))


# ---- Timesketch writers ----------------------------------------------------------------------

def write_timesketch_jsonl(events: Iterable[TimelineEvent], path: Path | str) -> int:
    """One JSON object per line (Timesketch JSONL import); returns the number of events."""
    count = 0
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for event in events:
            # ensure_ascii: every control and non-ASCII character as \uXXXX, so ``cat`` of
            # the file is inert whatever names the evidence holds (display.py)
            fh.write(json.dumps(event.to_timesketch(), ensure_ascii=True, sort_keys=False)
                     + "\n")
            count += 1
    return count


def write_timesketch_csv(events: Iterable[TimelineEvent], path: Path | str) -> int:
    """A header line then one row per event (Timesketch CSV import); every cell is text that
    cannot start a spreadsheet formula. Returns the number of events."""
    rows = [event.to_timesketch() for event in events]
    columns = list(CORE_FIELDS)
    extra = sorted({name for row in rows for name in row} - set(columns))
    columns += extra
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            writer.writerow([safe_cell(row.get(name)) for name in columns])
    return len(rows)


def safe_cell(value: Any) -> str:
    """A CSV cell as text: JSON for structures, ``'`` before a leading ``= + - @`` (or tab/CR)
    so that no spreadsheet reads it as a formula; control characters shown as ``\\x1b`` (names are
    shown, never obeyed: ``display.shown_text``)."""
    if value is None:
        text = ""
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value
    elif isinstance(value, int | float):
        text = str(value)
    else:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    text = shown_text(text)
    if text.startswith(_FORMULA_START):
        text = "'" + text
    return text


def _micros(moment: datetime) -> int:
    delta = moment.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _field_name(key: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", key).strip("_").lower()
    return name or "attr"


def _flat(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
