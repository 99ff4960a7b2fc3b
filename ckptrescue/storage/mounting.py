"""``mount`` / ``umount``: read-only mounts of evidence, with write protection at two layers.

1. Block layer: an image file is attached with ``losetup --read-only`` (``-P`` for partition
   tables); a block device gets ``BLKROSET`` on it and its partitions (:mod:`writeblock`,
   recorded as ``safety.kernel``; the block stays after ``umount`` until ``ckptrescue writeblock
   release``). ``/sys/class/block/*/ro`` is read back for the device and every partition before
   anything mounts.
2. Filesystem: XFS ``ro,norecovery`` (+ ``nouuid`` when a filesystem with the same UUID is
   mounted), ext3/ext4 ``ro,noload``; other types ``ro``. A plain ``ro`` mount would replay a
   dirty journal and change the disk.

What was attached is recorded in ``CASE/work/mounts/<id>.json`` so that ``umount`` detaches exactly
that (after checking that the loop device still points at the same backing file).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.errors import EvidenceError, RefusedError, ToolFailedError, UsageError
from ckptrescue.model import Finding, Severity
from ckptrescue.storage import sysfs

if TYPE_CHECKING:
    from ckptrescue.case import Case

RO_OPTIONS = {"xfs": "ro,norecovery", "ext4": "ro,noload", "ext3": "ro,noload",
              "ext2": "ro", "vfat": "ro", "exfat": "ro", "ntfs": "ro", "ntfs3": "ro",
              "btrfs": "ro,nologreplay", "iso9660": "ro", "squashfs": "ro"}


# nothing on the evidence runs, and no set-uid bit or device node from it counts
EVIDENCE_MOUNT_OPTIONS = ",nosuid,nodev,noexec"


def ro_options(fstype: str, kernel: str | None = None) -> str:
    """The read-only, no-replay mount options for ``fstype`` on this kernel. btrfs spells
    "do not replay the log tree" ``rescue=nologreplay`` since Linux 5.9; the old
    ``nologreplay`` is rejected by newer kernels ("Unknown parameter")."""
    if fstype == "btrfs":
        release = kernel if kernel is not None else os.uname().release
        nums = [int(x) for x in release.split("-")[0].split(".")[:2] if x.isdigit()]
        if len(nums) == 2 and tuple(nums) < (5, 9):
            return "ro,nologreplay" + EVIDENCE_MOUNT_OPTIONS
        return "ro,rescue=nologreplay" + EVIDENCE_MOUNT_OPTIONS
    return RO_OPTIONS.get(fstype, "ro") + EVIDENCE_MOUNT_OPTIONS


@dataclass
class MountResult:
    mountpoint: str
    device: str  # the node that was mounted (a partition when the image is partitioned)
    fstype: str
    options: str
    target: str
    loop_device: str | None = None
    backing_file: str | None = None
    set_readonly: list[str] = field(default_factory=list)
    partition_start: int = 0
    uuid: str | None = None
    extra_loops: list[dict[str, Any]] = field(default_factory=list)
    dm_devices: list[str] = field(default_factory=list)  # read-only LV assemblies (dmsetup)
    segments: list[list[int]] | None = None  # [fs offset, length, device offset] of an LV
    zfs_pool: str | None = None  # in-core name of a pool imported read-only (ZFS members)
    members: list[dict[str, Any]] = field(default_factory=list)  # other pool members attached
    datasets: list[dict[str, Any]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["findings"] = [f.to_json() for f in self.findings]
        return data


def _state_dir(case: Case) -> Path:
    d = case.work_dir / "mounts"
    d.mkdir(exist_ok=True)
    return d


def _state_path(case: Case, mountpoint: str) -> Path:
    key = hashlib.sha256(os.path.realpath(mountpoint).encode()).hexdigest()[:16]
    return _state_dir(case) / f"{key}.json"


def mount_state(case: Case, mountpoint: str | Path) -> dict[str, Any] | None:
    """What :func:`mount` recorded for ``mountpoint`` in this case (None if not a kit mount)."""
    path = _state_path(case, str(mountpoint))
    return json.loads(path.read_text()) if path.exists() else None


def zfs_mount_holding(case: Case, path: str | Path) -> dict[str, Any] | None:
    """The record of a ZFS pool this case imported whose altroot holds ``path``, if any."""
    real = os.path.realpath(path)
    for rec in sorted(_state_dir(case).glob("*.json")):
        data = json.loads(rec.read_text())
        mp = os.path.realpath(str(data.get("mountpoint", "")))
        if data.get("zfs_pool") and (real == mp or real.startswith(mp.rstrip("/") + "/")):
            return dict(data)
    return None


def blkid(runner: SubprocessRunner, dev: str) -> dict[str, str]:
    """Low-level probe (``blkid -p``: reads superblocks directly, no cache)."""
    res = runner.run(ToolCall.of("blkid", "-p", "-o", "export", dev, timeout_s=60,
                                 purpose="identify filesystem"))
    out: dict[str, str] = {}
    for line in res.stdout.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k] = v
    return out


def _mounted_uuids(runner: SubprocessRunner, fstype: str) -> set[str]:
    uuids = set()
    for entry in sysfs.mounts():
        if entry.fstype == fstype and entry.source.startswith("/dev/"):
            info = blkid(runner, entry.source)
            if info.get("UUID"):
                uuids.add(info["UUID"])
    return uuids


@contextlib.contextmanager
def attached(target: str | Path, *, case: Case, partscan: bool = True,
             protect_device: bool = True, require_block: bool = True,
             purpose: str = "attached as evidence") -> Iterator[dict[str, Any]]:
    """Attach ``target`` read-only for the duration (image files only get a loop device; a
    block device's write block stays: see :mod:`writeblock`)."""
    info = attach(target, case=case, partscan=partscan, protect_device=protect_device,
                  require_block=require_block, purpose=purpose)
    try:
        yield info
    finally:
        release(info, case=case)


def attach(target: str | Path, *, case: Case, partscan: bool = True,
           protect_device: bool = True, require_block: bool = True,
           purpose: str = "attached as evidence") -> dict[str, Any]:
    """Make ``target`` available as a read-only block device; returns what was done.

    Image files get a read-only loop device. A block device is write-blocked at the block layer
    (``BLKROSET`` on it and its partitions, :func:`writeblock.protect`; the block stays after
    release) when ``protect_device``. Write-protecting a device under a mount is refused (it
    would make a live filesystem fail its writes): with ``require_block`` (mounting) that is an
    error, without it (inspection) the refusal is recorded and the caller goes on reading.
    """
    from ckptrescue.storage import writeblock

    runner = SubprocessRunner(case)
    path = Path(target)
    if not path.exists():
        raise EvidenceError(f"{path}: no such image or device")
    info: dict[str, Any] = {"target": str(path), "loop_device": None, "backing_file": None,
                            "set_readonly": []}
    if sysfs.is_block_device(path):
        dev = str(path)
    elif path.is_file():
        argv = ["losetup", "--read-only", "--find", "--show"]
        if partscan:
            argv.append("-P")
        res = runner.run(ToolCall(argv=(*argv, str(path)), timeout_s=60,
                                  purpose="attach image read-only"))
        if res.refused:
            raise RefusedError(res.refused)
        if res.returncode != 0:
            raise ToolFailedError(f"losetup failed: {res.stderr.strip()}")
        dev = res.stdout.strip()
        info["loop_device"] = dev
        info["backing_file"] = sysfs.loop_backing_file(sysfs.dev_name(dev))
    else:
        raise EvidenceError(f"{path}: not an image file or block device")
    info["device"] = dev
    name = sysfs.dev_name(dev)
    nodes = [name, *sysfs.partitions(name)]
    if info["loop_device"] is not None:
        # the kit's own loop device: read-only by LO_FLAGS_READ_ONLY, never BLKROSET (that
        # would outlive the detach and make the next user of this loop read-only)
        writeblock.record_loop(case, path, dev)
        still_rw = [f"/dev/{n}" for n in nodes if not sysfs.is_readonly(n)]
        if still_rw:
            release(info, case=case)
            raise RefusedError(f"{', '.join(still_rw)} did not come up read-only")
    elif protect_device:
        rec = writeblock.protect(dev, case, purpose=purpose, refuse_any_mount=require_block)
        info["write_block"] = {k: rec.get(k) for k in ("target", "enforced", "how", "previous",
                                                         "by_kit", "reason")}
        info["set_readonly"] = list(rec.get("set_now") or [])
        still_rw = [f"/dev/{n}" for n in nodes if not sysfs.is_readonly(n)]
        if require_block and not rec.get("enforced"):
            raise RefusedError(f"{path}: {rec.get('reason') or 'not write-blocked'}; refusing to "
                               "mount a writable device",
                               hint="freeze and unmount it first, or image it / copy from it")
        if require_block and still_rw:
            raise RefusedError(f"cannot make {', '.join(still_rw)} read-only at the block layer")
    info["ro_verified"] = {f"/dev/{n}": sysfs.is_readonly(n) for n in nodes}
    case.log("storage.attached", info)
    return info


def release(info: dict[str, Any], *, case: Case) -> list[str]:
    """Undo exactly what :func:`attach` (and :func:`filesystems`) attached; returns what could
    not be undone (also logged), so that callers keep their records of it. A block device's
    write block (BLKROSET) is NOT cleared: it stays until ``ckptrescue writeblock release``."""
    runner = SubprocessRunner(case)
    problems: list[str] = []
    for dm_name in reversed(info.get("dm_devices", [])):
        res = runner.run(ToolCall.of("dmsetup", "remove", "--noudevsync", dm_name, timeout_s=60,
                                     purpose="remove the read-only LV assembly the kit made"))
        if res.returncode != 0:
            problems.append(f"dmsetup remove {dm_name}: {res.stderr.strip()[:200]}")
    for extra in info.get("extra_loops", []):
        problems += _detach(runner, case, extra["device"], extra["backing_file"])
    loopdev = info.get("loop_device")
    if loopdev:
        problems += _detach(runner, case, loopdev, info.get("backing_file"))
    case.log("storage.released", {"target": info.get("target"), "loop_device": loopdev,
                                  "write_block_kept": info.get("set_readonly") or [],
                                  "problems": problems})
    return problems


def _detach(runner: SubprocessRunner, case: Case, loopdev: str, backing: str | None) -> list[str]:
    current = sysfs.loop_backing_file(Path(loopdev).name)
    if current != backing:
        case.log("storage.detach_skipped", {"device": loopdev, "expected": backing,
                                            "found": current})
        return []
    res = runner.run(ToolCall.of("losetup", "-d", loopdev, timeout_s=60,
                                 purpose="detach the loop device the kit attached"))
    return [] if res.returncode == 0 else [f"losetup -d {loopdev}: {res.stderr.strip()[:200]}"]


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


def _attach_slice(runner: SubprocessRunner, info: dict[str, Any], start: int, size: int,
                  purpose: str) -> str | None:
    """A read-only loop device over ``[start, start+size)`` of the target (recorded in
    ``info["extra_loops"]`` so that :func:`release` detaches it)."""
    backing = info.get("backing_file") or info["device"]
    res = runner.run(ToolCall.of(
        "losetup", "--read-only", "--find", "--show", "--offset", str(start),
        "--sizelimit", str(size), backing, timeout_s=60, purpose=purpose))
    if res.returncode != 0:
        return None
    pdev = res.stdout.strip()
    info.setdefault("extra_loops", []).append({
        "device": pdev, "backing_file": sysfs.loop_backing_file(sysfs.dev_name(pdev)),
        "offset": start})
    if not sysfs.is_readonly(sysfs.dev_name(pdev)):
        raise RefusedError(f"{pdev} did not come up read-only")
    return pdev


def _read_at(node: str) -> Any:
    def read(off: int, n: int) -> bytes:
        fd = os.open(node, os.O_RDONLY)
        try:
            return os.pread(fd, n, off)
        finally:
            os.close(fd)
    return read


def _lvm_candidates(runner: SubprocessRunner, info: dict[str, Any], pv_node: str,
                    pv_start: int) -> list[FsCandidate]:
    """Logical volumes of the LVM2 PV on ``pv_node`` (read without LVM or device-mapper): each
    LV that lies in one contiguous range of this PV gets its own read-only loop device; the
    others are listed in ``info["unmapped_lvs"]``."""
    from ckptrescue.parsers import lvm_metadata

    try:
        pv = lvm_metadata.read_pv(_read_at(pv_node))
    except (lvm_metadata.LvmError, OSError) as exc:
        info.setdefault("unmapped_lvs", []).append({"pv": pv_node, "reason": str(exc)})
        return []
    here = pv.pv_name
    found: list[FsCandidate] = []
    for lv in pv.vg.lvs:
        name = f"{pv.vg.name}/{lv.name}"
        segs = lv.segments
        pieces_of = [[pv_start + sg.pv_offset, pv_start + sg.pv_offset + sg.length]
                     for sg in segs if sg.pv == here and sg.pv_offset is not None]
        if "VISIBLE" not in lv.status:
            info.setdefault("unmapped_lvs", []).append({
                "lv": name, "segments": len(segs), "pieces": pieces_of, "reason": "hidden LV (a component of "
                "another: raid image, cache origin, thin data, snapshot store): not mapped"})
            continue
        if not segs or not all(sg.linear and sg.pv == here for sg in segs):
            kinds = ", ".join(sorted({sg.type for sg in segs})) or "no segments"
            info.setdefault("unmapped_lvs", []).append({
                "lv": name, "segments": len(segs), "pieces": pieces_of, "reason":
                f"segment types {kinds}, or on other PVs: not mapped (only linear segments on "
                "this PV are)"})
            continue
        if len(segs) == 1:
            seg = segs[0]
            assert seg.pv_offset is not None
            start = pv_start + seg.pv_offset
            dev = _attach_slice(runner, info, start, seg.length, f"attach LV {name} read-only")
            fs = blkid(runner, dev) if dev else {}
            if not fs.get("TYPE"):
                info.setdefault("unmapped_lvs", []).append({
                    "lv": name, "segments": 1, "pieces": [[start, start + seg.length]],
                    "reason": "no filesystem found (blkid -p)" if dev else "could not attach"})
                continue
            found.append(FsCandidate(str(dev), fs, start, seg.length, f"LV {name}"))
            continue
        pieces = [(sg.lv_offset, sg.length, pv_start + (sg.pv_offset or 0)) for sg in segs]
        found.append(FsCandidate("", {}, pieces[0][2], lv.size, f"LV {name}", segments=pieces,
                                 pending=(pv_node, pv.vg.name, lv)))
    info.setdefault("lvm", []).append({"vg": pv.vg.name, "pv": here, "pv_uuid": pv.uuid,
                                       "lvs": [lv.name for lv in pv.vg.lvs]})
    return found


def _assemble_lv(runner: SubprocessRunner, info: dict[str, Any], pv_node: str, vg: str,
                 lv: Any) -> str | None:
    """A read-only device-mapper device of linear ``lv`` over the read-only ``pv_node``
    (``dmsetup create --readonly``, recorded in ``info["dm_devices"]``); None without dm."""
    if not os.path.exists("/dev/mapper/control"):
        return None
    if not sysfs.is_readonly(sysfs.dev_name(pv_node)):
        raise RefusedError(f"{pv_node} is not read-only: refusing to assemble an LV over it")
    import re
    import uuid

    from ckptrescue.guard import KIT_DM_PREFIX

    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", f"{vg}-{lv.name}")
    dm_name = f"{KIT_DM_PREFIX}{uuid.uuid4().hex[:8]}-{safe}"[:120]
    table = "".join(f"{sg.lv_offset // 512} {sg.length // 512} linear {pv_node} "
                    f"{(sg.pv_offset or 0) // 512}\n" for sg in lv.segments)
    assert runner.case is not None
    tdir = runner.case.work_dir / "lvm"
    tdir.mkdir(exist_ok=True)
    tfile = tdir / f"{dm_name}.table"
    tfile.write_text(table)
    res = runner.run(ToolCall.of("dmsetup", "create", "--readonly", "--noudevsync", dm_name,
                                 str(tfile), timeout_s=60,
                                 purpose=f"assemble LV {vg}/{lv.name} read-only"))
    if res.refused:
        raise RefusedError(res.refused)
    if res.returncode != 0:
        raise ToolFailedError(f"dmsetup create {dm_name}: {res.stderr.strip()[:300]}")
    info.setdefault("dm_devices", []).append(dm_name)
    res = runner.run(ToolCall.of("dmsetup", "info", "-c", "--noheadings", "-o", "blkdevname",
                                 dm_name, timeout_s=60, purpose="device node of the assembly"))
    kname = res.stdout.strip()
    if res.returncode != 0 or not kname:
        raise ToolFailedError(f"dmsetup info {dm_name}: no device name "
                              f"({res.stderr.strip()[:200]})")
    if not sysfs.is_readonly(kname):
        raise RefusedError(f"{dm_name} ({kname}) did not come up read-only")
    return f"/dev/{kname}"


def filesystems(runner: SubprocessRunner, info: dict[str, Any]) -> list[FsCandidate]:
    """Every filesystem on an attached target: the whole device, its partitions (kernel
    partitions, else the table read with ``partx`` and each partition attached as its own
    read-only loop device), and the logical volumes of LVM2 PVs among them."""
    dev = info["device"]
    fs = blkid(runner, dev)
    whole = sysfs.size_bytes(dev) if sysfs.is_block_device(dev) else None
    if fs.get("TYPE") == "LVM2_member":
        return _lvm_candidates(runner, info, dev, 0)
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
            pdev = _attach_slice(runner, info, start, size, "attach one partition read-only")
            if pdev is not None:
                parts.append(FsCandidate(pdev, blkid(runner, pdev), start, size,
                                         f"partition {nr}"))
    found: list[FsCandidate] = []
    for c in parts:
        if c.info.get("TYPE") == "LVM2_member":
            found += _lvm_candidates(runner, info, c.node, c.start)
        elif c.info.get("TYPE"):
            found.append(c)
    return found


def _realize(runner: SubprocessRunner, info: dict[str, Any], c: FsCandidate) -> FsCandidate:
    """Assemble a chosen multi-segment LV (device-mapper, read-only) and identify it."""
    if c.pending is None:
        return c
    pv_node, vg, lv = c.pending
    dev = _assemble_lv(runner, info, pv_node, vg, lv)
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


def mount(target: str | Path, mountpoint: str | Path, *, case: Case,
          select: str | None = None, members: list[str] | None = None) -> MountResult:
    """Mount ``target`` (image file or block device) read-only without log replay.

    ``members``: the other devices or images of a ZFS pool (mirror, raidz, several vdevs),
    each attached read-only like ``target``."""
    mp = Path(os.path.abspath(mountpoint))
    if sysfs.mounts() and any(m.mountpoint == os.path.realpath(mp) for m in sysfs.mounts()):
        raise UsageError(f"{mp} is already a mount point")
    if mp.is_dir() and any(mp.iterdir()):
        raise UsageError(f"{mp} is not empty: mounting over it would hide its files; "
                         "choose an empty directory")
    mp.mkdir(parents=True, exist_ok=True)
    state = _state_path(case, str(mp))
    if state.exists():
        raise UsageError(f"{mp}: the case already has a mount recorded there; umount it first")
    info = attach(target, case=case)
    runner = SubprocessRunner(case)
    try:
        cand = pick_candidate(runner, info, select)
        if not cand.info.get("TYPE"):
            raise EvidenceError(f"{cand.where}: no filesystem found (blkid -p)")
    except BaseException:
        _release_or_keep(info, case, state)
        raise
    node, fsinfo, start = cand.node, cand.info, cand.start
    fstype = fsinfo["TYPE"]
    if fstype == "zfs_member":
        return _mount_zfs(runner, case, info, node, fsinfo, start, target, mp, state,
                          members or [])
    if members:
        _release_or_keep(info, case, state)
        raise UsageError(f"{target} holds {fstype}, not a ZFS member: --member is for the other "
                         "devices of a ZFS pool")
    try:
        opts = ro_options(fstype)
        findings: list[Finding] = []
        uuid = fsinfo.get("UUID")
        if fstype == "xfs" and uuid and uuid in _mounted_uuids(runner, "xfs"):
            opts += ",nouuid"
            findings.append(Finding("MT002", Severity.WARNING, f"{target} is a clone of a mounted "
                                    f"XFS filesystem (UUID {uuid}); mounted with nouuid",
                                    evidence=str(target), source="mount"))
        res = runner.run(ToolCall.of("mount", "-t", fstype, "-o", opts, node, str(mp),
                                     timeout_s=120, purpose="read-only mount without log replay"))
        if res.refused:
            raise RefusedError(res.refused)
        if res.returncode != 0:
            raise ToolFailedError(f"mount {node} failed (rc {res.returncode}): "
                                  f"{res.stderr.strip() or res.stdout.strip()}",
                                  hint="use `ckptrescue fs inspect` and `locate` (offline)")
    except BaseException:
        _release_or_keep(info, case, state)
        raise
    findings.append(Finding("MT001", Severity.INFO, f"{target} mounted on {mp} with {opts} on a "
                            "read-only block device", evidence=str(target), source="mount"))
    result = MountResult(mountpoint=str(mp), device=node, fstype=fstype, options=opts,
                         target=str(target), loop_device=info["loop_device"],
                         backing_file=info["backing_file"], set_readonly=info["set_readonly"],
                         partition_start=start, uuid=uuid, findings=findings,
                         extra_loops=info.get("extra_loops", []),
                         dm_devices=info.get("dm_devices", []),
                         segments=[list(x) for x in cand.segments] if cand.segments else None)
    state.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    case.add_findings(findings)
    case.log("storage.mounted", result.to_json())
    return result


def _release_or_keep(info: dict[str, Any], case: Case, state: Path,
                     members: list[dict[str, Any]] | None = None) -> None:
    """Release after a failed mount (the pool members first); what could not be released stays
    recorded at ``state`` so that ``umount`` can finish the job."""
    problems: list[str] = []
    kept = []
    for m_info in members or []:
        trouble = release(m_info, case=case)
        if trouble:
            kept.append(m_info)
            problems += trouble
    problems += release(info, case=case)
    if problems:
        state.write_text(json.dumps({**{k: info.get(k) for k in (
            "target", "loop_device", "backing_file", "set_readonly", "extra_loops",
            "dm_devices")}, "device": info.get("device"), "failed_mount": True,
            "members": kept, "problems": problems}, indent=2) + "\n")


def _attach_members(runner: SubprocessRunner, case: Case, paths: list[str], guid: str,
                    attached: list[dict[str, Any]]) -> list[str]:
    """Attach the pool's other members read-only (appending each to ``attached`` at once, so
    that a failure releases what was attached); returns their member nodes."""
    nodes = []
    for path in paths:
        m_info = attach(path, case=case)
        attached.append(m_info)
        cand = pick_candidate(runner, m_info)
        if cand.info.get("TYPE") != "zfs_member" or cand.info.get("UUID") != guid:
            raise UsageError(f"{path}: not a member of this pool (GUID {guid}): "
                             f"{cand.info.get('TYPE') or 'no filesystem'} "
                             f"{cand.info.get('UUID') or ''}".rstrip())
        nodes.append(cand.node)
    return nodes


def _mount_zfs(runner: SubprocessRunner, case: Case, info: dict[str, Any], node: str,
               fsinfo: dict[str, str], start: int, target: str | Path, mp: Path,
               state: Path, member_paths: list[str]) -> MountResult:
    """Import the pool of a ZFS member read-only under ``mp`` (see :mod:`zfs_pool`)."""
    from ckptrescue.storage import zfs_pool

    result = MountResult(mountpoint=str(mp), device=node, fstype="zfs",
                         options="readonly=on,cachefile=none,-N,altroot=" + str(mp),
                         target=str(target), loop_device=info["loop_device"],
                         backing_file=info["backing_file"], set_readonly=info["set_readonly"],
                         partition_start=start, uuid=fsinfo.get("UUID"),
                         extra_loops=info.get("extra_loops", []),
                         dm_devices=info.get("dm_devices", []))

    def record(pool: str) -> None:  # before anything else can fail: the guard then allows export
        result.zfs_pool = pool
        state.write_text(json.dumps(result.to_json(), indent=2) + "\n")

    others: list[dict[str, Any]] = []
    result.members = others
    try:
        nodes = [node, *_attach_members(runner, case, member_paths, fsinfo.get("UUID", ""),
                                        others)]
        images_only = all(i["loop_device"] is not None for i in [info, *others])
        imp = zfs_pool.import_readonly(runner, members=nodes, fsinfo=fsinfo,
                                       altroot=str(mp), images_only=images_only,
                                       evidence=str(target), on_imported=record)
    except BaseException:
        if result.zfs_pool:
            try:
                zfs_pool.export(runner, result.zfs_pool, result.uuid)
            except Exception as exc:  # the pool stays imported (read-only): keep its record
                case.log("storage.zfs_left_imported", {"pool": result.zfs_pool,
                                                       "error": str(exc)})
                raise ToolFailedError(
                    f"mount failed and pool {result.zfs_pool} could not be exported ({exc}); "
                    "it stays imported read-only",
                    hint=f"retry with `ckptrescue umount {mp} --case {case.root}`") from exc
            state.unlink(missing_ok=True)
        _release_or_keep(info, case, state, others)
        raise
    result.datasets = imp.datasets
    mounted = [d["mountpoint"] for d in imp.datasets if d["mounted"]]
    result.findings = [*imp.findings, Finding(
        "MT001", Severity.INFO, f"{target}: ZFS pool {imp.ondisk_name} imported read-only "
        f"(readonly=on, cachefile=none) under {mp}; datasets mounted ro: "
        f"{', '.join(mounted) or 'none'}", evidence=str(target), source="mount")]
    state.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    case.add_findings(result.findings)
    case.log("storage.mounted", result.to_json())
    return result


def umount(mountpoint: str | Path, *, case: Case) -> dict[str, Any]:
    """Unmount what :func:`mount` mounted and detach exactly what it attached."""
    state = _state_path(case, str(mountpoint))
    if not state.exists():
        raise UsageError(f"{mountpoint}: no mount recorded by this case",
                         hint="umount only what `ckptrescue mount` mounted with the same --case")
    data = json.loads(state.read_text())
    runner = SubprocessRunner(case)
    if data.get("zfs_pool"):
        from ckptrescue.storage import zfs_pool

        zfs_pool.export(runner, data["zfs_pool"], data.get("uuid"))
    elif any(m.mountpoint == os.path.realpath(mountpoint) for m in sysfs.mounts()):
        res = runner.run(ToolCall.of("umount", str(mountpoint), timeout_s=120,
                                     purpose="unmount what the kit mounted"))
        if res.returncode != 0:
            raise ToolFailedError(f"umount {mountpoint}: {res.stderr.strip()}",
                                  hint="a process may still use it (fuser -vm MOUNTPOINT)")
    problems: list[str] = []
    for m_info in data.get("members") or []:
        problems += release(m_info, case=case)
    problems += release({"target": data["target"], "loop_device": data["loop_device"],
                        "backing_file": data["backing_file"],
                        "set_readonly": data.get("set_readonly") or [],
                        "extra_loops": data.get("extra_loops") or [],
                        "dm_devices": data.get("dm_devices") or []}, case=case)
    if problems:
        data["problems"] = problems
        state.write_text(json.dumps(data, indent=2) + "\n")
        raise ToolFailedError(f"{mountpoint}: unmounted, but not everything was released: "
                              + "; ".join(problems),
                              hint="the record is kept: run the same umount again")
    state.unlink()
    case.log("storage.unmounted", {"mountpoint": str(mountpoint), "device": data["device"]})
    return data


@contextlib.contextmanager
def mounted(target: str | Path, mountpoint: str | Path, *, case: Case) -> Iterator[MountResult]:
    res = mount(target, mountpoint, case=case)
    try:
        yield res
    finally:
        umount(mountpoint, case=case)
