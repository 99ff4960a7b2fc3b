"""The kernel write block beneath the guard (issue 13, item 1): evidence block devices get
BLKROSET, acquired images chattr +i; with the guard switched off a root write still fails and
the hashes stay; the block outlives the kit and only `writeblock release` gives it back.

Every loop device here is made by ``fx.loop``, whose finalizer clears BLKROSET (0) before
``losetup -d`` even when the test fails: a BLKROSET left on /dev/loopN would outlive the detach
and make the next user of that loop read-only. Images the kit made immutable are released by
the autouse fixture in conftest.py.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_helpers import run_cli

from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.errors import RefusedError
from ckptrescue.storage import writeblock
from fixtures import storage as fx
from fixtures.det import det_bytes

pytestmark = [pytest.mark.privileged, pytest.mark.needs_tool("ddrescue", "dd")]
SIZE = 8 << 20


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, timeout=300, env_extra={"COLUMNS": "200"})


def ro_flag(dev: str) -> str:
    return Path(f"/sys/class/block/{Path(dev).name}/ro").read_text().strip()


@pytest.fixture
def source_image(shm_dir: Path) -> Path:
    """Random bytes in RAM (so that an image destination in tmp_path is on other media)."""
    img = shm_dir / "evidence.img"
    img.write_bytes(det_bytes(SIZE, 1))
    return img


@pytest.fixture
def guard_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard allows everything in this process: only the kernel is left to refuse."""
    from ckptrescue import guard

    real = guard.check

    def allow_all(*a, **k):  # noqa: ANN002, ANN003, ANN202
        said = real(*a, **k)  # what the command writes still decides the tool's namespace
        return guard.Decision.allow(writes=said.writes, host_namespace=said.host_namespace)

    monkeypatch.setattr(guard, "check", allow_all)


def dd_onto(case, target: str | Path) -> int:  # noqa: ANN001
    res = SubprocessRunner(case).run(ToolCall.of(
        "dd", "if=/dev/zero", f"of={target}", "bs=4096", "count=1", "conv=notrunc",
        timeout_s=60, purpose="test: a root write attempt"))
    assert not res.refused, res.refused  # the guard is off: only the kernel can say no
    return res.returncode


def python_write(target: str | Path) -> OSError | None:
    try:
        with open(target, "r+b", buffering=0) as fh:
            fh.write(b"\0" * 4096)
            os.fsync(fh.fileno())
    except OSError as exc:
        return exc
    return None


def test_guard_off_root_writes_fail_on_write_blocked_device_and_immutable_image(
        case, source_image, tmp_path, guard_off, no_leftovers):
    from ckptrescue.storage.imaging import image

    control_img = source_image.with_name("control.img")
    control_img.write_bytes(det_bytes(SIZE, 2))
    with fx.loop(source_image, read_only=False) as dev, \
            fx.loop(control_img, read_only=False) as control:
        assert ro_flag(dev) == "0"
        before = fx.sha256(dev)
        res = image(dev, case=case, dest=tmp_path / "images", retries=0)
        assert res.finished and res.image_sha256 == before
        # the source: BLKROSET, recorded with its previous state
        assert ro_flag(dev) == "1"
        rec = [r["details"] for r in case.records("safety.kernel")
               if r["details"]["target"] == dev][-1]
        assert rec["guarantee"] == "block-device-readonly" and rec["enforced"]
        assert rec["how"] == "BLKROSET" and rec["previous"] == "rw" and rec["by_kit"]
        assert rec["ro_ioctl"] is True and rec["ro_sysfs"] is True
        # root, no guard: dd through the runner and a plain Python write both fail
        assert dd_onto(case, dev) != 0
        err = python_write(dev)
        assert err is not None and err.errno in {errno.EPERM, errno.EACCES, errno.EROFS}
        assert fx.sha256(dev) == before
        # the acquired image and its mapfile: chattr +i (ext4 under tmp_path has the flag)
        img, mapf = Path(res.image), Path(res.mapfile)
        for path in (img, mapf):
            assert writeblock.is_immutable(path)
            assert not os.stat(path).st_mode & 0o222
        kinds = {(r["details"]["guarantee"], r["details"]["target"], r["details"]["how"])
                 for r in case.records("safety.kernel")}
        assert ("image-immutable", str(img.resolve()), "chattr +i (FS_IMMUTABLE_FL)") in kinds
        img_before = fx.sha256(img)
        assert dd_onto(case, img) != 0
        err = python_write(img)
        assert err is not None and err.errno == errno.EPERM
        with pytest.raises(PermissionError):
            img.unlink()
        assert fx.sha256(img) == img_before == before
        # a device nobody protected: the guard-off runner still cannot write it (the tool
        # sees a read-only loop over it at its name: it names no device it writes) ...
        control_before = fx.sha256(control)
        assert dd_onto(case, control) != 0
        assert fx.sha256(control) == control_before
        # ... while the device itself is writable (negative control: a plain write changes it)
        assert python_write(control) is None
        assert fx.sha256(control) != control_before
        # the kit itself gives the image back only through release
        released = writeblock.release(img, case)
        assert released[0]["released"] and not writeblock.is_immutable(img)
        writeblock.release(dev, case)
        assert ro_flag(dev) == "0"
    assert fx.sha256(source_image) == before


def test_block_stays_after_the_cli_exits_and_release_restores_it(case, source_image, tmp_path,
                                                                 no_leftovers):
    """`ckptrescue image` (a subprocess) write-blocks the source; the block is there after it
    exits; `writeblock status` lists it; `writeblock release` restores rw, audited; a second
    release and a device the case never blocked are refused in one line."""
    before = fx.sha256(source_image)
    other_img = source_image.with_name("other.img")
    other_img.write_bytes(b"\0" * SIZE)
    with fx.loop(source_image, read_only=False) as dev, \
            fx.loop(other_img, read_only=False) as other:
        run = cli("image", dev, "--case", str(case.root), "--dest", str(tmp_path / "img"),
                  "--retries", "0", "--json")
        assert run.returncode == 0, run.stderr
        assert ro_flag(dev) == "1"  # the process is gone; the block is not
        assert fx.sha256(dev) == before
        st = cli("writeblock", "status", "--case", str(case.root), "--json")
        assert st.returncode == 0, st.stderr
        rows = {r["target"]: r for r in json.loads(st.stdout)}
        assert rows[dev]["blocked"] and rows[dev]["readonly_now"] and rows[dev]["previous"] == "rw"
        image = json.loads(run.stdout)["image"]
        assert rows[str(Path(image).resolve())]["immutable_now"] is True

        rel = cli("writeblock", "release", dev, "--case", str(case.root))
        assert rel.returncode == 0, rel.stderr
        assert ro_flag(dev) == "0"
        last = list(case.records("safety.kernel"))[-1]["details"]
        assert last["target"] == dev and last["released"] and last["restored"] == "rw"

        for target in (dev, other):  # released already / never write-blocked by this case
            again = cli("writeblock", "release", target, "--case", str(case.root))
            assert again.returncode == 3
            errors = [ln for ln in again.stderr.splitlines() if ln.startswith("ckptrescue:")]
            assert len(errors) == 1 and "did not write-block" in errors[0], again.stderr
            assert "Traceback" not in again.stderr
        assert ro_flag(other) == "0"

        rel_img = cli("writeblock", "release", image, "--case", str(case.root))
        assert rel_img.returncode == 0, rel_img.stderr
        assert not writeblock.is_immutable(image)
    assert fx.sha256(source_image) == before
    assert fx.sha256(image) == before


def test_inspect_of_a_device_under_a_live_rw_mount_records_no_block(case, shm_dir, tmp_path,
                                                                    no_leftovers):
    """Write-protecting a device under a read-write mount is refused (the live filesystem
    would fail its writes): recorded `enforced: false` with the reason; fs inspect still reads;
    mount refuses as before. (The device is live, mounted rw by the test: no fixed hash.)"""
    from ckptrescue.storage.fsinspect import fs_inspect
    from ckptrescue.storage.mounting import mount

    img = fx.make_fs(shm_dir / "live.img", "ext4")
    with fx.loop(img, read_only=False) as dev:
        mnt = tmp_path / "live"
        mnt.mkdir()
        fx.sh("mount", "-t", "ext4", dev, str(mnt))
        try:
            res = fs_inspect(dev, case=case, health=False)
            assert res.fstype == "ext4"
            assert ro_flag(dev) == "0"
            rec = [r["details"] for r in case.records("safety.kernel")
                   if r["details"]["target"] == dev][-1]
            assert rec["target"] == dev and rec["enforced"] is False
            assert "mounted" in rec["reason"] and str(mnt) in rec["reason"]
            with pytest.raises(RefusedError, match="mounted"):
                mount(dev, tmp_path / "m", case=case)
            assert ro_flag(dev) == "0"
            with pytest.raises(RefusedError, match="did not write-block"):
                writeblock.release(dev, case)
        finally:
            fx.sh("umount", str(mnt), check=False)


def test_a_device_already_read_only_is_recorded_not_claimed(case, shm_dir, no_leftovers):
    """A read-only loop: `previous: ro`, `by_kit: false`; recorded once; not releasable."""
    from ckptrescue.storage.fsinspect import fs_inspect

    img = fx.make_fs(shm_dir / "ro.img", "ext4")
    before = fx.sha256(img)
    with fx.loop(img) as dev:
        fs_inspect(dev, case=case, health=False)
        fs_inspect(dev, case=case, health=False)
        recs = [r["details"] for r in case.records("safety.kernel")
                if r["details"]["target"] == dev]
        assert len(recs) == 1
        assert recs[0]["enforced"] and recs[0]["previous"] == "ro" and not recs[0]["by_kit"]
        with pytest.raises(RefusedError, match="did not write-block"):
            writeblock.release(dev, case)
        assert ro_flag(dev) == "1"
    assert fx.sha256(img) == before


def test_mode_only_when_the_filesystem_has_no_immutable_flag(case, tmp_path, monkeypatch):
    img = tmp_path / "x.img"
    img.write_bytes(b"abc")

    def unsupported(path, value):  # noqa: ANN001, ANN202
        raise OSError(errno.ENOTTY, "Inappropriate ioctl for device")

    monkeypatch.setattr(writeblock, "set_immutable", unsupported)
    rec = writeblock.make_immutable(img, case)
    assert rec["enforced"] is False and rec["how"] == writeblock.MODE_ONLY
    assert "no immutable flag" in rec["reason"]
    assert not os.stat(img).st_mode & 0o222
    writeblock.release(img, case)
    assert os.stat(img).st_mode & 0o200
    assert img.read_bytes() == b"abc"


def test_release_refuses_a_device_reused_under_the_recorded_name(case, shm_dir, tmp_path):
    """Case A write-blocks /dev/loopN (over image A); the loop is detached and image B comes up
    on the same name. Releasing /dev/loopN for case A must not touch B's device."""
    a = fx.make_fs(shm_dir / "a.img", "ext4")
    b = fx.make_fs(shm_dir / "b.img", "ext4")
    for _ in range(20):
        with fx.loop(a, read_only=False) as dev:
            rec = writeblock.protect(dev, case, purpose="test")
            assert rec["enforced"] and rec["diskseq"]
        # fx.loop cleared the flag and detached; image B is attached on the very same name,
        # unless a test beside this one took that number first (then again, on another one)
        if fx.attach_on(dev, b, after=a):
            break
    else:
        pytest.fail("no loop number could be attached twice in a row (others took each one)")
    try:
        writeblock.set_readonly(dev, True)  # someone else's block on B
        with pytest.raises(RefusedError, match="not the device this case write-blocked"):
            writeblock.release(dev, case)
        assert ro_flag(dev) == "1"
    finally:
        fx.detach_own(dev, b)
