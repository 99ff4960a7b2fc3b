"""``s3 preserve``: copy a prefix (optionally every version) into a case's evidence.

Each object is streamed straight into a write-once, content-addressed case artifact while its
stored checksum (composite ones with the real part boundaries) or ETag is recomputed on the way.
A mismatch is a finding; the bytes are kept exactly as received, hashed and inventoried as
``s3-object`` evidence either way. An inventory JSON artifact lists every object.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckptrescue.errors import CkptRescueError
from ckptrescue.model import Finding, Severity
from ckptrescue.record.audit import CaseWriteError
from ckptrescue.stores.counts import counts_line, short_reason
from ckptrescue.stores.s3.client import ClientOptions, make_client
from ckptrescue.stores.s3.integrity import ObjectHead
from ckptrescue.stores.s3.objects import (
    LocalWriteError,
    ObjectGone,
    download_verified,
    head_object,
    list_versions,
)
from ckptrescue.stores.s3.urls import parse_s3_url
from ckptrescue.stores.s3.verify import list_objects

if TYPE_CHECKING:
    from ckptrescue.record.case import Case, EvidenceItem


@dataclass
class PreservedObject:
    key: str
    version_id: str | None
    status: str  # match | mismatch | unverifiable | error
    size: int | None
    sha256: str | None
    algorithm: str | None
    detail: dict[str, Any]
    evidence_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "version_id": self.version_id, "status": self.status,
                "size": self.size, "sha256": self.sha256, "algorithm": self.algorithm,
                "detail": self.detail, "evidence_id": self.evidence_id}


@dataclass
class PreserveResult:
    url: str
    objects: list[PreservedObject] = field(default_factory=list)
    inventory_sha256: str | None = None
    findings: list[Finding] = field(default_factory=list)  # also recorded in the case

    @property
    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for obj in self.objects:
            counts[obj.status] = counts.get(obj.status, 0) + 1
        counts["total"] = len(self.objects)
        return counts

    @property
    def ok(self) -> bool:
        return all(o.status in {"match", "unverifiable"} for o in self.objects)

    @property
    def summary(self) -> str:
        """"2 of 3 preserved (1 already by an earlier run), 1 failed: HTTP 500"."""
        return counts_line(self.objects)

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "objects": [o.to_json() for o in self.objects],
                "counts": self.counts, "summary": self.summary,
                "inventory_sha256": self.inventory_sha256}


def preserve(
    url: str,
    *,
    case: Case,
    all_versions: bool = False,
    client_options: ClientOptions | None = None,
    client: Any = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> PreserveResult:
    """Download every object (or version) under ``url`` into ``case`` as verified evidence.

    Resumable: an object the case already holds as ``s3-object`` evidence of the same source,
    whose stored identity (ETag, size, version, checksums) is unchanged and whose artifact still
    hashes right, is neither downloaded nor inventoried again (``detail.resumed``). A failure
    to write into the case (no space, an I/O error) stops the run with one line naming the path
    and what was being written; what was preserved stays, and the same command resumes."""
    target = parse_s3_url(url)
    if client is None:
        client = make_client(options=client_options or ClientOptions())
    todo: list[tuple[str, str | None]] = []
    if all_versions:
        for key, entries in sorted(list_versions(client, target.bucket, target.key).items()):
            todo.extend((key, e.version_id) for e in entries if not e.delete_marker)
    else:
        todo = [(k, None) for k in sorted(list_objects(client, target.bucket, target.key))
                if not k.endswith("/")]
    result = PreserveResult(url=str(target))
    known = {item.source: item for item in case.evidence() if item.kind == "s3-object"}
    case.log("s3.preserve.started", {"url": result.url, "all_versions": all_versions,
                                     "objects": len(todo)})
    try:
        for index, (key, version_id) in enumerate(todo, 1):
            result.objects.append(_preserve_one(client, case, target.bucket, key, version_id,
                                                result.findings, known))
            if progress:
                progress(index, len(todo), key)
    except (CaseWriteError, LocalWriteError) as exc:
        done = counts_line(result.objects)
        case.log("s3.preserve.stopped", {"url": result.url, "error": exc.message,
                                         "summary": done, "counts": result.counts})
        raise type(exc)(f"{exc.message} ({done} before it, of {len(todo)})",
                        hint=exc.hint) from exc
    inventory = json.dumps(result.to_json(), indent=2, sort_keys=True).encode()
    result.inventory_sha256 = case.store_artifact(inventory, name="s3-preserve-inventory.json",
                                                  kind="s3.inventory")
    case.log("s3.preserve.finished", {"url": result.url, "counts": result.counts,
                                      "summary": result.summary},
             artifacts=[result.inventory_sha256])
    return result


def _same_object(item: EvidenceItem, head: ObjectHead) -> bool:
    """The evidence item is a copy of this very object version, and its bytes are intact."""
    earlier = item.details.get("object") or {}
    now = head.to_json()
    keys = ("etag", "size", "version_id", "checksums")
    return all(earlier.get(k) == now.get(k) for k in keys) and bool(item.sha256)


def _resumed(case: Case, item: EvidenceItem, key: str, version_id: str | None,
             head: ObjectHead) -> PreservedObject | None:
    from ckptrescue.record.case import sha256_file

    if not _same_object(item, head):
        return None
    artifact = str(item.details.get("artifact") or item.sha256)
    try:
        if sha256_file(case.artifact_path(artifact)) != item.sha256:
            return None
    except OSError:
        return None
    verification = item.details.get("verification") or {}
    return PreservedObject(key, version_id or head.version_id,
                           str(verification.get("status") or "unverifiable"), item.size,
                           item.sha256, verification.get("algorithm"),
                           {"resumed": True, "message": "already preserved by an earlier run "
                            f"({item.id})"}, item.id)


def _preserve_one(client: Any, case: Case, bucket: str, key: str, version_id: str | None,
                  findings: list[Finding], known: dict[str, EvidenceItem]) -> PreservedObject:
    source = f"s3://{bucket}/{key}" + (f"?versionId={version_id}" if version_id else "")
    try:
        head = head_object(client, bucket, key, version_id)
        earlier = known.get(source)
        if earlier is not None:
            again = _resumed(case, earlier, key, version_id, head)
            if again is not None:
                return again
        name = f"s3/{bucket}/{key}" + (f"@{version_id}" if version_id else "")
        with case.artifact_writer(name=name, kind="s3-object") as writer:
            fetched = download_verified(client, bucket, key, writer, version_id=version_id,
                                        head=head)
    except (CaseWriteError, LocalWriteError):
        raise  # the case's disk, not this object: stop (the caller says how far it got)
    except (ObjectGone, CkptRescueError) as exc:
        _add(case, findings, Finding(code="S3005", severity=Severity.ERROR,
                                 title=f"{source}: could not be preserved ({exc.message})",
                                 evidence=source, source="s3.preserve"))
        return PreservedObject(key, version_id, "error", None, None, None,
                               {"message": exc.message, "reason": short_reason(exc)})
    check = fetched.check
    detail = check.detail()
    item = case.add_evidence(
        kind="s3-object", source=source,
        acquired_how=f"S3 GetObject (read-only client), {check.message}",
        size=fetched.size, sha256=writer.sha256,
        details={"object": head.to_json(), "verification": {"status": check.status,
                 "algorithm": check.algorithm, **detail},
                 "artifact": writer.sha256,
                 "layout": fetched.layout.to_json() if fetched.layout else None})
    if check.status == "mismatch":
        _add(case, findings, Finding(code="S3030", severity=Severity.ERROR,
                                 title=f"{source}: bytes received do not match the stored "
                                       f"value ({check.message}); kept as received",
                                 evidence=source, evidence_sha256=writer.sha256,
                                 source="s3.preserve", details=detail))
    else:
        _add(case, findings, Finding(code="S3031", severity=Severity.INFO,
                                 title=f"{source}: preserved ({check.message})",
                                 evidence=source, evidence_sha256=writer.sha256,
                                 source="s3.preserve", details=detail))
    return PreservedObject(key, version_id or head.version_id, check.status, fetched.size,
                           writer.sha256, check.algorithm, detail, item.id)


def _add(case: Case, findings: list[Finding], finding: Finding) -> None:
    findings.append(finding)
    case.add_finding(finding)
