"""LVM on a disk image, read without device-mapper: a partitioned disk whose PV (made by the real
lvm2 tools) holds an ext4 LV, an XFS LV with a real torch checkpoint, and a two-segment LV.

`mount --filesystem VG/LV` mounts one LV read-only; `locate` maps bad sectors of the *disk*
through the partition and the LV's extents to the file and the tensor. The LV offsets the test
expects come from lvm2's own reports (fixtures/storage.make_lvm_disk), not from the kit."""

from __future__ import annotations

import uuid

import pytest

from ckptrescue.errors import UsageError
from ckptrescue.storage import mounting
from ckptrescue.storage.locate import locate
from ckptrescue.storage.parsers import ddrescue_mapfile, lvm_metadata
from fixtures import storage as fx

pytestmark = [pytest.mark.privileged,
              pytest.mark.needs_tool("pvcreate", "mkfs.xfs", "mkfs.ext4", "filefrag")]

TARGET = "0.weight"


@pytest.fixture
def lvm_disk(shm_dir, tmp_path):
    pytest.importorskip("torch")
    vg = "ckr" + uuid.uuid4().hex[:8]
    img = shm_dir / "disk.img"
    lvs = fx.make_lvm_disk(img, vg)
    ckpt = fx.torch_checkpoint(tmp_path / "model.pt")
    exts = fx.put_files_at(img, *lvs["data"], "xfs", {"ckpt/step-200/model.pt": ckpt})
    fx.put_files_at(img, *lvs["scratch"], "ext4", {"notes.txt": b"scratch\n" * 1000})
    members = fx.zip_member_data_offsets(ckpt)
    data_off, size = next(v for k, v in members.items() if "/data/" in k and v[1] == 512 * 256 * 4)
    file_lo = data_off + (size // 2 // 512) * 512 - (data_off % 512)
    log, phys, _n = next(e for e in exts["ckpt/step-200/model.pt"]
                         if e[0] <= file_lo and file_lo + 1024 <= e[0] + e[2])
    dev_lo = lvs["data"][0] + phys + (file_lo - log)
    return img, vg, lvs, (file_lo, file_lo + 1024), (dev_lo, dev_lo + 1024)


def test_pv_metadata_read_without_lvm_matches_lvm2(lvm_disk):
    img, vg, lvs, _f, _d = lvm_disk
    with open(img, "rb") as fh:
        def read_at(off: int, n: int) -> bytes:
            fh.seek(2048 * 512 + off)
            return fh.read(n)

        pv = lvm_metadata.read_pv(read_at)
    assert pv.vg.name == vg and pv.pv_name == "pv0"
    by_name = {lv.name: lv for lv in pv.vg.lvs}
    assert sorted(by_name) == ["data", "frag", "scratch", "tail"]
    for name in ("scratch", "data", "tail"):
        (seg,) = by_name[name].segments
        assert (2048 * 512 + seg.pv_offset, seg.length) == lvs[name]
    assert len(by_name["frag"].segments) == 2


def test_mount_one_logical_volume_read_only(lvm_disk, case, tmp_path, no_leftovers):
    img, vg, _lvs, _f, _d = lvm_disk
    before = fx.sha256(img)
    with pytest.raises(UsageError, match=r"several filesystems.*--filesystem"):
        mounting.mount(img, tmp_path / "m0", case=case)
    res = mounting.mount(img, tmp_path / "mnt", case=case, select=f"{vg}/data")
    try:
        assert res.fstype == "xfs" and res.options.startswith("ro,norecovery")
        assert (tmp_path / "mnt/ckpt/step-200/model.pt").is_file()
        with pytest.raises(OSError):
            (tmp_path / "mnt/new").write_bytes(b"x")
    finally:
        mounting.umount(tmp_path / "mnt", case=case)
    assert fx.sha256(img) == before


def test_locate_maps_disk_sectors_through_the_lv_to_the_tensor(lvm_disk, case, tmp_path,
                                                                no_leftovers):
    img, _vg, lvs, (file_lo, file_hi), bad = lvm_disk
    in_scratch = (lvs["scratch"][0] + (8 << 20), lvs["scratch"][0] + (8 << 20) + 512)
    in_tail = (lvs["tail"][0] + 4096, lvs["tail"][0] + 8192)  # an LV without a filesystem
    mapfile = tmp_path / "disk.map"
    mapfile.write_text(ddrescue_mapfile.build_test_map(img.stat().st_size,
                                                       [in_scratch, bad, in_tail]))
    before = fx.sha256(img)
    loc = locate(mapfile, img, case=case)
    data = loc.to_json()
    assert [(r["start"], r["end"]) for r in data["ranges"]] == [in_scratch, bad, in_tail]
    assert data["ranges"][0]["files"] == []  # free space of the ext4 LV
    assert data["ranges"][2]["files"] == []
    by_start = {f.offset: f.code for f in loc.findings}
    assert by_start[in_scratch[0]] == "LC002"  # mapped: really free space
    assert by_start[in_tail[0]] == "LC005"  # not mapped: no verdict on its content
    (hit,) = data["ranges"][1]["files"]
    assert (hit["path"], hit["file_offset"], hit["length"]) == (
        "ckpt/step-200/model.pt", file_lo, file_hi - file_lo)
    assert hit["tensors"] == [TARGET]
    assert fx.sha256(img) == before
    from ckptrescue.storage.mount_state import held

    assert held(case) == {}


def test_cli_mount_and_fs_inspect_choose_a_logical_volume(lvm_disk, tmp_path, no_leftovers):
    import json
    import subprocess
    import sys
    from pathlib import Path

    cli = str(Path(sys.executable).with_name("ckptrescue"))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([cli, *args], capture_output=True, text=True, timeout=300)

    img, vg, _lvs, _f, _d = lvm_disk
    before = fx.sha256(img)
    case = tmp_path / "case"
    assert run("case", "new", str(case)).returncode == 0
    r = run("fs", "inspect", str(img), "--case", str(case))
    assert r.returncode == 2 and "--filesystem" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2
    r = run("fs", "inspect", str(img), "--filesystem", f"{vg}/scratch", "--case", str(case),
            "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["fstype"] == "ext4" and "E4004" in [f["code"] for f in data["findings"]]
    mnt = tmp_path / "mnt"
    r = run("mount", str(img), str(mnt), "--filesystem", f"{vg}/data", "--case", str(case))
    assert r.returncode == 0, r.stderr
    try:
        assert (mnt / "ckpt/step-200/model.pt").is_file()
    finally:
        assert run("umount", str(mnt), "--case", str(case)).returncode == 0
    assert fx.sha256(img) == before


def test_damaged_pv_metadata_is_detected_not_trusted(lvm_disk):
    img, vg, _lvs, _f, _d = lvm_disk
    with open(img, "rb") as fh:
        fh.seek(2048 * 512)
        head = bytearray(fh.read(1 << 20))
    text_at = head.rfind(f"{vg} {{".encode())
    assert text_at > 0
    head[text_at + 40] ^= 0x01  # one bit inside the current metadata text

    def read_at(off: int, n: int) -> bytes:
        return bytes(head[off:off + n])

    with pytest.raises(lvm_metadata.LvmError, match="checksum"):
        lvm_metadata.read_pv(read_at)


def test_segments_read_from_a_vm_made_pv_equal_lvms_own_device_mapper_table():
    """fixtures/transcripts/lvm/pv-head.bin.xz: the first MiB of a PV made and activated by
    LVM 2.03.16 in the lab VM; dm/dmsetup-table.txt: the tables LVM loaded for its LVs. The
    table the kit would load for a read-only assembly must be the same, line for line."""
    import lzma
    from pathlib import Path

    t = Path(__file__).resolve().parents[2] / "fixtures" / "transcripts"
    head = lzma.decompress((t / "lvm/pv-head.bin.xz").read_bytes())
    pv = lvm_metadata.read_pv(lambda off, n: head[off:off + n])
    assert pv.vg.name == "ckrvg"
    ours = sorted(f"{pv.vg.name}-{lv.name}: {s.lv_offset // 512} {s.length // 512} linear 7:1 "
                  f"{s.pv_offset // 512}" for lv in pv.vg.lvs for s in lv.segments)
    theirs = sorted(ln for ln in (t / "dm/dmsetup-table.txt").read_text().splitlines()
                    if ln.startswith("ckrvg-"))
    assert ours == theirs and len(theirs) == 3
