"""What filesystems an attached target holds: the whole device, its partitions, and the
filesystems inside volume managers (LVM2 physical volumes), each identified by ``blkid -p``.

Volume managers are looked up by blkid TYPE in :data:`VOLUME_MANAGERS`: a module with
``candidates(runner, info, node, start) -> list[FsCandidate]`` (``storage/lvm.py``). They are not
filesystems (nothing mounts, inspects or locates "an LVM"): they yield the filesystems that do.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.errors import EvidenceError, ToolFailedError, UsageError
from ckptrescue.storage import sysfs
from ckptrescue.storage.loops import attach_slice

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

# blkid TYPE of a volume manager's member -> the module that reads the volumes inside it
VOLUME_MANAGERS: dict[str, str] = {"LVM2_member": "ckptrescue.storage.lvm"}


def blkid(runner: SubprocessRunner, dev: str, *, strict: bool = True) -> dict[str, str]:
    """Low-level probe (``blkid -p``: reads superblocks directly, no cache). Empty when blkid
    found nothing (its exit status 2). When it could not probe (it could not read the device,
    several signatures made it ambivalent, it timed out), ``strict`` raises that, in blkid's
    words: "no filesystem found" would be a statement about the evidence nobody observed."""
    res = runner.run(ToolCall.of("blkid", "-p", "-o", "export", dev, timeout_s=60,
                                 purpose="identify filesystem"))
    if strict and not res.dry_run and res.returncode not in (0, 2):
        said = res.stderr.strip().splitlines()
        why = res.refused or ("timed out" if res.timed_out else
                              f"exit {res.returncode}: {said[-1] if said else 'no message'}")
        raise ToolFailedError(f"blkid -p {dev} could not probe it ({why[:300]})")
    out: dict[str, str] = {}
    for line in res.stdout.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k] = v
    return out


def mounted_uuids(runner: SubprocessRunner, fstype: str) -> set[str]:
    uuids = set()
    for entry in sysfs.mounts():
        if entry.fstype == fstype and entry.source.startswith("/dev/"):
            info = blkid(runner, entry.source, strict=False)
            if info.get("UUID"):
                uuids.add(info["UUID"])
    return uuids


def partition_table(runner: SubprocessRunner, dev: str) -> list[tuple[int, int, int]]:
    """(number, start bytes, size bytes) from the partition table, read by ``partx --show``
    (works where the kernel has no partition support or did not scan the device)."""
    res = runner.run(ToolCall.of("partx", "--show", "-b", "-g", "-o", "NR,START,SECTORS", dev,
                                 timeout_s=60, purpose="read the partition table"))
    out = []
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            out.append((int(parts[0]), int(parts[1]) * 512, int(parts[2]) * 512))
    return out


@dataclass
class FsCandidate:
    """A filesystem (or ZFS member) found on an attached target."""

    node: str  # block device node to mount
    info: dict[str, str]  # blkid -p
    start: int  # byte offset of its first byte in the target (partition / LV start)
    size: int | None
    where: str  # "whole device", "partition 2", "LV vg0/data"
    # (fs offset, length, device offset) pieces when the filesystem is not one contiguous range
    # of the target (an LVM logical volume of several segments, assembled read-only)
    segments: list[tuple[int, int, int]] | None = None
    # an LV of several segments, assembled only when chosen: (PV node, VG name, LogicalVolume)
    pending: tuple[str, str, Any] | None = None

    @property
    def fstype(self) -> str:
        if self.pending:
            return f"? ({len(self.segments or [])} segments, assembled when chosen)"
        return self.info.get("TYPE", "")

    def matches(self, select: str) -> bool:
        s = select.strip()
        return s in {self.node, self.where, self.where.split(" ", 1)[-1],
                     self.where.replace("partition ", "p")}


def volume_manager(fstype: str | None) -> Callable[..., list[FsCandidate]] | None:
    """``candidates(runner, info, node, start)`` of the volume manager whose member has blkid
    TYPE ``fstype``, or None when it is not one."""
    module = VOLUME_MANAGERS.get(fstype or "")
    if module is None:
        return None
    reader: Callable[..., list[FsCandidate]] = importlib.import_module(module).candidates
    return reader


def filesystems(runner: SubprocessRunner, info: dict[str, Any]) -> list[FsCandidate]:
    """Every filesystem on an attached target: the whole device, its partitions (kernel
    partitions, else the table read with ``partx`` and each partition attached as its own
    read-only loop device), and the logical volumes of LVM2 PVs among them."""
    dev = info["device"]
    fs = blkid(runner, dev)
    whole = sysfs.size_bytes(dev) if sysfs.is_block_device(dev) else None
    manager = volume_manager(fs.get("TYPE"))
    if manager is not None:
        return manager(runner, info, dev, 0)
    if fs.get("TYPE"):
        return [FsCandidate(dev, fs, 0, whole, "whole device")]
    name = sysfs.dev_name(dev)
    parts: list[FsCandidate] = []
    for part in sysfs.partitions(name):
        nr = part[len(name):].lstrip("p")
        parts.append(FsCandidate(f"/dev/{part}", blkid(runner, f"/dev/{part}"),
                                 sysfs.partition_start_bytes(part),
                                 sysfs.size_bytes(f"/dev/{part}"), f"partition {nr}"))
    if not parts and fs.get("PTTYPE"):
        for nr, start, size in partition_table(runner, dev):
            pdev = attach_slice(runner, info, start, size, "attach one partition read-only")
            if pdev is not None:
                parts.append(FsCandidate(pdev, blkid(runner, pdev), start, size,
                                         f"partition {nr}"))
    found: list[FsCandidate] = []
    for c in parts:
        manager = volume_manager(c.info.get("TYPE"))
        if manager is not None:
            found += manager(runner, info, c.node, c.start)
        elif c.info.get("TYPE"):
            found.append(c)
    return found


def _realize(runner: SubprocessRunner, info: dict[str, Any], c: FsCandidate) -> FsCandidate:
    """Assemble a chosen multi-segment LV (device-mapper, read-only) and identify it."""
    if c.pending is None:
        return c
    from ckptrescue.storage import lvm

    pv_node, vg, lv = c.pending
    dev = lvm.assemble_lv(runner, info, pv_node, vg, lv)
    if dev is None:
        raise EvidenceError(f"{c.where} has {len(c.segments or [])} segments: assembling them "
                            "read-only needs device-mapper, which this machine does not have",
                            hint="run on a machine with device-mapper (dm_mod)")
    fs = blkid(runner, dev)
    if not fs.get("TYPE"):
        raise EvidenceError(f"{c.where}: no filesystem found (blkid -p)")
    return FsCandidate(dev, fs, c.start, c.size, c.where, segments=c.segments)


def pick_filesystem(runner: SubprocessRunner, info: dict[str, Any], case: Case,
                    select: str | None = None) -> tuple[str, dict[str, str], int]:
    """(node, blkid info, start bytes) of the one filesystem on an attached target, or of the
    one named by ``select`` (``p2``, ``partition 2``, ``vg0/data``, a node)."""
    c = pick_candidate(runner, info, select)
    return c.node, c.info, c.start


def pick_candidate(runner: SubprocessRunner, info: dict[str, Any],
                   select: str | None = None) -> FsCandidate:
    found = filesystems(runner, info)
    if select:
        chosen = [c for c in found if c.matches(select)]
        if not chosen:
            raise UsageError(f"{info['device']}: no filesystem {select!r} (found: "
                             + (", ".join(c.where for c in found) or "none") + ")")
        found = chosen[:1]
    if len(found) == 1:
        return _realize(runner, info, found[0])
    unmapped = "; ".join(f"{u.get('lv', u.get('pv'))}: {u['reason']}"
                         for u in info.get("unmapped_lvs", []))
    if not found:
        raise EvidenceError(f"{info['device']}: no filesystem found (blkid -p)"
                            + (f"; LVM: {unmapped}" if unmapped else ""))
    raise UsageError(f"{info['device']}: several filesystems ("
                     + ", ".join(f"{c.where}: {c.fstype}" for c in found)
                     + "); choose one with --filesystem")
