"""One word for one thing (docs/conventions.md): the known-good manifest of a restore is
``--manifest FILE`` on `s3 restore` and `store restore` alike; the old spellings
(`--known-good --manifest`, `--known-good-manifest`) still restore the same bytes."""

from __future__ import annotations

import hashlib
import time

from s3_testlib import run


def test_restore_by_manifest_is_spelled_the_same_on_both(s3server, writer, versioned_bucket,
                                                         tmp_path):
    b = versioned_bucket
    good, bad = b"good" * 1000, b"bad!" * 1000
    writer.put_object(Bucket=b, Key="m.pt", Body=good, ChecksumAlgorithm="SHA256")
    time.sleep(1.1)  # LastModified has 1-second resolution
    writer.put_object(Bucket=b, Key="m.pt", Body=bad, ChecksumAlgorithm="SHA256")
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_text(f"{hashlib.sha256(good).hexdigest()} *m.pt\n")
    ep = ["--endpoint-url", s3server.endpoint_url]
    for i, argv in enumerate([
            ["s3", "restore", f"s3://{b}/m.pt", "--manifest", str(manifest)],
            ["s3", "restore", f"s3://{b}/m.pt", "--known-good", "--manifest", str(manifest)],
            ["store", "restore", f"s3://{b}/m.pt", "--manifest", str(manifest)],
            ["store", "restore", f"s3://{b}/m.pt", "--known-good-manifest", str(manifest)]]):
        out = tmp_path / f"r{i}"
        res = run([*argv, "--to", str(out), *ep])
        assert res.returncode == 0, (argv, res.stderr)
        assert (out / "m.pt").read_bytes() == good, argv
        assert ("deprecated" in res.stderr) == ("--known-good-manifest" in argv), res.stderr
    neither = run(["s3", "restore", f"s3://{b}/m.pt", "--to", str(tmp_path / "x"), *ep])
    assert neither.returncode == 2 and "--version ID or --manifest FILE" in neither.stderr
