"""A lying or failing server: moto over real HTTP behind a fault-injecting proxy on 127.0.0.1
(``faultproxy.py``). Counts say what happened ("0 of 3 preserved, 3 failed: HTTP 500", in the
log too); store preserve and s3 preserve resume without fetching or inventorying anything
twice; a connection reset in the middle of a body is resumed (bounded) and reported by store
verify, store preserve and manifest audit of an S3 prefix."""

from __future__ import annotations

import hashlib
import json
from itertools import count
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import invoke
from faultproxy import FaultProxy, versioned_bucket

from ckptrescue.record.case import Case

_n = count()
DATA = {f"run/obj-{i}.bin": bytes((i * 7 + j) % 251 for j in range(200_000 + 1000 * i))
        for i in range(3)}


@pytest.fixture
def bucket(motoserver: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    return versioned_bucket(motoserver, f"faults-{next(_n)}", DATA)


def _object_gets(proxy: FaultProxy) -> int:
    return sum(proxy.gets.values())


def test_store_preserve_all_500_says_none_preserved_and_the_log_agrees(
        tmp_path: Path, bucket: str, proxy: FaultProxy) -> None:
    proxy.rule = lambda *_: "500"
    case = tmp_path / "case"
    Case.create(case)
    res = invoke("store", "preserve", f"s3://{bucket}/run/", "--dest", str(tmp_path / "d"),
                 "--case", str(case), "--endpoint-url", proxy.endpoint_url)
    assert res.returncode == 1, res.stderr
    assert "0 of 3 preserved, 3 failed: HTTP 500" in res.stdout
    assert "preserved into" not in res.stdout.replace("0 of 3 preserved", "")
    [record] = [r["details"] for r in Case.open(case).records("store.preserved")]
    assert record["summary"] == "0 of 3 preserved, 3 failed: HTTP 500"
    finished = [r["details"] for r in Case.open(case).records("step.finished")]
    assert finished[-1]["summary"].startswith("0 of 3 preserved, 3 failed: HTTP 500")


def test_store_preserve_resumes_fetching_only_what_is_missing(
        tmp_path: Path, bucket: str, proxy: FaultProxy) -> None:
    dest = tmp_path / "d"
    proxy.rule = lambda _m, path, _h, _n: "500" if path.split("?")[0].endswith("obj-1.bin") \
        else "pass"
    first = invoke("store", "preserve", f"s3://{bucket}/run/", "--dest", str(dest),
                   "--endpoint-url", proxy.endpoint_url)
    assert "2 of 3 preserved, 1 failed: HTTP 500" in first.stdout, first.stdout + first.stderr
    proxy.rule = lambda *_: "pass"
    before = _object_gets(proxy)
    again = invoke("store", "preserve", f"s3://{bucket}/run/", "--dest", str(dest),
                   "--endpoint-url", proxy.endpoint_url)
    assert again.returncode == 0, again.stderr
    assert "3 of 3 preserved (2 already by an earlier run)" in again.stdout
    assert _object_gets(proxy) - before == 1  # only the one that failed was fetched again
    for key, data in DATA.items():
        assert (dest / "layout" / key).read_bytes() == data
    blobs = [p for p in (dest / "objects" / "sha256").rglob("*") if p.is_file()]
    assert len(blobs) == 3
    inventory = json.loads((dest / "inventory.json").read_text())
    assert sorted(o["key"] for o in inventory["objects"]) == sorted(DATA)
    third = invoke("store", "preserve", f"s3://{bucket}/run/", "--dest", str(dest),
                   "--endpoint-url", proxy.endpoint_url)
    assert "3 of 3 preserved (3 already by an earlier run)" in third.stdout
    other = invoke("store", "preserve", f"s3://{bucket}/", "--dest", str(dest),
                   "--endpoint-url", proxy.endpoint_url)
    assert other.returncode == 3 and "earlier preserve" in other.stderr


def test_s3_preserve_resumes_and_inventories_nothing_twice(
        tmp_path: Path, bucket: str, proxy: FaultProxy) -> None:
    case = tmp_path / "case"
    proxy.rule = lambda _m, path, _h, _n: "500" if path.split("?")[0].endswith("obj-2.bin") \
        else "pass"
    first = invoke("s3", "preserve", f"s3://{bucket}/run/", "--case", str(case),
                   "--endpoint-url", proxy.endpoint_url)
    assert first.returncode == 1
    assert "2 of 3 preserved, 1 failed: HTTP 500" in first.stdout
    proxy.rule = lambda *_: "pass"
    before = _object_gets(proxy)
    again = invoke("s3", "preserve", f"s3://{bucket}/run/", "--case", str(case),
                   "--endpoint-url", proxy.endpoint_url)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "3 of 3 preserved (2 already by an earlier run)" in again.stdout
    assert _object_gets(proxy) - before == 1
    items = Case.open(case).evidence()
    assert sorted(i.source for i in items) == sorted(f"s3://{bucket}/{k}" for k in DATA)
    assert [i.id for i in items] == ["E001", "E002", "E003"]
    assert {i.sha256 for i in items} == {hashlib.sha256(d).hexdigest() for d in DATA.values()}
    assert Case.open(case).verify().ok


def _reset_first(_m: str, _p: str, headers: dict[str, str], nth: int) -> str:
    return "reset" if nth == 1 and "Range" not in headers else "pass"


def test_mid_body_reset_is_resumed_and_reported(tmp_path: Path, bucket: str,
                                                proxy: FaultProxy) -> None:
    proxy.rule = _reset_first
    verify = invoke("store", "verify", f"s3://{bucket}/run/", "--json", "--endpoint-url",
                    proxy.endpoint_url)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "reset" in verify.stdout  # reported, not hidden
    proxy.gets.clear()
    dest = tmp_path / "d"
    kept = invoke("store", "preserve", f"s3://{bucket}/run/", "--dest", str(dest), "--json",
                  "--endpoint-url", proxy.endpoint_url)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    objects = json.loads(kept.stdout)["objects"]
    assert {o["status"] for o in objects} == {"match"}
    assert all(o["detail"].get("resets") for o in objects)
    for key, data in DATA.items():
        assert (dest / "layout" / key).read_bytes() == data


def test_a_reset_that_never_stops_is_a_bounded_failure(tmp_path: Path, bucket: str,
                                                       proxy: FaultProxy) -> None:
    proxy.rule = lambda *_: "reset"
    res = invoke("store", "preserve", f"s3://{bucket}/run/", "--dest", str(tmp_path / "d"),
                 "--endpoint-url", proxy.endpoint_url)
    assert res.returncode == 1
    assert "0 of 3 preserved, 3 failed: connection reset mid-body" in res.stdout
    assert max(proxy.gets.values()) <= 4 * 3  # bounded: a few resumptions, each retried


def test_manifest_audit_of_a_prefix_survives_a_mid_body_reset(
        tmp_path: Path, bucket: str, proxy: FaultProxy) -> None:
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_text("".join(f"{hashlib.sha256(d).hexdigest()}  {k[len('run/'):]}\n"
                                for k, d in sorted(DATA.items())))
    proxy.rule = _reset_first
    res = invoke("manifest", "audit", f"s3://{bucket}/run/", str(manifest), "--json",
                 "--endpoint-url", proxy.endpoint_url)
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["counts"]["ok"] == 3


@pytest.mark.privileged
def test_no_space_left_names_the_path_and_what_was_being_written(
        tmp_path: Path, bucket: str, proxy: FaultProxy) -> None:
    from fixtures.storage import small_tmpfs

    with small_tmpfs("448k") as mnt:
        dest = mnt / "d"
        res = invoke("store", "preserve", f"s3://{bucket}/run/", "--dest", str(dest),
                     "--endpoint-url", proxy.endpoint_url)
        assert res.returncode == 4, res.stdout + res.stderr
        first = res.stderr.splitlines()[0]
        assert "No space left on device" in first and str(dest) in first
        assert "while" in first and "Traceback" not in res.stderr
        kept = list((dest / "layout").rglob("*.bin"))
        assert kept and all(p.read_bytes() == DATA[f"run/{p.name}"] for p in kept)
    with small_tmpfs("448k") as mnt:
        case = mnt / "case"
        Case.create(case)
        res = invoke("s3", "preserve", f"s3://{bucket}/run/", "--case", str(case),
                     "--endpoint-url", proxy.endpoint_url)
        assert res.returncode == 4, res.stdout + res.stderr
        [first] = [x for x in res.stderr.splitlines() if x.startswith("ckptrescue: error:")]
        assert "No space left on device" in first and str(case) in first
        assert "preserved before it" in first and "Traceback" not in res.stderr
        assert Case.open(case).verify().ok


@pytest.mark.privileged
def test_a_restore_onto_a_full_disk_leaves_no_partial_to_block_the_rerun(
        tmp_path: Path, bucket: str, motoserver: Any) -> None:
    import os

    from fixtures.storage import small_tmpfs

    with small_tmpfs("448k") as mnt:
        st = os.statvfs(mnt)
        with open(mnt / "filler", "wb", buffering=0) as fh:  # 64 KiB left: the object is 203 KB
            fh.write(b"\0" * (st.f_bavail * st.f_frsize - (64 << 10)))
        to = mnt / "r"
        argv = ("store", "restore", f"s3://{bucket}/run/obj-2.bin", "--to", str(to),
                "--endpoint-url", motoserver.endpoint_url)
        res = invoke(*argv)
        assert res.returncode == 4, res.stdout + res.stderr
        [line] = [x for x in res.stderr.splitlines() if x.startswith("ckptrescue: error:")]
        assert line.startswith(f"ckptrescue: error: {to}/run/obj-2.bin.") and \
            ".partial: No space left on device while writing" in line, line
        assert "Traceback" not in res.stderr
        assert [p for p in to.rglob("*") if p.is_file()] == []
        (mnt / "filler").unlink()
        res = invoke(*argv)
        assert res.returncode == 0, res.stdout + res.stderr
        assert (to / "run" / "obj-2.bin").read_bytes() == DATA["run/obj-2.bin"]
        assert (to / "run" / "obj-2.bin.restore.json").is_file()
