"""Read-only facts about block devices from sysfs, ``/proc/self/mountinfo`` and ioctls.

Nothing here writes. Used by devices, samedisk, imaging and mounting.
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

SYS_BLOCK = Path("/sys/class/block")
BLKGETSIZE64 = 0x80081272


def read_attr(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def is_block_device(path: str | Path) -> bool:
    try:
        return stat.S_ISBLK(Path(path).stat().st_mode)
    except OSError:
        return False


def dev_name(path: str | Path) -> str:
    """Kernel name (``loop0``, ``nvme0n1p1``) of a block device node."""
    st = Path(path).stat()
    if not stat.S_ISBLK(st.st_mode):
        raise ValueError(f"{path} is not a block device")
    link = Path(f"/sys/dev/block/{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}")
    return Path(os.path.realpath(link)).name


def sys_dir(name: str) -> Path:
    return Path(os.path.realpath(SYS_BLOCK / name))


def is_partition(name: str) -> bool:
    return (sys_dir(name) / "partition").exists()


def parent_disk(name: str) -> str:
    """The whole-disk name for a partition, or ``name`` itself."""
    if is_partition(name):
        return sys_dir(name).parent.name
    return name


def partitions(name: str) -> list[str]:
    base = sys_dir(name)
    return sorted(p.name for p in base.iterdir() if (p / "partition").exists())


def partition_start_bytes(name: str) -> int:
    """Byte offset of a partition inside its disk (``start`` is in 512-byte units)."""
    value = read_attr(sys_dir(name) / "start")
    return int(value) * 512 if value else 0


def size_bytes(path: str | Path) -> int:
    """Size of a block device (BLKGETSIZE64) or a regular file."""
    if is_block_device(path):
        fd = os.open(path, os.O_RDONLY)
        try:
            buf = fcntl.ioctl(fd, BLKGETSIZE64, b"\0" * 8)
        finally:
            os.close(fd)
        return int(struct.unpack("Q", buf)[0])
    return Path(path).stat().st_size


def logical_sector_size(path: str | Path) -> int:
    if not is_block_device(path):
        return 512
    value = read_attr(sys_dir(dev_name(path)) / "queue" / "logical_block_size")
    if value is None:  # partitions have no queue/; use the disk's
        value = read_attr(sys_dir(parent_disk(dev_name(path))) / "queue" / "logical_block_size")
    return int(value or 512)


def is_readonly(name: str) -> bool:
    return read_attr(sys_dir(name) / "ro") == "1"


def loop_backing_file(name: str) -> str | None:
    return read_attr(sys_dir(name) / "loop" / "backing_file")


def slaves(name: str) -> list[str]:
    d = sys_dir(name) / "slaves"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def holders(name: str) -> list[str]:
    d = sys_dir(name) / "holders"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


@dataclass(frozen=True)
class MountEntry:
    mount_id: int
    major: int
    minor: int
    root: str
    mountpoint: str
    options: tuple[str, ...]
    fstype: str
    source: str
    super_options: tuple[str, ...]

    @property
    def readonly(self) -> bool:
        return "ro" in self.options or "ro" in self.super_options


def _unescape(text: str) -> str:
    return text.encode().decode("unicode_escape") if "\\" in text else text


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Parse ``/proc/self/mountinfo`` (proc(5))."""
    entries: list[MountEntry] = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        f = left.split()
        r = right.split()
        if len(f) < 6 or len(r) < 2:
            continue
        major, minor = (int(x) for x in f[2].split(":"))
        entries.append(MountEntry(
            mount_id=int(f[0]), major=major, minor=minor, root=_unescape(f[3]),
            mountpoint=_unescape(f[4]), options=tuple(f[5].split(",")), fstype=r[0],
            source=_unescape(r[1]), super_options=tuple(r[2].split(",")) if len(r) > 2 else (),
        ))
    return entries


def mounts() -> list[MountEntry]:
    return parse_mountinfo(Path("/proc/self/mountinfo").read_text())


def mount_of(path: str | Path) -> MountEntry | None:
    """The mount holding ``path`` (longest mount point prefix with the same st_dev)."""
    real = os.path.realpath(path)
    st_dev = Path(real).stat().st_dev
    best: MountEntry | None = None
    for entry in mounts():
        mp = entry.mountpoint
        if (real == mp or real.startswith(mp.rstrip("/") + "/")) and os.makedev(
            entry.major, entry.minor
        ) == st_dev and (best is None or len(mp) >= len(best.mountpoint)):
            best = entry
    return best


def mounts_of_device(name: str) -> list[MountEntry]:
    st = Path(f"/dev/{name}").stat() if Path(f"/dev/{name}").exists() else None
    if st is None:
        return []
    return [m for m in mounts()
            if os.makedev(m.major, m.minor) == st.st_rdev]
