"""The answer says what was brought back, not only what is damaged.

Found by a responder: after ``s3 restore --version`` had written a verified copy of the
truncated step-400.pt and ``recover`` had brought back two corrupted dataset shards, the
report's answer still read "step-400.pt truncated ...; dataset audit: shard-00003.tar corrupted,
shard-00004.tar corrupted" and nothing else: the restored copy (newer than the resume point)
and the recovered files were only in the step table.
"""

from __future__ import annotations

import hashlib
import json
import shutil

from s3_testlib import run

from fixtures.det import det_bytes


def test_the_answer_names_the_restored_version_and_the_recovered_files(
        tmp_path, s3server, writer, versioned_bucket) -> None:
    bucket = versioned_bucket
    good = det_bytes(9000, 400)
    v1 = writer.put_object(Bucket=bucket, Key="run/step-400.pt", Body=good,
                           ChecksumAlgorithm="SHA256")["VersionId"]
    writer.put_object(Bucket=bucket, Key="run/step-400.pt", Body=good[:4000],  # torn re-upload
                      ChecksumAlgorithm="SHA256")
    data, snaps = tmp_path / "data", tmp_path / "snaps" / "nightly"
    data.mkdir()
    shards = {f"shard-{i}.bin": det_bytes(3000, 10 + i) for i in range(3)}
    for name, body in shards.items():
        (data / name).write_bytes(body)
    shutil.copytree(data, snaps)
    manifest = tmp_path / "data.sha256"
    manifest.write_text("".join(f"{hashlib.sha256(b).hexdigest()}  {n}\n"
                                for n, b in shards.items()))
    with open(data / "shard-1.bin", "r+b") as fh:  # bit rot in one shard
        fh.seek(100)
        fh.write(b"\xff")
    case = tmp_path / "case"
    assert run(["case", "new", str(case)]).returncode == 0
    restored = run(["s3", "restore", f"s3://{bucket}/run/step-400.pt", "--version", v1,
                    "--to", str(case / "recovery"), "--case", str(case),
                    "--endpoint-url", s3server.endpoint_url])
    assert restored.returncode == 0, restored.stderr
    recovered = run(["recover", str(data), "--manifest", str(manifest), "--from",
                     str(snaps.parent), "--to", str(case / "recovery" / "data"),
                     "--case", str(case)])
    assert recovered.returncode == 0, recovered.stderr
    report = run(["report", str(case), "-f", "json", "-o", "-"])
    assert report.returncode == 0, report.stderr
    answer = json.loads(report.stdout)["answer"]
    assert f"step-400.pt: version {v1} restored, verified: CASE/recovery/run/step-400.pt" \
        in answer, answer
    assert "dataset recovery: recovered 1 of 1" in answer, answer
