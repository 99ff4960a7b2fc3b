"""A lying server: moto over real HTTP behind the fault proxy on 127.0.0.1, answering one object
with bytes that are not the object's while saying they are (a short body whose Content-Length
agrees, a body cut short under the full Content-Length, another object's body under this
object's headers, another version's bytes on a ranged retry that ignores ``If-Match``, a body
trickled a byte a second). What the server sent is kept as received, labelled as not matching
(the stored bytes may be what is damaged: that is the evidence), never counted as a match,
never spliced from two versions; a rerun once the server mends fetches it again; the case stays
verifiable; a trickle is given up on within a bound."""

from __future__ import annotations

import hashlib
import json
import time
from itertools import count
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import invoke, run_cli
from faultproxy import FaultProxy, versioned_bucket

from ckptrescue.record.case import Case

_n = count()
DATA = {f"run/obj-{i}.bin": bytes((i * 11 + j * 3) % 251 for j in range(150_000 + 2000 * i))
        for i in range(3)}
VICTIM = "run/obj-1.bin"


@pytest.fixture
def bucket(motoserver: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return versioned_bucket(motoserver, f"lies-{next(_n)}", DATA)


def _on(key: str, action: str, *, first_only: bool = False) -> Any:
    def rule(_m: str, path: str, _h: dict[str, str], nth: int) -> str:
        hit = path.split("?")[0].endswith("/" + key)
        return action if hit and (nth == 1 or not first_only) else "pass"
    return rule


LIES = ["short", "fin", "swap"]


def _lie(bucket: str, lie: str) -> str:
    return f"swap:/{bucket}/run/obj-2.bin" if lie == "swap" else lie


@pytest.mark.parametrize("lie", LIES)
def test_store_preserve_never_counts_a_lied_object_as_a_match(
        tmp_path: Path, bucket: str, proxy: FaultProxy, lie: str) -> None:
    proxy.rule = _on(VICTIM, _lie(bucket, lie), first_only=lie == "fin")
    dest = tmp_path / "d"
    res = invoke("store", "preserve", f"s3://{bucket}/run/", "--dest", str(dest), "--json",
                 "--endpoint-url", proxy.endpoint_url)
    objects = {o["key"]: o for o in json.loads(res.stdout)["objects"]}
    assert {objects[k]["status"] for k in DATA if k != VICTIM} == {"match"}
    victim = objects[VICTIM]
    kept = dest / "layout" / VICTIM
    if lie == "fin":  # a body cut short is resumed: the object as stored, the cut reported
        assert res.returncode == 0 and victim["status"] == "match", victim
        assert victim["detail"].get("resets")
        assert kept.read_bytes() == DATA[VICTIM]
        return
    assert res.returncode == 1, res.stdout + res.stderr
    assert victim["status"] == "mismatch", victim
    assert "not matching" in json.loads(res.stdout)["summary"]
    proxy.rule = lambda *_: "pass"  # the server mends: the rerun fetches what did not match
    again = invoke("store", "preserve", f"s3://{bucket}/run/", "--dest", str(dest), "--json",
                   "--endpoint-url", proxy.endpoint_url)
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads(again.stdout)["summary"] == "3 of 3 preserved (2 already by an earlier run)"
    assert kept.read_bytes() == DATA[VICTIM]


@pytest.mark.parametrize("lie", ["short", "swap"])
def test_s3_preserve_into_a_case_labels_a_lied_object_and_a_rerun_mends_it(
        tmp_path: Path, bucket: str, proxy: FaultProxy, lie: str) -> None:
    proxy.rule = _on(VICTIM, _lie(bucket, lie))
    case = tmp_path / "case"
    res = invoke("s3", "preserve", f"s3://{bucket}/run/", "--case", str(case),
                 "--endpoint-url", proxy.endpoint_url)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "3 of 3 preserved (1 kept as received but not matching" in res.stdout, res.stdout
    assert Case.open(case).verify().ok
    proxy.rule = lambda *_: "pass"  # the server mends: the rerun fetches the one that did not match
    again = invoke("s3", "preserve", f"s3://{bucket}/run/", "--case", str(case),
                   "--endpoint-url", proxy.endpoint_url)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "(2 already by an earlier run)" in again.stdout, again.stdout
    right = {f"s3://{bucket}/{k}": hashlib.sha256(d).hexdigest() for k, d in DATA.items()}
    items = Case.open(case).evidence()
    latest = {i.source: i.sha256 for i in items}  # the newest item of each source
    assert latest == right
    assert Case.open(case).verify().ok


@pytest.mark.parametrize("lie", LIES)
def test_store_verify_never_calls_a_lied_object_a_match(
        tmp_path: Path, bucket: str, proxy: FaultProxy, lie: str) -> None:
    local = tmp_path / "local"
    for key, data in DATA.items():
        (local / key).parent.mkdir(parents=True, exist_ok=True)
        (local / key).write_bytes(data)
    proxy.rule = _on(VICTIM, _lie(bucket, lie))
    res = invoke("store", "verify", f"s3://{bucket}/run/", str(local / "run"), "--json",
                 "--endpoint-url", proxy.endpoint_url)
    # the local copy is right: a lie in the GET may make it "unreadable", never "mismatch"
    # blamed on the copy, and the verdict of the others stands
    assert res.returncode in (0, 1), res.stdout + res.stderr
    assert "Traceback" not in res.stderr


def test_a_ranged_retry_answered_with_another_version_is_never_spliced(
        tmp_path: Path, bucket: str, proxy: FaultProxy) -> None:
    """The first GET is reset mid-body; the server answers the ranged retry with the bytes and
    ETag of another version, ignoring If-Match (the object changed between the requests)."""
    proxy.other_path = f"/{bucket}/run/obj-0.bin"

    def rule(_m: str, path: str, headers: dict[str, str], _nth: int) -> str:
        if not path.split("?")[0].endswith("/" + VICTIM):
            return "pass"
        return "other-version" if "Range" in headers else "reset"
    proxy.rule = rule
    dest = tmp_path / "d"
    res = invoke("store", "preserve", f"s3://{bucket}/run/", "--dest", str(dest), "--json",
                 "--endpoint-url", proxy.endpoint_url)
    assert res.returncode == 1, res.stdout + res.stderr
    objects = {o["key"]: o for o in json.loads(res.stdout)["objects"]}
    assert objects[VICTIM]["status"] != "match", objects[VICTIM]
    kept = dest / "layout" / VICTIM
    assert not kept.exists() or kept.read_bytes() == DATA[VICTIM]


def test_a_trickling_server_is_given_up_on_within_a_bound(
        tmp_path: Path, bucket: str, proxy: FaultProxy) -> None:
    proxy.rule = _on(VICTIM, "slow")
    case = tmp_path / "case"
    start = time.monotonic()
    res = run_cli("s3", "preserve", f"s3://{bucket}/run/", "--case", str(case),
                  "--endpoint-url", proxy.endpoint_url, timeout=300,
                  env_extra={"CKPTRESCUE_STALL_SECONDS": "5"})
    took = time.monotonic() - start
    assert took < 60, took  # the 5 s stall window, not the 42 hours the trickle would take
    assert res.returncode == 1, res.stdout + res.stderr
    assert "2 of 3 preserved, 1 failed" in res.stdout
    assert "trickles or stalled" in res.stdout + res.stderr, res.stdout + res.stderr
    assert Case.open(case).verify().ok


def test_a_lied_restore_kept_as_unverified_does_not_stop_restoring_a_good_version(
        tmp_path: Path, bucket: str, proxy: FaultProxy, motoserver: Any) -> None:
    # the newest answer is a lie (kept as KEY.unverified); the responder restores an older
    # version, which verifies, into the same folder
    writer = motoserver.writer_client()
    versions = [v["VersionId"] for v in writer.list_object_versions(
        Bucket=bucket, Prefix=VICTIM)["Versions"] if v["Key"] == VICTIM]
    writer.put_object(Bucket=bucket, Key=VICTIM, Body=DATA[VICTIM][::-1],
                      ChecksumAlgorithm="SHA256")  # a newer version
    to = tmp_path / "r"
    proxy.rule = _on(VICTIM, _lie(bucket, "swap"))
    first = invoke("store", "restore", f"s3://{bucket}/{VICTIM}", "--to", str(to),
                   "--endpoint-url", proxy.endpoint_url)
    assert first.returncode == 1, first.stdout + first.stderr
    assert (to / "run" / "obj-1.bin.unverified").is_file()
    proxy.rule = lambda *_: "pass"
    again = invoke("store", "restore", f"s3://{bucket}/{VICTIM}", "--to", str(to),
                   "--version", versions[0], "--endpoint-url", proxy.endpoint_url)
    assert again.returncode == 0, again.stdout + again.stderr
    assert (to / "run" / "obj-1.bin").read_bytes() == DATA[VICTIM]
    assert (to / "run" / "obj-1.bin.restore.json").is_file()
    assert (to / "run" / "obj-1.bin.unverified.restore.json").is_file()
