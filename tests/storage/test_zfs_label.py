"""ZFS members read without ZFS: labels (XDR nvlist), their SHA-256 checksums and the uberblock
ring, on real 64 MiB pool images made by OpenZFS 2.3.2 in the lab VM
(fixtures/transcripts/zfs/images/: one exported, one copied while imported), checked against
what `zdb -l` / `zdb -lu` printed for the same images. Then the kit on them here, where the ZFS
kernel module is absent: fs inspect reports the labels, mount fails in one line, evidence
unchanged, nothing left attached."""

from __future__ import annotations

import lzma
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ckptrescue.storage.parsers import zfs_label
from fixtures import storage as fx

IMAGES = Path(__file__).resolve().parents[2] / "fixtures" / "transcripts" / "zfs" / "images"


def _image(tmp_path: Path, name: str) -> Path:
    out = tmp_path / name.removesuffix(".xz")
    out.write_bytes(lzma.decompress((IMAGES / name).read_bytes()))
    return out


def _zdb(name: str) -> dict[str, str]:
    """Top-level `key: value` lines of LABEL 0 in a recorded `zdb -l`."""
    out: dict[str, str] = {}
    for line in (IMAGES / name).read_text().splitlines():
        m = re.match(r"^    (\w+): (.*)$", line)
        if m and m.group(1) not in out:
            out[m.group(1)] = m.group(2).strip("'")
    return out


def _read(path: Path) -> zfs_label.MemberReport:
    with open(path, "rb") as fh:
        def read_at(off: int, n: int) -> bytes:
            fh.seek(off)
            return fh.read(n)

        return zfs_label.read_member(read_at, path.stat().st_size)


@pytest.mark.parametrize(("image", "zdb", "state"), [
    ("small-exported.img.xz", "small-zdb-l.txt", "EXPORTED"),
    ("small-active.img.xz", "small-active-zdb-l.txt", "ACTIVE"),
])
def test_labels_match_zdb(tmp_path, image, zdb, state):
    rep = _read(_image(tmp_path, image))
    want = _zdb(zdb)
    s = rep.summary()
    assert s["labels_valid"] == [0, 1, 2, 3]
    assert s["labels_checksum_ok"] == {0: True, 1: True, 2: True, 3: True}
    assert s["state"] == state and int(want["state"]) == {"ACTIVE": 0, "EXPORTED": 1}[state]
    assert s["pool"] == want["name"] == "small"
    for key in ("txg", "pool_guid", "hostid", "version", "vdev_children"):
        assert s[key] == int(want[key]), key
    assert s["hostname"] == want["hostname"]
    assert s["top_vdev"]["type"] == "disk" and s["top_vdev"]["ashift"] == 12
    assert "com.delphix:hole_birth" in s["features_for_read"]


def test_active_uberblock_matches_zdb_lu(tmp_path):
    rep = _read(_image(tmp_path, "small-exported.img.xz"))
    text = (IMAGES / "small-zdb-lu.txt").read_text()
    blocks = [(int(re.search(r"^\ttxg = (\d+)$", b, re.M).group(1)),
               int(re.search(r"^\ttimestamp = (\d+)", b, re.M).group(1)))
              for b in text.split("Uberblock[")[1:]]
    assert len(blocks) >= 2
    best_txg, best_ts = max(blocks)
    ub = rep.active_uberblock
    assert ub is not None and (ub.txg, ub.timestamp) == (best_txg, best_ts)
    assert all(u.checksum_ok for lb in rep.labels for u in lb.uberblocks)


def test_damaged_front_label_is_distrusted_not_believed(tmp_path):
    img = _image(tmp_path, "small-exported.img.xz")
    with open(img, "r+b") as fh:  # one byte inside label 0's nvlist
        fh.seek(zfs_label.NVLIST_OFFSET + 200)
        b = fh.read(1)
        fh.seek(zfs_label.NVLIST_OFFSET + 200)
        fh.write(bytes([b[0] ^ 0xFF]))
    s = _read(img).summary()
    assert s["labels_valid"] == [1, 2, 3] and s["labels_checksum_ok"][0] is False
    assert "checksum" in s["labels_invalid"][0]
    assert s["pool"] == "small"  # the other three still name the pool


def test_nvlist_rejects_garbage():
    with pytest.raises(zfs_label.NvlistError):
        zfs_label.unpack_nvlist(b"\x01\x01\x00\x00" + b"\xff" * 64)
    with pytest.raises(zfs_label.NvlistError):
        zfs_label.unpack_nvlist(b"\x00" * 64)


@pytest.mark.privileged
def test_kit_on_a_zfs_member_without_the_zfs_module(tmp_path, no_leftovers):
    if Path("/dev/zfs").exists():
        pytest.skip("this machine has the ZFS module: the import path is exercised in the lab VM")
    img = _image(tmp_path, "small-active.img.xz")
    before = fx.sha256(img)
    cli = str(Path(sys.executable).with_name("ckptrescue"))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([cli, *args], capture_output=True, text=True, timeout=300)

    case = tmp_path / "case"
    assert run("case", "new", str(case)).returncode == 0
    r = run("fs", "inspect", str(img), "--case", str(case), "--json")
    import json

    data = json.loads(r.stdout)
    assert data["fstype"] == "zfs_member"
    assert data["facts"]["label"]["pool"] == "small"
    assert data["facts"]["label"]["state"] == "ACTIVE"
    assert data["facts"]["zfs_tools"]  # says why the live checks were skipped
    assert [f["code"] for f in data["findings"]] == ["ZF006"]
    r = run("mount", str(img), str(tmp_path / "mnt"), "--case", str(case))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "ZFS" in r.stderr.splitlines()[0] or "zpool" in r.stderr.splitlines()[0]
    # another member given: attached read-only, then released again when the import fails
    other = tmp_path / "other.img"
    other.write_bytes(img.read_bytes())
    r = run("mount", str(img), str(tmp_path / "mnt2"), "--member", str(other), "--case",
            str(case))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    # --member on a filesystem that is not ZFS: refused in one line
    ext = fx.make_fs(tmp_path / "e.img", "ext4")
    r = run("mount", str(ext), str(tmp_path / "mnt3"), "--member", str(other), "--case",
            str(case))
    assert r.returncode == 2 and "not a ZFS member" in r.stderr
    # locate needs the import (ZFS itself maps bad bytes to files): a clear one-line failure
    from ckptrescue.storage.parsers import ddrescue_mapfile

    mapfile = tmp_path / "m.map"
    mapfile.write_text(ddrescue_mapfile.build_test_map(img.stat().st_size, [(8 << 20,
                                                                             (8 << 20) + 512)]))
    r = run("locate", "--case", str(case), str(mapfile), str(img))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "ZFS" in r.stderr.splitlines()[0] or "zpool" in r.stderr.splitlines()[0]
    assert fx.sha256(img) == before == fx.sha256(other)
