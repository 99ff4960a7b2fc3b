"""image -> locate end to end: bad sectors simulated inside one known tensor's bytes of a real
torch.save() checkpoint on XFS and ext4; locate must name that file and that tensor and no other.

The bad device bytes are computed independently of the kit: the tensor's data offset from the
zip local header (zipfile + struct) and the file's physical extents from `filefrag -e -b1`.
"""

from __future__ import annotations

import pytest

from ckptrescue.storage import locate_offline
from ckptrescue.storage.imaging import image
from ckptrescue.storage.locate import locate
from ckptrescue.storage.parsers import ddrescue_mapfile
from fixtures import storage as fx
from fixtures.det import det_bytes

pytestmark = [pytest.mark.privileged, pytest.mark.needs_tool("ddrescue", "mkfs.xfs", "filefrag")]

TARGET = "0.weight"  # Linear(256, 512).weight: the only 524288-byte storage


def _build(shm_dir, tmp_path, fstype, fs_size=None):
    pytest.importorskip("torch")
    ckpt = fx.torch_checkpoint(tmp_path / "model.pt")
    members = fx.zip_member_data_offsets(ckpt)
    data_off, size = next(v for k, v in members.items() if "/data/" in k and v[1] == 512 * 256 * 4)
    img = fx.make_fs(shm_dir / f"{fstype}.img", fstype, size=fs_size)
    fx.put_files(img, fstype, {"run/step-100/model.pt": ckpt,
                               "run/other.bin": det_bytes(2 << 20, 1)})
    # two 512-byte sectors in the middle of the target tensor's bytes
    file_lo = data_off + (size // 2 // 512) * 512 - (data_off % 512)
    file_hi = file_lo + 1024
    exts = fx.fiemap_physical(img, fstype, "run/step-100/model.pt")
    log, phys, _length = next(e for e in exts if e[0] <= file_lo and file_hi <= e[0] + e[2])
    dev_lo = phys + (file_lo - log)
    assert dev_lo % 512 == 0
    return img, (file_lo, file_hi), (dev_lo, dev_lo + 1024)


@pytest.mark.parametrize("fstype", ["xfs", "ext4"])
def test_bad_sectors_in_one_tensor_are_located(fstype, case, shm_dir, tmp_path, no_leftovers):
    img, (file_lo, file_hi), bad = _build(shm_dir, tmp_path, fstype)
    size = img.stat().st_size
    free_space = (size - (1 << 20), size - (1 << 20) + 4096)  # unused tail of the filesystem
    test_map = tmp_path / "test.map"
    test_map.write_text(ddrescue_mapfile.build_test_map(size, [bad, free_space]))
    before = fx.sha256(img)

    with fx.loop(img) as dev:
        res = image(dev, case=case, dest=tmp_path / "out", retries=1, simulate_bad_map=test_map)
    assert res.bad_ranges == [bad, free_space]

    loc = locate(res.mapfile, res.image, case=case)
    data = loc.to_json()
    assert [(r["start"], r["end"]) for r in data["ranges"]] == [bad, free_space]
    hit = data["ranges"][0]["files"]
    assert [(f["path"], f["file_offset"], f["length"]) for f in hit] == [
        ("run/step-100/model.pt", file_lo, file_hi - file_lo)]
    assert data["ranges"][1]["files"] == []
    codes = sorted(f.code for f in loc.findings)
    assert codes == ["LC001", "LC002"]
    assert fx.sha256(img) == before
    assert hit[0]["tensors"] == [TARGET]


@pytest.mark.parametrize("fstype", ["xfs", "ext4"])
def test_offline_fallback_agrees_with_fiemap(fstype, case, shm_dir, tmp_path, no_leftovers):
    img, (file_lo, file_hi), bad = _build(shm_dir, tmp_path, fstype)
    before = fx.sha256(img)
    res = locate_offline.locate_unmounted(case, img, [bad])
    assert res.method == ("xfs_db" if fstype == "xfs" else "debugfs")
    files = [(f.path, f.file_offset, f.length) for f in res.ranges[0].files]
    assert files == [("run/step-100/model.pt", file_lo, file_hi - file_lo)]
    assert fx.sha256(img) == before


def test_partitioned_image_subtracts_the_partition_start(case, shm_dir, tmp_path, no_leftovers):
    img = fx.make_partitioned_ext4(shm_dir / "disk.img")
    data = det_bytes(1 << 20, 2)
    fx.put_files_partition(img, {"ckpt/model.bin": data})
    # filefrag on the mounted partition: physical offsets inside the partition
    line = next(ln for ln in (shm_dir / "disk.img.filefrag").read_text().splitlines()
                if ln.strip().startswith("0:"))
    fs_phys = int(line.split(":")[2].split("..")[0].strip())
    part_start = 2048 * 512
    dev_bad = (part_start + fs_phys + 65536, part_start + fs_phys + 65536 + 512)
    mapfile = tmp_path / "rescue.map"
    size = img.stat().st_size
    mapfile.write_text(ddrescue_mapfile.build_test_map(size, [dev_bad]))
    before = fx.sha256(img)
    loc = locate(mapfile, img, case=case)
    assert loc.partition_start == part_start
    assert [(f.path, f.file_offset, f.length) for f in loc.ranges[0].files] == [
        ("ckpt/model.bin", 65536, 512)]
    assert fx.sha256(img) == before


def test_unmountable_ext4_falls_back_to_debugfs_on_a_backup_superblock(case, shm_dir, tmp_path,
                                                                       no_leftovers):
    """The primary superblock sector is unreadable, so the rescued image neither identifies nor
    mounts; locate still names the file (debugfs on the first backup superblock) and, from a
    copy rebuilt from the file's extents, the tensor."""
    img, (file_lo, file_hi), bad = _build(shm_dir, tmp_path, "ext4", fs_size=256 << 20)
    superblock = (1024, 2048)
    test_map = tmp_path / "t.map"
    test_map.write_text(ddrescue_mapfile.build_test_map(img.stat().st_size, [superblock, bad]))
    before = fx.sha256(img)
    with fx.loop(img) as dev:
        res = image(dev, case=case, dest=tmp_path / "out", retries=0, simulate_bad_map=test_map)
    loc = locate(res.mapfile, res.image, case=case)
    assert loc.method.startswith("debugfs (backup superblock 32768")
    assert loc.ranges[0].files == []  # the superblock itself is no file's data
    hits = loc.ranges[1].files
    assert [(f.path, f.file_offset, f.length) for f in hits] == [
        ("run/step-100/model.pt", file_lo, file_hi - file_lo)]
    assert fx.sha256(img) == before
    assert hits[0].tensors == [TARGET]


def test_reflinked_clone_is_reported_for_both_owners(case, shm_dir, tmp_path, no_leftovers):
    img = fx.make_fs(shm_dir / "r.img", "xfs")
    with fx.rw_mounted(img, "xfs") as mnt:
        (mnt / "a.bin").write_bytes(det_bytes(1 << 20, 3))
        import subprocess

        subprocess.run(["cp", "--reflink=always", str(mnt / "a.bin"), str(mnt / "b.bin")],
                       check=True)
    log, phys, _n = fx.fiemap_physical(img, "xfs", "a.bin")[0]
    bad = (phys + 4096, phys + 8192)
    mapfile = tmp_path / "m.map"
    mapfile.write_text(ddrescue_mapfile.build_test_map(img.stat().st_size, [bad]))
    loc = locate(mapfile, img, case=case)
    files = [(f.path, f.file_offset, f.shared) for f in loc.ranges[0].files]
    assert files == [("a.bin", log + 4096, True), ("b.bin", log + 4096, True)]
    assert sorted(f.code for f in loc.findings) == ["LC003", "LC003"]


def test_locate_on_a_kit_mount_takes_the_partition_start_from_the_mount(case, shm_dir, tmp_path,
                                                                        no_leftovers):
    from ckptrescue.storage.mounting import mounted

    img = fx.make_partitioned_ext4(shm_dir / "disk.img")
    fx.put_files_partition(img, {"f.bin": det_bytes(1 << 20, 4)})
    line = next(ln for ln in (shm_dir / "disk.img.filefrag").read_text().splitlines()
                if ln.strip().startswith("0:"))
    fs_phys = int(line.split(":")[2].split("..")[0].strip())
    bad = (2048 * 512 + fs_phys, 2048 * 512 + fs_phys + 512)
    mapfile = tmp_path / "m.map"
    mapfile.write_text(ddrescue_mapfile.build_test_map(img.stat().st_size, [bad]))
    with mounted(img, tmp_path / "mnt", case=case) as m:
        assert m.partition_start == 2048 * 512
        loc = locate(mapfile, img, case=case, mountpoint=m.mountpoint)
    assert [(f.path, f.file_offset) for f in loc.ranges[0].files] == [("f.bin", 0)]


def test_a_mapfile_larger_than_the_image_is_flagged(case, shm_dir, tmp_path, no_leftovers):
    """A mapfile of another (larger) device must not read as an all-clear."""
    img = fx.make_fs(shm_dir / "small.img", "ext4", size=16 << 20)
    before = fx.sha256(img)
    size = img.stat().st_size
    past_end = (size + (1 << 20), size + (1 << 20) + 4096)
    big_map = tmp_path / "big.map"
    big_map.write_text(ddrescue_mapfile.build_test_map(size + (8 << 20), [past_end]))
    loc = locate(big_map, img, case=case)
    assert "LC004" in {f.code for f in loc.findings}
    assert any("past its end" in n for n in loc.notes)
    assert fx.sha256(img) == before


def test_two_partitions_one_unmountable_falls_back_to_xfs_db_for_it(case, shm_dir, tmp_path,
                                                                     no_leftovers):
    """A disk with an ext4 partition and an XFS partition whose filesystem is larger than the
    partition table says (a damaged table): the XFS one does not mount, so its range is mapped
    with xfs_db; the ext4 one is mapped through its mount."""
    import struct

    img = shm_dir / "disk.img"
    size = 448 << 20
    p1, n1 = 2048, 65536
    p2 = p1 + n1
    n2 = (size // 512) - p2 - 8192  # the table ends 4 MiB before the filesystem does
    with open(img, "wb") as fh:
        fh.truncate(size)
    with open(img, "r+b") as fh:
        for i, (start, n, kind) in enumerate([(p1, n1, 0x83), (p2, n2, 0x83)]):
            fh.seek(446 + 16 * i)
            fh.write(struct.pack("<B3sB3sII", 0, b"\xfe\xff\xff", kind, b"\xfe\xff\xff",
                                 start, n))
        fh.seek(510)
        fh.write(b"\x55\xaa")
    with fx.part_loop(img, p1 * 512, n1 * 512) as dev:
        fx.sh("mkfs.ext4", "-q", "-F", "-b", "4096", dev)
    xfs_size = size - p2 * 512
    with fx.part_loop(img, p2 * 512, xfs_size) as dev:
        fx.sh("mkfs.xfs", "-q", "-f", dev)
    ext_ex = fx.put_files_at(img, p1 * 512, n1 * 512, "ext4", {"a/one.bin": det_bytes(1 << 20, 5)})
    xfs_ex = fx.put_files_at(img, p2 * 512, xfs_size, "xfs", {"b/two.bin": det_bytes(1 << 20, 6)})
    bad1 = p1 * 512 + ext_ex["a/one.bin"][0][1] + 4096
    bad2 = p2 * 512 + xfs_ex["b/two.bin"][0][1] + 8192
    mapfile = tmp_path / "d.map"
    mapfile.write_text(ddrescue_mapfile.build_test_map(size, [(bad1, bad1 + 512),
                                                              (bad2, bad2 + 512)]))
    before = fx.sha256(img)
    loc = locate(mapfile, img, case=case)
    got = [[(f.path, f.file_offset, f.length) for f in r.files] for r in loc.ranges]
    assert got == [[("a/one.bin", 4096, 512)], [("b/two.bin", 8192, 512)]]
    assert any("used xfs_db" in n for n in loc.notes)
    assert fx.sha256(img) == before
