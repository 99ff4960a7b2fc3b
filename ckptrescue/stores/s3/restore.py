"""``s3 restore``: download one version of an object into a recovery folder and verify it.

Never into the bucket (the client cannot write) and never over an existing file: the bytes are
streamed to ``<to>/<key>.<version>.partial`` while every relevant digest is computed, fsynced,
then renamed to ``<to>/<key>`` only when they verify (stored checksum/ETag, and the manifest's
SHA-256 when restoring the known-good version); otherwise they are kept as ``.unverified``.
A ``.restore.json`` record sits next to the file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.effects import beneath
from ckptrescue.effects.output_dirs import refuse_aliasing
from ckptrescue.errors import RefusedError, UsageError
from ckptrescue.model import ArtifactData, Finding, Recorded, Severity
from ckptrescue.stores.s3.client import ClientOptions, make_client
from ckptrescue.stores.s3.history import history
from ckptrescue.stores.s3.manifest import expected_sha256, load_manifest
from ckptrescue.stores.s3.objects import download_verified, head_object
from ckptrescue.stores.s3.urls import parse_s3_url


@dataclass
class RestoreResult(Recorded):
    url: str
    version_id: str | None
    path: str
    status: str  # verified | mismatch | unverifiable
    size: int
    sha256: str
    algorithm: str | None
    detail: dict[str, Any]
    manifest_sha256: str | None = None
    chosen_by: str = "version"  # version | known-good
    object: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)  # the engine records them

    @property
    def ok(self) -> bool:
        return self.status == "verified"

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "version_id": self.version_id,
            "chosen_by": self.chosen_by,
            "path": self.path,
            "status": self.status,
            "size": self.size,
            "sha256": self.sha256,
            "algorithm": self.algorithm,
            "detail": self.detail,
            "manifest_sha256": self.manifest_sha256,
            "object": self.object,
        }


def _safe_target(to: Path, key: str) -> Path:
    rel = Path(key)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise UsageError(f"refusing to restore key {key!r}: not a safe relative path")
    return to / rel


def restore(
    url: str,
    to: Path | str,
    *,
    version: str | None = None,
    known_good_manifest: Path | str | None = None,
    client_options: ClientOptions | None = None,
    evidence: Sequence[str] = (),
    client: Any = None,
) -> RestoreResult:
    """Restore ``version`` (or the last known-good version per the manifest) of one key.

    ``evidence``: paths the restore must not overlap (the case's evidence). The result carries
    its ``s3.restore`` record and JSON artifact for the engine to record."""
    target = parse_s3_url(url, need_key=True)
    if (version is None) == (known_good_manifest is None):
        raise UsageError("give exactly one of --version ID or --known-good --manifest FILE")
    to = Path(to)
    resolved = to.resolve()
    for item in evidence:
        ev = Path(item).resolve()
        if resolved == ev or ev in resolved.parents or resolved in ev.parents:
            raise RefusedError(f"{to}: overlaps evidence {item}; restore elsewhere")
    refuse_aliasing(to, evidence=evidence)  # through bind mounts and overlay layers too
    if client is None:
        client = make_client(options=client_options or ClientOptions())
    manifest_sha = None
    chosen_by = "version"
    if known_good_manifest is not None:
        manifest = load_manifest(known_good_manifest)
        manifest_sha = expected_sha256(manifest, target.key)
        if manifest_sha is None:
            raise UsageError(f"{known_good_manifest}: no entry for {target.key}")
        found = history(str(target), manifest=manifest, client=client).keys
        item = next((k for k in found if k.key == target.key), None)
        if item is None or item.known_good is None:
            raise UsageError(f"{target}: no version matches the manifest's SHA-256 "
                             f"{manifest_sha}", hint="see `ckptrescue s3 history --manifest`")
        version = item.known_good
        chosen_by = "known-good"
    final = _safe_target(to, target.key)
    if beneath.lexists(to, final):
        raise RefusedError(f"{final}: already exists; restore never overwrites a file")
    beneath.makedirs(to, final.parent)
    partial = final.with_name(f"{final.name}.{version}.partial")
    head = head_object(client, target.bucket, target.key, version)
    with beneath.open_file(to, partial, "xb") as fh:
        fetched = download_verified(client, target.bucket, target.key, fh, version_id=version,
                                    head=head)
        fh.flush()
        os.fsync(fh.fileno())
    check = fetched.check
    detail = check.detail()
    status = {"match": "verified"}.get(check.status, check.status)
    if manifest_sha is not None:
        if fetched.sha256 == manifest_sha:
            detail["manifest"] = "SHA-256 matches the known-good manifest"
            if status == "unverifiable":
                status = "verified"
        else:
            detail["manifest"] = f"SHA-256 {fetched.sha256} differs from the manifest"
            status = "mismatch"
    dest = final if status == "verified" else final.with_name(final.name + ".unverified")
    if beneath.lexists(to, dest):
        raise RefusedError(f"{dest}: already exists; restore never overwrites a file")
    beneath.rename(to, partial, dest, replace=False)
    result = RestoreResult(
        url=str(target), version_id=version, path=str(dest), status=status, size=fetched.size,
        sha256=fetched.sha256, algorithm=check.algorithm, detail=detail,
        manifest_sha256=manifest_sha, chosen_by=chosen_by, object=head.to_json())
    record = json.dumps(result.to_json(), indent=2, sort_keys=True).encode()
    with beneath.open_file(to, dest.with_name(dest.name + ".restore.json"), "xb") as fh:
        fh.write(record)
    if status == "verified":
        result.findings.append(Finding(
            code="S3040", severity=Severity.INFO,
            title=f"{target.key} version {version} restored to {dest}, verified",
            evidence=str(target), evidence_sha256=fetched.sha256, source="s3.restore",
            details=result.to_json()))
    else:
        result.findings.append(Finding(
            code="S3041", severity=Severity.ERROR,
            title=f"{target.key} version {version} does not verify "
                  f"({detail.get('message')}); kept as {dest}",
            evidence=str(target), evidence_sha256=fetched.sha256, source="s3.restore",
            details=result.to_json()))
    sha = result.store(ArtifactData.of_bytes(record, name="s3-restore.json", kind="s3.restore"))
    result.record("s3.restore", {"url": result.url, "version_id": version, "path": str(dest),
                                 "status": status, "sha256": fetched.sha256}, artifacts=[sha])
    return result
