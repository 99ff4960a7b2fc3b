"""Version history of Azure blobs and GCS objects with the last known-good version from a
manifest — the result shape of ``ckptrescue.stores.s3.history`` (``s3://`` URLs go there as they are).

* Azure: blob versions (when the account keeps them), snapshots, and soft-deleted blobs (listed
  with ``include=deleted``; never undeleted: a soft-deleted blob cannot be read without undelete,
  so it is listed and never judged).
* GCS: object generations; noncurrent ones carry ``timeDeleted``; soft-deleted objects (listed
  with ``softDeleted=true``, read with ``softDeleted=true&generation=``, never restored).

Known-good: the newest readable version whose content has the manifest's SHA-256. Neither store
keeps a SHA-256, so candidates are streamed (not stored) and hashed, newest first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.errors import CkptRescueError
from ckptrescue.model import Finding, Severity
from ckptrescue.stores.base import ObjectInfo, Store, StoreOptions, open_store
from ckptrescue.stores.integrity import compare, digest_of
from ckptrescue.stores.s3.history import HistoryResult
from ckptrescue.stores.s3.manifest import expected_sha256, load_manifest
from ckptrescue.stores.urls import parse_store_url


@dataclass
class Anomaly:
    kind: str
    message: str
    version_ids: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "version_ids": self.version_ids}


def version_json(info: ObjectInfo) -> dict[str, Any]:
    """One version in the shape of ``s3 history`` (plus the store's own fields)."""
    return {"version_id": info.version or "current", "is_latest": info.is_latest,
            "delete_marker": info.kind == "delete-marker", "deleted": info.deleted,
            "soft_deleted": info.soft_deleted, "kind": info.kind,
            "last_modified": info.last_modified, "size": info.size,
            "checksum": dict(info.hashes) or None, "etag": info.etag}


@dataclass
class KeyHistory:
    url: str
    key: str
    versions: list[ObjectInfo]
    anomalies: list[Anomaly] = field(default_factory=list)
    known_good: str | None = None
    known_good_by: str | None = None
    manifest_sha256: str | None = None
    checked: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        versions = []
        for info in self.versions:
            item = version_json(info)
            if (info.version or "current") in self.checked:
                item["manifest_check"] = self.checked[info.version or "current"]
            versions.append(item)
        out: dict[str, Any] = {"key": self.key, "versions": versions,
                               "known_good": self.known_good,
                               "anomalies": [a.to_json() for a in self.anomalies]}
        if self.manifest_sha256 is not None:
            out["manifest_sha256"] = self.manifest_sha256
            out["known_good_by"] = self.known_good_by
        return out


@dataclass
class StoreHistoryResult(HistoryResult):
    """The S3 history result's shape (``to_json``, ``key``) with the object stores' codes."""

    keys: list[KeyHistory] = field(default_factory=list)  # type: ignore[assignment]

    def findings(self) -> list[Finding]:
        out = []
        for item in self.keys:
            for anomaly in item.anomalies:
                code = "OS013" if anomaly.kind == "soft-deleted" else "OS010"
                severity = Severity.INFO if code == "OS013" else Severity.WARNING
                out.append(Finding(code=code, severity=severity,
                                   title=f"{item.key}: {anomaly.message}", evidence=item.url,
                                   source="stores.history", details=anomaly.to_json()))
            if item.known_good:
                out.append(Finding(code="OS011", severity=Severity.INFO,
                                   title=f"{item.key}: last known-good version is "
                                         f"{item.known_good}", evidence=item.url,
                                   evidence_sha256=item.manifest_sha256,
                                   source="stores.history",
                                   details={"version_id": item.known_good}))
            elif item.manifest_sha256:
                out.append(Finding(code="OS012", severity=Severity.WARNING,
                                   title=f"{item.key}: no version matches the manifest",
                                   evidence=item.url, source="stores.history",
                                   details={"checked": item.checked}))
        return out


def find_anomalies(entries: list[ObjectInfo]) -> list[Anomaly]:
    """Listing anomalies of one key's history (newest first); pure."""
    out: list[Anomaly] = []
    latest = [e.version or "current" for e in entries if e.is_latest]
    if len(latest) > 1:
        out.append(Anomaly("latest-count", f"{len(latest)} entries are current (expected one): "
                                           "the listing changed while it was read", latest))
    if entries and not latest:
        out.append(Anomaly("no-current-version",
                           "no current version: the object was deleted; the versions listed "
                           "remain", [e.version or "?" for e in entries]))
    soft = [e.version or "?" for e in entries if e.soft_deleted]
    if soft:
        out.append(Anomaly("soft-deleted", f"{len(soft)} soft-deleted version(s) listed "
                                           "(never undeleted by the kit)", soft))
    return out


def find_known_good(store: Store, item: KeyHistory, wanted: str) -> None:
    item.manifest_sha256 = wanted
    for info in item.versions:
        ident = info.version or "current"
        if info.kind == "delete-marker":
            continue
        if info.soft_deleted and store.url.scheme == "az":
            item.checked[ident] = "soft-deleted blob: unreadable without undelete (never done)"
            continue
        try:
            digest = digest_of(store.iter_content(info))
        except CkptRescueError as exc:
            item.checked[ident] = f"could not read: {exc.message}"
            continue
        got = digest.values()["sha256"]
        status, _ = compare(info, digest)
        if got == wanted:
            item.checked[ident] = "content SHA-256 matches the manifest" + (
                "" if status != "mismatch" else " (but the stored MD5/CRC32C differs)")
            item.known_good, item.known_good_by = ident, "content"
            return
        item.checked[ident] = f"content SHA-256 {got} differs from the manifest"


def history(url: str, *, manifest: Path | str | dict[str, str] | None = None,
            options: StoreOptions | None = None, store: Store | None = None) -> Any:
    """Every version of the key at ``url`` (or of every key under it), anomalies, known-good."""
    target = parse_store_url(url)
    store = store or open_store(target, options)
    if target.scheme == "s3":
        from ckptrescue.stores.s3.history import history as s3_history

        return s3_history(str(target), manifest=manifest,
                          client=store.client)  # type: ignore[attr-defined]
    by_key = store.list_versions(target.key)
    if target.key in by_key:
        by_key = {target.key: by_key[target.key]}
    wanted = load_manifest(manifest) if isinstance(manifest, str | Path) else manifest
    prefix = target.key if target.key.endswith("/") else target.key.rsplit("/", 1)[0] + "/"
    result = StoreHistoryResult(url=str(target))
    for key, entries in by_key.items():
        item = KeyHistory(url=target.child(key), key=key, versions=entries,
                          anomalies=find_anomalies(entries))
        if wanted is not None:
            digest = expected_sha256(wanted, key, prefix)
            if digest:
                find_known_good(store, item, digest)
        result.keys.append(item)
    return result
