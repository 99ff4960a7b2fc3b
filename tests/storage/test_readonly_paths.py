"""Evidence only through kernel-read-only paths: immediately before a tool touches a block
device the guard asks the kernel, and refuses a writable device that is, is backed by, or holds
a filesystem of evidence — whoever made it; ``mount`` only from a device the kernel reports
read-only. Real loop devices (one stacked on another) made by the test outside the kit;
the evidence image hashed before and after."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.record.case import Case
from fixtures.storage import detach_own

pytestmark = [pytest.mark.privileged, pytest.mark.needs_tool("losetup", "mkfs.ext4",
                                                              "dumpe2fs")]
OPTS = "ro,noload,nosuid,nodev,noexec"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[dict]:
    img = tmp_path / "evidence" / "disk.img"
    img.parent.mkdir()
    with open(img, "wb") as fh:
        fh.truncate(16 << 20)
    _sh("mkfs.ext4", "-q", "-F", str(img))
    case = Case.create(tmp_path / "case", title="read-only paths")
    case.ensure_evidence(img, how="test evidence image")
    made: list[str] = []
    dms: list[str] = []
    mounts: list[str] = []
    before = _sha(img)
    try:
        yield {"img": img, "case": case, "loops": made, "dms": dms, "mounts": mounts,
               "root": tmp_path, "runner": SubprocessRunner(case)}
    finally:
        for m in mounts:
            subprocess.run(["umount", m], check=False, capture_output=True)
        for name in dms:
            subprocess.run(["dmsetup", "remove", name], check=False, capture_output=True)
        for dev in reversed(made):  # a loop stacked on another first
            detach_own(dev, tmp_path, *made)
    assert _sha(img) == before, "the evidence image changed"


def _loop(scene: dict, target: Path, *extra: str) -> str:
    dev = _sh("losetup", *extra, "--find", "--show", str(target))
    scene["loops"].append(dev)
    return dev


def _run(scene: dict, *argv: str):  # noqa: ANN202
    return scene["runner"].run(ToolCall(argv=tuple(argv), timeout_s=60, purpose="test"))


def test_a_writable_loop_over_evidence_made_outside_the_kit_is_refused(scene: dict) -> None:
    dev = _loop(scene, scene["img"])  # writable, not the kit's
    mnt = scene["root"] / "mnt"
    mnt.mkdir()
    res = _run(scene, "mount", "-r", "-t", "ext4", "-o", OPTS, dev, str(mnt))
    assert res.refused and "writable" in res.refused, res
    for argv in (("dumpe2fs", "-h", dev), ("blockdev", "--getsz", dev),
                 ("dumpe2fs", "-h", f"-oblocksize=4096,device={dev}")):
        res = _run(scene, *argv)
        assert res.refused and "evidence" in res.refused, (argv, res)
    # another name of the same device: a node made by the test with its number
    alias = scene["root"] / "alias"
    os.mknod(alias, 0o600 | stat.S_IFBLK, os.stat(dev).st_rdev)
    res = _run(scene, "dumpe2fs", "-h", str(alias))
    assert res.refused and "evidence" in res.refused
    assert not any(line.split()[4] == str(mnt) for line in
                   Path("/proc/self/mountinfo").read_text().splitlines())


def test_aliases_of_the_evidence_file_are_refused(scene: dict) -> None:
    link = scene["root"] / "elsewhere.img"
    os.link(scene["img"], link)  # a hard link: the same inode under another name
    by_link = _loop(scene, link)
    offset = _loop(scene, scene["img"], "--offset", "1048576")  # part of the image
    for dev in (by_link, offset):
        res = _run(scene, "dumpe2fs", "-h", dev)
        assert res.refused and "backed by an evidence file" in res.refused, (dev, res)


def test_a_device_stacked_on_writable_evidence_is_refused(scene: dict) -> None:
    """A block device whose writes reach the evidence through another block device (here a loop
    over the writable evidence loop; device-mapper stacks are followed through the same sysfs
    links, but this kernel has no device-mapper to make one)."""
    by_link = _loop(scene, scene["img"])
    stacked = _loop(scene, Path(by_link))  # writes to it reach the evidence loop, then the image
    res = _run(scene, "dumpe2fs", "-h", stacked)
    assert res.refused and "evidence" in res.refused, res


def test_a_read_only_device_is_allowed_whoever_made_it(scene: dict) -> None:
    dev = _loop(scene, scene["img"], "--read-only")  # read-only, made outside the kit
    res = _run(scene, "dumpe2fs", "-h", dev)
    assert res.refused is None and res.returncode == 0, res
    mnt = scene["root"] / "mnt"
    mnt.mkdir()
    res = _run(scene, "mount", "-t", "ext4", "-o", OPTS, dev, str(mnt))
    assert res.refused is None and res.returncode == 0, (res.refused, res.stderr)
    scene["mounts"].append(str(mnt))
    assert _run(scene, "umount", str(mnt)).returncode == 0


def test_mount_only_from_a_read_only_device_even_if_it_is_not_evidence(scene: dict) -> None:
    other = scene["root"] / "scratch.img"
    with open(other, "wb") as fh:
        fh.truncate(8 << 20)
    _sh("mkfs.ext4", "-q", "-F", str(other))
    dev = _loop(scene, other)  # writable, not evidence
    mnt = scene["root"] / "mnt"
    mnt.mkdir()
    res = _run(scene, "mount", "-t", "ext4", "-o", OPTS, dev, str(mnt))
    assert res.refused and "writable" in res.refused
    res = _run(scene, "mount", "-t", "ext4", "-o", OPTS, str(other), str(mnt))
    assert res.refused and "not a block device" in res.refused
    res = _run(scene, "dumpe2fs", "-h", dev)  # reading a device that is not evidence
    assert res.refused is None and res.returncode == 0
