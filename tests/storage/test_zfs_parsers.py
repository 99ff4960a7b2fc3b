"""ZFS parsers against real outputs of OpenZFS 2.3.2 recorded in the lab VM
(fixtures/transcripts/zfs/, provenance in fixtures/transcripts/README.md): a damaged pool whose
file step-100.pt had three 128 KiB records overwritten on the vdev (bytes [5619712, 5750784),
[7716864, 7847936), [10072064, 10203136)), a degraded mirror, import scans."""

from __future__ import annotations

import json
from pathlib import Path

from ckptrescue.storage import fsinspect
from ckptrescue.storage.parsers import zfs_get, zpool_events, zpool_json, zpool_status

Z = Path(__file__).resolve().parents[2] / "fixtures" / "transcripts" / "zfs"
OVERWRITTEN = [(5619712, 5750784), (7716864, 7847936), (10072064, 10203136)]


def read(name: str) -> str:
    return (Z / name).read_text()


def test_damaged_pool_status_text_and_json_agree():
    (text,) = zpool_status.parse(read("damaged-status-vP.txt"))
    for name in ("damaged-status-j-vP.json", "damaged-status-j-json-int-vP.json"):
        (js,) = zpool_json.parse(read(name))
        assert (js.pool, js.state) == (text.pool, text.state) == ("tank", "ONLINE")
        assert js.error_files == text.error_files == ["/tank/ckpt/step-100.pt"]
        leaf = [v for v in js.vdevs if v.name == "/dev/loop0"]
        assert [(v.read, v.write, v.cksum) for v in leaf] == [(0, 0, 6)]
        assert js.data_errors == 3  # error_count: three damaged records
        assert "SCRUB" in js.scan and "errors=3" in js.scan
    codes = sorted(f.code for f in fsinspect.zfs_findings([text], "tank"))
    assert codes == ["ZF002", "ZF003"]


def test_degraded_mirror_text_and_json():
    (text,) = zpool_status.parse(read("mirror-status-vP.txt"))
    (js,) = zpool_json.parse(read("mirror-status-j-vP.json"))
    missing = "5168654097773070576"
    for p, word in ((text, "UNAVAIL"), (js, "CANT_OPEN")):  # JSON gives the vdev state's name
        assert p.state == "DEGRADED"
        (v,) = [v for v in p.vdevs if v.name == missing]
        assert (v.state, v.message) == (word, "was /tmp/mir/b.img")
        assert p.error_files == []
    assert [f.code for f in fsinspect.zfs_findings([js], "tank")] == ["ZF001"]


def test_clean_pool_has_no_findings_in_either_form():
    (text,) = zpool_status.parse(read("clean-status-vP.txt"))
    (js,) = zpool_json.parse(read("clean-status-j-json-int-vP.json"))
    assert fsinspect.zfs_findings([text], "t") == fsinspect.zfs_findings([js], "t") == []
    assert text.data_errors == 0


def test_events_give_the_overwritten_device_bytes_and_the_file_blocks():
    events = zpool_events.parse(read("damaged-events-v.txt"))
    assert len(events) == read("damaged-events.txt").count("\n") - 1  # one per line, minus header
    checksum = [e for e in events if e.cls == "ereport.fs.zfs.checksum"]
    assert checksum and all(e.is_error for e in checksum)
    for e in checksum:
        start, end = e.device_range()
        assert any(lo <= start and end <= hi for lo, hi in OVERWRITTEN), (start, end)
        assert e.get("vdev_path") == "/dev/loop0" and e.get("zio_object") == 2
        assert e.get("detector")["scheme"] == "zfs"  # embedded nvlist
        assert e.get("zio_priority") == 4  # "0x4 [SCRUB]"
    # level-0 block ids x recordsize (128 KiB) are the overwritten file offsets
    assert sorted({e.get("zio_blkid") * 0x20000 for e in checksum}) == [
        0x100000, 0x300000, 0x500000]
    guid = str(checksum[0].get("pool_guid"))
    (f,) = fsinspect.event_findings(events, guid, "tank")
    assert f.code == "ZF004"
    assert sorted((r["start"], r["end"]) for r in f.details["device_ranges"]) == [
        (lo, lo + 0x20000) for lo, _hi in OVERWRITTEN]
    assert fsinspect.event_findings(events, "12345", "tank") == []  # another pool's events


def test_clean_event_log_has_no_error_events():
    events = zpool_events.parse(read("clean-events-v.txt"))
    assert events and not [e for e in events if e.is_error]


def test_zfs_get_properties():
    props = zfs_get.parse(read("clean-zfs-get.txt"))
    assert props["tank/ckpt"]["compression"].value == "lz4"
    assert props["tank/ckpt"]["compression"].source == "local"
    assert props["tank"]["recordsize"].value == "131072"
    assert props["tank"]["checksum"].value == "on"


def test_import_scans_parse_like_status():
    (p,) = zpool_status.parse(read("import-notexported-otherhost-scan.txt"))
    assert (p.pool, p.state) == ("live", "ONLINE")
    assert "last accessed by another system" in p.status
    assert "'-f' flag" in p.action
    (q,) = zpool_status.parse(read("import-notexported-samehost-scan.txt"))
    assert q.pool == "live" and q.status == ""


def test_json_status_rejects_other_json():
    import pytest

    with pytest.raises(ValueError):
        zpool_json.parse(json.dumps({"not": "zpool"}))
