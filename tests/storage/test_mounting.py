"""`mount`/`umount` on real loop devices: a dirty XFS log and a needs_recovery ext4 stay
unchanged; the negative control shows that a plain `ro` mount on a writable loop changes them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ckptrescue.engine.action import ActionResult, from_library
from ckptrescue.engine.executor import record
from ckptrescue.errors import UsageError
from ckptrescue.storage import sysfs
from ckptrescue.storage.mounting import mount, mounted, umount, unmounted_record
from fixtures import storage as fx

pytestmark = [pytest.mark.privileged, pytest.mark.needs_tool("mkfs.xfs", "xfs_io")]


@pytest.fixture
def dirty_xfs(shm_dir):
    img = fx.make_fs(shm_dir / "dirty.img", "xfs")
    fx.put_files(img, "xfs", {"ckpt/model.pt": b"x" * 100_000})
    fx.make_dirty(img, "xfs")
    assert "<DIRTY>" in fx.sh("xfs_logprint", "-t", str(img), check=False).stdout
    return img


@pytest.fixture
def dirty_ext4(shm_dir):
    img = fx.make_fs(shm_dir / "dirty-ext4.img", "ext4")
    fx.put_files(img, "ext4", {"ckpt/model.pt": b"y" * 100_000})
    fx.make_dirty(img, "ext4")
    assert "needs_recovery" in fx.sh("dumpe2fs", "-h", str(img)).stdout
    return img


@pytest.mark.parametrize("fixture", ["dirty_xfs", "dirty_ext4"])
def test_mount_umount_leaves_dirty_filesystem_unchanged(request, fixture, case, tmp_path,
                                                        no_leftovers):
    img = request.getfixturevalue(fixture)
    before = fx.sha256(img)
    mp = tmp_path / "mnt"
    res = mount(img, mp, case=case)
    record(case, from_library(res))  # the engine's one writer records it
    try:
        assert res.fstype in {"xfs", "ext4"}
        assert res.options == ("ro,norecovery" if res.fstype == "xfs" else "ro,noload") \
            + ",nosuid,nodev,noexec"
        assert res.loop_device and sysfs.is_readonly(Path(res.loop_device).name)
        assert (mp / "ckpt" / "model.pt").exists()
        # block-level protection: writing the device fails
        with pytest.raises(PermissionError), open(res.loop_device, "r+b") as fh:
            fh.write(b"\0")
        entry = next(m for m in sysfs.mounts() if m.mountpoint == str(mp))
        assert entry.readonly
        assert {"norecovery"} & set(entry.super_options + entry.options)
    finally:
        released = umount(mp, case=case)
        record(case, ActionResult(audit=[unmounted_record(mp, released)]))
    assert fx.sha256(img) == before
    # umount detached exactly the loop device it attached
    assert sysfs.loop_backing_file(Path(res.loop_device).name) != str(img)
    actions = [r["action"] for r in case.audit.records()]
    assert "storage.mounted" in actions and "storage.unmounted" in actions


@pytest.mark.parametrize("fixture", ["dirty_xfs", "dirty_ext4"])
def test_negative_control_plain_ro_on_writable_loop_changes_the_image(request, fixture,
                                                                      shm_dir, tmp_path):
    """What the kit prevents: a plain `-o ro` mount on a writable loop replays the journal."""
    img = request.getfixturevalue(fixture)
    copy = shm_dir / "copy.img"
    shutil.copyfile(img, copy)
    before = fx.sha256(copy)
    mp = tmp_path / "plain"
    mp.mkdir()
    fstype = "xfs" if fixture == "dirty_xfs" else "ext4"
    with fx.loop(copy, read_only=False) as dev:
        subprocess.run(["mount", "-t", fstype, "-o", "ro", dev, str(mp)], check=True)
        subprocess.run(["umount", str(mp)], check=True)
    assert fx.sha256(copy) != before


def test_umount_refuses_what_the_case_did_not_mount(case, tmp_path):
    with pytest.raises(UsageError, match="no mount recorded"):
        umount(tmp_path, case=case)


def test_xfs_clone_of_a_mounted_filesystem_gets_nouuid(case, shm_dir, tmp_path, no_leftovers):
    img = fx.make_fs(shm_dir / "a.img", "xfs")
    clone = shm_dir / "b.img"
    shutil.copyfile(img, clone)
    with mounted(img, tmp_path / "a", case=case), \
            mounted(clone, tmp_path / "b", case=case) as second:
        assert "nouuid" in second.options
        assert "MT002" in [f.code for f in second.findings]


def test_umount_detaches_only_what_mount_attached(dirty_xfs, case, tmp_path, no_leftovers):
    """Another loop device over the same image (not the kit's) survives the kit's umount."""
    with fx.loop(dirty_xfs) as other:
        res = mount(dirty_xfs, tmp_path / "m", case=case)
        try:
            assert res.loop_device != other
        finally:
            umount(tmp_path / "m", case=case)
        assert sysfs.loop_backing_file(Path(other).name) == str(dirty_xfs)
        assert sysfs.loop_backing_file(Path(res.loop_device).name) != str(dirty_xfs)


def test_writable_block_device_is_write_protected_and_stays_until_released(dirty_xfs, case,
                                                                          tmp_path,
                                                                          no_leftovers):
    """A writable device gets BLKROSET (recorded); the block outlives the umount; only
    `writeblock release` gives it back writable."""
    from ckptrescue.storage import writeblock

    before = fx.sha256(dirty_xfs)
    with fx.loop(dirty_xfs, read_only=False) as dev:
        name = Path(dev).name
        assert not sysfs.is_readonly(name)
        res = mount(dev, tmp_path / "m", case=case)
        try:
            assert res.set_readonly == [dev] and res.loop_device is None
            assert sysfs.is_readonly(name)
            assert res.options == "ro,norecovery,nosuid,nodev,noexec"
        finally:
            umount(tmp_path / "m", case=case)
        assert sysfs.is_readonly(name)  # the write block stays
        writeblock.release(dev, case=case)
        assert not sysfs.is_readonly(name)
    assert fx.sha256(dirty_xfs) == before
    blocks = [r["details"] for r in case.records("safety.kernel")
              if r["details"]["target"] == dev]
    assert [(b["enforced"], b.get("released", False)) for b in blocks] == [(True, False),
                                                                         (False, True)]


@pytest.mark.needs_tool("mkfs.btrfs")
def test_btrfs_mounts_without_log_replay_on_this_kernel(case, shm_dir, tmp_path, no_leftovers):
    """btrfs: `rescue=nologreplay` (Linux >= 5.9; the old `nologreplay` is an unknown
    parameter on current kernels and the mount would fail)."""
    from ckptrescue.storage.mounting import ro_options

    img = shm_dir / "b.img"
    with open(img, "wb") as fh:
        fh.truncate(200 << 20)
    fx.sh("mkfs.btrfs", "-q", str(img))
    before = fx.sha256(img)
    with mounted(img, tmp_path / "mnt", case=case) as res:
        assert res.fstype == "btrfs" and res.options == ro_options("btrfs")
        assert "nologreplay" in res.options
    assert fx.sha256(img) == before
    assert ro_options("btrfs", "5.4.0-150-generic") == "ro,nologreplay,nosuid,nodev,noexec"
    assert ro_options("btrfs", "6.1.0-57-amd64") == "ro,rescue=nologreplay,nosuid,nodev,noexec"


def test_two_signatures_are_said_as_blkid_says_them_not_as_no_filesystem(case, shm_dir, tmp_path,
                                                                         no_leftovers):
    """An ext4 volume whose first sector still holds an older XFS superblock (a disk reformatted
    over another filesystem): ``blkid -p`` is ambivalent and exits 8. The mount stops with blkid's
    words, not "no filesystem found", which nobody observed; an image holding nothing still says
    that. Nothing stays attached and the images are unchanged."""
    from cli_helpers import invoke

    both = fx.make_fs(shm_dir / "both.img", "ext4")
    older = fx.make_fs(shm_dir / "older.img", "xfs")
    with open(older, "rb") as src, open(both, "r+b") as dst:
        dst.write(src.read(512))
    blank = shm_dir / "blank.img"
    with open(blank, "wb") as fh:
        fh.truncate(32 << 20)
    before = {p: fx.sha256(p) for p in (both, blank)}
    case_dir = case.root

    r = invoke("mount", str(both), str(tmp_path / "m1"), "--case", str(case_dir))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    said = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(said) == 1 and "blkid -p" in said[0] and "ambivalent" in said[0], r.stderr
    assert "no filesystem found" not in r.stderr

    r = invoke("mount", str(blank), str(tmp_path / "m2"), "--case", str(case_dir))
    assert r.returncode != 0 and "no filesystem found (blkid -p)" in r.stderr, r.stderr
    assert {p: fx.sha256(p) for p in before} == before
