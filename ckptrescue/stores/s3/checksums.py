"""S3 checksum algorithms and forms, pure (bytes in, values out).

Every S3 ``Checksum*`` value is Base64 of the raw digest, CRCs as big-endian unsigned integers;
the ETag is hex MD5 for single-part plaintext/SSE-S3 objects. Forms (see docs/s3.md):

* full object:  ``b64(H(file))``                          (never a ``-N`` suffix)
* composite:    ``b64(H(H(part_1) || ... || H(part_N)))``  (``-N`` on GET/HEAD on AWS; a one-part
  multipart upload is still composite)
* ETag:         ``hex(md5(file))`` or ``hex(md5(md5(part_1) || ...))-N``

:class:`DigestSet` computes, in one streaming pass, the full-object digests of several algorithms
and the per-part digests for a given list of part sizes. No network, no boto3.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# Algorithms, in the order we prefer them when an object carries several (strongest first).
PREFERENCE = ("SHA256", "SHA512", "CRC64NVME", "CRC32C", "CRC32", "SHA1", "MD5")
SUPPORTED = frozenset(PREFERENCE)
# Checksum members S3 may return that we recognise but cannot recompute reliably.
KNOWN_UNSUPPORTED = frozenset({"XXHASH64", "XXHASH3", "XXHASH128"})
WIDTH = {"CRC32": 4, "CRC32C": 4, "CRC64NVME": 8, "SHA1": 20, "SHA256": 32, "SHA512": 64, "MD5": 16}

_SUFFIX = re.compile(r"^(?P<value>[^-]+)-(?P<parts>\d+)$")
_HEX_MD5 = re.compile(r"^[0-9a-f]{32}$")


class Hasher(Protocol):
    def update(self, data: bytes, /) -> None: ...
    def digest(self) -> bytes: ...


class _Crc32:
    def __init__(self) -> None:
        self.value = 0

    def update(self, data: bytes, /) -> None:
        self.value = zlib.crc32(data, self.value)

    def digest(self) -> bytes:
        return self.value.to_bytes(4, "big")


class _Crc32c:
    def __init__(self) -> None:
        self.value = 0
        try:
            import google_crc32c

            self._extend = google_crc32c.extend
        except ImportError:  # pragma: no cover - google-crc32c is a core dependency
            from awscrt import checksums

            self._extend = lambda crc, data: checksums.crc32c(data, crc)

    def update(self, data: bytes, /) -> None:
        self.value = self._extend(self.value, bytes(data))

    def digest(self) -> bytes:
        return self.value.to_bytes(4, "big")


_CRC64NVME_POLY_REFLECTED = 0x9A6C9329AC4BC9B5
_CRC64_TABLE: list[int] = []


def _crc64nvme_table() -> list[int]:
    if not _CRC64_TABLE:
        for byte in range(256):
            crc = byte
            for _ in range(8):
                crc = (crc >> 1) ^ _CRC64NVME_POLY_REFLECTED if crc & 1 else crc >> 1
            _CRC64_TABLE.append(crc)
    return _CRC64_TABLE


def crc64nvme_pure(data: bytes, previous: int = 0) -> int:
    """CRC-64/NVME in pure Python (slow: test vectors and machines without awscrt)."""
    table = _crc64nvme_table()
    crc = previous ^ 0xFFFFFFFFFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFFFFFFFFFF


class _Crc64Nvme:
    def __init__(self) -> None:
        self.value = 0
        try:
            from awscrt import checksums

            self._fn = checksums.crc64nvme
        except ImportError:
            self._fn = crc64nvme_pure

    def update(self, data: bytes, /) -> None:
        self.value = self._fn(bytes(data), self.value)

    def digest(self) -> bytes:
        return self.value.to_bytes(8, "big")


def new_hasher(algorithm: str) -> Hasher:
    """A streaming hasher for an S3 algorithm name (``SHA256``, ``CRC64NVME``, ...)."""
    alg = algorithm.upper()
    if alg == "CRC32":
        return _Crc32()
    if alg == "CRC32C":
        return _Crc32c()
    if alg == "CRC64NVME":
        return _Crc64Nvme()
    if alg in {"SHA1", "SHA256", "SHA512", "MD5"}:
        return hashlib.new(alg.lower())
    raise ValueError(f"unsupported checksum algorithm {algorithm!r}")


def raw_digest(algorithm: str, data: bytes) -> bytes:
    hasher = new_hasher(algorithm)
    hasher.update(data)
    return hasher.digest()


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def full_object(algorithm: str, data: bytes) -> str:
    """``b64(H(data))``: a single-part or FULL_OBJECT checksum."""
    return b64(raw_digest(algorithm, data))


def composite_from_parts(algorithm: str, part_digests: Sequence[bytes]) -> str:
    """``b64(H(H(p1) || ... || H(pN)))`` without the ``-N`` suffix."""
    return b64(raw_digest(algorithm, b"".join(part_digests)))


def composite(algorithm: str, data: bytes, part_sizes: Sequence[int]) -> str:
    """The COMPOSITE checksum of ``data`` split at ``part_sizes`` (no suffix)."""
    digests = [raw_digest(algorithm, p) for p in split(data, part_sizes)]
    return composite_from_parts(algorithm, digests)


def etag_single(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()  # noqa: S324 - S3's ETag is MD5 by definition


def etag_multipart_from_parts(part_md5s: Sequence[bytes]) -> str:
    return f"{hashlib.md5(b''.join(part_md5s)).hexdigest()}-{len(part_md5s)}"  # noqa: S324


def etag_multipart(data: bytes, part_sizes: Sequence[int]) -> str:
    return etag_multipart_from_parts([raw_digest("MD5", p) for p in split(data, part_sizes)])


def split(data: bytes, part_sizes: Sequence[int]) -> list[bytes]:
    out, pos = [], 0
    for size in part_sizes:
        out.append(data[pos : pos + size])
        pos += size
    if pos != len(data):
        raise ValueError(f"part sizes add up to {pos}, data is {len(data)} bytes")
    return out


# -- parsing values ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ChecksumValue:
    """A stored checksum as S3 reported it."""

    algorithm: str  # SHA256, CRC64NVME, ...
    value: str  # Base64 without any -N suffix
    parts: int | None = None  # N from a "-N" suffix, when present
    checksum_type: str | None = None  # FULL_OBJECT | COMPOSITE when the server said so

    @property
    def display(self) -> str:
        return f"{self.value}-{self.parts}" if self.parts else self.value

    def to_json(self) -> dict[str, object]:
        return {
            "algorithm": self.algorithm,
            "value": self.display,
            "type": self.checksum_type,
        }


def parse_value(algorithm: str, text: str, checksum_type: str | None = None) -> ChecksumValue:
    """Parse ``"b64"`` or ``"b64-N"`` (composite on GET/HEAD)."""
    match = _SUFFIX.match(text.strip())
    if match:
        return ChecksumValue(algorithm.upper(), match["value"], int(match["parts"]), checksum_type)
    return ChecksumValue(algorithm.upper(), text.strip(), None, checksum_type)


def checksums_from_response(response: dict[str, object]) -> dict[str, ChecksumValue]:
    """Every ``Checksum<ALG>`` member of a HeadObject/GetObject/attributes response."""
    ctype = response.get("ChecksumType")
    ctype_s = str(ctype) if isinstance(ctype, str) else None
    out: dict[str, ChecksumValue] = {}
    for name, value in response.items():
        if name.startswith("Checksum") and name != "ChecksumType" and isinstance(value, str):
            alg = name[len("Checksum") :].upper()
            if alg:
                out[alg] = parse_value(alg, value, ctype_s)
    return out


def best_algorithm(available: Iterable[str]) -> str | None:
    """The strongest algorithm we can recompute among ``available``."""
    names = set(available)
    for alg in PREFERENCE:
        if alg in names:
            return alg
    return None


def valid_width(algorithm: str, value_b64: str) -> bool:
    """Does the Base64 value decode to the algorithm's digest width?"""
    try:
        raw = base64.b64decode(value_b64, validate=True)
    except (binascii.Error, ValueError):
        return False
    return len(raw) == WIDTH.get(algorithm, -1)


def parse_etag(etag: str | None) -> tuple[str | None, int | None]:
    """``'"abc...-3"'`` -> (``'abc...'``, 3); a plain MD5 -> (md5, None)."""
    if not etag:
        return None, None
    text = etag.strip().strip('"').lower()
    match = _SUFFIX.match(text)
    if match:
        return match["value"], int(match["parts"])
    return text, None


def etag_is_md5(etag: str | None) -> bool:
    value, parts = parse_etag(etag)
    return value is not None and parts is None and bool(_HEX_MD5.match(value))


# -- one streaming pass ---------------------------------------------------------------------------


@dataclass
class DigestSet:
    """Full-object and per-part digests of one byte stream, computed in a single pass.

    ``full`` algorithms are hashed over the whole stream; ``per_part`` algorithms are hashed
    separately for each part of ``part_sizes`` (the last part takes whatever remains).
    """

    full: Sequence[str] = ()
    per_part: Sequence[str] = ()
    part_sizes: Sequence[int] = ()
    size: int = 0
    _full: dict[str, Hasher] = field(default_factory=dict, repr=False)
    _parts: dict[str, list[bytes]] = field(default_factory=dict, repr=False)
    _cur: dict[str, Hasher] = field(default_factory=dict, repr=False)
    _part_index: int = 0
    _part_left: int = 0

    def __post_init__(self) -> None:
        self._full = {alg: new_hasher(alg) for alg in dict.fromkeys(self.full)}
        self._parts = {alg: [] for alg in dict.fromkeys(self.per_part)}
        if self._parts and not self.part_sizes:
            raise ValueError("per-part digests need part sizes")
        self._start_part()

    def _start_part(self) -> None:
        self._cur = {alg: new_hasher(alg) for alg in self._parts}
        if self._part_index < len(self.part_sizes) - 1:
            self._part_left = self.part_sizes[self._part_index]
        else:
            self._part_left = -1  # the last part: unbounded

    def update(self, data: bytes) -> None:
        self.size += len(data)
        for hasher in self._full.values():
            hasher.update(data)
        if not self._parts:
            return
        view = memoryview(data)
        while view:
            if self._part_left < 0:
                chunk, view = view, view[len(view) :]
            else:
                take = min(self._part_left, len(view))
                chunk, view = view[:take], view[take:]
                self._part_left -= take
            for hasher in self._cur.values():
                hasher.update(bytes(chunk))
            if self._part_left == 0:
                self._finish_part()

    def _finish_part(self) -> None:
        for alg, hasher in self._cur.items():
            self._parts[alg].append(hasher.digest())
        self._part_index += 1
        self._start_part()

    def finish(self) -> DigestSet:
        """Close the last part; call once after the final ``update``."""
        if self._parts and self._part_index < len(self.part_sizes):
            self._finish_part()
        return self

    def digest(self, algorithm: str) -> bytes:
        return self._full[algorithm].digest()

    def value(self, algorithm: str) -> str:
        return b64(self.digest(algorithm))

    def hexdigest(self, algorithm: str) -> str:
        return self.digest(algorithm).hex()

    def part_digests(self, algorithm: str) -> list[bytes]:
        return list(self._parts[algorithm])

    def composite_value(self, algorithm: str) -> str:
        return composite_from_parts(algorithm, self._parts[algorithm])

    def multipart_etag(self) -> str:
        return etag_multipart_from_parts(self._parts["MD5"])


def part_offsets(part_sizes: Sequence[int]) -> list[tuple[int, int]]:
    """(offset, length) of every part."""
    out, pos = [], 0
    for size in part_sizes:
        out.append((pos, size))
        pos += size
    return out
