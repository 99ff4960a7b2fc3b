"""``s3 verify``: pair objects under a prefix with local files and compare checksums.

Nothing is downloaded for an object that carries a server-side checksum or an MD5 ETag: its
stored value is recomputed from the local bytes (composite values with the real part boundaries).
Objects that carry neither are ``unverifiable`` unless ``download=True``, in which case they are
streamed (never stored) and compared by content. HEADs run concurrently on a thread pool.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.errors import CkptRescueError, RemoteError, UsageError
from ckptrescue.model import ArtifactData, Finding, Recorded, Severity
from ckptrescue.stores.s3.client import ClientOptions, make_client, translate_error
from ckptrescue.stores.s3.objects import (
    CHUNK,
    ObjectGone,
    discover_layout,
    download_verified,
    head_object,
    provenance_for,
    verify_stream,
)
from ckptrescue.stores.s3.urls import parse_s3_url

STATUSES = ("match", "mismatch", "missing-local", "missing-remote", "unverifiable")
Progress = Callable[[int, int, str], None]


@dataclass
class ObjectResult:
    key: str  # relative to the prefix (= relative path under the local folder)
    status: str
    algorithm: str | None
    detail: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "status": self.status, "algorithm": self.algorithm,
                "detail": self.detail}


@dataclass
class VerifyResult(Recorded):
    url: str
    local_dir: str
    objects: list[ObjectResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(STATUSES, 0)
        for obj in self.objects:
            counts[obj.status] = counts.get(obj.status, 0) + 1
        counts["total"] = len(self.objects)
        return counts

    @property
    def ok(self) -> bool:
        return not self.errors and all(
            o.status in {"match", "unverifiable"} for o in self.objects
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "objects": [o.to_json() for o in sorted(self.objects, key=lambda o: o.key)],
            "counts": self.counts,
            "errors": list(self.errors),
        }

    def findings(self) -> list[Finding]:
        out = []
        base = self.url.rstrip("/")
        for obj in self.objects:
            evidence = f"{base}/{obj.key}"
            message = str(obj.detail.get("message", ""))
            if obj.status == "mismatch":
                parts = obj.detail.get("parts") or []
                out.append(Finding(
                    code="S3001", severity=Severity.ERROR,
                    title=f"{obj.key}: local file does not match the object ({message})",
                    evidence=evidence, source="s3.verify",
                    offset=parts[0]["offset"] if parts else None,
                    length=parts[0]["length"] if parts else None,
                    details=obj.to_json()))
            elif obj.status == "missing-local":
                out.append(Finding(code="S3002", severity=Severity.WARNING,
                                   title=f"{obj.key}: no local file for this object",
                                   evidence=evidence, source="s3.verify", details=obj.to_json()))
            elif obj.status == "unverifiable":
                code, sev = ("S3005", Severity.ERROR) if obj.detail.get("error") else (
                    "S3004", Severity.INFO)
                out.append(Finding(code=code, severity=sev,
                                   title=f"{obj.key}: unverifiable ({message})",
                                   evidence=evidence, source="s3.verify", details=obj.to_json()))
        # local files never uploaded: one finding for the cause, the list in its details
        unuploaded = [o.key for o in self.objects if o.status == "missing-remote"]
        if unuploaded:
            shown = ", ".join(unuploaded[:5]) + (" …" if len(unuploaded) > 5 else "")
            out.append(Finding(
                code="S3003", severity=Severity.INFO,
                title=f"{len(unuploaded)} local file(s) have no object under {base} ({shown}): "
                      "never uploaded, or uploaded elsewhere", evidence=str(self.local_dir),
                source="s3.verify", details={"count": len(unuploaded),
                                             "keys": unuploaded[:1000]}))
        return out


class VerifyFailed(CkptRescueError):
    """Verification stopped early; ``partial`` holds what was established."""

    def __init__(self, cause: CkptRescueError, partial: VerifyResult) -> None:
        super().__init__(cause.message, hint=cause.hint)
        self.exit_code = cause.exit_code
        self.partial = partial


def iter_object_pages(client: Any, bucket: str, prefix: str
                      ) -> Iterator[list[dict[str, Any]]]:
    """ListObjectsV2 pages under ``prefix`` (kit errors on failure)."""
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    while True:
        try:
            response = client.list_objects_v2(**kwargs)
        except Exception as exc:
            raise translate_error(exc, f"s3://{bucket}/{prefix}") from exc
        yield list(response.get("Contents") or [])
        token = response.get("NextContinuationToken")
        if not response.get("IsTruncated") or not token:
            return
        kwargs["ContinuationToken"] = token


def list_objects(client: Any, bucket: str, prefix: str) -> dict[str, dict[str, Any]]:
    """Every object key under ``prefix`` -> its listing entry (ListObjectsV2, paginated)."""
    return {item["Key"]: item for page in iter_object_pages(client, bucket, prefix)
            for item in page}


def list_local(root: Path) -> dict[str, Path]:
    """Regular files under ``root`` by POSIX relative path (symlinks are not followed)."""
    out: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                continue
            out[path.relative_to(root).as_posix()] = path
    return out


def verify_prefix(
    url: str,
    local_dir: Path | str,
    *,
    client_options: ClientOptions | None = None,
    download: bool = False,
    workers: int = 16,
    progress: Progress | None = None,
    client: Any = None,
) -> VerifyResult:
    """Verify every object under ``url`` (s3://BUCKET/PREFIX) against ``local_dir``.

    Raises :class:`VerifyFailed` (carrying the partial result and its records) when the listing
    fails or objects could not be read; per-object outcomes are in the result. The result
    carries its ``s3.verify`` record and JSON artifact for the engine to record.
    """
    target = parse_s3_url(url)
    root = Path(local_dir)
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory")
    prefix = target.key
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    options = client_options or ClientOptions(max_pool_connections=workers)
    if client is None:
        client = make_client(options=options)
    result = VerifyResult(url=f"s3://{target.bucket}/{prefix}", local_dir=str(root))
    local = list_local(root)
    provenance = provenance_for(client)
    listing_error: CkptRescueError | None = None
    done = [0]
    lock = threading.Lock()
    futures: dict[str, Any] = {}

    def one(rel: str, key: str) -> ObjectResult:
        if rel not in local:
            return ObjectResult(rel, "missing-local", None, {"message": "no local file"})
        try:
            return _verify_one(client, target.bucket, key, rel, local[rel],
                               provenance=provenance, download=download)
        except ObjectGone as exc:
            return ObjectResult(rel, "missing-remote", None, {"message": exc.message})
        except CkptRescueError as exc:
            return ObjectResult(rel, "unverifiable", None,
                                {"message": exc.message, "error": True})

    def tick(future: Any) -> None:
        with lock:
            done[0] += 1
            if progress:
                progress(done[0], len(futures), future.result().key)

    # HEADs start while later listing pages are still being fetched.
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        try:
            for page in iter_object_pages(client, target.bucket, prefix):
                for item in page:
                    key = item["Key"]
                    if key.endswith("/"):
                        continue  # folder placeholder
                    rel = key[len(prefix):]
                    with lock:
                        futures[rel] = pool.submit(one, rel, key)
                    futures[rel].add_done_callback(tick)
        except CkptRescueError as exc:
            listing_error = exc
        for rel in sorted(futures):
            obj = futures[rel].result()
            result.objects.append(obj)
            if obj.detail.get("error"):
                result.errors.append(f"{result.url}{rel}: {obj.detail['message']}")
    if listing_error is None:
        for rel in sorted(set(local) - set(futures)):
            result.objects.append(ObjectResult(rel, "missing-remote", None,
                                               {"message": "no object with this key"}))
    _record(result, options, download)
    if listing_error is not None:
        raise VerifyFailed(listing_error, result)
    if result.errors:
        first = result.errors[0]
        more = f" (and {len(result.errors) - 1} more)" if len(result.errors) > 1 else ""
        denied = any("access denied" in e for e in result.errors)
        cause: CkptRescueError = RemoteError(
            f"{first}{more}", hint="partial results were kept" if denied else None)
        raise VerifyFailed(cause, result)
    return result


def _verify_one(client: Any, bucket: str, key: str, rel: str, path: Path, *,
                provenance: str, download: bool) -> ObjectResult:
    local_size = path.stat().st_size
    head = head_object(client, bucket, key)
    if head.size is not None and head.size != local_size:
        return ObjectResult(rel, "mismatch", None, {
            "message": f"size differs: local {local_size} bytes, remote {head.size} bytes",
            "form": "size", "expected": str(head.size), "actual": str(local_size)})
    layout = discover_layout(client, head)
    with open(path, "rb") as fh:
        check = verify_stream(head, layout, fh, provenance=provenance)
    if check.status != "unverifiable" or not download:
        detail = check.detail()
        if layout is not None:
            detail["layout"] = layout.to_json()
        return ObjectResult(rel, check.status, check.algorithm, detail)
    # --download: compare by content, streaming the object without storing it.
    sink = _HashSink()
    fetched = download_verified(client, bucket, key, sink, head=head)
    local_sha = _sha256(path)
    status = "match" if sink.hexdigest() == local_sha else "mismatch"
    return ObjectResult(rel, status, "SHA256", {
        "message": f"compared by content (downloaded {fetched.size} bytes): "
                   + ("identical" if status == "match" else "content differs"),
        "form": "download", "expected": sink.hexdigest(), "actual": local_sha,
        "why_download": check.message})


class _HashSink:
    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self._h.update(data)
        return len(data)

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _record(result: VerifyResult, options: ClientOptions, download: bool) -> None:
    import json

    data = json.dumps(result.to_json(), indent=2, sort_keys=True).encode()
    sha = result.store(ArtifactData.of_bytes(data, name="s3-verify.json", kind="s3.verify"))
    result.record("s3.verify", {"url": result.url, "local_dir": result.local_dir,
                                "download": download, "client": options.to_json(),
                                "counts": dict(result.counts), "errors": list(result.errors)},
                  artifacts=[sha])
