"""Integrity of Azure Blob and GCS objects against the values the store keeps (the default of
:meth:`ckptrescue.stores.base.Store.check_local` and :meth:`~ckptrescue.stores.base.Store.fetch`;
the S3 backend checks its own checksums: ``ckptrescue.stores.s3.integrity``).

* Azure: the blob's ``Content-MD5`` (``x-ms-blob-content-md5``). ``Put Blob`` validates it on
  upload; ``Put Block List`` stores whatever the client sent, or nothing: a blob committed from
  blocks often has none (``unverifiable``, with its block list recorded). The service keeps no
  per-block MD5 and no whole-blob CRC64 (``x-ms-content-crc64`` is a transport check on one
  request), so neither can be compared afterwards.
* GCS: ``crc32c`` (every object, composites included) and ``md5Hash`` (absent on composite
  objects: then CRC32C alone, finding OS006). Values are Base64, CRC32C big-endian.

:func:`compare` is pure: content digests against an object's stored values.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ckptrescue.stores.base import ObjectInfo, Verdict

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


class Sha256Sink:
    """A sink that keeps nothing but the SHA-256 of what it is given (content compared,
    nothing stored)."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.digest.update(data)
        return len(data)

    def hexdigest(self) -> str:
        return self.digest.hexdigest()


def sha256_file(path: Path) -> str:
    sink = Sha256Sink()
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK):
            sink.write(block)
    return sink.hexdigest()


def count_statuses(objects: Iterable[Any], statuses: Iterable[str] = ()) -> dict[str, int]:
    """Objects per ``status`` (every one of ``statuses`` listed, zero or not) and ``total``."""
    counts = dict.fromkeys(statuses, 0)
    total = 0
    for obj in objects:
        counts[obj.status] = counts.get(obj.status, 0) + 1
        total += 1
    counts["total"] = total
    return counts


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


def verdict_of(status: str, detail: dict[str, Any]) -> Verdict:
    """A :func:`compare` outcome as a :class:`~ckptrescue.stores.base.Verdict` (the strongest
    value compared named as its algorithm)."""
    checked = detail.get("checked") or {}
    algorithm = "MD5" if "md5" in checked else "CRC32C" if "crc32c" in checked else None
    return Verdict(status, algorithm, detail)
