"""A tool in the host's namespace (``mount``, ``umount``, ``losetup``) opens what the guard
judged, not a name resolved again later.

The guard asks the kernel about the device a word names (read-only? reaching evidence?), then
the tool resolves that word itself. Two ways the word names another device by then:

* libmount reads ``UUID=…`` (``LABEL=``, ``PARTUUID=``…) as a *tag*: a node so named in the
  working directory, of a read-only device, passes the guard, and mount then looks the tag up
  and mounts the writable loop device over the evidence image that carries that UUID;
* a symlink swapped between the check and the exec (here swapped by the test at exactly that
  moment: the runner's own exec step, overridden).

The runner gives such a tool the device's own ``/dev`` node for the device number the guard
judged (and resolved paths): what runs is what was judged. Real loop devices, a writable one
made by the test outside the kit (another party's), evidence hashed before and after."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.record.case import Case
from fixtures.storage import detach_own

pytestmark = [pytest.mark.privileged, pytest.mark.needs_tool("losetup", "mkfs.ext4")]
CLI = str(Path(sys.executable).with_name("ckptrescue"))
REPO = Path(__file__).resolve().parents[2]
NS = "ro,noload,nosuid,nodev,noexec"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


def _ext4(path: Path) -> Path:
    with open(path, "wb") as fh:
        fh.truncate(8 << 20)
    _sh("mkfs.ext4", "-q", "-F", str(path))
    return path


def _rdev(dev: str) -> int:
    return os.stat(dev).st_rdev


def _mounted_dev(where: Path) -> int | None:
    real = os.path.realpath(where)
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        f = line.split()
        if f[4] == real:
            major, minor = (int(x) for x in f[2].split(":"))
            return os.makedev(major, minor)
    return None


class Scene:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.case = Case.create(root / "case", title="what runs is what was judged")
        self.evidence = _ext4(root / "evidence.img")
        self.case.ensure_evidence(self.evidence, how="test evidence image")
        self.other = _ext4(root / "other.img")
        self.loops: list[str] = []
        self.mnt = root / "mnt"
        self.mnt.mkdir()

    def loop(self, img: Path, *extra: str) -> str:
        dev = _sh("losetup", *extra, "--find", "--show", str(img))
        self.loops.append(dev)
        return dev

    def cleanup(self) -> None:
        while _mounted_dev(self.mnt) is not None:
            if subprocess.run(["umount", str(self.mnt)], capture_output=True).returncode:
                break
        for rec in self.case.records("safety.attached"):
            if rec["details"]["kind"] == "loop":
                detach_own(rec["details"]["name"], self.root)
        for dev in self.loops:
            detach_own(dev, self.root)


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    s = Scene(tmp_path)
    before = _sha(s.evidence)
    try:
        yield s
    finally:
        s.cleanup()
    assert _sha(s.evidence) == before


def test_a_node_named_like_a_tag_mounts_the_device_judged(scene: Scene) -> None:
    theirs = scene.loop(scene.evidence)  # writable, over the evidence image, not the kit's
    ro = scene.loop(scene.other, "-r")
    uuid = _sh("blkid", "-o", "value", "-s", "UUID", str(scene.evidence))
    node = scene.root / f"UUID={uuid}"
    os.mknod(node, 0o600 | 0o060000, _rdev(ro))  # a block node of the read-only device
    r = subprocess.run([CLI, "exec", "--case", str(scene.case.root), "--", "mount", "-t", "ext4",
                        "-o", NS, node.name, str(scene.mnt)], cwd=scene.root,
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    mounted = _mounted_dev(scene.mnt)
    assert mounted != _rdev(theirs), "libmount mounted the writable evidence loop by its tag"
    assert r.returncode == 0 and mounted == _rdev(ro), (r.returncode, r.stderr)
    run = list(scene.case.records("tool.run"))[-1]["details"]
    assert run["ran"][-2] == ro  # the audit log says what the tool was given


class SwapAfterCheck(SubprocessRunner):
    """The runner, with the symlink swapped the moment between the guard's check and the exec."""

    swap: tuple[Path, str] | None = None

    def _execute(self, call: ToolCall, *args: Any, **kw: Any) -> Any:
        if self.swap is not None and call.argv[0] in {"mount", "losetup"}:
            link, target = self.swap
            link.unlink()
            link.symlink_to(target)
            self.swap = None
        return super()._execute(call, *args, **kw)


def test_a_symlink_swapped_after_the_check_changes_nothing(scene: Scene) -> None:
    theirs = scene.loop(scene.evidence)  # writable, over the evidence image
    ro = scene.loop(scene.other, "-r")
    link = scene.root / "source"
    link.symlink_to(ro)
    runner = SwapAfterCheck(scene.case)
    runner.swap = (link, theirs)
    res = runner.run(ToolCall.of("mount", "-t", "ext4", "-o", NS, str(link), str(scene.mnt),
                                 timeout_s=60, purpose="test"))
    assert res.refused is None and res.returncode == 0, (res.refused, res.stderr)
    assert _mounted_dev(scene.mnt) == _rdev(ro)
    assert runner.run(ToolCall.of("umount", str(scene.mnt), timeout_s=60)).returncode == 0
    # a detach judged on the kit's own loop, swapped to another party's before it runs
    mine = runner.run(ToolCall.of("losetup", "--read-only", "--find", "--show",
                                  str(scene.other), timeout_s=60, purpose="test"))
    assert mine.ok, mine.stderr
    link.unlink()
    link.symlink_to(mine.stdout.strip())
    runner.swap = (link, theirs)
    res = runner.run(ToolCall.of("losetup", "-d", str(link), timeout_s=60, purpose="test"))
    assert res.refused is None and res.returncode == 0, (res.refused, res.stderr)
    assert Path(f"/sys/block/{Path(theirs).name}/loop/backing_file").read_text().strip() == \
        str(scene.evidence), "the other party's loop device was detached"
    assert not Path(f"/sys/block/{Path(mine.stdout.strip()).name}/loop/backing_file").exists()
