"""End to end through the installed ``ckptrescue`` console script (subprocess), against the
session's moto server over HTTP: JSON shapes, exit codes, one-line errors, partial results."""

from __future__ import annotations

import json

import pytest
from s3_testlib import MiB, put_multipart, run, tree_sha256, write_local

from fixtures.det import det_bytes


def test_verify_json_shape_and_exit_code(s3server, writer, bucket, tmp_path):
    parts = [det_bytes(5 * MiB, 1), det_bytes(1000, 2)]
    put_multipart(writer, bucket, "run/model.pt", parts)
    writer.put_object(Bucket=bucket, Key="run/meta.json", Body=b"{}", ChecksumAlgorithm="SHA256")
    local = tmp_path / "local"
    write_local(local, "model.pt", b"".join(parts))
    write_local(local, "meta.json", b"{}")
    before = tree_sha256(local)
    ok = run(["s3", "verify", f"s3://{bucket}/run/", str(local), "--json",
              "--endpoint-url", s3server.endpoint_url])
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert set(data) >= {"objects", "counts"}
    assert [(o["key"], o["status"], o["algorithm"]) for o in data["objects"]] == [
        ("meta.json", "match", "SHA256"), ("model.pt", "match", "SHA256")]
    assert all(set(o) == {"key", "status", "algorithm", "detail"} for o in data["objects"])
    assert data["counts"]["match"] == 2 and data["counts"]["total"] == 2
    # One byte changed in the last part: exit 1, the part is named.
    damaged = bytearray(b"".join(parts))
    damaged[-10] ^= 0xFF
    (local / "model.pt").write_bytes(bytes(damaged))
    bad = run(["s3", "verify", f"s3://{bucket}/run/", str(local), "--json",
               "--endpoint-url", s3server.endpoint_url, "--checksum-when", "required"])
    assert bad.returncode == 1
    obj = {o["key"]: o for o in json.loads(bad.stdout)["objects"]}["model.pt"]
    assert obj["status"] == "mismatch"
    assert obj["detail"]["parts"] == [{"part": 2, "offset": 5 * MiB, "length": 1000}]
    assert before.keys() == tree_sha256(local).keys()


def test_history_restore_preflight_preserve_cli(s3server, writer, versioned_bucket, tmp_path):
    b = versioned_bucket
    good, bad = b"good" * 1000, b"bad!" * 1000
    import hashlib
    import time

    writer.put_object(Bucket=b, Key="m.pt", Body=good, ChecksumAlgorithm="SHA256")
    time.sleep(1.1)  # LastModified has 1-second resolution: avoid the equal-timestamps anomaly
    writer.put_object(Bucket=b, Key="m.pt", Body=bad, ChecksumAlgorithm="SHA256")

    manifest = tmp_path / "SHA256SUMS"
    manifest.write_text(f"{hashlib.sha256(good).hexdigest()} *m.pt\n")
    ep = ["--endpoint-url", s3server.endpoint_url]
    hist = run(["s3", "history", f"s3://{b}/m.pt", "--manifest", str(manifest), "--json", *ep])
    item = json.loads(hist.stdout)["keys"][0]
    assert item["known_good"] == item["versions"][1]["version_id"]
    assert item["anomalies"] == []
    assert hist.returncode == 0, hist.stderr
    out = tmp_path / "recovery"
    rest = run(["s3", "restore", f"s3://{b}/m.pt", "--to", str(out), "--known-good",
                "--manifest", str(manifest), "--json", *ep])
    assert rest.returncode == 0, rest.stderr
    assert (out / "m.pt").read_bytes() == good
    pre = run(["s3", "preflight", f"s3://{b}", "--json", *ep])
    assert pre.returncode == 1  # versioned, but no Object Lock
    assert json.loads(pre.stdout)["verdict"] == "versioned"
    assert "WARNING" in pre.stderr
    case_dir = tmp_path / "case"
    kept = run(["s3", "preserve", f"s3://{b}/", "--case", str(case_dir), "--all-versions",
                "--json", *ep])
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout)["counts"] == {"match": 2, "total": 2}


@pytest.mark.parametrize(("args", "env_extra", "creds", "code", "needle"), [
    (["--endpoint-url", "http://127.0.0.1:9"], {}, True, 4, "cannot reach the S3 endpoint"),
    ([], {}, False, 2, "no AWS credentials"),
    (["BUCKET"], {}, True, 2, "bucket does not exist"),
    (["--checksum-when", "sometimes"], {}, True, 2, "--checksum-when"),
])
def test_one_line_errors(s3server, tmp_path, args, env_extra, creds, code, needle):
    url = "s3://no-such-bucket-xyz/p/" if "BUCKET" in args else "s3://whatever-bucket/p/"
    args = [a for a in args if a != "BUCKET"]
    if "--endpoint-url" not in args:
        args += ["--endpoint-url", s3server.endpoint_url]
    result = run(["s3", "verify", url, str(tmp_path), *args], env_extra=env_extra, creds=creds)
    assert result.returncode == code, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("ckptrescue:")]
    assert len(errors) == 1, result.stderr
    first = errors[0]
    assert first.startswith("ckptrescue: error:") and needle in first
    assert "Traceback" not in result.stderr
