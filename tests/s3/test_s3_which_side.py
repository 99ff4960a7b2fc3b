"""Say which side is wrong: a versioned bucket whose latest step-300.pt is a corrupted rewrite,
a local copy that is the good one, and a known-good manifest. `s3 verify --manifest` says the
store's object is the bad copy (not "local file does not match"), and a playbook's answer warns
that the store's latest object is bad; `s3 history --manifest` names the known-good version."""

from __future__ import annotations

import hashlib
import json

from s3_testlib import run, write_local

from ckptrescue.stores.s3.api import verify_prefix
from fixtures.det import det_bytes


def test_the_store_latest_is_the_bad_copy(tmp_path, s3server, writer, versioned_bucket,
                                          options) -> None:
    bucket = versioned_bucket
    good = det_bytes(6000, 300)
    bad = bytearray(good)
    bad[4000] ^= 0x04  # bit rot in the rewrite: same size
    writer.put_object(Bucket=bucket, Key="run/step-300.pt", Body=good,
                      ChecksumAlgorithm="SHA256")
    writer.put_object(Bucket=bucket, Key="run/step-300.pt", Body=bytes(bad),
                      ChecksumAlgorithm="SHA256")
    writer.put_object(Bucket=bucket, Key="run/step-200.pt", Body=b"two hundred",
                      ChecksumAlgorithm="SHA256")
    local = tmp_path / "local"
    write_local(local, "step-300.pt", good)
    write_local(local, "step-200.pt", b"two hundred")
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_text(f"{hashlib.sha256(good).hexdigest()}  step-300.pt\n"
                        f"{hashlib.sha256(b'two hundred').hexdigest()}  step-200.pt\n")
    # without a manifest, nothing tells which side is wrong
    plain = {o.rel: o for o in verify_prefix(f"s3://{bucket}/run", local,
                                             client_options=options).objects}
    assert plain["step-300.pt"].status == "mismatch"
    assert "wrong_side" not in plain["step-300.pt"].detail
    result = verify_prefix(f"s3://{bucket}/run", local, client_options=options,
                           manifest=manifest)
    obj = {o.rel: o for o in result.objects}["step-300.pt"]
    assert obj.detail["wrong_side"] == "store"
    assert obj.detail["object_sha256"] == hashlib.sha256(bytes(bad)).hexdigest()
    (finding,) = [f for f in result.findings() if f.code == "S3001"]
    assert finding.title.startswith("step-300.pt: the store's object is the bad copy")
    assert "local file does not match" not in finding.title
    # a local copy that is the bad one: the local side is named
    write_local(local, "step-300.pt", bytes(bad))
    writer.put_object(Bucket=bucket, Key="run/step-300.pt", Body=good,
                      ChecksumAlgorithm="SHA256")
    flipped = verify_prefix(f"s3://{bucket}/run", local, client_options=options,
                            manifest=manifest)
    assert {o.rel: o for o in flipped.objects}["step-300.pt"].detail["wrong_side"] == "local"


def test_the_answer_warns_that_the_latest_object_is_bad(tmp_path, s3server, writer,
                                                        versioned_bucket) -> None:
    bucket = versioned_bucket
    good = det_bytes(5000, 31)
    bad = bytearray(good)
    bad[100] ^= 0x80
    v1 = writer.put_object(Bucket=bucket, Key="ck/step-300.pt", Body=good,
                           ChecksumAlgorithm="SHA256")["VersionId"]
    writer.put_object(Bucket=bucket, Key="ck/step-300.pt", Body=bytes(bad),
                      ChecksumAlgorithm="SHA256")
    local = tmp_path / "local"
    write_local(local, "step-300.pt", good)
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_text(f"{hashlib.sha256(good).hexdigest()}  step-300.pt\n")
    case = tmp_path / "case"
    ep = ["--endpoint-url", s3server.endpoint_url]
    assert run(["case", "new", str(case), "--title", "which side"]).returncode == 0
    verified = run(["s3", "verify", f"s3://{bucket}/ck", str(local), "--manifest",
                    str(manifest), "--case", str(case), *ep])
    assert verified.returncode == 1, verified.stderr
    assert "the store's object is the bad copy" in verified.stdout
    history = run(["s3", "history", f"s3://{bucket}/ck/step-300.pt", "--manifest",
                   str(manifest), "--case", str(case), "--json", *ep])
    assert json.loads(history.stdout)["keys"][0]["known_good"] == v1
    from ckptrescue.engine.answer import answer_line
    from ckptrescue.record.case import Case

    answer = answer_line(Case.open(case))
    assert "WARNING: the store's latest object is the bad copy for step-300.pt" in answer, answer
    assert "WARNING: the store's latest object is not the known-good version: step-300.pt " \
        f"(known-good version {v1})" in answer, answer
    assert "step-300.pt mismatch (the store's object is wrong)" in answer, answer


def test_store_verify_names_its_side_in_the_answer_too(tmp_path, s3server, writer,
                                                       versioned_bucket) -> None:
    """`store verify URL LOCAL --manifest M` (the store command for any store): same judgment,
    same answer part."""
    bucket = versioned_bucket
    good = det_bytes(2048, 7)
    writer.put_object(Bucket=bucket, Key="sv/a.bin", Body=good[::-1],
                      ChecksumAlgorithm="SHA256")
    local = tmp_path / "local"
    write_local(local, "a.bin", good)
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_text(f"{hashlib.sha256(good).hexdigest()}  a.bin\n")
    case = tmp_path / "case"
    assert run(["case", "new", str(case)]).returncode == 0
    out = run(["store", "verify", f"s3://{bucket}/sv/", str(local), "--manifest", str(manifest),
               "--case", str(case), "--endpoint-url", s3server.endpoint_url])
    assert out.returncode == 1, out.stderr
    from ckptrescue.engine.answer import answer_line
    from ckptrescue.record.case import Case

    answer = answer_line(Case.open(case))
    assert "store verify: a.bin mismatch (the store's object is wrong)" in answer, answer
    assert "WARNING: the store's latest object is the bad copy for a.bin" in answer, answer
