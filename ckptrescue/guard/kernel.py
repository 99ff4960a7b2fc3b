"""What the kernel shows: loop devices, mounts, device-mapper devices and ZFS pools, each with
the identity that tells one instance from the next (device number, backing inode, mount id,
uuid, pool GUID), and whether a block device is read-only right now.

Read-only: ``/proc/self/mountinfo``, ``/sys/block``, ``LOOP_GET_STATUS64`` and ``BLKROGET`` on
a descriptor opened read-only. The ZFS pool list comes from ``zpool list -H``, which only the
runner can run: it hands :func:`snapshot` a function that returns it.

The case's records of what it attached (``safety.attached``) are made from a before/after
:func:`snapshot` around each command that can attach (:func:`appeared`), never from the argv
alone: a command that exits 0 without attaching (``losetup -h``, ``mount -f``) records nothing.
A detach is allowed only for a recorded attachment whose identity the kernel still shows
(:func:`still_there`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ckptrescue.model import JsonObject

LOOP_GET_STATUS64 = 0x4C05
BLKROGET = 0x125E
_LOOP_INFO64 = struct.Struct("=QQQQQIIII64s64s32sQQ")
LO_FLAGS_READ_ONLY = 1
LO_FLAGS_AUTOCLEAR = 4  # set by LOOP_CLR_FD on a device still held open: released at last close
SYS_BLOCK = "/sys/block"
MOUNTINFO = "/proc/self/mountinfo"


def dev_text(rdev: int) -> str:
    return f"{os.major(rdev)}:{os.minor(rdev)}"


def dev_parse(text: str) -> int | None:
    try:
        major, minor = (int(x) for x in str(text).strip().split(":"))
    except (ValueError, AttributeError):
        return None
    return os.makedev(major, minor)


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(1 << 16).decode("utf-8", "surrogateescape").strip()
    except OSError:
        return None


# ---- block devices -----------------------------------------------------------------------------
def sys_dir(rdev: int) -> str | None:
    path = f"/sys/dev/block/{dev_text(rdev)}"
    return os.path.realpath(path) if os.path.exists(path) else None


def block_rdev(path: str) -> int | None:
    """The device number of a block device node (after following links), else None."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_rdev if stat.S_ISBLK(st.st_mode) else None


def node_of(rdev: int) -> str | None:
    """The device's own node in ``/dev`` (``/dev/NAME`` of its sysfs entry), when that node is
    this very device number; None otherwise."""
    sysdir = sys_dir(rdev)
    if sysdir is None:
        return None
    node = f"/dev/{os.path.basename(sysdir)}"
    return node if block_rdev(node) == rdev else None


def _ask_device(node: str, request: int, size: int) -> bytes | None:
    """The ``size``-byte answer of the query ioctl ``request`` on a device node opened
    read-only; None when the node cannot be opened or asked."""
    try:
        fd = os.open(node, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return fcntl.ioctl(fd, request, b"\0" * size)
    except OSError:
        return None
    finally:
        os.close(fd)


def blk_ro(path: str) -> bool | None:
    """``BLKROGET`` on the node: True when the kernel refuses writes to the device right now;
    None when it cannot be asked."""
    buf = _ask_device(path, BLKROGET, 4)
    return None if buf is None else struct.unpack("i", buf)[0] != 0


def sys_ro(rdev: int) -> bool | None:
    sysdir = sys_dir(rdev)
    text = _read(os.path.join(sysdir, "ro")) if sysdir else None
    return None if text is None else text == "1"


def is_read_only(path: str) -> bool:
    """True only when the kernel reports the block device read-only both ways it can be asked
    (the device's ``ro`` attribute and ``BLKROGET`` on the node)."""
    rdev = block_rdev(path)
    if rdev is None:
        return False
    return sys_ro(rdev) is True and blk_ro(path) is not False


def underlying(rdev: int, _depth: int = 0) -> set[int]:
    """The device, the disk of a partition, and every device it is stacked on (``slaves``),
    recursively: what a write to ``rdev`` reaches."""
    out = {rdev}
    sysdir = sys_dir(rdev)
    if sysdir is None or _depth > 16:
        return out
    if os.path.exists(os.path.join(sysdir, "partition")):
        parent = dev_parse(_read(os.path.join(os.path.dirname(sysdir), "dev")) or "")
        if parent is not None:
            out |= underlying(parent, _depth + 1)
    slaves = os.path.join(sysdir, "slaves")
    with contextlib.suppress(OSError):
        for name in os.listdir(slaves):
            sub = dev_parse(_read(os.path.join(slaves, name, "dev")) or "")
            if sub is not None:
                out |= underlying(sub, _depth + 1)
    return out


@dataclass(frozen=True)
class Reach:
    """What a write to a block device reaches: block devices (itself, the disk of a partition,
    every device it is stacked on, a loop's backing device) and the backing files of loops on
    the way (identity and path)."""

    devices: frozenset[int]
    files: frozenset[tuple[int, int]]
    paths: tuple[str, ...]


def reach(rdev: int) -> Reach:
    devices: set[int] = set()
    files: set[tuple[int, int]] = set()
    paths: list[str] = []
    todo = [rdev]
    while todo and len(devices) < 256:
        cur = todo.pop()
        if cur in devices:
            continue
        for dev in underlying(cur):
            if dev in devices:
                continue
            devices.add(dev)
            sysdir = sys_dir(dev)
            if sysdir is None or not os.path.basename(sysdir).startswith("loop"):
                continue
            node = f"/dev/{os.path.basename(sysdir)}"
            lo = loop_status(node, dev) if block_rdev(node) == dev else None
            if lo is None:
                backing = _read(os.path.join(sysdir, "loop", "backing_file"))
                if backing:
                    paths.append(backing)
                    with contextlib.suppress(OSError):
                        st = os.stat(backing)
                        files.add((st.st_dev, st.st_ino))
                        if stat.S_ISBLK(st.st_mode):
                            todo.append(st.st_rdev)
                continue
            files.add((lo.backing_dev, lo.backing_ino))
            paths.append(lo.file)
            if lo.backing_rdev:
                todo.append(lo.backing_rdev)
    return Reach(frozenset(devices), frozenset(files), tuple(paths))


# ---- loop devices ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Loop:
    name: str  # /dev/loopN
    rdev: int
    backing_dev: int
    backing_ino: int
    file: str
    offset: int
    sizelimit: int
    readonly: bool  # LO_FLAGS_READ_ONLY: the kit's loops are all read-only
    backing_rdev: int = 0  # the backing inode's device number when it is a device node
    autoclear: bool = False  # LO_FLAGS_AUTOCLEAR: released when its last holder closes it


def loop_status(node: str, rdev: int | None = None) -> Loop | None:
    """``LOOP_GET_STATUS64`` of a loop device node (None when unbound or not a loop)."""
    rdev = rdev if rdev is not None else block_rdev(node)
    if rdev is None:
        return None
    raw = _ask_device(node, LOOP_GET_STATUS64, _LOOP_INFO64.size)
    if raw is None:
        return None
    f = _LOOP_INFO64.unpack(raw)
    sysdir = sys_dir(rdev)
    backing = _read(os.path.join(sysdir, "loop", "backing_file")) if sysdir else None
    name = f"/dev/{os.path.basename(sysdir)}" if sysdir else node
    return Loop(name=name, rdev=rdev, backing_dev=_decode_dev(f[0]), backing_ino=f[1],
                file=backing or f[9].rstrip(b"\0").decode("utf-8", "replace"), offset=f[3],
                sizelimit=f[4], readonly=bool(f[8] & LO_FLAGS_READ_ONLY),
                backing_rdev=_decode_dev(f[2]), autoclear=bool(f[8] & LO_FLAGS_AUTOCLEAR))


def _decode_dev(huge: int) -> int:
    """The kernel's ``huge_encode_dev`` (as in ``lo_device``) to a Python device number."""
    major = (huge & 0xFFF00) >> 8
    minor = (huge & 0xFF) | ((huge >> 12) & 0xFFF00)
    return os.makedev(major, minor)


def _block_names(prefix: str) -> list[str]:
    """The kernel's block devices whose names start with ``prefix``, sorted (none when
    ``/sys/block`` cannot be read)."""
    try:
        return sorted(n for n in os.listdir(SYS_BLOCK) if n.startswith(prefix))
    except OSError:
        return []


def loops() -> dict[int, Loop]:
    """Every bound loop device, by device number."""
    out: dict[int, Loop] = {}
    for name in _block_names("loop"):
        if _read(f"{SYS_BLOCK}/{name}/loop/backing_file") is None:
            continue  # unbound
        rdev = dev_parse(_read(f"{SYS_BLOCK}/{name}/dev") or "")
        if rdev is None:
            continue
        node = f"/dev/{name}"
        if block_rdev(node) != rdev:
            continue  # no node of ours for it (another namespace's /dev): cannot be asked
        status = loop_status(node, rdev)
        if status is not None:
            out[rdev] = status
    return out


# ---- mounts ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mount:
    mount_id: int
    parent_id: int
    dev: int
    root: str
    mountpoint: str
    fstype: str
    source: str
    readonly: bool
    super_options: str = ""  # the filesystem's own options, as escaped in the table (overlay: its layers)


_OCTAL = re.compile(rb"\\([0-7]{3})")


def _unescape(field_: bytes) -> str:
    return os.fsdecode(_OCTAL.sub(lambda m: bytes([int(m[1], 8)]), field_))


def parse_mountinfo(data: bytes) -> dict[int, Mount]:
    out: dict[int, Mount] = {}
    for line in data.splitlines():
        left, sep, right = line.partition(b" - ")
        f, r = left.split(b" "), right.split(b" ")
        if not sep or len(f) < 6 or len(r) < 2:
            continue
        dev = dev_parse(f[2].decode())
        if dev is None:
            continue
        opts = set(f[5].split(b",")) | (set(r[2].split(b",")) if len(r) > 2 else set())
        out[int(f[0])] = Mount(mount_id=int(f[0]), parent_id=int(f[1]), dev=dev,
                               root=_unescape(f[3]), mountpoint=_unescape(f[4]),
                               fstype=_unescape(r[0]), source=_unescape(r[1]),
                               readonly=b"ro" in opts,
                               super_options=os.fsdecode(r[2]) if len(r) > 2 else "")
    return out


def mounts() -> dict[int, Mount]:
    """Every mount of this mount namespace, by mount id (``/proc/self/mountinfo``)."""
    try:
        with open(MOUNTINFO, "rb") as fh:
            return parse_mountinfo(fh.read())
    except OSError:
        return {}


def mount_id_at(path: str) -> int | None:
    """The id of the mount a path opens on (``/proc/self/fdinfo``: ``mnt_id``): for a mount
    point, the mount on top of it. Asked of the kernel directly, not read from the mount
    table (which can miss entries while other processes mount)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        return fd_mount_id(fd)
    finally:
        os.close(fd)


def fd_mount_id(fd: int) -> int | None:
    """The id of the mount an open descriptor lies on (``/proc/self/fdinfo``: ``mnt_id``); a
    bind mount of the same filesystem has the same ``st_dev`` but another mount id."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as fh:
            for line in fh:
                if line.startswith(b"mnt_id:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def mount_table_with(mount_id: int, tries: int = 5) -> dict[int, Mount] | None:
    """A fresh mount table that shows ``mount_id`` (which the kernel reported for a path), or
    None after ``tries`` reads. A table read while other processes mount and unmount can miss
    entries; the id asked of the path itself cannot."""
    for _ in range(tries):
        table = mounts()
        if mount_id in table:
            return table
    return None


def top_mount_at(path: str, table: Mapping[int, Mount] | None = None) -> Mount | None:
    """The mount a ``umount`` of ``path`` would remove: the last one stacked on it."""
    real = os.path.realpath(path)
    table = mounts() if table is None else table
    probe = mount_id_at(real)
    if probe is not None and probe not in table:
        table = mount_table_with(probe) or table  # the read missed it: read again
    if probe is not None and probe in table and table[probe].mountpoint == real:
        return table[probe]
    on = [m for m in table.values() if m.mountpoint == real]
    if not on:
        return None
    ids = {m.mount_id for m in on}
    tops = [m for m in on if not any(o.parent_id == m.mount_id for o in on if o.mount_id in ids)]
    return (tops or on)[-1]


# ---- where a path lives in its filesystem ------------------------------------------------------
Place = tuple[int, str]  # (the filesystem's device number as the mount table shows it, path in it)


def _split_escaped(text: str, sep: str) -> list[str]:
    """Split on ``sep`` except where a backslash escapes it (overlayfs option values)."""
    out, cur, i = [], "", 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur += text[i + 1]
            i += 2
            continue
        if c == sep:
            out.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    out.append(cur)
    return out


def overlay_layers(super_options: str) -> list[str]:
    """The directories an overlayfs mount is made of (upper, lowers, data layers), from its
    super options as the mount table shows them."""
    layers: list[str] = []
    for raw in super_options.split(","):  # a comma in a value is escaped (\\054) in the table
        key, eq, value = _unescape(os.fsencode(raw)).partition("=")
        if not eq:
            continue
        if key in ("upperdir", "lowerdir", "lowerdir+", "datadir+"):
            layers += [v for v in _split_escaped(value, ":") if v.startswith("/")]
    return layers


def _mount_of(path: str, table: Mapping[int, Mount]) -> Mount | None:
    probe = mount_id_at(path)
    if probe is not None and probe in table:
        return table[probe]
    best: Mount | None = None
    for m in table.values():  # not in the table read: the longest mount point above it
        mp = m.mountpoint.rstrip("/")
        if (path == m.mountpoint or path.startswith(mp + "/")) and (
                best is None or len(m.mountpoint) >= len(best.mountpoint)):
            best = m
    return best


def places(path: str, table: Mapping[int, Mount] | None = None, _depth: int = 0) -> set[Place]:
    """Where ``path`` (or, when it does not exist yet, where it would be created) lives, in the
    coordinates of its filesystem: the mount table's device number and the path from that
    filesystem's root — the same for every name of it, however it is reached (a bind mount of
    a subdirectory, a symlinked or ``..`` path). Through an overlayfs mount, the place in each
    of its layers too (the upper directory, where writes land, and the lower ones it shows)."""
    table = mounts() if table is None else table
    real = os.path.realpath(path)
    anc, tail = real, ""
    for _ in range(256):
        if os.path.lexists(anc) or anc == "/":
            break
        anc, name = os.path.dirname(anc), os.path.basename(anc)
        tail = os.path.join(name, tail) if tail else name
    m = _mount_of(anc, table)
    if m is None:
        return {(0, real)}
    rel = os.path.relpath(anc, m.mountpoint)
    inside = os.path.normpath(os.path.join(m.root, "" if rel == "." else rel, tail))
    out: set[Place] = {(m.dev, inside)}
    if m.fstype == "overlay" and _depth < 8:
        for layer in overlay_layers(m.super_options):
            out |= places(os.path.join(layer, inside.lstrip("/")), table, _depth + 1)
    return out


def place_within(inner: Place, outer: Place) -> bool:
    """Whether the place ``inner`` is ``outer`` or lies beneath it."""
    if inner[0] != outer[0]:
        return False
    base = outer[1].rstrip("/")
    return inner[1] == outer[1] or inner[1].startswith(base + "/")


# ---- device-mapper -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Dm:
    name: str
    rdev: int
    uuid: str
    readonly: bool


def dms() -> dict[str, Dm]:
    out: dict[str, Dm] = {}
    for sysname in _block_names("dm-"):
        name = _read(f"{SYS_BLOCK}/{sysname}/dm/name")
        rdev = dev_parse(_read(f"{SYS_BLOCK}/{sysname}/dev") or "")
        if name is None or rdev is None:
            continue
        out[name] = Dm(name=name, rdev=rdev, uuid=_read(f"{SYS_BLOCK}/{sysname}/dm/uuid") or "",
                       readonly=_read(f"{SYS_BLOCK}/{sysname}/ro") == "1")
    return out


# ---- ZFS pools ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pool:
    name: str
    guid: str
    readonly: bool


def parse_zpool_list(text: str) -> dict[str, Pool]:
    """``zpool list -H -o name,guid,readonly`` output."""
    out: dict[str, Pool] = {}
    for line in text.splitlines():
        f = line.split("\t")
        if len(f) >= 3 and f[0]:
            out[f[0]] = Pool(f[0], f[1], f[2].strip() == "on")
    return out


PoolLister = Callable[[], "dict[str, Pool] | None"]


# ---- snapshots and what changed -----------------------------------------------------------------
@dataclass(frozen=True)
class Snapshot:
    loops: Mapping[int, Loop]
    mounts: Mapping[int, Mount]
    dms: Mapping[str, Dm]
    pools: Mapping[str, Pool] | None  # None: not asked (no zpool, or not a zpool command)
    # the mount id each directory the command names opens on, asked of the directory itself
    dir_mounts: Mapping[str, int | None] = field(default_factory=dict)


def snapshot(pools: PoolLister | None = None, argv: Sequence[str] = ()) -> Snapshot:
    """The kernel's loops, mounts, dm devices (and pools when asked); with ``argv``, also the
    mount each directory it names is on now (what a mount the command makes must change)."""
    return Snapshot(loops(), mounts(), dms(), pools() if pools is not None else None,
                    {d: mount_id_at(d) for d in _ids_named(argv)[1]} if argv else {})


@dataclass(frozen=True)
class Attachment:
    """One thing the kernel showed this case attach, with the identity a detach must match."""

    kind: str  # loop | mount | dm | pool
    name: str  # /dev/loopN | mount point | dm name | pool name
    ident: tuple[tuple[str, Any], ...] = field(default=())

    def get(self, key: str) -> Any:
        return dict(self.ident).get(key)

    def to_json(self) -> JsonObject:
        return {"kind": self.kind, "name": self.name, **dict(self.ident)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Attachment | None:
        kind, name = data.get("kind"), data.get("name")
        if kind not in KINDS or not isinstance(name, str):
            return None
        ident = tuple(sorted((k, v) for k, v in data.items()
                             if k not in {"kind", "name", "argv"} and not isinstance(v, list | dict)))
        return cls(kind, name, ident)

    def key(self) -> tuple[str, str, tuple[tuple[str, Any], ...]]:
        return self.kind, self.name, tuple((k, v) for k, v in self.ident if k in IDENTITY[self.kind])


KINDS = ("loop", "mount", "dm", "pool")
# the fields that must still match for a detach (the rest is description)
IDENTITY = {"loop": ("rdev", "backing_dev", "backing_ino"), "mount": ("mount_id", "dev"),
            "dm": ("rdev", "uuid"), "pool": ("guid",)}


def of_loop(lo: Loop) -> Attachment:
    return Attachment("loop", lo.name, tuple(sorted({
        "rdev": dev_text(lo.rdev), "backing_dev": dev_text(lo.backing_dev),
        "backing_ino": lo.backing_ino, "file": lo.file, "offset": lo.offset,
        "sizelimit": lo.sizelimit, "readonly": lo.readonly}.items())))


def of_mount(m: Mount) -> Attachment:
    return Attachment("mount", m.mountpoint, tuple(sorted({
        "mount_id": m.mount_id, "dev": dev_text(m.dev), "source": m.source, "fstype": m.fstype,
        "readonly": m.readonly}.items())))


def of_dm(d: Dm) -> Attachment:
    return Attachment("dm", d.name, tuple(sorted({
        "rdev": dev_text(d.rdev), "uuid": d.uuid, "readonly": d.readonly}.items())))


def of_pool(p: Pool) -> Attachment:
    return Attachment("pool", p.name, (("guid", p.guid), ("readonly", p.readonly)))


def _ids_named(argv: Sequence[str]) -> tuple[set[tuple[int, int]], set[str]]:
    """Identities (st_dev, st_ino) of the files an argv names (as an argument or after ``=``),
    and the resolved paths of the directories it names."""
    ids: set[tuple[int, int]] = set()
    dirs: set[str] = set()
    for arg in argv[1:]:
        for cand in {arg, arg.partition("=")[2]}:
            if not cand:
                continue
            try:
                st = os.stat(cand)
            except (OSError, ValueError):
                continue
            ids.add((st.st_dev, st.st_ino))
            if stat.S_ISDIR(st.st_mode):
                dirs.add(os.path.realpath(cand))
    return ids, dirs


def appeared(before: Snapshot, after: Snapshot, argv: Sequence[str]) -> list[Attachment]:
    """What the kernel shows after a command and did not before, that this command made: a
    loop over a file the argv names, a mount on a directory it names, a device-mapper device
    or pool it names. (Other processes attach and mount concurrently: only what the command
    could have made is attributed to it, and only what the kernel shows is recorded.)"""
    ids, dirs = _ids_named(argv)
    words = set(argv[1:])
    out: list[Attachment] = []
    for rdev, lo in after.loops.items():
        was = before.loops.get(rdev)
        if was is not None and (was.backing_dev, was.backing_ino) == (lo.backing_dev,
                                                                      lo.backing_ino):
            continue
        if (lo.backing_dev, lo.backing_ino) in ids:
            out.append(of_loop(lo))
    for mid, m in after.mounts.items():
        if same_mount(before.mounts.get(mid), m):
            continue
        real = m.mountpoint
        if any(real == d or real.startswith(d.rstrip("/") + "/") for d in dirs):
            out.append(of_mount(m))
    for d in sorted(dirs):  # a new mount on a named directory that the table read missed
        mid = mount_id_at(d)
        if mid is None or mid in after.mounts:
            continue
        if before.dir_mounts.get(d, mid) == mid:
            continue  # not asked before the command, or already there: not the command's
        table = mount_table_with(mid)
        if table is not None and table[mid].mountpoint == d \
                and not same_mount(before.mounts.get(mid), table[mid]):
            out.append(of_mount(table[mid]))  # (not one that was under the top one before)
    for name, d in after.dms.items():
        was_dm = before.dms.get(name)
        if (was_dm is None or was_dm.rdev != d.rdev) and name in words:
            out.append(of_dm(d))
    if after.pools is not None and before.pools is not None:
        for name, p in after.pools.items():
            if name not in before.pools and (name in words or p.guid in words):
                out.append(of_pool(p))
    return out


def same_mount(was: Mount | None, now: Mount) -> bool:
    """Whether ``now`` is the mount ``was`` (read earlier with the same id). The kernel hands
    out the lowest free mount id: one unmounted by another process while a command ran is
    given to the next mount, maybe the command's own. The same id is the same mount only on
    the same device, at the same place, under the same parent."""
    return was is not None and (was.dev, was.mountpoint, was.parent_id, was.root) == \
        (now.dev, now.mountpoint, now.parent_id, now.root)


def still_there(att: Attachment, snap: Snapshot) -> bool:
    """Whether the kernel still shows this very attachment (same identity)."""
    if att.kind == "loop":
        rdev = dev_parse(att.get("rdev") or "")
        lo = snap.loops.get(rdev) if rdev is not None else None
        if lo is None and rdev is not None and block_rdev(att.name) == rdev:
            lo = loop_status(att.name, rdev)  # not in the scan: ask the device itself
        return lo is not None and dev_text(lo.backing_dev) == att.get("backing_dev") and \
            lo.backing_ino == att.get("backing_ino")
    if att.kind == "mount":
        m = snap.mounts.get(att.get("mount_id"))
        if m is not None:
            return dev_text(m.dev) == att.get("dev") and m.mountpoint == att.name
        # not in the table read: ask the kernel directly whether it is still mounted there
        # (a table read can miss entries while other processes mount and unmount)
        if mount_id_at(att.name) != att.get("mount_id"):
            return False
        try:
            return dev_text(os.stat(att.name).st_dev) == att.get("dev")
        except OSError:
            return False
    if att.kind == "dm":
        d = snap.dms.get(att.name)
        return d is not None and dev_text(d.rdev) == att.get("rdev") and d.uuid == att.get("uuid")
    if att.kind == "pool":
        if snap.pools is None:
            return True  # not asked: unknown, kept
        p = snap.pools.get(att.name)
        return p is not None and p.guid == att.get("guid")
    return False


def release_pending(live: Iterable[Attachment], before: Snapshot,
                    after: Snapshot) -> list[Attachment]:
    """The recorded loops a command marked for release that the kernel still shows: ``losetup
    -d`` of a device another process holds open (a udev probe, a scan of the loop devices, a
    reader) exits 0 and only sets ``LO_FLAGS_AUTOCLEAR``; the kernel detaches it when the last
    holder closes it."""
    out: list[Attachment] = []
    for att in live:
        rdev = dev_parse(att.get("rdev") or "") if att.kind == "loop" else None
        lo = after.loops.get(rdev) if rdev is not None else None
        was = before.loops.get(rdev) if rdev is not None else None
        if lo is not None and lo.autoclear and not (was is not None and was.autoclear) \
                and still_there(att, after):
            out.append(att)
    return out


def gone(live: Iterable[Attachment], snap: Snapshot,
         again: Callable[[], Snapshot] | None = None) -> list[Attachment]:
    """The recorded attachments the kernel no longer shows (detached, by whatever means);
    with ``again``, an absence is confirmed by a second, fresh read before it counts."""
    missing = [a for a in live if not still_there(a, snap)]
    if missing and again is not None:
        fresh = again()
        missing = [a for a in missing if not still_there(a, fresh)]
    return missing
