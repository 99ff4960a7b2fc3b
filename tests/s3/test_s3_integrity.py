"""Plan/check logic with part layouts moto cannot serve (pure): GetObjectAttributes ObjectParts
with per-part checksums, per-part values that do not reproduce the object value (ignored), an
unknown checksum type, guessed part sizes, and unverifiable objects."""

from __future__ import annotations

from ckptrescue.stores.s3 import checksums as c
from ckptrescue.stores.s3.integrity import ObjectHead, PartLayout, guess_part_sizes, make_plan
from ckptrescue.stores.s3.objects import _validate_part_values
from fixtures.det import det_bytes

MiB = 1 << 20


def run(plan, data):
    for i in range(0, len(data), 100_000):
        plan.update(data[i:i + 100_000])
    return plan.finish()


def test_object_parts_with_per_part_crc32c_names_the_part():
    data = bytearray(det_bytes(3000, 1))
    sizes = [1000, 1000, 1000]
    parts = [c.raw_digest("CRC32C", bytes(data[i:i + 1000])) for i in (0, 1000, 2000)]
    head = ObjectHead(bucket="b", key="k", size=3000, etag='"x-3"', checksums={
        "CRC32C": c.ChecksumValue("CRC32C", c.composite_from_parts("CRC32C", parts), None,
                                  "COMPOSITE")})
    layout = PartLayout(sizes=sizes, source="GetObjectAttributes",
                        part_checksums={"CRC32C": [c.b64(p) for p in parts]})
    _validate_part_values(head, layout)
    assert "CRC32C" in layout.part_checksums
    assert run(make_plan(head, layout), bytes(data)).status == "match"
    data[2500] ^= 1
    check = run(make_plan(head, layout), bytes(data))
    assert check.status == "mismatch"
    assert check.bad_parts == [{"part": 3, "offset": 2000, "length": 1000}]


def test_part_values_echoing_the_object_value_are_dropped():
    data = det_bytes(2000, 2)
    value = c.composite("SHA256", data, [1000, 1000])
    head = ObjectHead(bucket="b", key="k", size=2000, checksums={
        "SHA256": c.ChecksumValue("SHA256", value, 2)})
    layout = PartLayout(sizes=[1000, 1000], source="HeadObject PartNumber",
                        part_checksums={"SHA256": [value, value]})  # MinIO-style echo
    _validate_part_values(head, layout)
    assert layout.part_checksums == {}


def test_unknown_type_multipart_crc32_tries_both_forms():
    data = det_bytes(5000, 3)
    full = c.full_object("CRC32", data)
    head = ObjectHead(bucket="b", key="k", size=5000, etag='"abc-2"',
                      checksums={"CRC32": c.ChecksumValue("CRC32", full)})
    layout = PartLayout(sizes=[2500, 2500], source="HeadObject PartNumber")
    check = run(make_plan(head, layout), data)
    assert (check.status, check.form) == ("match", "full-object")
    composite = c.composite("CRC32", data, [2500, 2500])
    head.checksums = {"CRC32": c.ChecksumValue("CRC32", composite)}
    check = run(make_plan(head, layout), data)
    assert (check.status, check.form) == ("match", "composite")


def test_multipart_etag_with_guessed_8mib_parts():
    data = det_bytes(8 * MiB + 10, 4)
    etag = c.etag_multipart(data, [8 * MiB, 10])
    assert [8 * MiB, 10] in guess_part_sizes(len(data), 2)
    head = ObjectHead(bucket="b", key="k", size=len(data), etag=f'"{etag}"')
    check = run(make_plan(head, None), data)
    assert check.status == "match" and "guessed" in check.message


def test_unverifiable_reasons():
    kms = ObjectHead(bucket="b", key="k", size=3, etag='"0123456789abcdef0123456789abcdef"',
                     sse="aws:kms")
    check = run(make_plan(kms), b"abc")
    assert check.status == "unverifiable" and "not an MD5" in check.message
    xx = ObjectHead(bucket="b", key="k", size=3, etag='"abc-2"', sse="aws:kms",
                    checksums={"XXHASH64": c.ChecksumValue("XXHASH64", "AAAAAAAAAAA=")})
    check = run(make_plan(xx), b"abc")
    assert check.status == "unverifiable" and "XXHASH64" in check.message
    bad = ObjectHead(bucket="b", key="k", size=3, checksums={
        "SHA256": c.ChecksumValue("SHA256", "bm90LWEtaGFzaA==")})
    assert "not a valid SHA256" in run(make_plan(bad), b"abc").message


def test_aws_chunked_framing_stored_in_the_body_is_reported():
    from ckptrescue.stores.s3.integrity import aws_chunked_framing

    payload = b"hello world!"
    sig = "a" * 64
    framed = (f"c;chunk-signature={sig}\r\n".encode() + payload + b"\r\n"
              + f"0;chunk-signature={sig}\r\n".encode()
              + b"x-amz-checksum-crc32:cVmzJg==\r\n" + b"x-amz-trailer-signature:" + b"b" * 64
              + b"\r\n\r\n")
    assert "x-amz-checksum-crc32:cVmzJg==" in aws_chunked_framing(framed[:128], framed[-1024:])
    unsigned = b"c\r\n" + payload + b"\r\n0\r\nx-amz-checksum-crc32:cVmzJg==\r\n\r\n"
    assert aws_chunked_framing(unsigned[:128], unsigned[-1024:])
    assert aws_chunked_framing(payload, payload) is None
    head = ObjectHead(bucket="b", key="k", size=len(framed),
                      etag=f'"{c.etag_single(framed)}"')
    check = run(make_plan(head), framed)
    assert check.status == "match" and "de-frame" in check.detail()["framing"]
