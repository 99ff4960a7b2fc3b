"""Records from the kernel: what a command attached is what the kernel showed appear, never
what its argv said; a detach is allowed only for this case's attachment whose identity
(device number, backing inode, mount id) the kernel still shows. Real loop devices and mounts,
some made by the test itself outside the kit (another party's); evidence hashed before and
after."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckptrescue.effects import runner as runner_mod
from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.errors import UsageError
from ckptrescue.record.case import Case

pytestmark = [pytest.mark.privileged, pytest.mark.needs_tool("losetup", "mkfs.ext4")]
CLI = str(Path(sys.executable).with_name("ckptrescue"))
NS = "ro,noload,nosuid,nodev,noexec"


def _sha(path: Path | str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


def _ext4(path: Path) -> Path:
    with open(path, "wb") as fh:
        fh.truncate(8 << 20)
    _sh("mkfs.ext4", "-q", "-F", str(path))
    return path


class Scene:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.loops: list[str] = []
        self.mounts: list[str] = []
        self.case = Case.create(root / "case", title="kernel records")
        self.evidence = _ext4(root / "evidence.img")
        self.case.ensure_evidence(self.evidence, how="test evidence image")
        self.other_img = _ext4(root / "other.img")
        self.runner = SubprocessRunner(self.case)

    def loop(self, img: Path, *extra: str) -> str:
        dev = _sh("losetup", *extra, "--find", "--show", str(img))
        self.loops.append(dev)
        return dev

    def mount(self, dev: str, where: Path) -> Path:
        where.mkdir(parents=True, exist_ok=True)
        _sh("mount", "-t", "ext4", "-o", NS, dev, str(where))
        self.mounts.append(str(where))
        return where

    def run(self, *argv: str):  # noqa: ANN201
        return self.runner.run(ToolCall(argv=tuple(argv), timeout_s=60, purpose="test"))

    def records(self, action: str) -> list[dict]:
        return [r["details"] for r in self.case.records(action)]

    def mounted(self, where: Path | str) -> bool:
        real = os.path.realpath(where)
        return any(line.split()[4] == real for line in
                   Path("/proc/self/mountinfo").read_text().splitlines())

    def cleanup(self) -> None:
        for where in reversed(self.mounts):
            subprocess.run(["umount", where], check=False, capture_output=True)
        for rec in self.records("safety.attached"):
            if rec["kind"] == "mount":
                subprocess.run(["umount", rec["name"]], check=False, capture_output=True)
        for rec in self.records("safety.attached"):
            if rec["kind"] == "loop":
                subprocess.run(["losetup", "-d", rec["name"]], check=False, capture_output=True)
        for dev in self.loops:
            subprocess.run(["losetup", "-d", dev], check=False, capture_output=True)


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    s = Scene(tmp_path)
    before = _sha(s.evidence)
    try:
        yield s
    finally:
        s.cleanup()
    assert _sha(s.evidence) == before


def test_forms_that_attach_nothing_record_nothing_and_authorise_nothing(scene: Scene) -> None:
    theirs = scene.loop(scene.other_img, "-r")  # another party's loop device
    their_mnt = scene.mount(theirs, scene.root / "their-mnt")
    empty = scene.root / "empty"
    empty.mkdir()
    for argv in (("losetup", "-r", "-h", theirs, str(scene.evidence)),
                 ("losetup", "-V"),
                 ("mount", "-f", "-r", "-t", "ext4", "-o", NS, theirs, str(empty)),
                 ("mount", "-h")):
        res = scene.run(*argv)
        assert res.refused is None and res.returncode == 0, (argv, res.refused, res.stderr)
    assert scene.records("safety.attached") == []
    assert scene.case.attachments() == []
    detach = scene.run("losetup", "-d", theirs)
    assert detach.refused and "not a loop device this case attached" in detach.refused
    unmount = scene.run("umount", str(their_mnt))
    assert unmount.refused and "not a mount this case made" in unmount.refused
    assert scene.mounted(their_mnt)
    assert Path(f"/sys/block/{Path(theirs).name}/loop/backing_file").read_text().strip() == \
        str(scene.other_img)


def test_through_the_cli_the_help_form_attaches_nothing(scene: Scene) -> None:
    theirs = scene.loop(scene.other_img, "-r")
    r = subprocess.run([CLI, "exec", "--case", str(scene.case.root), "--", "losetup", "-r",
                        "-h", theirs, str(scene.evidence)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([CLI, "exec", "--case", str(scene.case.root), "--", "losetup", "-d",
                        theirs], capture_output=True, text=True, timeout=120)
    assert r.returncode == 3 and "not a loop device this case attached" in r.stderr
    assert Path(f"/sys/block/{Path(theirs).name}/loop/backing_file").exists()


def test_a_real_attach_is_recorded_with_its_kernel_identity(scene: Scene) -> None:
    res = scene.run("losetup", "--read-only", "--find", "--show", str(scene.evidence))
    assert res.returncode == 0, res.stderr
    ours = res.stdout.strip()
    (rec,) = scene.records("safety.attached")
    st = os.stat(scene.evidence)
    rdev = os.stat(ours).st_rdev
    assert rec["kind"] == "loop" and rec["name"] == ours and rec["readonly"] is True
    assert rec["rdev"] == f"{os.major(rdev)}:{os.minor(rdev)}"
    assert (rec["backing_dev"], rec["backing_ino"]) == (
        f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", st.st_ino)
    mnt = scene.root / "mnt"
    mnt.mkdir()
    res = scene.run("mount", "-t", "ext4", "-o", NS, ours, str(mnt))
    assert res.returncode == 0, res.stderr
    (mrec,) = [r for r in scene.records("safety.attached") if r["kind"] == "mount"]
    assert mrec["name"] == str(mnt) and isinstance(mrec["mount_id"], int)
    assert mrec["readonly"] is True and mrec["dev"] == rec["rdev"]
    # the case's own mount: unmounted; the kernel shows it gone: recorded as detached
    assert scene.run("umount", str(mnt)).returncode == 0
    assert [r["kind"] for r in scene.records("safety.detached")] == ["mount"]
    # its own loop, by another name of the same device (/dev/block/M:N where udev made it,
    # else a node of the same number made by the test): detached
    alias = f"/dev/block/{os.major(rdev)}:{os.minor(rdev)}"
    if not os.path.exists(alias):
        alias = str(scene.root / "same-device")
        os.mknod(alias, 0o600 | stat.S_IFBLK, rdev)
    res = scene.run("losetup", "-d", alias)
    assert res.refused is None and res.returncode == 0, (res.refused, res.stderr)
    assert scene.case.attachments() == []


def test_a_detach_the_kernel_defers_is_waited_for_then_recorded(scene: Scene) -> None:
    # another process holds the case's loop open as it is detached (a udev probe, a scan of the
    # loop devices): losetup -d exits 0 and the kernel releases the device at the last close
    res = scene.run("losetup", "--read-only", "--find", "--show", str(scene.evidence))
    ours = res.stdout.strip()
    holder = os.open(ours, os.O_RDONLY)
    closer = threading.Timer(0.4, os.close, (holder,))
    closer.start()
    try:
        res = scene.run("losetup", "-d", ours)
    finally:
        closer.join()
    assert res.refused is None and res.returncode == 0, (res.refused, res.stderr)
    assert not Path(f"/sys/block/{Path(ours).name}/loop/backing_file").exists()
    assert [r["name"] for r in scene.records("safety.detached")] == [ours]
    assert scene.records("safety.detach_deferred") == []
    assert scene.case.attachments() == []


def test_a_detach_still_held_after_the_wait_is_recorded_as_deferred(
        scene: Scene, monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptrescue.report import model as report_model

    monkeypatch.setattr(runner_mod, "DETACH_WAIT_S", 0.3)
    res = scene.run("losetup", "--read-only", "--find", "--show", str(scene.evidence))
    ours = res.stdout.strip()
    holder = os.open(ours, os.O_RDONLY)
    try:
        res = scene.run("losetup", "-d", ours)
        assert res.refused is None and res.returncode == 0, (res.refused, res.stderr)
        # the kernel still shows it: still the case's, and said to be waiting for its holder
        (deferred,) = scene.records("safety.detach_deferred")
        assert deferred["name"] == ours and "last holder" in deferred["why"]
        assert scene.records("safety.detached") == []
        assert [a["name"] for a in scene.case.attachments()] == [ours]
        rows = report_model.build(scene.case)["safety_table"]
        attach = next(r for r in rows if r["guarantee"].startswith("attachments"))
        assert attach["note"] == "1 attached, 0 released, 1 release(s) deferred (still held " \
            "open elsewhere)"
    finally:
        os.close(holder)
    # released at the last close: the next command that reads the kernel's state records it
    assert scene.run("losetup", "-l").returncode == 0
    assert [r["name"] for r in scene.records("safety.detached")] == [ours]
    assert scene.case.attachments() == []
    rows = report_model.build(scene.case)["safety_table"]
    attach = next(r for r in rows if r["guarantee"].startswith("attachments"))
    assert attach["note"] == "1 attached, 1 released"


def test_a_detach_needs_the_same_identity_not_the_same_name(scene: Scene) -> None:
    res = scene.run("losetup", "--read-only", "--find", "--show", str(scene.evidence))
    ours = res.stdout.strip()
    # behind the kit's back: detached, and the same node re-bound to another party's file
    _sh("losetup", "-d", ours)
    _sh("losetup", "-r", ours, str(scene.other_img))
    scene.loops.append(ours)
    refused = scene.run("losetup", "-d", ours)
    assert refused.refused and "not a loop device this case attached" in refused.refused
    assert Path(f"/sys/block/{Path(ours).name}/loop/backing_file").read_text().strip() == \
        str(scene.other_img)
    # the kernel no longer shows the case's loop: the next state command records it released
    assert scene.run("losetup", "-l").returncode == 0
    assert [r["name"] for r in scene.records("safety.detached")] == [ours]
    assert scene.case.attachments() == []


def test_a_mount_stacked_over_the_kits_is_not_the_kits(scene: Scene) -> None:
    res = scene.run("losetup", "--read-only", "--find", "--show", str(scene.evidence))
    ours = res.stdout.strip()
    mnt = scene.root / "mnt"
    mnt.mkdir()
    assert scene.run("mount", "-t", "ext4", "-o", NS, ours, str(mnt)).returncode == 0
    theirs = scene.loop(scene.other_img, "-r")
    scene.mount(theirs, mnt)  # another party mounts over the kit's mount point
    refused = scene.run("umount", str(mnt))
    assert refused.refused and "not a mount this case made" in refused.refused
    by_dev = scene.run("umount", ours)
    assert by_dev.refused and "mount point" in by_dev.refused
    _sh("umount", str(mnt))
    scene.mounts.remove(str(mnt))
    assert scene.run("umount", str(mnt)).returncode == 0  # the kit's own, now on top again


def test_files_under_work_authorise_nothing(scene: Scene) -> None:
    """A record planted under CASE/work/ (as a guarded rsync into it could) neither names a
    pool to export nor a mount to release: the log is the only authority."""
    from ckptrescue.storage import mounting

    theirs = scene.loop(scene.other_img, "-r")
    their_mnt = scene.mount(theirs, scene.root / "their-mnt")
    planted = scene.case.work_dir / "mounts"
    planted.mkdir(exist_ok=True)
    for name, data in (("a.json", {"zfs_pool": "rpool", "mountpoint": str(their_mnt)}),
                       ("b.json", {"mountpoint": str(their_mnt), "device": theirs,
                                   "loop_device": theirs, "backing_file": str(scene.other_img),
                                   "target": str(scene.other_img), "fstype": "ext4"})):
        (planted / name).write_text(json.dumps(data))
    assert scene.case.readonly_pools() == []
    with pytest.raises(UsageError, match="no mount recorded"):
        mounting.umount(their_mnt, case=scene.case)
    assert scene.run("zpool", "export", "rpool").refused
    assert scene.mounted(their_mnt)


def test_the_reports_safety_table_says_which_guarantees_held(scene: Scene) -> None:
    from ckptrescue.report import model as report_model
    from ckptrescue.report.render import render

    res = scene.run("losetup", "--read-only", "--find", "--show", str(scene.evidence))
    assert res.returncode == 0
    assert scene.run("losetup", "-d", res.stdout.strip()).returncode == 0
    assert scene.run("losetup", "-d", "/dev/loop-control").refused
    rows = {r["guarantee"]: r for r in report_model.build(scene.case)["safety_table"]}
    by = {r["enforced_by"] for r in rows.values()}
    assert by == {"kernel", "construction", "guard"}
    attach = next(r for g, r in rows.items() if g.startswith("attachments"))
    assert attach["held"] == "yes" and attach["note"] == "1 attached, 1 released"
    refusals = next(r for r in rows.values() if r["enforced_by"] == "guard")
    assert refusals["note"] == "1 command(s) refused"
    outputs = next(r for g, r in rows.items() if g.startswith("tools write only into"))
    assert outputs["held"] == "not exercised"
    md = render(scene.case, "md")
    assert "| enforced by | held |" in md and "1 attached, 1 released" in md


def test_a_mount_the_table_read_missed_is_still_recorded_and_found(tmp_path: Path) -> None:
    """A read of the mount table while other processes mount and unmount can miss entries (the
    suite saw a case's own mount go unrecorded, so its umount was refused). The mount id asked
    of the directory itself is the truth: a read that lacks it is read again."""
    from ckptrescue.guard import kernel

    target = tmp_path / "mnt"
    target.mkdir()
    argv = ["mount", "-t", "tmpfs", "tmpfs", str(target)]
    before = kernel.snapshot(argv=argv)
    _sh("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target))
    try:
        after = kernel.snapshot()
        mid = kernel.mount_id_at(str(target))
        assert mid in after.mounts and mid not in before.mounts

        def without(snap: kernel.Snapshot, dir_mounts: dict[str, int | None]) -> kernel.Snapshot:
            return kernel.Snapshot(snap.loops, {k: v for k, v in snap.mounts.items() if k != mid},
                                   snap.dms, snap.pools, dir_mounts)

        missed = without(after, {})
        got = [a for a in kernel.appeared(before, missed, argv) if a.kind == "mount"]
        assert [(a.name, a.get("mount_id")) for a in got] == [(str(target), mid)]
        assert kernel.appeared(before, after, argv) == got  # the same record either way
        top = kernel.top_mount_at(str(target), missed.mounts)
        assert top is not None and top.mount_id == mid
        # never attributed: a directory the command did not name; a mount that was already on
        # the directory before the command (missed by both reads); a directory not asked before
        assert not [a for a in kernel.appeared(before, missed, ["mount", "-a"])
                    if a.kind == "mount"]
        already = without(kernel.snapshot(argv=argv), kernel.snapshot(argv=argv).dir_mounts)
        assert already.dir_mounts == {str(target): mid}
        assert not [a for a in kernel.appeared(already, missed, argv) if a.kind == "mount"]
        unasked = without(before, {})
        assert not [a for a in kernel.appeared(unasked, missed, argv) if a.kind == "mount"]
    finally:
        _sh("umount", str(target))


def test_a_mount_that_takes_a_freed_mount_id_is_still_the_commands(tmp_path: Path) -> None:
    """The kernel hands out the lowest free mount id, so a mount another process removes while
    a command runs leaves its id to the command's own mount (the suite saw a case's mount go
    unrecorded this way, and its umount refused). An id the table showed before is the same
    mount only on the same device at the same place."""
    import dataclasses

    from ckptrescue.guard import kernel

    other, target = tmp_path / "other", tmp_path / "mnt"
    other.mkdir()
    target.mkdir()
    argv = ["mount", "-t", "tmpfs", "tmpfs", str(target)]
    _sh("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(other))
    try:
        before = kernel.snapshot(argv=argv)  # another process's mount is in the table
        freed = kernel.mount_id_at(str(other))
        if freed not in before.mounts:  # this read missed it (others mount too): read again
            table = kernel.mount_table_with(freed) or {}
            before = kernel.Snapshot(before.loops, table, before.dms, before.pools,
                                     before.dir_mounts)
    finally:
        _sh("umount", str(other))  # ... and is gone while the command runs
    assert freed in before.mounts
    _sh("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target))
    try:
        after = kernel.snapshot()
        mid = kernel.mount_id_at(str(target))
        assert mid is not None and mid in after.mounts
        if mid != freed:  # a third process took the freed id first: show the table it would
            before = kernel.Snapshot(
                before.loops, {**before.mounts, mid: dataclasses.replace(before.mounts[freed],
                                                                          mount_id=mid)},
                before.dms, before.pools, before.dir_mounts)
        assert before.mounts[mid].mountpoint == str(other)  # the id was another mount's
        got = [a for a in kernel.appeared(before, after, argv) if a.kind == "mount"]
        assert [(a.name, a.get("mount_id")) for a in got] == [(str(target), mid)]
        missed = kernel.Snapshot(after.loops, {k: v for k, v in after.mounts.items() if k != mid},
                                 after.dms, after.pools)
        assert kernel.appeared(before, missed, argv) == got  # and when the read after missed it
        # the same mount read twice is never taken for a new one
        assert not [a for a in kernel.appeared(after, after, argv) if a.kind == "mount"]
    finally:
        _sh("umount", str(target))


def test_the_lower_of_two_stacked_mounts_is_not_taken_for_the_commands(tmp_path: Path) -> None:
    """``umount DIR`` of the top of two mounts stacked on DIR uncovers the lower one: the
    directory's mount id changes to one the table showed before. When the table read after the
    command misses that mount, it is still not the command's."""
    from ckptrescue.guard import kernel

    target = tmp_path / "mnt"
    target.mkdir()
    _sh("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target))
    try:
        lower = kernel.mount_id_at(str(target))
        _sh("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(target))
        argv = ["umount", str(target)]
        before = kernel.snapshot(argv=argv)
        if lower not in before.mounts:  # this read missed it (others mount too): read again
            before = kernel.Snapshot(before.loops, kernel.mount_table_with(lower) or {},
                                     before.dms, before.pools, before.dir_mounts)
        assert before.dir_mounts[str(target)] != lower and lower in before.mounts
        _sh("umount", str(target))
        assert kernel.mount_id_at(str(target)) == lower
        after = kernel.snapshot()
        missed = kernel.Snapshot(after.loops,
                                 {k: v for k, v in after.mounts.items() if k != lower},
                                 after.dms, after.pools)
        assert not [a for a in kernel.appeared(before, missed, argv) if a.kind == "mount"]
        assert not [a for a in kernel.appeared(before, after, argv) if a.kind == "mount"]
    finally:
        while kernel.mount_id_at(str(target)) != kernel.mount_id_at(str(tmp_path)):
            _sh("umount", str(target))
