"""Object keys are shown, never obeyed (#25): a key carrying an OSC 52 clipboard write, a screen
clear and a right-to-left override, preserved and verified through the console script against
the moto server. The terminal gets the key visibly escaped; ``--json`` keeps it exact."""

from __future__ import annotations

import json
import re

from s3_testlib import run, write_local

EVIL = "run/evil\x1b]52;c;aGk=\x07\x1b[2J\u202egpj.pt"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f\u0080-\u009f\u202a-\u202e\u2066-\u2069]")


def test_preserve_and_verify_show_a_hostile_key_escaped(s3server, writer, bucket, tmp_path):
    writer.put_object(Bucket=bucket, Key=EVIL, Body=b"weights" * 100, ChecksumAlgorithm="SHA256")
    ep = ["--endpoint-url", s3server.endpoint_url]
    kept = run(["s3", "preserve", f"s3://{bucket}/run/", "--case", str(tmp_path / "case"), *ep])
    assert kept.returncode == 0, kept.stderr
    assert RAW.search(kept.stdout + kept.stderr) is None, kept.stdout
    assert "evil\\x1b]52;c;aGk=\\x07\\x1b[2J\\u202egpj.pt" in kept.stdout
    local = tmp_path / "local"
    write_local(local, EVIL.split("/", 1)[1], b"weights" * 99)  # differs: a mismatch line
    checked = run(["s3", "verify", f"s3://{bucket}/run/", str(local), *ep])
    assert checked.returncode == 1
    assert RAW.search(checked.stdout + checked.stderr) is None, checked.stdout
    assert "evil\\x1b]52" in checked.stdout
    as_json = run(["s3", "verify", f"s3://{bucket}/run/", str(local), "--json", *ep])
    assert as_json.stdout.isascii()
    assert [o["key"] for o in json.loads(as_json.stdout)["objects"]] == [EVIL.split("/", 1)[1]]
