"""The report's timeline: what bears on the incident, inside a window around it.

A case collects far more than a reader can use: ``dmesg`` alone brings hundreds of boot lines
(``BIOS-e820``, ``ACPI``, ``CPU topo``) and other devices' filesystem messages. The report shows:

* the kit's own actions (a step once, with its outcome; its start is folded into its end);
* collected lines (kernel, journal) that are about the incident: the **evidence devices** (a
  block device given as evidence and its partitions, at any time -- a loop device only since it
  was last attached before it became evidence: its lines before that were about the file an
  earlier user had attached to that number (where the kernel may have dropped attach lines in
  between, its rate limit spent, those lines are marked as possibly an earlier use); a loop,
  device-mapper or mount
  device the kit itself attached, only while the kit held it), **I/O errors** (any device),
  **OOM** and **hung-task** lines, and the **job** (a training process triage found: its pid or
  name); a filesystem message counts when it names one of those devices;
* every checkpoint mtime and object-store version and CloudTrail event the case recorded,

inside the **incident window**: from an hour before the earliest of the case's creation and the
mtimes of its damaged checkpoints (at most a day before the case), to the case's last record.

Everything else is counted by reason and collapsed (the counts are in the report); the case keeps
every line as an artifact and ``ckptrescue report CASE --format timeline`` exports them all for
Timesketch. Runs of near-identical lines (the same message but for its numbers) are shown once,
with their count and the time of the last one.

Pure: records and timeline events in, rows out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from ckptrescue.model import JsonObject
from ckptrescue.storage.triage import LOOP_ATTACHED, rate_limit_mark, spent_windows

if TYPE_CHECKING:
    from ckptrescue.exports.timeline import TimelineEvent

BEFORE_INCIDENT = timedelta(hours=1)    # the window opens this long before the first sign
MAX_LOOKBACK = timedelta(days=1)        # ... but never more than this before the case
MAX_EXTERNAL_ROWS = 80                  # collected rows shown at most (the rest counted)
COLLECTED_SOURCES = ("kernel", "journal")  # log lines; others (file, s3, cloudtrail) always bear

IO_ERROR = re.compile(r"I/O error|blk_update_request|critical medium error|Medium Error|"
                      r"Unrecovered read error|\bUNC\b|failed command: (READ|WRITE)|"
                      r"Sense Key|end_request|print_req_error|DID_(BAD_TARGET|NO_CONNECT|"
                      r"TIME_OUT)|\bcritical (target|nexus|space allocation) error|"
                      r"nvme\d+.*(timeout|I/O error|reset|failed|critical|Abort)|"
                      r"ata\d+(\.\d+)?: (exception|failed|error)|EXT4-fs error|"
                      r"XFS \([^)]*\): (metadata I/O error|Corruption|log I/O error)",
                      re.IGNORECASE)
OOM = re.compile(r"Out of memory|oom-kill|oom_reaper|invoked oom-killer|Killed process \d+|"
                 r"Memory cgroup out of memory", re.IGNORECASE)
HUNG = re.compile(r"blocked for more than \d+ seconds|hung_task|INFO: task \S+ blocked",
                  re.IGNORECASE)
_DIGITS = re.compile(r"\d+")
_WHOLE_DEVICE = re.compile(r"^(?P<base>(?:nvme\d+n\d+|mmcblk\d+|loop\d+|nbd\d+|md\d+|"
                           r"dm-\d+|[a-z]+?))(?:p?\d+)?$")


@dataclass
class Subjects:
    """What the incident is about, read from the case's records."""

    devices: set[str] = field(default_factory=set)          # kernel names, at any time
    held: dict[str, list[tuple[datetime, datetime | None]]] = field(default_factory=dict)
    pids: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)
    added: dict[str, datetime] = field(default_factory=dict)     # evidence device -> when added
    attached: dict[str, datetime] = field(default_factory=dict)  # loop device -> its last attach
    # loop device -> its lines up to then may be an earlier use's (an attach line after the last
    # one seen may have been dropped by the kernel's rate limit)
    unsure: dict[str, datetime] = field(default_factory=dict)

    def learn_attaches(self, events: list[TimelineEvent]) -> None:
        """For each evidence loop device, the last kernel attach line before it became evidence:
        a loop number is reused, and what the kernel said about it before is about another
        file."""
        for e in events:
            m = LOOP_ATTACHED.search(e.message) if e.source in COLLECTED_SOURCES else None
            if m is None or m[1] not in self.devices:
                continue
            added = self.added.get(m[1])
            if (added is None or e.time <= added) and e.time >= self.attached.get(m[1], e.time):
                self.attached[m[1]] = e.time
        kernel = sorted((e for e in events if e.source in COLLECTED_SOURCES),
                        key=lambda e: (e.time, e.order))
        marks = [(e.time.timestamp(), rate_limit_mark(e.message)) for e in kernel]
        # (from the window's last printed line, or the first line: a drop announced first)
        spent = [(kernel[max(i, 0)].time, datetime.fromtimestamp(end, kernel[0].time.tzinfo))
                 for i, end in spent_windows(marks)]
        for dev in self.devices:
            if not dev.startswith("loop"):
                continue
            since, added = self.attached.get(dev), self.added.get(dev)
            ends = [end for start, end in spent
                    if (added is None or start <= added) and (since is None or end > since)]
            if ends:
                self.unsure[dev] = min(max(ends), added) if added else max(ends)

    def device_hit(self, text: str, when: datetime) -> str | None:
        """The evidence device ``text`` names (as a word), if any, at ``when``."""
        for dev in self.devices:
            if _names_device(text, dev) and when >= self.attached.get(_whole(dev), when):
                return dev
        for dev, spans in self.held.items():
            if _names_device(text, dev) and any(
                    start <= when and (end is None or when <= end) for start, end in spans):
                return dev
        return None

    def job_hit(self, event: TimelineEvent) -> bool:
        attrs = event.attributes
        if str(attrs.get("pid") or "") in self.pids and attrs.get("pid"):
            return True
        if attrs.get("identifier") in self.names or attrs.get("command") in self.names:
            return True
        msg = event.message
        return any(re.search(rf"(pid[ =:]\s*{p}\b|\[{p}\]|:{p}\b|process {p}\b)", msg)
                   for p in self.pids)


def _names_device(text: str, dev: str) -> bool:
    """``sdb`` names sdb and its partitions (sdb1), not sdba; ``loop0`` names loop0p1."""
    return re.search(rf"(?<![\w-]){re.escape(dev)}(p?\d+)?(?![\w-])", text) is not None


def _whole(name: str) -> str:
    """The whole device of a kernel name (``loop1p2`` -> ``loop1``)."""
    m = _WHOLE_DEVICE.match(name)
    return m["base"] if m else name


def _kernel_name(path: str) -> str | None:
    """The kernel's name of a device path (``/dev/sdb1`` -> ``sdb1``), None for a file."""
    if not path.startswith("/dev/"):
        return None
    name = PurePosixPath(path).name
    if path.startswith("/dev/mapper/"):
        return name  # the dm name; dm-N is added when the kit records it
    return name or None


def subjects_of(records: list[JsonObject], triage_processes: list[JsonObject],
                parse_time: Any) -> Subjects:
    """Evidence devices, the devices the kit attached (with when it held them), the job."""
    subjects = Subjects()
    opened: dict[str, datetime] = {}
    for r in records:
        d = r.get("details") or {}
        action = r.get("action")
        when = parse_time(r.get("time"))
        if action == "evidence.added":
            item = d.get("item") or {}
            for path in (item.get("source"), (item.get("details") or {}).get("realpath")):
                name = _kernel_name(str(path or ""))
                if name:  # the device and the whole disk it is on (I/O errors name the disk)
                    subjects.devices.update({name, _whole(name)})
                    if when is not None:
                        for dev in (name, _whole(name)):
                            subjects.added.setdefault(dev, when)
        elif action in {"safety.attached", "safety.detached"} and when is not None:
            name = _kernel_name(str(d.get("name") or ""))
            if d.get("kind") == "mount":
                argv = [str(a) for a in d.get("argv") or []]
                devs = [a for a in argv if a.startswith("/dev/")]
                name = _kernel_name(devs[0]) if devs else None
            if not name:
                continue
            if action == "safety.attached":
                opened.setdefault(name, when)
            elif name in opened:
                subjects.held.setdefault(name, []).append((opened.pop(name), when))
        elif action == "storage.mounted":
            for dev in [d.get("device"), *(d.get("dm_devices") or []),
                        *(d.get("extra_loops") or [])]:
                name = _kernel_name(str(dev or ""))
                if name and when is not None and name not in opened:
                    opened[name] = when
    for name, start in opened.items():  # still attached when the case ended
        subjects.held.setdefault(name, []).append((start, None))
    for p in triage_processes:
        if p.get("kind") == "training" or p.get("open_for_write"):
            if p.get("pid") is not None:
                subjects.pids.add(str(p["pid"]))
            if p.get("name"):
                subjects.names.add(str(p["name"]))
    return subjects


def classify(event: TimelineEvent, subjects: Subjects) -> str | None:
    """Why a collected line bears on the incident (None: it does not)."""
    text = event.message
    if IO_ERROR.search(text):
        return "I/O error"
    if OOM.search(text):
        return "out of memory"
    if HUNG.search(text):
        return "hung task"
    dev = subjects.device_hit(text, event.time)
    if dev and event.time <= subjects.unsure.get(_whole(dev), datetime.min.replace(
            tzinfo=event.time.tzinfo)):
        return (f"evidence device {dev}, or an earlier use of {_whole(dev)}: the kernel may have "
                "dropped its attach line (rate limit)")
    if dev:
        return f"evidence device {dev}"
    if subjects.job_hit(event):
        return "the job"
    return None


def incident_window(created: datetime | None, end: datetime | None,
                    damaged_mtimes: list[datetime]) -> tuple[datetime | None, datetime | None,
                                                             str]:
    """(start, end, why) of the window the report's timeline shows."""
    if created is None:
        return None, end, "the whole case (no creation time recorded)"
    first = min([created, *damaged_mtimes])
    start = max(first - BEFORE_INCIDENT, created - MAX_LOOKBACK)
    why = ("an hour before the earliest damaged checkpoint's mtime" if first < created
           else "an hour before the case was created")
    if first < created - MAX_LOOKBACK + BEFORE_INCIDENT:
        why = "a day before the case was created (the damaged checkpoints are older)"
    return start, end, why + ", to the case's last record"


def display_time(value: Any) -> str:
    """``2026-12-04 05:36:44.640`` (UTC; milliseconds): one short line."""
    text = str(value or "")
    m = re.match(r"^(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(\.\d{1,3})?", text)
    if not m:
        return text
    return f"{m[1]} {m[2]}{m[3] or ''}"


@dataclass
class Selection:
    rows: list[JsonObject]
    collapsed: dict[str, int]
    collected: int
    shown_collected: int
    window: JsonObject

    def to_json(self) -> JsonObject:
        return {"rows": self.rows, "collapsed": [{"reason": k, "count": v} for k, v in
                                                 sorted(self.collapsed.items(),
                                                        key=lambda kv: -kv[1])],
                "collapsed_total": sum(self.collapsed.values()), "collected": self.collected,
                "shown_collected": self.shown_collected, "window": self.window}


def select(kit: list[JsonObject], events: list[TimelineEvent], subjects: Subjects, *,
           window: tuple[datetime | None, datetime | None, str], iso: Any) -> Selection:
    """The rows the report shows: the kit's actions and the collected events that bear on the
    incident inside ``window``; the rest counted by reason."""
    start, end, why = window
    subjects.learn_attaches(events)
    collapsed: dict[str, int] = {}
    shown: list[JsonObject] = []
    collected = 0

    def drop(reason: str) -> None:
        collapsed[reason] = collapsed.get(reason, 0) + 1

    for e in events:
        collected += 1
        if e.source in COLLECTED_SOURCES:
            reason = classify(e, subjects)
            if reason is None:
                drop(f"{e.source} lines about nothing the incident involves")
                continue
        else:
            reason = {"file": "checkpoint written", "s3": "object version",
                      "cloudtrail": "object-store API call"}.get(e.source, e.source)
        if e.time_exact and ((start is not None and e.time < start)
                             or (end is not None and e.time > end)):
            drop(f"{e.source} lines outside the incident window ({reason})"
                 if e.source in COLLECTED_SOURCES else f"{reason} outside the incident window")
            continue
        shown.append({"time": iso(e.time), "when": display_time(iso(e.time)),
                      "seq": e.order[0], "action": e.timestamp_desc, "text": e.message,
                      "source": e.source, "exact": e.time_exact, "why": reason, "repeat": 1,
                      "started": None})
    merged = _merge_repeats(shown)
    kept, extra = merged[:MAX_EXTERNAL_ROWS], merged[MAX_EXTERNAL_ROWS:]
    for row in extra:
        drop(f"more {row['source']} lines than the report shows ({row['why']})")
    rows = sorted([*_fold_steps(kit), *kept],
                  key=lambda e: (str(e["time"]), e["source"] != "ckptrescue", e["seq"] or 0))
    return Selection(rows=rows, collapsed=collapsed, collected=collected,
                     shown_collected=sum(r["repeat"] for r in kept),
                     window={"start": iso(start) if start else None,
                             "end": iso(end) if end else None, "why": why,
                             "start_display": display_time(iso(start)) if start else "",
                             "end_display": display_time(iso(end)) if end else ""})


def _merge_repeats(rows: list[JsonObject]) -> list[JsonObject]:
    """Consecutive lines of one source whose messages differ only in their numbers: once, with
    how many and until when."""
    out: list[JsonObject] = []
    for row in rows:
        last = out[-1] if out else None
        if (last is not None and last["source"] == row["source"]
                and row["source"] in COLLECTED_SOURCES
                and _DIGITS.sub("#", last["text"]) == _DIGITS.sub("#", row["text"])):
            last["repeat"] += 1
            last["until"] = row["when"]
            continue
        out.append(dict(row))
    for row in out:
        if row["repeat"] > 1:
            row["text"] += f" (and {row['repeat'] - 1} more like it, until {row['until']})"
    return out


def _fold_steps(kit: list[JsonObject]) -> list[JsonObject]:
    """A step's start folds into its end (one row: outcome, started at); a start without an
    end (interrupted) stays."""
    ends = {(e.get("run"), e.get("step")) for e in kit if e["action"] == "step.finished"}
    out = []
    starts: dict[tuple[Any, Any], str] = {}
    for e in kit:
        key = (e.get("run"), e.get("step"))
        if e["action"] == "step.started" and key in ends:
            starts[key] = e["time"]
            continue
        row = {**e, "when": display_time(e["time"]), "why": "", "repeat": 1, "started": None}
        if e["action"] == "step.finished" and key in starts:
            row["started"] = display_time(starts.pop(key))
        out.append(row)
    return out
