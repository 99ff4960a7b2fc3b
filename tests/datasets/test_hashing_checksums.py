"""`hash_file(..., checksums=...)`: the CRCs S3 stores, computed in the SHA-256 pass, equal
independent implementations (zlib, google-crc32c, the pure-Python CRC-64/NVME) in S3's form."""

from __future__ import annotations

import base64
import hashlib
import zlib
from pathlib import Path

import google_crc32c
import pytest

from ckptrescue.datasets.hashing import hash_file
from ckptrescue.errors import UsageError
from ckptrescue.stores.s3.checksums import crc64nvme_pure
from fixtures.det import det_bytes


def _b64(value: int, width: int) -> str:
    return base64.b64encode(value.to_bytes(width, "big")).decode()


@pytest.mark.parametrize("size", [0, 1, 4095, (1 << 20) + 17, 3 * (1 << 20)])
def test_checksums_equal_independent_implementations(tmp_path: Path, size: int) -> None:
    data = det_bytes(size, "crc", size)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    out = hash_file(str(path), checksums=("crc64nvme", "CRC32C", "crc32"))
    assert out.sha256 == hashlib.sha256(data).hexdigest() and out.size == size
    assert out.checksums == {
        "CRC64NVME": _b64(_crc64_pure(data), 8),
        "CRC32C": _b64(google_crc32c.value(data), 4),
        "CRC32": _b64(zlib.crc32(data), 4),
    }


def _crc64_pure(data: bytes) -> int:
    crc = 0
    for i in range(0, len(data), 1 << 16):  # the pure function continues from a previous CRC
        crc = crc64nvme_pure(data[i:i + (1 << 16)], crc)
    return crc


def test_the_check_value_of_crc64nvme(tmp_path: Path) -> None:
    # CRC-64/NVME check value (the CRC of b"123456789"), from the NVMe spec / CRC catalogue
    path = tmp_path / "check.txt"
    path.write_bytes(b"123456789")
    got = hash_file(str(path), checksums=("CRC64NVME",)).checksums
    assert got == {"CRC64NVME": _b64(0xAE8B14860A799888, 8)}


def test_no_checksums_unless_asked_and_unknown_names_refused(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")
    assert hash_file(str(path)).checksums is None
    with pytest.raises(UsageError, match="not one of"):
        hash_file(str(path), checksums=("md5",))
