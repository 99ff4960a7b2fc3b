"""Integrity of Azure Blob and GCS objects against the values the store keeps, side by side
with S3 (``ckptrescue.stores.s3``, used as is for ``s3://`` URLs).

* Azure: the blob's ``Content-MD5`` (``x-ms-blob-content-md5``). ``Put Blob`` validates it on
  upload; ``Put Block List`` stores whatever the client sent, or nothing: a blob committed from
  blocks often has none (``unverifiable``, with its block list recorded). The service keeps no
  per-block MD5 and no whole-blob CRC64 (``x-ms-content-crc64`` is a transport check on one
  request), so neither can be compared afterwards.
* GCS: ``crc32c`` (every object, composites included) and ``md5Hash`` (absent on composite
  objects: then CRC32C alone, finding OS006). Values are Base64, CRC32C big-endian.

``verify(url)`` streams each object (nothing is stored) and recomputes its values;
``verify(url, local_dir)`` hashes local files instead and downloads nothing.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptrescue.errors import CkptRescueError
from ckptrescue.model import Finding, Severity
from ckptrescue.stores.base import ObjectInfo, Store, StoreOptions, open_store
from ckptrescue.stores.urls import parse_store_url

CHUNK = 8 << 20


class Digest:
    """MD5, CRC32C and SHA-256 of a byte stream in one pass."""

    def __init__(self) -> None:
        import google_crc32c

        self.md5 = hashlib.md5(usedforsecurity=False)
        self.sha256 = hashlib.sha256()
        self.crc = google_crc32c.Checksum()
        self.size = 0

    def update(self, data: bytes) -> None:
        self.md5.update(data)
        self.sha256.update(data)
        self.crc.update(data)
        self.size += len(data)

    def write(self, data: bytes) -> int:
        self.update(data)
        return len(data)

    def values(self) -> dict[str, str]:
        return {"md5": base64.b64encode(self.md5.digest()).decode(),
                "crc32c": base64.b64encode(self.crc.digest()).decode(),
                "sha256": self.sha256.hexdigest()}


def digest_of(blocks: Iterable[bytes]) -> Digest:
    out = Digest()
    for block in blocks:
        out.update(block)
    return out


def digest_file(path: Path) -> Digest:
    with open(path, "rb") as fh:
        return digest_of(iter(lambda: fh.read(CHUNK), b""))


def compare(obj: ObjectInfo, digest: Digest) -> tuple[str, dict[str, Any]]:
    """(status, detail) of content with ``digest`` against ``obj``'s stored values (pure):
    ``match`` when every stored value the kit can recompute matches, ``mismatch`` when one
    differs (or the size does), ``unverifiable`` when there is none."""
    got = digest.values()
    checked: dict[str, dict[str, Any]] = {}
    for alg in ("md5", "crc32c"):
        stored = obj.hashes.get(alg)
        if stored:
            checked[alg] = {"stored": stored, "actual": got[alg], "match": stored == got[alg]}
    detail: dict[str, Any] = {"checked": checked, "size": digest.size, "sha256": got["sha256"],
                              "stored_size": obj.size}
    if obj.composite:
        detail["composite"] = True
    if digest.size != obj.size:
        detail["message"] = f"size {digest.size} differs from the stored size {obj.size}"
        return "mismatch", detail
    if not checked:
        detail["message"] = "no stored MD5/CRC32C to recompute"
        return "unverifiable", detail
    bad = [alg.upper() for alg, c in checked.items() if not c["match"]]
    if bad:
        detail["message"] = " and ".join(bad) + " differ from the stored value"
        return "mismatch", detail
    detail["message"] = " and ".join(a.upper() for a in checked) + " match"
    return "match", detail


@dataclass
class ObjectCheck:
    key: str
    version: str | None
    status: str  # match | mismatch | unverifiable | missing-local | missing-remote | error
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "version": self.version, "status": self.status,
                "detail": self.detail}


@dataclass
class StoreVerifyResult:
    url: str
    mode: str  # content (objects streamed) | local (local files hashed)
    objects: list[ObjectCheck] = field(default_factory=list)
    operations: dict[str, int] = field(default_factory=dict)

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for obj in self.objects:
            out[obj.status] = out.get(obj.status, 0) + 1
        out["total"] = len(self.objects)
        return out

    @property
    def ok(self) -> bool:
        return all(o.status in ("match", "unverifiable") for o in self.objects)

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "mode": self.mode, "counts": self.counts,
                "objects": [o.to_json() for o in self.objects], "operations": self.operations}

    def findings(self) -> list[Finding]:
        target = parse_store_url(self.url)
        out = []
        for obj in self.objects:
            where = target.child(obj.key)
            code, severity = {
                "mismatch": ("OS001" if self.mode == "content" else "OS007", Severity.ERROR),
                "missing-local": ("OS002", Severity.WARNING),
                "missing-remote": ("OS003", Severity.WARNING),
                "unverifiable": ("OS004", Severity.INFO),
                "error": ("OS005", Severity.ERROR),
            }.get(obj.status, (None, Severity.INFO))
            if code:
                out.append(Finding(code=code, severity=severity,
                                   title=f"{obj.key}: {obj.detail.get('message', obj.status)}",
                                   evidence=where, source="stores.verify", details=obj.detail))
            if obj.detail.get("composite") and obj.status == "match":
                out.append(Finding(code="OS006", severity=Severity.INFO,
                                   title=f"{obj.key}: composite object, CRC32C only",
                                   evidence=where, source="stores.verify"))
        return out


def _block_list(store: Store, obj: ObjectInfo) -> dict[str, Any] | None:
    """An Azure block blob's committed blocks (ids, sizes): where a mismatch could sit."""
    hook = getattr(store, "block_list", None)
    return hook(obj) if hook is not None else None


def check_object(store: Store, obj: ObjectInfo) -> ObjectCheck:
    """Stream one object version and compare it with its stored values."""
    try:
        status, detail = compare(obj, digest_of(store.iter_content(obj)))
    except CkptRescueError as exc:
        return ObjectCheck(obj.key, obj.version, "error", {"message": exc.message})
    if status != "match":
        blocks = _block_list(store, obj)
        if blocks:
            detail["block_list"] = blocks
    return ObjectCheck(obj.key, obj.version, status, detail)


def verify(url: str, local_dir: Path | str | None = None, *,
           options: StoreOptions | None = None, store: Store | None = None) -> Any:
    """Check every object at or under an ``az://``/``gs://`` URL against its stored values:
    streamed (no ``local_dir``) or against local files paired by relative key. ``s3://`` URLs
    go to ``ckptrescue.stores.s3.verify.verify_prefix`` (with ``local_dir``) or to
    ``ckptrescue.stores.s3.objects.download_verified`` per object."""
    target = parse_store_url(url)
    store = store or open_store(target, options)
    prefix, objects, exact = store.resolve()
    if target.scheme == "s3":
        return _verify_s3(store, str(target), prefix, objects, local_dir)
    result = StoreVerifyResult(url=str(target), mode="local" if local_dir else "content")
    if local_dir is None:
        result.objects = [check_object(store, obj) for obj in objects]
    else:
        root = Path(local_dir)
        seen = set()
        for obj in objects:
            rel = obj.key[len(prefix):] if not exact else obj.key.rsplit("/", 1)[-1]
            path = root / rel
            seen.add(path)
            if not path.is_file():
                result.objects.append(ObjectCheck(obj.key, obj.version, "missing-local",
                                                  {"message": f"no local file {rel}"}))
                continue
            status, detail = compare(obj, digest_file(path))
            result.objects.append(ObjectCheck(obj.key, obj.version, status, detail))
        if not exact:
            for path in sorted(p for p in root.rglob("*") if p.is_file() and p not in seen):
                rel = path.relative_to(root).as_posix()
                result.objects.append(ObjectCheck(prefix + rel, None, "missing-remote",
                                                  {"message": f"no object for {rel}"}))
    result.operations = dict(store.stats.operations)
    return result


def _verify_s3(store: Store, url: str, prefix: str, objects: list[ObjectInfo],
               local_dir: Path | str | None) -> Any:
    from ckptrescue.stores.s3.objects import download_verified
    from ckptrescue.stores.s3.verify import verify_prefix

    client = store.client  # type: ignore[attr-defined]
    if local_dir is not None:
        return verify_prefix(url, local_dir, client=client)
    result = StoreVerifyResult(url=url, mode="content")
    for obj in objects:
        sink = Digest()
        try:
            download = download_verified(client, store.url.bucket, obj.key, sink)
        except CkptRescueError as exc:
            result.objects.append(ObjectCheck(obj.key, obj.version, "error",
                                              {"message": exc.message}))
            continue
        check = download.check
        result.objects.append(ObjectCheck(obj.key, download.head.version_id, check.status,
                                          {**check.detail(), "algorithm": check.algorithm,
                                           "sha256": sink.values()["sha256"],
                                           "size": sink.size}))
    result.operations = dict(store.stats.operations)
    return result
