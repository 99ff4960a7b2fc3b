"""Preserve into the case (``s3 preserve URL --case CASE``, ``store preserve URL --case CASE``):
each object is streamed straight into a write-once, content-addressed case artifact and
inventoried as evidence (``s3-object``; ``store-object`` for Azure and GCS) with what its bytes
were checked against; its finding goes into the case at once (an acquisition is recorded as it
happens), and an inventory artifact lists every object. The log says when it started, stopped
and finished (``<store>.preserve.started|stopped|finished``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ckptrescue.stores.base import ObjectInfo, Store
from ckptrescue.stores.preserve import PreservedObject, PreserveResult, finding_of

if TYPE_CHECKING:
    from ckptrescue.record.case import Case, EvidenceItem


def same_object(earlier: dict[str, Any], obj: ObjectInfo) -> bool:
    """The object an evidence item was acquired from is this one: same ETag, size and (when
    both name one) version."""
    etag = str(earlier.get("etag") or "").strip('"')
    version = earlier.get("version_id", earlier.get("version"))
    return (bool(etag) and etag == str(obj.etag or "").strip('"')
            and earlier.get("size") == obj.size
            and (obj.version is None or version in (None, obj.version)))


class CaseDestination:
    def __init__(self, store: Store, case: Case, url: str, all_versions: bool) -> None:
        self.store, self.case, self.url, self.all_versions = store, case, url, all_versions
        self.records = store.RECORDS
        self.kind = f"{store.RECORDS}-object"
        self.known: dict[str, EvidenceItem] = {}

    def start(self, result: PreserveResult, count: int) -> None:
        self.known = {item.source: item for item in self.case.evidence()
                      if item.kind == self.kind}
        self.case.log(f"{self.records}.preserve.started", {
            "url": self.url, "all_versions": self.all_versions, "objects": count})

    def earlier(self, obj: ObjectInfo, source: str) -> PreservedObject | None:
        """The case already holds this very object, and its artifact still hashes right."""
        from ckptrescue.record.case import sha256_file

        item = self.known.get(source)
        if item is None or not item.sha256 or not same_object(
                item.details.get("object") or {}, obj):
            return None
        artifact = str(item.details.get("artifact") or item.sha256)
        try:
            if sha256_file(self.case.artifact_path(artifact)) != item.sha256:
                return None
        except OSError:
            return None
        verification = item.details.get("verification") or {}
        return PreservedObject(obj.key, obj.version, str(verification.get("status")
                                                         or "unverifiable"),
                               item.size, item.sha256, verification.get("algorithm"),
                               {"resumed": True, "message": "already preserved by an earlier "
                                f"run ({item.id})"}, stored=dict(obj.hashes),
                               evidence_id=item.id, source=source)

    def keep(self, obj: ObjectInfo, source: str, is_current: bool, n: int) -> PreservedObject:
        url = self.store.url
        name = f"{url.scheme}/{url.account + '/' if url.account else ''}{url.bucket}/{obj.key}" \
            + ("" if is_current or not obj.version else f"@{obj.version}")
        with self.case.artifact_writer(name=name, kind=self.kind) as writer:
            fetched = self.store.fetch(obj, writer)
        message = fetched.detail.get("message")
        before = self.known.get(source)
        if before is not None and before.sha256 == writer.sha256:
            # fetched again because it did not match, and the same bytes came back: the case
            # holds them already (inventoried once)
            evidence_id, detail = before.id, {**fetched.detail,
                                              "message": f"{message}; the same bytes as {before.id}"}
        else:
            evidence_id, detail = self.case.add_evidence(
                kind=self.kind, source=source,
                acquired_how=f"{url.store_name} GET (read-only client), {message}",
                size=fetched.size, sha256=writer.sha256,
                details={"object": fetched.object, "verification": {
                    "status": fetched.status, "algorithm": fetched.algorithm, **fetched.detail},
                    "artifact": writer.sha256, "layout": fetched.layout}).id, fetched.detail
        return PreservedObject(obj.key, obj.version or fetched.object.get("version_id"),
                               fetched.status, fetched.size, writer.sha256, fetched.algorithm,
                               detail, stored=dict(obj.hashes), evidence_id=evidence_id,
                               source=source)

    def kept(self, obj: PreservedObject) -> None:
        self.case.add_finding(finding_of(obj, self.store.CODES, into_case=True))

    def stopped(self, result: PreserveResult, message: str) -> None:
        self.case.log(f"{self.records}.preserve.stopped", {
            "url": self.url, "error": message, "summary": result.summary,
            "counts": result.counts})

    def finish(self, result: PreserveResult) -> None:
        inventory = json.dumps(result.to_json(), indent=2, sort_keys=True).encode()
        result.inventory_sha256 = self.case.store_artifact(
            inventory, name=f"{self.records}-preserve-inventory.json",
            kind=f"{self.records}.inventory")
        self.case.log(f"{self.records}.preserve.finished", {
            "url": self.url, "counts": result.counts, "summary": result.summary},
            artifacts=[result.inventory_sha256])
