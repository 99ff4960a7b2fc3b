"""Read exported CloudTrail log files and pick out S3 data events on objects (pure, local files).

Accepted inputs: a file or a folder (searched recursively) of ``.json`` / ``.json.gz`` files in
CloudTrail's delivered format ``{"Records": [event, ...]}``; also ``lookup-events`` output
(``{"Events": [{"CloudTrailEvent": "<json>"}]}``), a bare list of events, or JSON lines.

Each S3 data event on an object becomes an :class:`ObjectEvent`: who (``userIdentity`` ARN or
principal), from where (``sourceIPAddress``), with what (``userAgent``), when (``eventTime``),
which bucket/key and — where S3 logged it — which version id (``responseElements``
``x-amz-version-id`` for writes and delete markers, ``requestParameters.versionId`` for deletes
of a specific version). :func:`correlate` matches them to listed versions.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ckptrescue.errors import UsageError
from ckptrescue.model import JsonObject

WRITE_EVENTS = frozenset({
    "PutObject", "CompleteMultipartUpload", "CopyObject", "UploadPart", "UploadPartCopy",
    "CreateMultipartUpload", "RestoreObject", "PutObjectRetention", "PutObjectLegalHold",
})
DELETE_EVENTS = frozenset({"DeleteObject", "DeleteObjects"})
# Events that create or remove a version (used for correlation).
VERSION_EVENTS = frozenset({"PutObject", "CompleteMultipartUpload", "CopyObject",
                            "DeleteObject", "DeleteObjects"})


@dataclass(frozen=True)
class ObjectEvent:
    event_name: str
    event_time: str
    bucket: str
    key: str
    version_id: str | None
    principal: str | None
    principal_type: str | None
    access_key_id: str | None
    source_ip: str | None
    user_agent: str | None
    request_id: str | None
    event_id: str | None
    delete_marker: bool = False
    file: str = ""

    def to_json(self, matched_by: str | None = None) -> JsonObject:
        out = {
            "event_name": self.event_name,
            "event_time": self.event_time,
            "principal": self.principal,
            "principal_type": self.principal_type,
            "access_key_id": self.access_key_id,
            "source_ip": self.source_ip,
            "user_agent": self.user_agent,
            "request_id": self.request_id,
            "event_id": self.event_id,
            "version_id": self.version_id,
            "file": self.file,
        }
        if matched_by:
            out["matched_by"] = matched_by
        return out


def iter_files(path: Path) -> Iterator[Path]:
    if path.is_file():
        yield path
        return
    if not path.is_dir():
        raise UsageError(f"{path}: no such CloudTrail file or folder")
    for child in sorted(path.rglob("*")):
        if child.is_file() and (child.name.endswith((".json", ".json.gz", ".jsonl"))):
            yield child


def _read_text(path: Path) -> str:
    with open(path, "rb") as fh:
        magic = fh.read(2)
    try:
        if magic == b"\x1f\x8b":
            with gzip.open(path, "rt", encoding="utf-8") as gz:
                return gz.read()
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise UsageError(f"{path}: unreadable CloudTrail file ({exc})") from exc


def iter_records(path: Path) -> Iterator[tuple[dict[str, Any], str]]:
    """Every raw CloudTrail event in the files under ``path`` with the file it came from."""
    for file in iter_files(path):
        text = _read_text(file)
        try:
            data: Any = json.loads(text)
            docs: Iterable[Any] = [data]
        except ValueError:
            try:
                docs = [json.loads(line) for line in text.splitlines() if line.strip()]
            except ValueError as exc:
                raise UsageError(f"{file}: not CloudTrail JSON ({exc})") from exc
        for doc in docs:
            for record in _records_of(doc):
                yield record, str(file)


def _records_of(doc: Any) -> Iterator[dict[str, Any]]:
    if isinstance(doc, list):
        for item in doc:
            yield from _records_of(item)
    elif isinstance(doc, dict):
        if isinstance(doc.get("Records"), list):
            yield from (r for r in doc["Records"] if isinstance(r, dict))
        elif isinstance(doc.get("Events"), list):
            for item in doc["Events"]:
                raw = item.get("CloudTrailEvent") if isinstance(item, dict) else None
                if isinstance(raw, str):
                    try:
                        yield json.loads(raw)
                    except ValueError:
                        continue
                elif isinstance(item, dict) and "eventName" in item:
                    yield item
        elif "eventName" in doc:
            yield doc


def object_events(record: dict[str, Any], file: str = "") -> list[ObjectEvent]:
    """The object-level S3 events in one CloudTrail record (DeleteObjects may name several)."""
    source = str(record.get("eventSource") or "")
    if source and not source.startswith("s3"):
        return []
    name = str(record.get("eventName") or "")
    request = record.get("requestParameters") or {}
    response = record.get("responseElements") or {}
    if not isinstance(request, dict):
        request = {}
    if not isinstance(response, dict):
        response = {}
    bucket = str(request.get("bucketName") or "")
    identity = record.get("userIdentity") or {}
    common = {
        "event_name": name,
        "event_time": str(record.get("eventTime") or ""),
        "bucket": bucket,
        "principal": identity.get("arn") or identity.get("principalId")
        or identity.get("invokedBy"),
        "principal_type": identity.get("type"),
        "access_key_id": identity.get("accessKeyId"),
        "source_ip": record.get("sourceIPAddress"),
        "user_agent": record.get("userAgent"),
        "request_id": record.get("requestID"),
        "event_id": record.get("eventID"),
        "file": file,
    }
    out: list[ObjectEvent] = []
    if name == "DeleteObjects":
        delete = request.get("delete") or request.get("Delete") or {}
        objects = delete.get("object") or delete.get("Object") or []
        if isinstance(objects, dict):
            objects = [objects]
        for item in objects:
            if isinstance(item, dict) and (item.get("key") or item.get("Key")):
                out.append(ObjectEvent(key=str(item.get("key") or item.get("Key")),
                                       version_id=item.get("versionId") or item.get("VersionId"),
                                       **common))
        return out
    key = request.get("key")
    if not key or not bucket:
        return []
    if name in DELETE_EVENTS:
        version = request.get("versionId") or response.get("x-amz-version-id")
        marker = str(response.get("x-amz-delete-marker", "")).lower() == "true" and not (
            request.get("versionId"))
        out.append(ObjectEvent(key=str(key), version_id=version, delete_marker=marker, **common))
    else:
        version = response.get("x-amz-version-id") or request.get("versionId")
        out.append(ObjectEvent(key=str(key), version_id=version, **common))
    return out


def load_events(path: Path | str, *, bucket: str | None = None) -> list[ObjectEvent]:
    """Object-level S3 events in the CloudTrail export at ``path`` (optionally one bucket)."""
    events = []
    for record, file in iter_records(Path(path)):
        for event in object_events(record, file):
            if bucket is None or event.bucket == bucket:
                events.append(event)
    events.sort(key=lambda e: e.event_time)
    return events


def _ts(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def correlate(
    events: list[ObjectEvent], key: str, version_id: str, last_modified: str | None,
    *, delete_marker: bool, tolerance_s: float = 2.0,
) -> list[dict[str, Any]]:
    """Events that wrote, completed, copied or deleted this version.

    Matched by version id where CloudTrail logged one; otherwise (unversioned buckets, events
    without ``x-amz-version-id``) a write/delete of the same key within ``tolerance_s`` seconds of
    the version's LastModified, flagged ``matched_by: "time"``.
    """
    out = []
    when = _ts(last_modified)
    for event in events:
        if event.key != key:
            continue
        if event.version_id and version_id and event.version_id == version_id:
            out.append(event.to_json("version-id"))
            continue
        if event.version_id or event.event_name not in VERSION_EVENTS:
            continue
        kind_ok = (event.event_name in DELETE_EVENTS) == delete_marker
        event_ts = _ts(event.event_time)
        if kind_ok and when is not None and event_ts is not None and (
                abs(event_ts - when) <= tolerance_s):
            out.append(event.to_json("time"))
    return out
