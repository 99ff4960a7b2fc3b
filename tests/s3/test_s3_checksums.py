"""Pure checksum algorithms against the published check values (b"123456789") and the
composite/ETag recipes from docs/s3.md; no network."""

from __future__ import annotations

import base64
import hashlib
import zlib

import pytest

from ckptrescue.stores.s3 import checksums as c
from fixtures.det import det_bytes

CHECK = b"123456789"


@pytest.mark.parametrize(("alg", "expected"), [
    ("CRC32", "y/Q5Jg=="),
    ("CRC32C", "4waSgw=="),
    ("CRC64NVME", "rosUhgp5mIg="),
    ("SHA1", "98O8HYCOBHMq32eZZczDTKeuNEE="),
    ("SHA256", base64.b64encode(hashlib.sha256(CHECK).digest()).decode()),
    ("MD5", base64.b64encode(hashlib.md5(CHECK).digest()).decode()),
])
def test_catalogue_check_values(alg, expected):
    assert c.full_object(alg, CHECK) == expected


def test_crc_check_values_as_integers():
    assert int.from_bytes(c.raw_digest("CRC32", CHECK), "big") == 0xCBF43926
    assert int.from_bytes(c.raw_digest("CRC32C", CHECK), "big") == 0xE3069283
    assert int.from_bytes(c.raw_digest("CRC64NVME", CHECK), "big") == 0xAE8B14860A799888
    assert c.crc64nvme_pure(CHECK) == 0xAE8B14860A799888


def test_pure_crc64nvme_agrees_with_awscrt_incrementally():
    awscrt = pytest.importorskip("awscrt.checksums")
    data = det_bytes(4096, 1)
    assert c.crc64nvme_pure(data[1000:], c.crc64nvme_pure(data[:1000])) == awscrt.crc64nvme(data)


def test_composite_and_etag_recipes():
    data = det_bytes(300, 2)
    sizes = [128, 128, 44]
    parts = [data[:128], data[128:256], data[256:]]
    inner = b"".join(hashlib.sha256(p).digest() for p in parts)
    expected = base64.b64encode(hashlib.sha256(inner).digest()).decode()
    assert c.composite("SHA256", data, sizes) == expected
    md5s = b"".join(hashlib.md5(p).digest() for p in parts)
    assert c.etag_multipart(data, sizes) == hashlib.md5(md5s).hexdigest() + "-3"
    crc_inner = b"".join(zlib.crc32(p).to_bytes(4, "big") for p in parts)
    assert c.composite("CRC32", data, sizes) == base64.b64encode(
        zlib.crc32(crc_inner).to_bytes(4, "big")).decode()


def test_one_part_multipart_is_still_composite():
    data = b"x" * 1000
    assert c.composite("SHA256", data, [1000]) != c.full_object("SHA256", data)
    assert c.composite("SHA256", data, [1000]) == base64.b64encode(
        hashlib.sha256(hashlib.sha256(data).digest()).digest()).decode()
    inner_md5 = hashlib.md5(hashlib.md5(data).digest()).hexdigest()
    assert c.etag_multipart(data, [1000]) == inner_md5 + "-1"


def test_digestset_one_pass_matches_recipes_with_odd_chunking():
    data = det_bytes(10_000, 3)
    sizes = [4096, 4096, 1808]
    ds = c.DigestSet(full=["SHA256", "CRC64NVME"], per_part=["SHA256", "MD5", "CRC32C"],
                     part_sizes=sizes)
    for i in range(0, len(data), 777):  # chunks straddle part boundaries
        ds.update(data[i:i + 777])
    ds.finish()
    assert ds.size == len(data)
    assert ds.value("SHA256") == c.full_object("SHA256", data)
    assert ds.value("CRC64NVME") == c.full_object("CRC64NVME", data)
    assert ds.composite_value("SHA256") == c.composite("SHA256", data, sizes)
    assert ds.composite_value("CRC32C") == c.composite("CRC32C", data, sizes)
    assert ds.multipart_etag() == c.etag_multipart(data, sizes)


def test_parse_values_and_etags():
    v = c.parse_value("SHA256", "dtXciK3lY5MMaXE1kDJRz/T3e80f9QZK4EOobZyyOHI=-3")
    assert (v.value, v.parts) == ("dtXciK3lY5MMaXE1kDJRz/T3e80f9QZK4EOobZyyOHI=", 3)
    assert c.parse_value("CRC64NVME", "J6/OGi3N3RM=").parts is None
    assert c.parse_etag('"d41d8cd98f00b204e9800998ecf8427e"') == ("d41d8cd98f00b204e9800998ecf8427e", None)
    assert c.parse_etag('"abc-12"') == ("abc", 12)
    assert c.etag_is_md5('"d41d8cd98f00b204e9800998ecf8427e"')
    assert not c.etag_is_md5('"abc-12"')
    found = c.checksums_from_response({"ChecksumSHA256": "x=", "ChecksumType": "COMPOSITE",
                                       "ChecksumXXHASH64": "y", "ETag": "z"})
    assert set(found) == {"SHA256", "XXHASH64"}
    assert found["SHA256"].checksum_type == "COMPOSITE"
    assert c.best_algorithm(["CRC32", "SHA1", "CRC64NVME"]) == "CRC64NVME"
    assert not c.valid_width("SHA256", "y/Q5Jg==")
