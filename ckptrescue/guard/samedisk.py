"""Is a destination on the same physical media as a source? (sysfs only, read-only)

Both ends are resolved to their physical leaves: partitions go to their disk, loop devices to the
filesystem holding their backing file, dm/LVM/md/dm-crypt (non-empty ``slaves/``) to every slave,
recursively. A leaf is identified by the resolved ``device`` link (for NVMe this is the
controller, so two namespaces of one drive are one leaf) plus its serial/WWID when present.
tmpfs/ramfs and zram/brd are the leaf ``ram``. Anything else with a major-0 device (btrfs,
overlayfs, ZFS, NFS, FUSE) is UNKNOWN, and callers refuse on UNKNOWN.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ckptrescue.guard import sysfs

RAM_FSTYPES = {"tmpfs", "ramfs", "devtmpfs"}
RAM_DISKS = ("zram", "ram", "brd")


class Sameness(StrEnum):
    SAME = "same"
    DIFFERENT = "different"
    UNKNOWN = "unknown"


class UnknownMediaError(Exception):
    """The physical media behind a path cannot be determined from sysfs."""


@dataclass(frozen=True)
class Comparison:
    verdict: Sameness
    source_leaves: tuple[str, ...]
    dest_leaves: tuple[str, ...]
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"verdict": str(self.verdict), "source_leaves": list(self.source_leaves),
                "dest_leaves": list(self.dest_leaves), "reason": self.reason}


def _existing(path: Path) -> Path:
    p = path
    while not p.exists():
        if p.parent == p:
            break
        p = p.parent
    return p


def physical_leaves(path: str | Path, _depth: int = 0) -> frozenset[str]:
    """Physical leaves under a block device node, or under the filesystem holding a path."""
    if _depth > 16:
        raise UnknownMediaError(f"{path}: device stack too deep")
    p = _existing(Path(path))
    st = Path(p).stat()
    if stat.S_ISBLK(st.st_mode):
        return _block_leaves(sysfs.dev_name(p), _depth)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    entry = sysfs.mount_of(p)
    if entry is not None and entry.fstype in RAM_FSTYPES:
        return frozenset({"ram"})
    if major == 0:
        fstype = entry.fstype if entry else "unknown"
        raise UnknownMediaError(
            f"{p} is on {fstype} ({major}:{minor}), whose physical devices sysfs cannot name"
        )
    link = Path(f"/sys/dev/block/{major}:{minor}")
    if not link.exists():
        raise UnknownMediaError(f"{p}: no /sys/dev/block/{major}:{minor}")
    return _block_leaves(Path(os.path.realpath(link)).name, _depth)


def _block_leaves(name: str, depth: int) -> frozenset[str]:
    disk = sysfs.parent_disk(name)
    if disk.startswith("loop"):
        backing = sysfs.loop_backing_file(disk)
        if not backing:
            raise UnknownMediaError(f"/dev/{disk}: loop device without a backing file")
        if backing.endswith(" (deleted)"):
            raise UnknownMediaError(f"/dev/{disk}: backing file was deleted")
        return physical_leaves(backing, depth + 1)
    if disk.startswith(RAM_DISKS):
        return frozenset({"ram"})
    slaves = sysfs.slaves(disk)
    if slaves:
        out: set[str] = set()
        for s in slaves:
            out |= _block_leaves(s, depth + 1)
        return frozenset(out)
    return frozenset({leaf_identity(disk)})


def leaf_identity(disk: str) -> str:
    base = sysfs.sys_dir(disk)
    device = base / "device"
    ident = os.path.realpath(device) if device.exists() else f"/sys/class/block/{disk}"
    nvme = nvme_identity(Path(ident)) if disk.startswith("nvme") else None
    if nvme:
        return nvme
    serial = (sysfs.read_attr(base / "wwid") or sysfs.read_attr(device / "wwid")
              or sysfs.read_attr(device / "serial"))
    return f"{ident}#{serial}" if serial else ident


def nvme_identity(device_dir: Path) -> str | None:
    """One identity per NVM subsystem (= one drive): every namespace and every controller of it.

    A namespace block device's ``device`` is its controller (``/sys/class/nvme/nvmeN``) or, with
    native multipath, the subsystem (``/sys/class/nvme-subsystem/nvme-subsysN``); both carry
    ``subsysnqn`` and ``serial``. The namespace's own ``wwid`` differs per namespace and must not
    be used: two namespaces of one drive are the same physical media.
    """
    nqn = sysfs.read_attr(device_dir / "subsysnqn")
    if not nqn:
        return None
    serial = sysfs.read_attr(device_dir / "serial") or ""
    return f"nvme-subsystem:{nqn}#{serial}"


def compare(source: str | Path, dest: str | Path) -> Comparison:
    """SAME if the leaf sets intersect, DIFFERENT if not, UNKNOWN when either is unknowable."""
    try:
        src = physical_leaves(source)
    except (UnknownMediaError, OSError) as exc:
        return Comparison(Sameness.UNKNOWN, (), (), f"source: {exc}")
    try:
        dst = physical_leaves(dest)
    except (UnknownMediaError, OSError) as exc:
        return Comparison(Sameness.UNKNOWN, tuple(sorted(src)), (), f"destination: {exc}")
    common = src & dst
    if common:
        return Comparison(Sameness.SAME, tuple(sorted(src)), tuple(sorted(dst)),
                          "both sit on " + ", ".join(sorted(common)))
    return Comparison(Sameness.DIFFERENT, tuple(sorted(src)), tuple(sorted(dst)),
                      "no physical device in common")
