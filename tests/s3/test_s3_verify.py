"""``verify_prefix`` against moto's server over HTTP: every checksum form, statuses, parts named.

Objects are written by a plain boto3 client with real single-part and multipart uploads (5 MiB
parts + a small last part); local copies are written next to them, then altered per test.
"""

from __future__ import annotations

import pytest
from s3_testlib import MiB, put_multipart, tree_sha256, write_local

from ckptrescue.engine.action import from_library
from ckptrescue.engine.executor import record
from ckptrescue.stores.s3.api import VerifyFailed, verify_prefix
from ckptrescue.stores.s3.client import stats
from fixtures.det import det_bytes


def _by_key(result):
    return {o["key"]: o for o in result.to_json()["objects"]}


def test_single_part_sha256_match_and_nothing_downloaded(tmp_path, writer, bucket, options,
                                                          reader):
    data = det_bytes(3000, 1)
    writer.put_object(Bucket=bucket, Key="run/a.bin", Body=data, ChecksumAlgorithm="SHA256")
    write_local(tmp_path, "a.bin", data)
    before = tree_sha256(tmp_path)
    result = verify_prefix(f"s3://{bucket}/run", tmp_path, client_options=options, client=reader)
    obj = _by_key(result)["a.bin"]
    assert (obj["status"], obj["algorithm"]) == ("match", "SHA256")
    assert obj["detail"]["form"] == "full-object"
    assert result.to_json()["counts"]["match"] == 1
    assert stats(reader).bytes_downloaded == 0 and stats(reader).operations["GetObject"] == 0
    assert tree_sha256(tmp_path) == before


def test_multipart_composite_unequal_parts_and_one_byte_difference_names_the_part(
        tmp_path, writer, bucket, options):
    parts = [det_bytes(5 * MiB, 2), det_bytes(5 * MiB, 3), det_bytes(1 * MiB + 123, 4)]
    put_multipart(writer, bucket, "ckpt/model.pt", parts, algorithm="SHA256")
    put_multipart(writer, bucket, "ckpt/copy.pt", parts, algorithm="SHA256")
    write_local(tmp_path, "model.pt", b"".join(parts))
    damaged = bytearray(b"".join(parts))
    damaged[5 * MiB + 4242] ^= 0x01  # one bit in part 2
    write_local(tmp_path, "copy.pt", bytes(damaged))
    objs = _by_key(verify_prefix(f"s3://{bucket}/ckpt/", tmp_path, client_options=options))
    good = objs["model.pt"]
    assert good["status"] == "match" and good["algorithm"] == "SHA256"
    assert good["detail"]["form"] == "composite"
    assert good["detail"]["expected"].endswith("-3")
    assert good["detail"]["layout"]["sizes"] == [5 * MiB, 5 * MiB, 1 * MiB + 123]
    bad = objs["copy.pt"]
    assert bad["status"] == "mismatch"
    assert bad["detail"]["parts"] == [{"part": 2, "offset": 5 * MiB, "length": 5 * MiB}]
    assert "#2" in bad["detail"]["message"]


def test_one_part_multipart_is_verified_as_composite(tmp_path, writer, bucket, options):
    data = det_bytes(2 * MiB, 5)
    put_multipart(writer, bucket, "p/one.bin", [data], algorithm="SHA256")
    write_local(tmp_path, "one.bin", data)
    obj = _by_key(verify_prefix(f"s3://{bucket}/p", tmp_path, client_options=options))["one.bin"]
    assert obj["status"] == "match"
    assert obj["detail"]["form"] == "composite" and obj["detail"]["expected"].endswith("-1")


def test_crc64nvme_full_object_multipart(tmp_path, writer, bucket, options):
    parts = [det_bytes(5 * MiB, 6), det_bytes(4321, 7)]
    put_multipart(writer, bucket, "f/x.bin", parts, algorithm="CRC64NVME",
                  checksum_type="FULL_OBJECT")
    write_local(tmp_path, "x.bin", b"".join(parts))
    obj = _by_key(verify_prefix(f"s3://{bucket}/f", tmp_path, client_options=options))["x.bin"]
    assert (obj["status"], obj["algorithm"], obj["detail"]["form"]) == (
        "match", "CRC64NVME", "full-object")
    # A full-object CRC cannot locate damage by itself; the per-part MD5 ETags (accepted because
    # they reproduce the multipart ETag) still name the part.
    damaged = bytearray(b"".join(parts))
    damaged[100] ^= 0x80
    write_local(tmp_path, "x.bin", bytes(damaged))
    obj = _by_key(verify_prefix(f"s3://{bucket}/f", tmp_path, client_options=options))["x.bin"]
    assert (obj["status"], obj["detail"]["form"]) == ("mismatch", "full-object")
    assert obj["detail"]["parts"] == [{"part": 1, "offset": 0, "length": 5 * MiB}]


def test_etag_only_multipart(tmp_path, s3server, bucket, options):
    plain = s3server.writer_client(default_checksums=False)
    parts = [det_bytes(5 * MiB, 8), det_bytes(777, 9)]
    put_multipart(plain, bucket, "e/old.bin", parts, algorithm=None)
    head = plain.head_object(Bucket=bucket, Key="e/old.bin", ChecksumMode="ENABLED")
    assert not [k for k in head if k.startswith("Checksum")]  # really ETag-only
    write_local(tmp_path, "old.bin", b"".join(parts))
    obj = _by_key(verify_prefix(f"s3://{bucket}/e", tmp_path, client_options=options))["old.bin"]
    assert (obj["status"], obj["algorithm"], obj["detail"]["form"]) == (
        "match", "MD5", "etag-multipart")


def test_stored_checksum_that_does_not_match_the_content(tmp_path, writer, bucket, options):
    data = det_bytes(1000, 10)
    wrong = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="  # moto stores it unvalidated
    writer.put_object(Bucket=bucket, Key="w/lie.bin", Body=data, ChecksumAlgorithm="SHA256",
                      ChecksumSHA256=wrong)
    write_local(tmp_path, "lie.bin", data)
    obj = _by_key(verify_prefix(f"s3://{bucket}/w", tmp_path, client_options=options))["lie.bin"]
    assert obj["status"] == "mismatch"
    assert obj["detail"]["expected"] == wrong
    assert obj["detail"]["provenance"] == "client-asserted"


def test_missing_on_either_side_and_size_difference(tmp_path, writer, bucket, options, case):
    tmp_path = tmp_path / "local"  # the case fixture lives in tmp_path/case
    writer.put_object(Bucket=bucket, Key="m/only-remote.bin", Body=b"r")
    writer.put_object(Bucket=bucket, Key="m/short.bin", Body=b"0123456789")
    write_local(tmp_path, "sub/only-local.bin", b"l")
    write_local(tmp_path, "short.bin", b"01234")
    result = verify_prefix(f"s3://{bucket}/m", tmp_path, client_options=options)
    record(case, from_library(result))  # the engine's one writer records it
    assert case.root not in tmp_path.parents
    objs = _by_key(result)
    assert objs["only-remote.bin"]["status"] == "missing-local"
    assert objs["sub/only-local.bin"]["status"] == "missing-remote"
    assert objs["short.bin"]["status"] == "mismatch"
    assert "size differs" in objs["short.bin"]["detail"]["message"]
    counts = result.to_json()["counts"]
    assert counts == {"match": 0, "mismatch": 1, "missing-local": 1, "missing-remote": 1,
                      "unverified": 0, "unreadable": 0, "total": 3}
    codes = sorted(f.code for f in case.findings())
    assert codes == ["S3001", "S3002", "S3003"]
    assert case.verify().ok


def test_kms_object_is_unverified_until_downloaded(tmp_path, s3server, bucket, options, reader):
    plain = s3server.writer_client(default_checksums=False)
    data = det_bytes(5000, 11)
    plain.put_object(Bucket=bucket, Key="k/enc.bin", Body=data, ServerSideEncryption="aws:kms")
    write_local(tmp_path, "enc.bin", data)
    obj = _by_key(verify_prefix(f"s3://{bucket}/k", tmp_path, client_options=options,
                                client=reader))["enc.bin"]
    assert obj["status"] == "unverified"
    assert "not an MD5" in obj["detail"]["message"]
    assert stats(reader).bytes_downloaded == 0
    obj = _by_key(verify_prefix(f"s3://{bucket}/k", tmp_path, client_options=options,
                                client=reader, download=True))["enc.bin"]
    assert obj["status"] == "match" and obj["detail"]["form"] == "download"
    assert stats(reader).bytes_downloaded == len(data)


def test_missing_bucket_is_a_usage_error(tmp_path, options):
    with pytest.raises(VerifyFailed) as info:
        verify_prefix("s3://no-such-bucket-here/x", tmp_path, client_options=options)
    assert int(info.value.exit_code) == 2
    assert "bucket does not exist" in info.value.message
    assert info.value.partial.to_json()["objects"] == []


def test_local_files_never_uploaded_are_one_finding(tmp_path, s3server, bucket, options,
                                                     writer):
    from ckptrescue.stores.s3.api import verify_prefix

    writer.put_object(Bucket=bucket, Key="n/a.bin", Body=b"a")
    write_local(tmp_path, "a.bin", b"a")
    for i in range(13):
        write_local(tmp_path, f"local-{i}.bin", b"x")
    result = verify_prefix(f"s3://{bucket}/n", tmp_path, client_options=options)
    s3003 = [f for f in result.findings() if f.code == "S3003"]
    assert len(s3003) == 1 and s3003[0].details["count"] == 13
    assert str(s3003[0].severity) == "info" and "13 local file(s)" in s3003[0].title


def test_unverified_objects_fail_closed(tmp_path, s3server, bucket, options):
    """An object without a usable checksum (SSE-KMS: its ETag is not an MD5, no Checksum*) is
    `unverified`: it never counts toward "everything verifies". `s3 verify` exits 1 and says how
    many; --allow-unverified accepts them (exit 0, still counted); --download verifies them."""
    import json

    from s3_testlib import run

    plain = s3server.writer_client(default_checksums=False)
    writer = s3server.writer_client()
    data = det_bytes(3000, 12)
    plain.put_object(Bucket=bucket, Key="fc/enc.bin", Body=data, ServerSideEncryption="aws:kms")
    writer.put_object(Bucket=bucket, Key="fc/ok.bin", Body=b"fine", ChecksumAlgorithm="SHA256")
    local = tmp_path / "local"
    write_local(local, "enc.bin", data)
    write_local(local, "ok.bin", b"fine")
    result = verify_prefix(f"s3://{bucket}/fc", local, client_options=options)
    assert {o.rel: o.status for o in result.objects} == {"enc.bin": "unverified",
                                                        "ok.bin": "match"}
    assert not result.ok
    assert result.summary.startswith("1 of 2 verified; 1 unverified (no usable stored checksum")
    warn = [f for f in result.findings() if f.code == "S3004"]
    assert len(warn) == 1 and str(warn[0].severity) == "warning"
    base = ["s3", "verify", f"s3://{bucket}/fc", str(local), "--endpoint-url",
            s3server.endpoint_url]
    strict = run(base)
    assert strict.returncode == 1, strict.stderr
    assert "1 of 2 verified; 1 unverified" in strict.stdout
    allowed = run([*base, "--allow-unverified", "--json"])
    assert allowed.returncode == 0, allowed.stderr
    out = json.loads(allowed.stdout)
    assert out["counts"]["unverified"] == 1 and out["allow_unverified"] is True
    assert run([*base, "--download"]).returncode == 0  # compared by content: verified
