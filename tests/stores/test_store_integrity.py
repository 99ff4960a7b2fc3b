"""Integrity, history, preflight, preserve and restore on the emulators; every write refused
before a request leaves; the objects unchanged."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat

import pytest
from stores_testlib import make_kit, sha256

from ckptrescue.checkpoints.probes.checkpoints import probe_paths
from ckptrescue.errors import RefusedError
from ckptrescue.stores import StoreOptions, open_store
from ckptrescue.stores.history import history
from ckptrescue.stores.preflight import preflight
from ckptrescue.stores.preserve import preserve
from ckptrescue.stores.restore import restore
from ckptrescue.stores.verify import verify
from fixtures import stores as fs
from fixtures.det import det_bytes

# ---- integrity ---------------------------------------------------------------------------------


def test_azure_content_md5_mismatch_named(request, monkeypatch):
    """A blob committed from blocks with a Content-MD5 that is not its content's (Put Block
    List stores it unvalidated): OS001; a Put Blob blob matches; a blob without any MD5 is
    unverifiable with its block list."""
    from azure.storage.blob import BlobBlock, ContentSettings

    kit = make_kit("az", request, monkeypatch)
    container = kit.writer.get_container_client(kit.bucket)
    good, bad = det_bytes(300_000, 1), det_bytes(200_000, 2)
    container.upload_blob("c/good.bin", good)
    blob = container.get_blob_client("c/bad.bin")
    blob.stage_block("YjE=", bad[:100_000])
    blob.stage_block("YjI=", bad[100_000:])
    blob.commit_block_list([BlobBlock("YjE="), BlobBlock("YjI=")],
                           content_settings=ContentSettings(
                               content_md5=hashlib.md5(b"other").digest()))
    nomd5 = container.get_blob_client("c/nomd5.bin")
    nomd5.stage_block("YjE=", good)
    nomd5.commit_block_list([BlobBlock("YjE=")])
    before = kit.state()
    result = verify(kit.url("c/"))
    by = {o.key: o for o in result.objects}
    assert by["c/good.bin"].status == "match"
    assert by["c/bad.bin"].status == "mismatch"
    assert by["c/bad.bin"].detail["checked"]["md5"]["match"] is False
    assert by["c/bad.bin"].detail["block_list"]["sizes"] == [100_000, 100_000]
    assert by["c/nomd5.bin"].status == "unverified"
    assert "1 unverified (no usable stored checksum" in result.summary  # fail closed
    codes = {f.code for f in result.findings()}
    assert {"OS001", "OS004"} <= codes
    local = kit  # the same objects against local files: no download
    tmp = request.getfixturevalue("tmp_path")
    (tmp / "good.bin").write_bytes(good)
    (tmp / "bad.bin").write_bytes(bad)
    (tmp / "extra.bin").write_bytes(b"x")
    offline = verify(local.url("c/"), tmp)
    by = {o.key: o.status for o in offline.objects}
    assert by == {"c/good.bin": "match", "c/bad.bin": "mismatch", "c/nomd5.bin": "missing-local",
                  "c/extra.bin": "missing-remote"}
    assert "GetBlob" not in offline.operations
    assert kit.state() == before


def test_gcs_md5_and_crc32c_mismatch_named(request, monkeypatch):
    """The store serves bytes whose hash differs from the md5Hash/crc32c it keeps (at-rest
    corruption, staged by a proxy: fake-gcs-server recomputes hashes on upload): OS001 with
    both values named; the same object read directly matches."""
    kit = make_kit("gs", request, monkeypatch)
    data = det_bytes(500_000, 3)
    kit.put("g/model.bin", data)
    kit.put("g/other.bin", b"fine")
    before = kit.state()
    clean = verify(kit.url("g/"))
    assert {o.key: o.status for o in clean.objects} == {"g/model.bin": "match",
                                                        "g/other.bin": "match"}
    server = request.getfixturevalue("fakegcs")
    proxy = fs.start_corrupting_proxy(server.endpoint, "g/model.bin", 123_456)
    try:
        result = verify(kit.url("g/"), options=StoreOptions(endpoint_url=proxy.endpoint))
    finally:
        proxy.stop()
    by = {o.key: o for o in result.objects}
    assert by["g/other.bin"].status == "match"
    bad = by["g/model.bin"]
    assert bad.status == "mismatch"
    assert bad.detail["checked"]["md5"]["match"] is False
    assert bad.detail["checked"]["crc32c"]["match"] is False
    assert bad.detail["checked"]["md5"]["stored"] == base64.b64encode(
        hashlib.md5(data).digest()).decode()
    assert [f.code for f in result.findings()] == ["OS001"]
    assert kit.state() == before


def test_gcs_composite_object_has_crc32c(request, monkeypatch):
    kit = make_kit("gs", request, monkeypatch)
    kit.put("p/a", b"a" * 1000)
    kit.put("p/b", b"b" * 1000)
    bucket = kit.writer.bucket(kit.bucket)
    bucket.blob("p/comp").compose([bucket.blob("p/a"), bucket.blob("p/b")])
    result = verify(kit.url("p/comp"))
    (obj,) = result.objects
    assert obj.status == "match" and "crc32c" in obj.detail["checked"]


def test_s3_content_verify_delegates(request, monkeypatch):
    kit = make_kit("s3", request, monkeypatch)
    data = det_bytes(1000, 4)
    wrong = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    kit.writer.put_object(Bucket=kit.bucket, Key="k/bad", Body=data, ChecksumAlgorithm="SHA256",
                          ChecksumSHA256=wrong)
    kit.put("k/good", data)
    result = verify(kit.url("k/"), options=kit.options)
    assert {o.key: o.status for o in result.objects} == {"k/bad": "mismatch", "k/good": "match"}


# ---- history, known-good, restore ------------------------------------------------------------


def _manifest(tmp_path, key, data):  # noqa: ANN001, ANN202
    path = tmp_path / "manifest.sha256"
    path.write_text(f"{sha256(data)}  {key}\n")
    return path


def test_azure_history_snapshots_known_good_and_restore(request, monkeypatch, tmp_path):
    kit = make_kit("az", request, monkeypatch)
    container = kit.writer.get_container_client(kit.bucket)
    v1, v2 = det_bytes(10_000, 5), det_bytes(10_000, 6)
    blob = container.upload_blob("h/model.pt", v1)
    snap = blob.create_snapshot()["snapshot"]
    container.upload_blob("h/model.pt", v2, overwrite=True)
    before = kit.state()
    manifest = _manifest(tmp_path, "model.pt", v1)
    result = history(kit.url("h/model.pt"), manifest=manifest)
    item = result.key("h/model.pt")
    kinds = [(v["kind"], v["is_latest"]) for v in item.to_json()["versions"]]
    assert kinds == [("version", True), ("snapshot", False)]
    assert item.known_good == snap
    assert [f.code for f in result.findings()] == ["OS011"]
    out = restore(kit.url("h/model.pt"), tmp_path / "rec", known_good_manifest=manifest)
    assert out.status == "verified" and out.chosen_by == "known-good"
    assert (tmp_path / "rec" / "h" / "model.pt").read_bytes() == v1
    record = json.loads((tmp_path / "rec" / "h" / "model.pt.restore.json").read_text())
    assert record["version"] == snap and record["sha256"] == sha256(v1)
    with pytest.raises(RefusedError):
        restore(kit.url("h/model.pt"), tmp_path / "rec")  # never overwrites
    assert kit.state() == before


def test_gcs_generations_known_good_and_restore(request, monkeypatch, tmp_path):
    kit = make_kit("gs", request, monkeypatch)
    v1, v2, v3 = (det_bytes(5000, 7, v) for v in range(3))
    for data in (v1, v2, v3):
        kit.put("h/model.pt", data)
    before = kit.state()
    manifest = _manifest(tmp_path, "model.pt", v2)
    result = history(kit.url("h/model.pt"), manifest=manifest)
    item = result.key("h/model.pt")
    versions = item.to_json()["versions"]
    assert [v["is_latest"] for v in versions] == [True, False, False]
    assert all(v["deleted"] for v in versions[1:])  # noncurrent: timeDeleted
    assert item.known_good == versions[1]["version_id"]
    assert "differs" in item.checked[versions[0]["version_id"]]
    out = restore(kit.url("h/model.pt"), tmp_path / "rec", known_good_manifest=manifest)
    assert out.ok and (tmp_path / "rec" / "h" / "model.pt").read_bytes() == v2
    # a deleted object: no current version, its generations remain
    kit.writer.bucket(kit.bucket).blob("h/model.pt").delete()
    gone = history(kit.url("h/model.pt")).key("h/model.pt")
    assert [a.kind for a in gone.anomalies] == ["no-current-version"]
    assert kit.state() != before  # the test deleted it: the listing saw the change


def test_s3_history_delegates(request, monkeypatch, tmp_path):
    kit = make_kit("s3", request, monkeypatch)
    kit.put("h/m", b"one")
    kit.put("h/m", b"two")
    manifest = _manifest(tmp_path, "m", b"one")
    result = history(kit.url("h/m"), manifest=manifest, options=kit.options)
    item = result.key("h/m")
    assert item.known_good == item.versions[1].version_id


# ---- preflight -----------------------------------------------------------------------------


def test_preflight_on_the_emulators(request, monkeypatch):
    az = make_kit("az", request, monkeypatch)
    result = preflight(az.url())
    assert result.verdict == "unprotected"
    assert result.settings["has_immutability_policy"] is False
    assert result.settings["soft_delete"]["enabled"] is False
    codes = {f.code for f in result.findings()}
    assert {"OS021", "OS023", "OS024"} <= codes
    gs = make_kit("gs", request, monkeypatch)
    out = preflight(gs.url())
    assert out.verdict == "versioned" and out.settings["versioning"] is True
    plain = make_kit("gs", request, monkeypatch, versioned=False)
    assert preflight(plain.url()).verdict == "unprotected"


def test_preflight_judgements():
    from ckptrescue.stores.azure import judge_azure
    from ckptrescue.stores.gcs import judge_gcs

    assert judge_azure({"has_immutability_policy": True, "soft_delete": {"enabled": True},
                        "versioning": True})[0] == "immutable"
    assert judge_azure({"has_immutability_policy": False, "soft_delete": {"enabled": True},
                        "versioning": None})[0] == "versioned"
    assert judge_azure({"container_error": "denied", "service_error": "denied"})[0] == "unknown"
    assert judge_gcs({"versioning": True, "retention_locked": True, "retention_period_s": 60,
                      "soft_delete_s": 604800})[0] == "immutable"
    assert judge_gcs({"versioning": False, "soft_delete_s": None,
                      "fields_present": []})[0] == "unprotected"


# ---- preserve ------------------------------------------------------------------------------


def test_preserve_layout_probes_equal(kit, checkpoints, tmp_path):
    names = ("model.pt", "model.safetensors")
    for name in names:
        kit.put(f"run/step-1/{name}", checkpoints[name].read_bytes())
    before = kit.state()
    out = preserve(kit.url("run/step-1/"), tmp_path / "kept", options=kit.options)
    assert out.ok and len(out.objects) == 2
    layout = out.layout / "run" / "step-1"
    for name in names:
        kept = layout / name
        assert kept.read_bytes() == checkpoints[name].read_bytes()
        assert not kept.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
        digest = sha256(checkpoints[name].read_bytes())
        cas = tmp_path / "kept" / "objects" / "sha256" / digest[:2] / digest
        assert cas.exists() and os.path.samefile(cas, kept)
    inventory = json.loads((tmp_path / "kept" / "inventory.json").read_text())
    assert {o["key"]: o["sha256"] for o in inventory["objects"]} == {
        f"run/step-1/{n}": sha256(checkpoints[n].read_bytes()) for n in names}
    local = {n: str(probe_paths([checkpoints[n]])[0].verdict) for n in names}
    assert {p.name: str(probe_paths([p])[0].verdict) for p in layout.iterdir()} == local
    assert {f.code for f in out.findings()} == {"OS031"}
    again = preserve(kit.url("run/step-1/"), tmp_path / "kept", options=kit.options)
    assert all(o.detail.get("resumed") for o in again.objects)  # resumed: nothing fetched
    assert again.summary == "2 of 2 preserved (2 already by an earlier run)"
    with pytest.raises(RefusedError):  # another URL into it: refused
        preserve(kit.url("run/"), tmp_path / "kept", options=kit.options)
    assert kit.state() == before


def test_preserve_all_versions_gcs(request, monkeypatch, tmp_path):
    kit = make_kit("gs", request, monkeypatch)
    kit.put("v/a.bin", b"old")
    kit.put("v/a.bin", b"new")
    out = preserve(kit.url("v/"), tmp_path / "kept", all_versions=True)
    assert sorted(o.status for o in out.objects) == ["match", "match"]
    assert (out.layout / "v" / "a.bin").read_bytes() == b"new"
    old = [o for o in out.objects if o.path and "/versions/" in o.path]
    assert len(old) == 1
    with open(old[0].path, "rb") as fh:
        assert fh.read() == b"old"


# ---- read-only by construction ---------------------------------------------------------------


def test_azure_writes_refused_before_any_request(monkeypatch):
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "")
    monkeypatch.setenv("AZURE_STORAGE_KEY", fs.AZURITE_KEY)
    rec = fs.start_recording_server()
    try:
        store = open_store(f"az://{fs.AZURITE_ACCOUNT}/ctr/x",
                           StoreOptions(endpoint_url=f"{rec.endpoint}/{fs.AZURITE_ACCOUNT}"))
        container = store.container  # type: ignore[attr-defined]
        blob = container.get_blob_client("x")
        attempts = [
            lambda: blob.upload_blob(b"data"),
            lambda: blob.delete_blob(),
            lambda: blob.set_blob_metadata({"k": "v"}),
            lambda: blob.set_http_headers(),
            lambda: blob.create_snapshot(),
            lambda: blob.undelete_blob(),
            lambda: blob.start_copy_from_url("http://127.0.0.1/x"),
            lambda: blob.set_standard_blob_tier("Archive"),
            lambda: blob.acquire_lease(),
            lambda: blob.stage_block("YQ==", b"a"),
            lambda: container.create_container(),
            lambda: container.delete_container(),
            lambda: store.service.get_blob_client("ctr", "y").upload_blob(b"x"),  # type: ignore[attr-defined]
        ]
        for attempt in attempts:
            with pytest.raises(RefusedError):
                attempt()
        assert rec.requests == []
        assert sum(store.stats.refused.values()) == len(attempts)
        assert not store.stats.operations
    finally:
        rec.stop()


def test_gcs_writes_refused_before_any_request(monkeypatch):
    rec = fs.start_recording_server()
    try:
        store = open_store("gs://bkt/x", StoreOptions(endpoint_url=rec.endpoint))
        client = store.sdk_client()  # type: ignore[attr-defined]
        bucket = client.bucket("bkt")
        blob = bucket.blob("x")
        attempts = [
            lambda: blob.upload_from_string(b"data"),
            lambda: blob.upload_from_string(b"d" * (9 << 20)),  # resumable
            lambda: blob.delete(),
            lambda: blob.patch(),
            lambda: blob.compose([bucket.blob("a")]),
            lambda: blob.rewrite(bucket.blob("y")),
            lambda: bucket.delete(),
            lambda: bucket.patch(),
            lambda: client.create_bucket("new"),
            lambda: bucket.restore_blob("x", generation=1),
        ]
        for attempt in attempts:
            with pytest.raises(RefusedError):
                attempt()
        # the SDK may read first (a bucket GET before a patch): only reads ever left
        assert [r for r in rec.requests if not r.startswith("GET ")] == []
        assert set(store.stats.operations) <= {"buckets.get", "objects.get"}
        assert sum(store.stats.refused.values()) == len(attempts)
    finally:
        rec.stop()


def test_s3_writes_refused_before_any_request():
    rec = fs.start_recording_server()
    try:
        store = open_store("s3://bkt/x", StoreOptions(endpoint_url=rec.endpoint,
                                                      region="us-east-1"))
        client = store.client  # type: ignore[attr-defined]
        for attempt in (lambda: client.put_object(Bucket="bkt", Key="x", Body=b"d"),
                        lambda: client.delete_object(Bucket="bkt", Key="x"),
                        lambda: client.copy_object(Bucket="bkt", Key="y",
                                                   CopySource={"Bucket": "bkt", "Key": "x"})):
            with pytest.raises(RefusedError):
                attempt()
        assert rec.requests == []
    finally:
        rec.stop()
