"""Version history — one implementation for every store: every version of the key at a URL (or
of every key under it), the listing's anomalies, and the last known-good version against a
manifest.

* S3: versions and delete markers, each version HEADed for its stored checksums; anomalies of
  S3's own (delete marker on top, null versions, equal timestamps...); who wrote or deleted a
  version from exported CloudTrail logs (``cloudtrail``).
* Azure: blob versions (when the account keeps them), snapshots, and soft-deleted blobs (listed
  with ``include=deleted``; never undeleted: a soft-deleted blob cannot be read without undelete,
  so it is listed and never judged).
* GCS: object generations; noncurrent ones carry ``timeDeleted``; soft-deleted objects (listed
  with ``softDeleted=true``, read with ``softDeleted=true&generation=``, never restored).

Known-good: the newest readable version whose content has the manifest's SHA-256 — judged by the
SHA-256 the store keeps when it keeps one (S3 full-object ``ChecksumSHA256``; no download) unless
``by_content``, else streamed (never stored) and hashed, newest first.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.errors import CkptRescueError
from ckptrescue.model import ArtifactData, Finding, JsonObject, Recorded, Severity
from ckptrescue.stores.base import ObjectInfo, Store, StoreOptions, open_store
from ckptrescue.stores.integrity import Sha256Sink
from ckptrescue.stores.kinds import OS_CODES
from ckptrescue.stores.manifest import expected_sha256, load_manifest
from ckptrescue.stores.outputs import VersionAnomaly
from ckptrescue.stores.urls import parse_store_url

__all__ = ["HistoryResult", "KeyHistory", "VersionAnomaly", "find_known_good", "history"]


@dataclass
class KeyHistory:
    url: str
    key: str
    versions: list[ObjectInfo]
    anomalies: list[VersionAnomaly] = field(default_factory=list)
    known_good: str | None = None
    known_good_by: str | None = None  # stored-sha256 | content
    manifest_sha256: str | None = None
    checked: dict[str, str] = field(default_factory=dict)  # version -> why (not) good
    events: dict[str, list[dict[str, Any]]] | None = None  # version -> who wrote/deleted it
    shown: list[dict[str, Any]] = field(default_factory=list, repr=False)  # versions as listed

    def to_json(self) -> JsonObject:
        versions = []
        for info, item in zip(self.versions, self.shown, strict=True):
            item = dict(item)
            if self.events is not None:
                item["events"] = self.events.get(info.version_id, [])
            if info.version_id in self.checked:
                item["manifest_check"] = self.checked[info.version_id]
            versions.append(item)
        out: dict[str, Any] = {"key": self.key, "versions": versions,
                               "known_good": self.known_good,
                               "anomalies": [a.to_json() for a in self.anomalies]}
        if self.manifest_sha256 is not None or self.known_good_by is not None:
            out["manifest_sha256"] = self.manifest_sha256
            out["known_good_by"] = self.known_good_by
        return out


@dataclass
class HistoryResult(Recorded):
    url: str
    keys: list[KeyHistory] = field(default_factory=list)
    codes: dict[str, str] = field(default_factory=lambda: OS_CODES, repr=False)

    def to_json(self) -> JsonObject:
        return {"keys": [k.to_json() for k in self.keys]}

    def key(self, key: str) -> KeyHistory:
        for item in self.keys:
            if item.key == key:
                return item
        raise KeyError(key)

    @property
    def problems(self) -> bool:
        """An anomaly, or a manifest no version matches."""
        return any(k.anomalies or (k.manifest_sha256 and k.known_good is None)
                   for k in self.keys)

    @property
    def summary(self) -> str:
        good = [k for k in self.keys if k.known_good]
        wanted = [k for k in self.keys if k.manifest_sha256]
        return f"{len(self.keys)} key(s)" + (
            f", {len(good)} with a known-good version" if wanted else "")

    def findings(self) -> list[Finding]:
        out = []
        for item in self.keys:
            for anomaly in item.anomalies:
                kind = "soft-deleted" if anomaly.kind == "soft-deleted" else "anomaly"
                out.append(Finding(code=self.codes[kind], severity=Severity.INFO
                                   if kind == "soft-deleted" else Severity.WARNING,
                                   title=f"{item.key}: {anomaly.message}", evidence=item.url,
                                   source="stores.history", details=anomaly.to_json()))
            if item.known_good:
                out.append(Finding(code=self.codes["known-good"], severity=Severity.INFO,
                                   title=f"{item.key}: last known-good version is "
                                         f"{item.known_good} ({item.known_good_by})",
                                   evidence=item.url, source="stores.history",
                                   evidence_sha256=item.manifest_sha256,
                                   details={"version_id": item.known_good}))
            elif item.manifest_sha256:
                out.append(Finding(code=self.codes["no-known-good"], severity=Severity.WARNING,
                                   title=f"{item.key}: no version matches the manifest",
                                   evidence=item.url, source="stores.history",
                                   details={"checked": item.checked}))
            for version_id, events in (item.events or {}).items():
                for event in events:
                    out.append(Finding(
                        code=self.codes["writer"], severity=Severity.INFO,
                        title=f"{item.key} version {version_id}: {event['event_name']} by "
                              f"{event['principal']} from {event['source_ip']} at "
                              f"{event['event_time']}",
                        evidence=item.url, source="stores.history",
                        details={"version_id": version_id, **event}))
        return out


def find_known_good(store: Store, item: KeyHistory, wanted: str, *,
                    by_content: bool = False) -> None:
    """Set ``item.known_good``: the newest version whose content has SHA-256 ``wanted``."""
    item.manifest_sha256 = wanted
    for info in item.versions:
        ident = info.version_id
        if info.delete_marker:
            continue
        why_not = store.unreadable(info)
        if why_not:
            item.checked[ident] = why_not
            continue
        stored = None if by_content else store.stored_sha256(info)
        if stored is not None:
            if stored == wanted:
                item.checked[ident] = "stored SHA256 matches the manifest"
                item.known_good, item.known_good_by = ident, "stored-sha256"
                return
            item.checked[ident] = "stored SHA256 differs from the manifest"
            continue
        try:
            fetched = store.fetch(info, Sha256Sink())
        except CkptRescueError as exc:
            item.checked[ident] = f"could not read: {exc.message}"
            continue
        if fetched.sha256 == wanted:
            item.checked[ident] = "content SHA-256 matches the manifest" + (
                " (but the stored checksum differs)" if fetched.status == "mismatch" else "")
            item.known_good, item.known_good_by = ident, "content"
            return
        item.checked[ident] = f"content SHA-256 {fetched.sha256} differs from the manifest"


def history(url: str, *, manifest: Path | str | dict[str, str] | None = None,
            cloudtrail: Path | str | None = None, by_content: bool = False,
            options: StoreOptions | None = None, store: Store | None = None) -> HistoryResult:
    """Every version of the key at ``url`` (exactly that key when it exists, else of every key
    under the prefix), anomalies, known-good, and (S3) CloudTrail events. The result carries its
    ``<store>.history`` record and JSON artifact for the engine to record."""
    target = parse_store_url(url)
    store = store or open_store(target, options)
    by_key = store.list_versions(target.key)
    if target.key in by_key:
        by_key = {target.key: by_key[target.key]}
    wanted = load_manifest(manifest) if isinstance(manifest, str | Path) else manifest
    prefix = target.key if target.key.endswith("/") else target.key.rsplit("/", 1)[0] + "/"
    store.describe_versions([info for key in sorted(by_key) for info in by_key[key]])
    result = HistoryResult(url=str(target), codes=store.CODES)
    for key in sorted(by_key):
        versions = by_key[key]
        item = KeyHistory(url=target.child(key), key=key, versions=versions,
                          anomalies=store.version_anomalies(versions),
                          shown=[store.version_json(v) for v in versions])
        if wanted is not None:
            digest = expected_sha256(wanted, key, prefix)
            if digest:
                find_known_good(store, item, digest, by_content=by_content)
        if cloudtrail:
            item.events = store.version_events(key, versions, cloudtrail)
        result.keys.append(item)
    data = json.dumps(result.to_json(), indent=2, sort_keys=True).encode()
    name = store.RECORDS
    sha = result.store(ArtifactData.of_bytes(data, name=f"{name}-history.json",
                                             kind=f"{name}.history"))
    result.record(f"{name}.history", {
        "url": result.url, "keys": len(result.keys),
        "manifest": str(manifest) if isinstance(manifest, str | Path) else None,
        "cloudtrail": str(cloudtrail) if cloudtrail else None}, artifacts=[sha])
    return result
