"""``s3 history``: every version and delete marker of a key (or of every key under a prefix),
listing anomalies, per-version checksums, the last known-good version against a manifest, and
who wrote or deleted each version according to exported CloudTrail logs.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.errors import CkptRescueError
from ckptrescue.model import ArtifactData, Finding, Recorded, Severity
from ckptrescue.stores.s3 import cloudtrail as ct
from ckptrescue.stores.s3.client import ClientOptions, make_client
from ckptrescue.stores.s3.manifest import expected_sha256, load_manifest
from ckptrescue.stores.s3.objects import (
    ObjectGone,
    VersionEntry,
    download_verified,
    fill_checksums,
    list_versions,
)
from ckptrescue.stores.s3.urls import parse_s3_url


@dataclass
class Anomaly:
    kind: str
    message: str
    version_ids: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "version_ids": self.version_ids}


@dataclass
class KeyHistory:
    bucket: str
    key: str
    versions: list[VersionEntry]
    anomalies: list[Anomaly] = field(default_factory=list)
    known_good: str | None = None
    known_good_by: str | None = None  # stored-sha256 | content
    manifest_sha256: str | None = None
    checked: dict[str, str] = field(default_factory=dict)  # version id -> why (not) good
    events: dict[str, list[dict[str, Any]]] | None = None

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def to_json(self) -> dict[str, Any]:
        versions = []
        for entry in self.versions:
            item = entry.to_json()
            if self.events is not None:
                item["events"] = self.events.get(entry.version_id, [])
            if entry.version_id in self.checked:
                item["manifest_check"] = self.checked[entry.version_id]
            if entry.error:
                item["error"] = entry.error
            versions.append(item)
        out: dict[str, Any] = {
            "key": self.key,
            "versions": versions,
            "known_good": self.known_good,
            "anomalies": [a.to_json() for a in self.anomalies],
        }
        if self.manifest_sha256 is not None or self.known_good_by is not None:
            out["manifest_sha256"] = self.manifest_sha256
            out["known_good_by"] = self.known_good_by
        return out


@dataclass
class HistoryResult(Recorded):
    url: str
    keys: list[KeyHistory] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"keys": [k.to_json() for k in self.keys]}

    def key(self, key: str) -> KeyHistory:
        for item in self.keys:
            if item.key == key:
                return item
        raise KeyError(key)

    def findings(self) -> list[Finding]:
        out = []
        for item in self.keys:
            for anomaly in item.anomalies:
                out.append(Finding(code="S3010", severity=Severity.WARNING,
                                   title=f"{item.key}: {anomaly.message}", evidence=item.url,
                                   source="s3.history", details=anomaly.to_json()))
            if item.known_good:
                out.append(Finding(code="S3011", severity=Severity.INFO,
                                   title=f"{item.key}: last known-good version is "
                                         f"{item.known_good} ({item.known_good_by})",
                                   evidence=item.url, source="s3.history",
                                   evidence_sha256=item.manifest_sha256,
                                   details={"version_id": item.known_good}))
            elif item.manifest_sha256:
                out.append(Finding(code="S3012", severity=Severity.WARNING,
                                   title=f"{item.key}: no version matches the manifest",
                                   evidence=item.url, source="s3.history",
                                   details={"checked": item.checked}))
            for version_id, events in (item.events or {}).items():
                for event in events:
                    out.append(Finding(
                        code="S3013", severity=Severity.INFO,
                        title=f"{item.key} version {version_id}: {event['event_name']} by "
                              f"{event['principal']} from {event['source_ip']} at "
                              f"{event['event_time']}",
                        evidence=item.url, source="s3.history",
                        details={"version_id": version_id, **event}))
        return out


def find_anomalies(entries: list[VersionEntry]) -> list[Anomaly]:
    """Listing anomalies of one key's history (newest first); pure."""
    out: list[Anomaly] = []
    if not entries:
        return out
    latest = [e.version_id for e in entries if e.is_latest]
    if len(latest) != 1:
        out.append(Anomaly("latest-count",
                           f"{len(latest)} entries are marked latest (expected exactly one); "
                           "the listing may have changed while it was read: list again",
                           latest))
    if all(e.delete_marker for e in entries):
        out.append(Anomaly("only-delete-markers",
                           "only delete markers remain: there is no version to recover",
                           [e.version_id for e in entries]))
    elif entries[0].delete_marker:
        out.append(Anomaly("delete-marker-on-top",
                           "the current entry is a delete marker: GET returns 404, older "
                           "versions are still recoverable", [entries[0].version_id]))
    for index, entry in enumerate(entries):
        if entry.version_id == "null" and entry.delete_marker:
            out.append(Anomaly("null-delete-marker",
                               "a null delete marker: written while versioning was suspended",
                               ["null"]))
        elif entry.version_id == "null" and index != len(entries) - 1:
            out.append(Anomaly("null-version-mid-history",
                               "a null version is not the oldest entry: a write while "
                               "versioning was suspended replaced the previous null version "
                               "for good", ["null"]))
    times = Counter(e.last_modified for e in entries if e.last_modified)
    for when, count in times.items():
        if count > 1:
            out.append(Anomaly("equal-timestamps",
                               f"{count} entries share LastModified {when} (1-second "
                               "resolution): their order comes from the listing only",
                               [e.version_id for e in entries if e.last_modified == when]))
    forms = set()
    for entry in entries:
        if entry.head is None:
            continue
        best = entry.head.checksum_json()
        if best:
            kind = best.get("type") or ("COMPOSITE" if entry.head.part_count else "FULL_OBJECT")
            forms.add(f"{best['algorithm']}/{kind}")
        else:
            forms.add("none")
        if entry.size is not None and entry.head.size is not None and entry.size != (
                entry.head.size):
            out.append(Anomaly("listing-head-disagree",
                               f"version {entry.version_id}: listing says {entry.size} bytes, "
                               f"HEAD says {entry.head.size}", [entry.version_id]))
        elif entry.etag and entry.head.etag and entry.etag.strip('"') != entry.head.etag.strip(
                '"'):
            out.append(Anomaly("listing-head-disagree",
                               f"version {entry.version_id}: listing and HEAD ETags differ",
                               [entry.version_id]))
    if len(forms) > 1:
        out.append(Anomaly("mixed-checksum-forms",
                           "versions carry different checksum forms (" + ", ".join(sorted(forms))
                           + "): compare them by content, not by checksum strings"))
    for entry in entries:
        if entry.error:
            out.append(Anomaly("unreadable-version", f"version {entry.version_id}: {entry.error}",
                               [entry.version_id]))
    return out


def stored_sha256_hex(entry: VersionEntry) -> str | None:
    """The version's full-object SHA-256 as hex, if it carries one (never a composite)."""
    head = entry.head
    if head is None:
        return None
    value = head.checksums.get("SHA256")
    if value is None or value.parts or head.part_count:
        return None
    if (value.checksum_type or head.checksum_type) == "COMPOSITE":
        return None
    try:
        return base64.b64decode(value.value).hex()
    except ValueError:
        return None


class _HashSink:
    def __init__(self) -> None:
        self.h = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.h.update(data)
        return len(data)


def find_known_good(client: Any, item: KeyHistory, wanted: str, *, by_content: bool) -> None:
    """Set ``item.known_good``: the newest version whose content has SHA-256 ``wanted``.

    A version with a stored full-object SHA-256 is judged by it (no download) unless
    ``by_content``; any other version is streamed (not stored) and hashed.
    """
    item.manifest_sha256 = wanted
    for entry in item.versions:
        if entry.delete_marker:
            continue
        stored = None if by_content else stored_sha256_hex(entry)
        if stored is not None:
            if stored == wanted:
                item.checked[entry.version_id] = "stored SHA256 matches the manifest"
                item.known_good, item.known_good_by = entry.version_id, "stored-sha256"
                return
            item.checked[entry.version_id] = "stored SHA256 differs from the manifest"
            continue
        sink = _HashSink()
        try:
            download_verified(client, item.bucket, item.key, sink, version_id=entry.version_id,
                              head=entry.head)
        except (ObjectGone, CkptRescueError) as exc:
            item.checked[entry.version_id] = f"could not read: {exc.message}"
            continue
        digest = sink.h.hexdigest()
        if digest == wanted:
            item.checked[entry.version_id] = "content SHA-256 matches the manifest"
            item.known_good, item.known_good_by = entry.version_id, "content"
            return
        item.checked[entry.version_id] = f"content SHA-256 {digest} differs from the manifest"


def history(
    url: str,
    *,
    client_options: ClientOptions | None = None,
    manifest: Path | str | dict[str, str] | None = None,
    cloudtrail: Path | str | None = None,
    by_content: bool = False,
    client: Any = None,
) -> HistoryResult:
    """Version history of ``s3://BUCKET/KEY`` (exactly that key when it exists, else every key
    under the prefix), with anomalies, checksums, known-good version and CloudTrail events."""
    target = parse_s3_url(url)
    if client is None:
        client = make_client(options=client_options or ClientOptions())
    entries_by_key = list_versions(client, target.bucket, target.key)
    if target.key in entries_by_key:
        entries_by_key = {target.key: entries_by_key[target.key]}
    wanted = load_manifest(manifest) if isinstance(manifest, str | Path) else manifest
    events = ct.load_events(cloudtrail, bucket=target.bucket) if cloudtrail else None
    prefix = target.key if target.key.endswith("/") else target.key.rsplit("/", 1)[0] + "/"
    result = HistoryResult(url=str(target))
    every = [e for key in sorted(entries_by_key) for e in entries_by_key[key]]
    with ThreadPoolExecutor(max_workers=16) as pool:  # one HEAD per version, concurrently
        list(pool.map(lambda e: fill_checksums(client, target.bucket, e), every))
    for key in sorted(entries_by_key):
        entries = entries_by_key[key]
        item = KeyHistory(bucket=target.bucket, key=key, versions=entries,
                          anomalies=find_anomalies(entries))
        if wanted is not None:
            digest = expected_sha256(wanted, key, prefix)
            if digest:
                find_known_good(client, item, digest, by_content=by_content)
        if events is not None:
            item.events = {
                e.version_id: ct.correlate(events, key, e.version_id, e.last_modified,
                                           delete_marker=e.delete_marker)
                for e in entries
            }
        result.keys.append(item)
    data = json.dumps(result.to_json(), indent=2, sort_keys=True).encode()
    sha = result.store(ArtifactData.of_bytes(data, name="s3-history.json", kind="s3.history"))
    result.record("s3.history", {"url": result.url, "keys": len(result.keys),
                                 "manifest": str(manifest) if isinstance(manifest, str | Path)
                                 else None,
                                 "cloudtrail": str(cloudtrail) if cloudtrail else None},
                  artifacts=[sha])
    return result
