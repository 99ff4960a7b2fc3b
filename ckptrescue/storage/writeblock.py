"""The kernel write block: evidence block devices read-only at the block layer, acquired images
immutable. What the kernel enforces does not depend on the guard being right.

* :func:`protect` sets ``BLKROSET`` on a block device that became evidence and on each of its
  partitions (a whole disk's flag does not cover its partitions), reads the previous state from
  ``/sys/class/block/NAME/ro`` and ``BLKROGET``, and records one ``safety.kernel`` audit record
  per device node. It refuses (``enforced: false``, with the reason) to write-protect a device
  under a live read-write mount: the mounted filesystem's own writes would start failing.
  Holders (device-mapper, md) are recorded; they are not write-blocked by this.
* :func:`make_immutable` makes an image file the kit acquired read-only once hashed: mode
  ``a-w`` and ``FS_IMMUTABLE_FL`` (``chattr +i``, here the ioctl itself) where the filesystem has
  the flag.
* The block STAYS after the kit exits and after ``umount``: only :func:`release`
  (``ckptrescue writeblock release``) restores the recorded previous state, and only for what this
  case itself write-blocked; audited.

Everything here is an ioctl or a sysfs read: no external tool runs.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.errors import CaseError, RefusedError, UsageError
from ckptrescue.storage import sysfs

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

ACTION = "safety.kernel"
BLOCK = "block-device-readonly"
IMAGE = "image-immutable"
LOOP = "image-readonly-loop"

BLKROSET = 0x125D  # _IO(0x12, 93)
BLKROGET = 0x125E  # _IO(0x12, 94)
FS_IOC_GETFLAGS = 0x80086601  # _IOR('f', 1, long); the kernel reads/writes an int
FS_IOC_SETFLAGS = 0x40086602  # _IOW('f', 2, long)
FS_IMMUTABLE_FL = 0x00000010
MODE_ONLY = "mode 0444 only (filesystem has no immutable flag)"


# -- the ioctls -----------------------------------------------------------------------------
def _node(name: str) -> str:
    return f"/dev/{name}"


def set_readonly(path: str | Path, value: bool) -> None:
    """``BLKROSET`` on one block device node (what ``blockdev --setro/--setrw`` does)."""
    fd = os.open(str(path), os.O_RDONLY | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, BLKROSET, struct.pack("i", 1 if value else 0))
    finally:
        os.close(fd)


def _blkroget(path: str | Path) -> bool | None:
    try:
        fd = os.open(str(path), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        buf = fcntl.ioctl(fd, BLKROGET, struct.pack("i", 0))
        return bool(struct.unpack("i", buf)[0])
    except OSError:
        return None
    finally:
        os.close(fd)


def _get_flags(fd: int) -> int:
    return int(struct.unpack("i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("i", 0)))[0])


def _set_flags(fd: int, flags: int) -> None:
    fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("i", flags))


def is_immutable(path: str | Path) -> bool:
    try:
        fd = os.open(str(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return bool(_get_flags(fd) & FS_IMMUTABLE_FL)
    except OSError:
        return False
    finally:
        os.close(fd)


def set_immutable(path: str | Path, value: bool) -> None:
    """Set or clear ``FS_IMMUTABLE_FL`` (``chattr +i`` / ``-i``) on one regular file."""
    fd = os.open(str(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        flags = _get_flags(fd)
        new = flags | FS_IMMUTABLE_FL if value else flags & ~FS_IMMUTABLE_FL
        if new != flags:
            _set_flags(fd, new)
    finally:
        os.close(fd)


# -- state ------------------------------------------------------------------------------------
def state(dev: str | Path) -> dict[str, Any]:
    """The block layer's read-only state of ``dev`` (sysfs ``ro`` and ``BLKROGET``), its
    partitions, holders and mounts. Reads only."""
    name = sysfs.dev_name(dev)
    st = os.stat(dev)
    ro_sysfs = sysfs.is_readonly(name)
    ro_ioctl = _blkroget(dev)
    return {"device": _node(name), "name": name,
            "dev": f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}",
            "ro_sysfs": ro_sysfs, "ro_ioctl": ro_ioctl,
            "readonly": ro_sysfs or bool(ro_ioctl),
            "partitions": sysfs.partitions(name), "holders": sysfs.holders(name),
            "loop_backing_file": sysfs.loop_backing_file(name),
            "diskseq": _diskseq(name),
            "mounts": [{"mountpoint": m.mountpoint, "readonly": m.readonly}
                       for m in sysfs.mounts_of_device(name)]}


def _diskseq(name: str) -> str | None:
    """The kernel's per-attach sequence number of a disk (a loop re-attached, or a disk re-plugged
    under the same name, gets a new one); a partition has its disk's."""
    for base in (f"/sys/class/block/{name}", f"/sys/class/block/{name}/.."):
        try:
            with open(os.path.join(base, "diskseq")) as fh:
                return fh.read().strip() or None
        except OSError:
            continue
    return None


def _same_device(rec: dict[str, Any], now: dict[str, Any]) -> str | None:
    """Why the device under a recorded name is not the one this case write-blocked, or None."""
    if rec.get("dev") and rec["dev"] != now["dev"]:
        return f"device number {now['dev']} is not the recorded {rec['dev']}"
    if rec.get("diskseq") and now.get("diskseq") and rec["diskseq"] != now["diskseq"]:
        return "the disk was re-attached since (diskseq changed)"
    if rec.get("loop_backing_file") and rec["loop_backing_file"] != now["loop_backing_file"]:
        return (f"the loop device now holds {now['loop_backing_file']}, not the recorded "
                f"{rec['loop_backing_file']}")
    return None


def _latest(case: Case) -> dict[tuple[str, str], dict[str, Any]]:
    """The newest ``safety.kernel`` record of this case per (guarantee, target)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for rec in case.records(ACTION):
        d = rec.get("details") or {}
        if isinstance(d.get("guarantee"), str) and isinstance(d.get("target"), str):
            out[(d["guarantee"], d["target"])] = {**d, "seq": rec.get("seq"),
                                                  "time": rec.get("time")}
    return out


def _active(latest: dict[str, Any] | None) -> bool:
    """A block the case set itself and has not released."""
    return bool(latest and latest.get("enforced") and latest.get("by_kit")
                and not latest.get("released"))


def _log(case: Case, details: dict[str, Any]) -> dict[str, Any]:
    case.log(ACTION, details)
    return details


# -- protect ------------------------------------------------------------------------------------
def protect(dev: str | Path, case: Case, *, purpose: str = "",
            refuse_any_mount: bool = False) -> dict[str, Any]:
    """Write-block ``dev`` and its partitions at the block layer; returns the record of ``dev``
    (``enforced`` says whether the kernel now refuses writes to it).

    ``refuse_any_mount``: also leave a device mounted read-only alone (``mount`` does not mount a
    writable device that is mounted elsewhere)."""
    first = state(dev)
    name = first["name"]
    nodes = [name, *first["partitions"]]
    busy = [f"{_node(n)} on {m.mountpoint}" for n in nodes for m in sysfs.mounts_of_device(n)
            if (refuse_any_mount or not m.readonly) and not sysfs.is_readonly(n)]
    latest = _latest(case)
    if busy:
        return _log(case, {
            "guarantee": BLOCK, "target": first["device"], "given": str(dev),
            "dev": first["dev"], "enforced": False, "how": "none",
            "previous": "ro" if first["readonly"] else "rw", "by_kit": False,
            "reason": f"mounted ({', '.join(busy)}): write-protecting a device under a live "
                      "mount would fail that filesystem's writes; the guard alone protects it",
            "holders": first["holders"], "purpose": purpose})
    out: dict[str, Any] = {}
    set_now: list[str] = []
    for n in nodes:
        prior = latest.get((BLOCK, _node(n)))
        rec = _protect_node(case, n, prior, purpose,
                            partition_of=None if n == name else first["device"])
        if rec is not prior and rec.get("by_kit") and rec.get("enforced"):
            set_now.append(rec["target"])
        if n == name:
            out = rec
        elif not rec.get("enforced"):
            out = {**out, "enforced": False, "reason": f"{rec['target']}: {rec.get('reason')}"}
    out = {**out, "partitions": [_node(p) for p in first["partitions"]], "set_now": set_now}
    if str(dev) != out["target"]:
        out["given"] = str(dev)
    return out


def _protect_node(case: Case, name: str, latest: dict[str, Any] | None, purpose: str,
                  partition_of: str | None) -> dict[str, Any]:
    path = _node(name)
    before = state(path)
    if before["readonly"] and latest and latest.get("enforced") and not latest.get("released"):
        return latest  # already recorded by this case and still in force: no new record
    base: dict[str, Any] = {"guarantee": BLOCK, "target": path, "dev": before["dev"],
                            "diskseq": before["diskseq"],
                            "previous": "ro" if before["readonly"] else "rw",
                            "ro_sysfs_before": before["ro_sysfs"],
                            "ro_ioctl_before": before["ro_ioctl"],
                            "holders": before["holders"], "purpose": purpose}
    if partition_of:
        base["partition_of"] = partition_of
    if before["loop_backing_file"]:
        base["loop_backing_file"] = before["loop_backing_file"]
    if before["holders"]:
        base["note"] = ("holders (" + ", ".join(before["holders"]) + ") are recorded, not "
                        "write-blocked by this")
    if before["readonly"]:
        return _log(case, {**base, "enforced": True, "by_kit": False,
                           "how": "already read-only (sysfs ro / BLKROGET)"})
    try:
        set_readonly(path, True)
    except OSError as exc:
        return _log(case, {**base, "enforced": False, "by_kit": False, "how": "BLKROSET",
                           "reason": f"BLKROSET failed: {exc.strerror or exc}"})
    after = state(path)
    rec = {**base, "enforced": after["readonly"], "by_kit": True, "how": "BLKROSET",
           "ro_sysfs": after["ro_sysfs"], "ro_ioctl": after["ro_ioctl"]}
    if not after["readonly"]:
        rec["reason"] = "BLKROSET returned but the device still reads as writable"
    return _log(case, rec)


def record_loop(case: Case, image: str | Path, loop_device: str) -> dict[str, Any]:
    """Record that an image file is seen only through a read-only loop device (once per image
    per case while it holds)."""
    target = os.path.realpath(image)
    name = sysfs.dev_name(loop_device)
    ro = sysfs.is_readonly(name)
    latest = _latest(case).get((LOOP, target))
    if ro and latest and latest.get("enforced"):
        return latest
    rec: dict[str, Any] = {"guarantee": LOOP, "target": target, "device": loop_device,
                           "enforced": ro, "how": "losetup --read-only (loop device read-only)",
                           "by_kit": False}
    if not ro:
        rec["reason"] = f"{loop_device} did not come up read-only"
    return _log(case, rec)


# -- immutable images ---------------------------------------------------------------------------
def make_immutable(path: str | Path, case: Case, *, sha256: str | None = None) -> dict[str, Any]:
    """Make an acquired image read-only: mode ``a-w``, then ``FS_IMMUTABLE_FL`` where the
    filesystem supports it. Returns (and records) what holds."""
    target = os.path.realpath(path)
    latest = _latest(case).get((IMAGE, target))
    if latest and latest.get("enforced") and not latest.get("released") and is_immutable(target):
        return latest
    st = os.stat(target, follow_symlinks=False)
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{target}: not a regular file")
    prev_mode = stat.S_IMODE(st.st_mode)
    base: dict[str, Any] = {"guarantee": IMAGE, "target": target,
                            "previous_mode": f"{prev_mode:04o}", "sha256": sha256}
    if is_immutable(target):
        return _log(case, {**base, "enforced": True, "by_kit": False, "previous": "immutable",
                           "how": "already immutable"})
    os.chmod(target, prev_mode & ~0o222)
    base["previous"] = "mutable"
    try:
        set_immutable(target, True)
    except OSError as exc:
        unsupported = exc.errno in {errno.ENOTTY, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS}
        return _log(case, {**base, "enforced": False, "by_kit": True, "how": MODE_ONLY,
                           "mode": f"{prev_mode & ~0o222:04o}",
                           "reason": ("the filesystem has no immutable flag" if unsupported
                                      else f"FS_IOC_SETFLAGS failed: {exc.strerror or exc}")
                           + "; root can still write a 0444 file"})
    ok = is_immutable(target)
    rec = {**base, "enforced": ok, "by_kit": True, "how": "chattr +i (FS_IMMUTABLE_FL)",
           "mode": f"{prev_mode & ~0o222:04o}"}
    if not ok:
        rec["reason"] = "FS_IOC_SETFLAGS returned but the flag is not set"
    return _log(case, rec)


# -- release and status ---------------------------------------------------------------------------
def release(target: str | Path, case: Case) -> list[dict[str, Any]]:
    """Restore the recorded previous state of a device (and its partitions) or an image this
    case write-blocked; refuses anything else. Returns the ``released`` records."""
    if case.sealed:
        raise CaseError(f"{case.root}: case is sealed; a release could not be audited",
                        hint="the block stays; an administrator can clear it with "
                             "`blockdev --setrw DEV` / `chattr -i FILE`, outside the kit")
    path = Path(target)
    if sysfs.is_block_device(path):
        return _release_device(path, case)
    if path.is_file():
        return _release_image(path, case)
    raise UsageError(f"{target}: not a block device or image file")


def _release_device(path: Path, case: Case) -> list[dict[str, Any]]:
    first = state(path)
    latest = _latest(case)
    nodes = [first["name"], *first["partitions"]]
    mine = [n for n in nodes if _active(latest.get((BLOCK, _node(n))))]
    if not mine:
        raise RefusedError(f"{path}: this case did not write-block it; refusing to make it "
                           "writable", hint="`ckptrescue writeblock status --case C` lists "
                                            "what this case write-blocked")
    for n in mine:
        other = _same_device(latest[(BLOCK, _node(n))], state(_node(n)))
        if other:
            raise RefusedError(f"{_node(n)}: not the device this case write-blocked ({other}); "
                               "refusing to change another device's state")
    busy = [f"{_node(n)} on {m.mountpoint}" for n in mine for m in sysfs.mounts_of_device(n)]
    if busy:
        raise RefusedError(f"{path}: still mounted ({', '.join(busy)}); refusing to make it "
                           "writable under a mount", hint="ckptrescue umount MOUNTPOINT first")
    out = []
    for n in mine:
        rec = latest[(BLOCK, _node(n))]
        if rec.get("previous") == "rw":
            set_readonly(_node(n), False)
        after = state(_node(n))
        out.append(_log(case, {
            "guarantee": BLOCK, "target": _node(n), "dev": after["dev"], "released": True,
            "enforced": False, "by_kit": True, "how": "BLKROSET 0 (writeblock release)",
            "previous": "ro", "restored": rec.get("previous"), "blocked_seq": rec.get("seq"),
            "ro_sysfs": after["ro_sysfs"], "ro_ioctl": after["ro_ioctl"],
            "reason": "released by `ckptrescue writeblock release`"
                      + ("" if not after["readonly"] else
                         "; still read-only for another reason (e.g. a read-only loop)")}))
    return out


def _release_image(path: Path, case: Case) -> list[dict[str, Any]]:
    target = os.path.realpath(path)
    rec = _latest(case).get((IMAGE, target))
    if not (rec and rec.get("by_kit") and not rec.get("released")):
        raise RefusedError(f"{path}: this case did not make it immutable; refusing to make it "
                           "writable", hint="`ckptrescue writeblock status --case C` lists "
                                            "what this case write-blocked")
    if rec.get("previous") != "immutable" and is_immutable(target):
        set_immutable(target, False)
    mode = rec.get("previous_mode")
    if isinstance(mode, str):
        os.chmod(target, int(mode, 8))
    return [_log(case, {"guarantee": IMAGE, "target": target, "released": True,
                        "enforced": False, "by_kit": True,
                        "how": "chattr -i (FS_IMMUTABLE_FL cleared), mode restored",
                        "previous": "immutable", "restored_mode": mode,
                        "blocked_seq": rec.get("seq"),
                        "reason": "released by `ckptrescue writeblock release`"})]


def status(case: Case | None = None) -> list[dict[str, Any]]:
    """What ``case`` write-blocked (its newest record per target) with the state now; without a
    case, every block device that reads as read-only now."""
    rows: list[dict[str, Any]] = []
    if case is None:
        for p in sorted(sysfs.SYS_BLOCK.iterdir()):
            dev = _node(p.name)
            if (sysfs.is_readonly(p.name) and os.path.exists(dev)
                    and sysfs.read_attr(p / "size") not in {None, "0"}):  # not a free loop
                rows.append({"target": dev, "guarantee": BLOCK, "readonly_now": True,
                             "ro_ioctl": _blkroget(dev),
                             "loop_backing_file": sysfs.loop_backing_file(p.name)})
        return rows
    ever = {(d.get("guarantee"), d.get("target")) for r in case.records(ACTION)
            if (d := r.get("details") or {}).get("by_kit")}
    for key, rec in sorted(_latest(case).items(), key=lambda kv: kv[1].get("seq") or 0):
        if key not in ever:
            continue
        row = {"target": key[1], "guarantee": key[0], "blocked": _active(rec),
               "released": bool(rec.get("released")), "previous": rec.get("restored")
               if rec.get("released") else rec.get("previous"), "since_seq": rec.get("seq")}
        if key[0] == BLOCK:
            now = state(key[1]) if sysfs.is_block_device(key[1]) else None
            row["readonly_now"] = None if now is None else now["readonly"]
        elif key[0] == IMAGE:
            row["immutable_now"] = is_immutable(key[1]) if os.path.exists(key[1]) else None
        rows.append(row)
    return rows


def mount_source_device(path: str | Path) -> str | None:
    """The block device node under the filesystem holding ``path`` (by the mount's major:minor,
    so ``/dev/root`` and symlinked sources resolve), or None (tmpfs, ZFS, overlay, ...)."""
    entry = sysfs.mount_of(path)
    if entry is None or entry.major == 0:
        return None
    link = Path(f"/sys/dev/block/{entry.major}:{entry.minor}")
    if not link.exists():
        return None
    node = _node(Path(os.path.realpath(link)).name)
    return node if sysfs.is_block_device(node) else None


def protect_mount_source(path: str | Path, case: Case, *, purpose: str) -> dict[str, Any] | None:
    """Write-block the block device under the mounted filesystem holding ``path`` (refused, and
    recorded as not enforced, when that filesystem is mounted read-write)."""
    dev = mount_source_device(path)
    return protect(dev, case, purpose=purpose) if dev else None


def clear_immutable_tree(root: str | Path) -> list[str]:
    """Clear ``FS_IMMUTABLE_FL`` on every regular file under ``root`` (not audited): only for a
    scratch directory the caller itself made and is about to remove (the drill's images in RAM,
    test directories). Evidence is released with :func:`release`."""
    cleared = []
    for path in Path(root).rglob("*"):
        if path.is_file() and not path.is_symlink() and is_immutable(path):
            set_immutable(path, False)
            cleared.append(str(path))
    return cleared
