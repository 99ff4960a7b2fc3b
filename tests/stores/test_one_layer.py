"""One object-store layer: what the store commands now share on every store, against moto,
Azurite and fake-gcs-server over real HTTP. Preserve into the case (the s3 command's way) works
for Azure and GCS too and resumes without fetching again; `s3 verify` is `store verify` for
s3:// URLs (the same objects, counts and exit code) and takes no other URL; an object that
cannot be read stops the verdict the same way on every store (exit 4, what was established
kept)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import invoke

from ckptrescue.record.case import Case


def _args(kit: Any) -> list[str]:
    return ["--endpoint-url", kit.options.endpoint_url] if kit.scheme == "s3" else []


def test_preserve_into_the_case_on_every_store_resumes(kit: Any, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    data = {f"run/part-{i}.bin": bytes((i * 31 + j) % 253 for j in range(70_000 + i))
            for i in range(2)}
    for key, body in data.items():
        kit.put(key, body)
    before = kit.state()
    case = tmp_path / "case"
    assert invoke("case", "new", str(case), "--title", "one layer").returncode == 0
    first = invoke("store", "preserve", kit.url("run/"), "--case", str(case), *_args(kit))
    assert first.returncode == 0, first.stdout + first.stderr
    assert "2 of 2 preserved" in first.stdout
    opened = Case.open(case)
    items = opened.evidence()
    kind = "s3-object" if kit.scheme == "s3" else "store-object"
    assert sorted((i.kind, i.source) for i in items) == sorted(
        (kind, kit.url(k)) for k in data)
    assert {i.sha256 for i in items} == {hashlib.sha256(b).hexdigest() for b in data.values()}
    for item in items:
        assert opened.read_artifact(str(item.sha256)) == data[item.source[len(kit.url()):]]
    preserved = "S3031" if kit.scheme == "s3" else "OS031"
    assert [f.code for f in opened.findings()] == [preserved, preserved]
    again = invoke("store", "preserve", kit.url("run/"), "--case", str(case), *_args(kit))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2 of 2 preserved (2 already by an earlier run)" in again.stdout
    assert [i.id for i in Case.open(case).evidence()] == [i.id for i in items]  # none twice
    assert Case.open(case).verify().ok
    assert kit.state() == before


def test_s3_verify_is_store_verify_for_s3_urls(request: pytest.FixtureRequest, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from stores_testlib import make_kit

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    kit = make_kit("s3", request, monkeypatch)
    good, other = b"weights" * 5000, b"other" * 300
    kit.writer.put_object(Bucket=kit.bucket, Key="run/a.bin", Body=good,
                          ChecksumAlgorithm="SHA256")
    kit.writer.put_object(Bucket=kit.bucket, Key="run/b.bin", Body=other,
                          ChecksumAlgorithm="CRC32C")
    local = tmp_path / "local"
    local.mkdir()
    (local / "a.bin").write_bytes(good)
    (local / "b.bin").write_bytes(other[:-1] + b"!")  # one byte differs
    (local / "c.bin").write_bytes(b"never uploaded")
    ep = _args(kit)
    by_s3 = invoke("s3", "verify", kit.url("run/"), str(local), "--json", *ep)
    by_store = invoke("store", "verify", kit.url("run/"), str(local), "--json", *ep)
    assert by_s3.returncode == by_store.returncode == 1, by_s3.stderr + by_store.stderr
    s3_out, store_out = json.loads(by_s3.stdout), json.loads(by_store.stdout)
    assert s3_out["objects"] == store_out["objects"] and s3_out["counts"] == store_out["counts"]
    assert {o["key"]: o["status"] for o in s3_out["objects"]} == {
        "a.bin": "match", "b.bin": "mismatch", "c.bin": "missing-remote"}
    refused = invoke("s3", "verify", "gs://bucket/run/", str(local))
    assert refused.returncode == 2 and "not an s3:// URL" in refused.stderr


def test_an_unreadable_object_stops_the_verdict_keeping_the_rest(
        request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """GCS answering 500 for one object's bytes: exit 4, one line, the other object's outcome
    kept in --json (the convention s3 verify always had, now every store's)."""
    from stores_testlib import make_kit

    from fixtures import stores as fs

    kit = make_kit("gs", request, monkeypatch)
    kit.put("p/ok.bin", b"fine" * 1000)
    kit.put("p/bad.bin", b"lost" * 1000)
    proxy = fs.start_failing_proxy(request.getfixturevalue("fakegcs").endpoint, "p/bad.bin")
    try:
        res = invoke("store", "verify", kit.url("p/"), "--json", "--endpoint-url",
                     proxy.endpoint)
    finally:
        proxy.stop()
    assert res.returncode == 4, res.stdout + res.stderr
    errors = [x for x in res.stderr.splitlines() if x.startswith("ckptrescue: error:")]
    assert len(errors) == 1 and "bad.bin" in errors[0] and "500" in errors[0], res.stderr
    objects = {o["key"]: o for o in json.loads(res.stdout)["objects"]}
    assert objects["ok.bin"]["status"] == "match"
    assert objects["bad.bin"]["status"] == "unreadable"
    assert objects["bad.bin"]["detail"]["error"] is True
    assert proxy.failed >= 1
