"""What the guard may know beyond the argv: the evidence and the case's records, identified by
(device, inode) as well as by path, and what this case attached itself.

Identity matters because a path is only one name of a file: a hard link, a bind mount or a
symlinked directory reaches the same inode under another name. A write target is refused when
it *is* evidence (same inode), lies *inside* an evidence directory (an ancestor is one), lies on
a filesystem whose block device is evidence or is backed by evidence (a loop over an evidence
image, a partition or holder of an evidence device), or is any device node but ``/dev/null``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from ckptrescue.guard.kernel import (
    Attachment,
    Mount,
    Place,
    PoolLister,
    Reach,
    Snapshot,
    block_rdev,
    dev_parse,
    is_read_only,
    mounts,
    node_of,
    place_within,
    places,
    reach,
    snapshot,
    still_there,
    sys_dir,
    top_mount_at,
)
from ckptrescue.guard.samedisk import Comparison, Sameness
from ckptrescue.guard.samedisk import compare as compare_media


def _is_block_device(path: str) -> bool:
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        # a path that does not exist yet: only a name directly under /dev looks like a device
        return os.path.dirname(os.path.abspath(path)) == "/dev"


def _read_small_text(path: str, limit: int = 1 << 20) -> str | None:
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError:
        return None
    return None if len(data) > limit else data.decode("utf-8", "replace")


# the host's own trees: no tool output, mount point or image ever goes there
SYSTEM_ROOTS = ("/proc", "/sys", "/dev", "/boot", "/etc", "/usr", "/bin", "/sbin", "/lib",
                "/lib32", "/lib64", "/libx32", "/opt", "/var/lib", "/var/log", "/var/cache",
                "/var/spool", "/run", "/snap", "/efi")


def _kit_roots() -> tuple[str, ...]:
    """The running Python installation and the kit's own code (a write there plants code)."""
    import sys

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, here}
    return tuple(sorted(os.path.realpath(r) for r in roots if r))


def _empty_dir(path: str) -> bool:
    if not os.path.isdir(path) or os.path.islink(path):
        return False
    try:
        with os.scandir(path) as it:
            return not any(True for _ in it)
    except OSError:
        return False


def _ident(path: str, *, follow: bool = True) -> tuple[int, int] | None:
    """(device, inode) of ``path`` (of the link itself when not ``follow``), None if unstattable."""
    try:
        st = os.stat(path, follow_symlinks=follow)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _related_rdevs(rdev: int) -> set[int]:
    """The device, its partitions and the devices stacked on it (holders), recursively."""
    out: set[int] = set()
    todo = [rdev]
    while todo:
        cur = todo.pop()
        if cur in out:
            continue
        out.add(cur)
        sysdir = sys_dir(cur)
        if sysdir is None:
            continue
        subdirs: list[str] = []
        try:
            for entry in os.scandir(sysdir):
                if entry.is_dir() and os.path.exists(os.path.join(entry.path, "partition")):
                    subdirs.append(entry.path)
            holders = os.path.join(sysdir, "holders")
            if os.path.isdir(holders):
                subdirs += [os.path.realpath(os.path.join(holders, h)) for h in os.listdir(holders)]
        except OSError:
            continue
        for sub in subdirs:
            try:
                text = open(os.path.join(sub, "dev")).read().strip()  # noqa: SIM115
                major, minor = (int(x) for x in text.split(":"))
                todo.append(os.makedev(major, minor))
            except (OSError, ValueError):
                continue
    return out


def _loops_backed_by(idents: set[tuple[int, int]]) -> dict[int, str]:
    """Loop devices whose backing file is one of ``idents``: rdev -> backing file."""
    out: dict[int, str] = {}
    try:
        names = [n for n in os.listdir("/sys/block") if n.startswith("loop")]
    except OSError:
        return out
    for name in names:
        try:
            backing = open(f"/sys/block/{name}/loop/backing_file").read().strip()  # noqa: SIM115
            text = open(f"/sys/block/{name}/dev").read().strip()  # noqa: SIM115
        except OSError:
            continue
        ident = _ident(backing)
        if ident is not None and ident in idents:
            major, minor = (int(x) for x in text.split(":"))
            out[os.makedev(major, minor)] = backing
    return out


def _loop_backing(rdev: int) -> str | None:
    sysdir = sys_dir(rdev)
    if sysdir is None:
        return None
    try:
        return open(os.path.join(sysdir, "loop", "backing_file")).read().strip()  # noqa: SIM115
    except OSError:
        return None


@dataclass(frozen=True)
class GuardContext:
    """Evidence, the case's own records, and what this case attached (from its audit log)."""

    evidence_paths: tuple[str, ...] = ()
    is_block_device: Callable[[str], bool] = field(default=_is_block_device)
    protected_paths: tuple[str, ...] = ()  # the case's own records: audit log, artifacts, ...
    # what this case attached and has not released, as the kernel showed it (its audit log's
    # ``safety.attached`` records): loops, mounts, device-mapper devices, ZFS pools
    attachments: tuple[Attachment, ...] = ()
    # the kernel's state now (a detach must find the recorded identity there), and how to list
    # ZFS pools (the runner runs ``zpool list``; None: unknown)
    kernel_snapshot: Callable[[PoolLister | None], Snapshot] = field(default=snapshot)
    block_rdev: Callable[[str], int | None] = field(default=block_rdev)
    # a device number's own node in /dev (what a host-namespace tool is given: ``check.pins``)
    device_node: Callable[[int], str | None] = field(default=node_of)
    pools: PoolLister | None = None
    # where ``zfs mount DATASET`` would mount it (``zfs get mountpoint``, altroot included; the
    # runner asks zfs); None: unknown, and a ZFS mount is refused
    dataset_mountpoint: Callable[[str], str | None] | None = None
    # whether the kernel refuses writes to a block device right now (``/sys/.../ro`` and
    # BLKROGET), and what a write to a device reaches (partitions' disks, stacked devices, loop
    # backing files and devices)
    device_read_only: Callable[[str], bool] = field(default=is_read_only)
    device_reach: Callable[[int], Reach] = field(default=reach)
    # identities of the directories the kit made for tools' outputs (``safety.output_dir``
    # records); None: no case, no such rule (pure judgements, dry runs)
    output_dirs: tuple[tuple[int, int], ...] | None = None
    # the same-disk rule (``guard/samedisk.py``, shared with ``image`` and ``copy``)
    compare_media: Callable[[str, str], Comparison] = field(default=compare_media)
    # reads a small text file the command will consume (a dmsetup table), None if unreadable
    read_text: Callable[[str], str | None] = field(default=_read_small_text)
    # whether a path is an empty directory (a mount point); replaceable in pure tests
    is_empty_dir: Callable[[str], bool] = field(default=lambda p: _empty_dir(p))

    # -- identity ---------------------------------------------------------------------------------
    @cached_property
    def _evidence_ids(self) -> set[tuple[int, int]]:
        ids = {i for p in self.evidence_paths if (i := _ident(p)) is not None}
        for path in self.evidence_paths:  # the backing file of an evidence loop device
            try:
                st = os.stat(path)
            except OSError:
                continue
            if stat.S_ISBLK(st.st_mode):
                backing = _loop_backing(st.st_rdev)
                if backing and (i := _ident(backing)) is not None:
                    ids.add(i)
        return ids

    @cached_property
    def _evidence_rdevs(self) -> set[int]:
        """Block devices that are, hold or are backed by evidence."""
        rdevs: set[int] = set()
        for path in self.evidence_paths:
            try:
                st = os.stat(path)
            except OSError:
                continue
            if stat.S_ISBLK(st.st_mode):
                rdevs |= _related_rdevs(st.st_rdev)
        for rdev in _loops_backed_by(self._evidence_ids):
            rdevs |= _related_rdevs(rdev)
        return rdevs

    @cached_property
    def _evidence_devices(self) -> set[int]:
        """Block devices a write must never reach: evidence devices and their partitions, and
        the device holding a filesystem of evidence (an evidence directory's filesystem)."""
        out: set[int] = set()
        for path in self.evidence_paths:
            try:
                st = os.stat(path)
            except (OSError, ValueError):
                continue
            if stat.S_ISBLK(st.st_mode):
                out |= _with_partitions(st.st_rdev)
            elif stat.S_ISDIR(st.st_mode) and os.major(st.st_dev) != 0:
                out |= _with_partitions(st.st_dev)
        return out

    def reaches_evidence(self, path: str) -> bool:
        """Whether ``path`` is evidence, or a device (or a file on a filesystem of a device)
        whose writes or reads reach evidence: a kit mount of an evidence image, a loop over
        it, a partition of an evidence disk."""
        if self.is_evidence(path):
            return True
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return False
        dev = st.st_rdev if stat.S_ISBLK(st.st_mode) else st.st_dev
        if os.major(dev) == 0:
            return False
        r = self.device_reach(dev)
        return bool(r.devices & self._evidence_devices or r.files & self._evidence_ids
                    or any(self.is_evidence(p) for p in r.paths))

    def same_media_refusal(self, source: str, dest: str) -> str | None:
        """The one same-disk rule of every imaging and copying tool (``ddrescue``, ``dd``,
        ``rsync``; ``image`` and ``copy`` apply the same comparison): a copy of a device or of
        evidence goes to other physical media, proven from sysfs."""
        if self.block_rdev(source) is None and not self.reaches_evidence(source):
            return None
        cmp = self.compare_media(source, dest)
        if cmp.verdict is Sameness.SAME:
            return (f"{dest} is on the same physical disk as {source} ({cmp.reason}); image "
                    "and copy onto separate media")
        if cmp.verdict is Sameness.UNKNOWN:
            return (f"cannot prove that {dest} is on other physical media than {source} "
                    f"({cmp.reason})")
        return None

    def device_refusal(self, path: str) -> str | None:
        """Why a tool may not touch the block device ``path`` now: the kernel reports it
        writable and a write to it would reach evidence (it is, is backed by, or holds a
        filesystem of, evidence — whoever attached it). None for any other path."""
        rdev = self.block_rdev(path)
        if rdev is None or self.device_read_only(path):
            return None
        r = self.device_reach(rdev)
        what = None
        if r.devices & self._evidence_devices:
            what = "is, lies on or holds a filesystem of an evidence device"
        elif r.files & self._evidence_ids or any(self.is_evidence(p) for p in r.paths):
            what = "is backed by an evidence file"
        if what is None:
            return None
        return (f"{path} {what}, and the kernel reports it writable: evidence is reached only "
                "through devices the kernel keeps read-only (the kit's `losetup --read-only` "
                "loops, `writeblock`)")

    # -- where things live in their filesystems (through bind mounts and overlay layers) ----------
    @cached_property
    def _mount_table(self) -> dict[int, Mount]:
        return mounts()

    def places_of(self, path: str) -> set[Place]:
        """``kernel.places``: the path's place in its filesystem, whatever name reaches it."""
        try:
            return places(path, self._mount_table)
        except (OSError, ValueError):
            return set()

    def _existing_places(self, paths: tuple[str, ...]) -> list[Place]:
        out: list[Place] = []
        for p in paths:
            if p and os.path.lexists(p):
                out += self.places_of(p)
        return out

    @cached_property
    def _evidence_places(self) -> list[Place]:
        return self._existing_places(self.evidence_paths)

    @cached_property
    def _protected_places(self) -> list[Place]:
        return self._existing_places(self.protected_paths)

    def _placed_within(self, path: str, outer: list[Place]) -> bool:
        """Whether ``path`` lies at or beneath one of the places ``outer`` in its filesystem
        (a bind mount of an evidence subdirectory, an overlay whose layer is evidence)."""
        return bool(outer) and any(place_within(mine, o) for mine in self.places_of(path)
                                   for o in outer)

    def _places_beneath(self, path: str, inner: list[Place]) -> bool:
        return bool(inner) and any(place_within(i, mine) and i != mine
                                   for mine in self.places_of(path) for i in inner)

    @cached_property
    def _protected_ids(self) -> set[tuple[int, int]]:
        return {i for p in self.protected_paths if (i := _ident(p)) is not None}

    @cached_property
    def _holder_ids(self) -> set[tuple[int, int]]:
        """Identities of every directory that holds evidence or the case's records: writing
        there *as a whole* (an rsync or mount onto it) would replace them."""
        ids: set[tuple[int, int]] = set()
        for path in (*self.evidence_paths, *self.protected_paths):
            cur = os.path.dirname(os.path.realpath(path))
            for _ in range(256):
                ident = _ident(cur)
                if ident is not None:
                    ids.add(ident)
                parent = os.path.dirname(cur)
                if parent == cur:
                    break
                cur = parent
        return ids

    def holds_evidence(self, path: str) -> bool:
        """True when ``path`` is a directory that contains evidence or the case's records."""
        real = os.path.realpath(path)
        for root in (*self.evidence_paths, *self.protected_paths):
            target = os.path.realpath(root)
            if target.startswith(real.rstrip("/") + "/"):
                return True
        ident = _ident(path)
        if ident is not None and ident in self._holder_ids:
            return True
        return self._places_beneath(path, [*self._evidence_places, *self._protected_places])

    def system_path(self, path: str) -> str | None:
        real = os.path.realpath(path)
        if real.startswith("/dev/shm/"):
            return None  # RAM scratch space, not the host's files
        for root in (*SYSTEM_ROOTS, *_kit_roots()):
            if real == root or real.startswith(root.rstrip("/") + "/"):
                return root
        return None

    def is_evidence(self, path: str) -> bool:
        if not path:
            return False
        if _inside(path, self.evidence_paths):
            return True
        return _ancestor_in(path, self._evidence_ids) or self._placed_within(
            path, self._evidence_places)

    def writes_forbidden(self, path: str) -> str | None:
        """A reason why writing ``path`` is forbidden, or None."""
        if not path:
            return "an empty path"
        if self.is_block_device(path):
            return f"writing to block device {path} would change evidence"
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            st = None
        if st is not None and (stat.S_ISCHR(st.st_mode) and path != "/dev/null"):
            return f"{path} is a device node; tools write only to files"
        if path == "/dev/null":
            return None
        root = self.system_path(path)
        if root is not None:
            return f"{path} is under {root}, the host's own files; output goes to the case or a " \
                   "destination of yours"
        if self.holds_evidence(path):
            return f"{path} holds evidence or the case's records; writing it as a whole would " \
                   "replace them"
        if self.is_evidence(path):
            return f"{path} is an evidence path; output must go elsewhere"
        if _inside(path, self.protected_paths) or _ancestor_in(path, self._protected_ids) \
                or self._placed_within(path, self._protected_places):
            return f"{path} is one of the case's own records (audit log, artifacts); never written by tools"
        fs_dev = _fs_device(path)
        if fs_dev is not None and fs_dev in self._evidence_rdevs:
            return (f"{path} lies on a filesystem whose block device is evidence (or is backed "
                    "by evidence); output must go to other media")
        return None

    def output_refusal(self, path: str, *, limit: int = 200_000) -> str | None:
        """Why a tool may not write ``path``: it must lie beneath a directory the kit made for
        outputs (recorded in the log), be no symlink, and — when it exists already — be a file
        with no other hard link, or a directory whose tree holds none and no mount: nothing
        there may alias evidence."""
        if self.output_dirs is None or path == "/dev/null":
            return None
        absolute = os.path.abspath(path)
        try:
            st = os.lstat(absolute)
        except FileNotFoundError:
            st = None
        except (OSError, ValueError) as exc:
            return f"{path}: cannot be examined ({exc})"
        if st is not None and stat.S_ISLNK(st.st_mode):
            return f"{path} is a symlink; a tool writes only files and directories the kit made"
        kit_dirs = set(self.output_dirs)
        cur, inside = absolute if st is not None and stat.S_ISDIR(st.st_mode) else \
            os.path.dirname(absolute), False
        for _ in range(256):
            ident = _ident(cur, follow=False)
            if ident is not None and ident in kit_dirs:
                inside = True
                break
            parent = os.path.dirname(cur)
            if parent == cur:
                break
            cur = parent
        if not inside:
            return (f"{path} is not inside a directory the kit made for this case's outputs; "
                    "give a path in a directory that does not exist yet (the kit creates it)")
        if os.path.realpath(absolute) != absolute and st is not None:
            return f"{path} is reached through a symlink"
        if st is None:
            return None
        if stat.S_ISREG(st.st_mode):
            if any(m.mountpoint == absolute for m in mounts().values()):
                return f"{path} is a mount point (a file bound over the name)"
            return None if st.st_nlink == 1 else (
                f"{path} has {st.st_nlink} hard links: writing it could change another file")
        if not stat.S_ISDIR(st.st_mode):
            return f"{path} is not a regular file or directory"
        for m in mounts().values():  # a mount inside (a bind of evidence over a name)
            if m.mountpoint.startswith(absolute.rstrip("/") + "/"):
                return f"{m.mountpoint} is a mount inside {path}"
        seen = 0
        for root, dirs, files in os.walk(absolute):
            for name in (*dirs, *files):
                seen += 1
                if seen > limit:
                    return f"{path} holds more than {limit} entries; write into a new directory"
                try:
                    est = os.lstat(os.path.join(root, name))
                except OSError:
                    continue
                if est.st_dev != st.st_dev:
                    return f"{os.path.join(root, name)} is another filesystem (a mount)"
                if not stat.S_ISDIR(est.st_mode) and est.st_nlink > 1:
                    return (f"{os.path.join(root, name)} has {est.st_nlink} hard links: a "
                            "tool writing it could change another file (evidence)")
                if stat.S_ISLNK(est.st_mode):
                    real = os.path.realpath(os.path.join(root, name))
                    if not real.startswith(absolute.rstrip("/") + "/"):
                        return (f"{os.path.join(root, name)} is a symlink leading outside "
                                f"{path}")
        return None

    def mount_point_forbidden(self, path: str) -> str | None:
        """Why ``path`` may not be a mount point: it must be an empty directory of yours, not
        evidence, not holding evidence or the case's records, not one of the host's trees."""
        reason = self.writes_forbidden(path)
        if reason:
            return reason
        if not self.is_empty_dir(path):
            return f"{path} is not an empty directory (mounting over files would hide them)"
        return None

    # -- what this case attached, as the kernel shows it now ---------------------------------------
    @cached_property
    def kernel_now(self) -> Snapshot:
        return self.kernel_snapshot(self.pools)

    def _live(self, kind: str, match: Callable[[Attachment], bool]) -> Attachment | None:
        for att in reversed(self.attachments):
            if att.kind == kind and match(att) and still_there(att, self.kernel_now):
                return att
        return None

    def attached_loop(self, dev: str) -> Attachment | None:
        """This case's loop device at the node ``dev`` (any name of it: ``/dev/loopN``,
        ``/dev/block/7:N``, a symlink), still bound to the very file it was attached to."""
        rdev = self.block_rdev(dev)
        if rdev is None:
            return None
        return self._live("loop", lambda a: dev_parse(a.get("rdev") or "") == rdev)

    def attached_mount(self, target: str) -> Attachment | None:
        """This case's mount that ``umount target`` would remove (the top mount on that
        directory), with the same mount id and device as recorded."""
        top = top_mount_at(target, self.kernel_now.mounts)
        if top is None:
            return None
        return self._live("mount", lambda a: a.get("mount_id") == top.mount_id)

    def attached_dm(self, name: str) -> Attachment | None:
        return self._live("dm", lambda a: a.name == name)

    def attached_pool(self, name: str) -> Attachment | None:
        """A pool this case imported read-only, still imported with the same GUID."""
        if self.kernel_now.pools is None:
            return None
        return self._live("pool", lambda a: a.name == name and a.get("readonly") is True)


def _with_partitions(rdev: int) -> set[int]:
    out = {rdev}
    sysdir = sys_dir(rdev)
    if sysdir is None:
        return out
    try:
        for entry in os.scandir(sysdir):
            if entry.is_dir() and os.path.exists(os.path.join(entry.path, "partition")):
                dev = dev_parse(open(os.path.join(entry.path, "dev")).read())  # noqa: SIM115
                if dev is not None:
                    out.add(dev)
    except OSError:
        pass
    return out


def _inside(path: str, roots: tuple[str, ...]) -> bool:
    target = os.path.realpath(path)
    for root in roots:
        real = os.path.realpath(root)
        if target == real or target.startswith(real.rstrip("/") + "/"):
            return True
    return False


def _ancestor_in(path: str, ids: set[tuple[int, int]]) -> bool:
    """True when ``path`` or one of its existing ancestors has an identity in ``ids``."""
    if not ids:
        return False
    cur = os.path.abspath(path)
    seen = 0
    while True:
        ident = _ident(cur)
        if ident is not None and ident in ids:
            return True
        parent = os.path.dirname(cur)
        seen += 1
        if parent == cur or seen > 256:
            return False
        cur = parent


def _fs_device(path: str) -> int | None:
    """st_dev of the filesystem ``path`` is (or would be created) on."""
    cur = os.path.abspath(path)
    for _ in range(256):
        try:
            return os.stat(cur).st_dev
        except (OSError, ValueError):
            parent = os.path.dirname(cur)
            if parent == cur:
                return None
            cur = parent
    return None
