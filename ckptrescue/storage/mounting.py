"""``mount`` / ``umount``: read-only mounts of evidence, with write protection at two layers.

1. Block layer (:mod:`loops`): an image file is attached with ``losetup --read-only`` (``-P``
   for partition tables); a block device gets ``BLKROSET`` on it and its partitions
   (:mod:`writeblock`, recorded as ``safety.kernel``; the block stays after ``umount`` until
   ``ckptrescue writeblock release``). ``/sys/class/block/*/ro`` is read back for the device and
   every partition before anything mounts.
2. Filesystem: the options come from the filesystem registry (``storage/filesystem.py``,
   ``storage/filesystems/``): XFS ``ro,norecovery`` (+ ``nouuid`` when a filesystem with the
   same UUID is mounted), ext3/ext4 ``ro,noload``, btrfs ``ro,rescue=nologreplay``; other types
   ``ro``; always ``,nosuid,nodev,noexec``. A plain ``ro`` mount would replay a dirty journal and
   change the disk. A ZFS member is imported read-only instead (:mod:`zfs_mount`).

What was attached is recorded in the case's log (``storage.mount_state``, :mod:`mount_state`;
the runner's ``safety.attached`` records what the kernel showed) so that ``umount`` detaches
exactly that (after checking that the loop device still points at the same
backing file). Finding the filesystems of a target (partitions, LVM volumes) is
:mod:`candidates`; the public names of those modules stay importable from here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ckptrescue.effects.runner import SubprocessRunner, ToolCall
from ckptrescue.errors import EvidenceError, RefusedError, ToolFailedError, UsageError
from ckptrescue.model import AuditEvent, Finding, JsonObject, Severity
from ckptrescue.storage import filesystem, sysfs
from ckptrescue.storage.candidates import (
    FsCandidate,
    blkid,
    filesystems,
    partition_table,
    pick_candidate,
    pick_filesystem,
    volume_manager,
)
from ckptrescue.storage.filesystem import EVIDENCE_MOUNT_OPTIONS, MountRequest
from ckptrescue.storage.loops import attach, attached, release
from ckptrescue.storage.mount_state import (
    MountResult,
    mount_state,
    record_state,
    release_or_keep,
    zfs_mount_holding,
)

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

__all__ = ["EVIDENCE_MOUNT_OPTIONS", "FsCandidate", "MountResult", "attach",
           "attached", "blkid", "filesystems", "mount", "mount_state", "mounted",
           "partition_table", "pick_candidate", "pick_filesystem", "release", "ro_options",
           "umount", "volume_manager", "zfs_mount_holding"]


def ro_options(fstype: str, kernel: str | None = None) -> str:
    """The read-only, no-replay mount options for ``fstype`` on this kernel (from the
    filesystem registry; btrfs spells "do not replay the log tree" ``rescue=nologreplay`` since
    Linux 5.9)."""
    return filesystem.ro_options(fstype, kernel)


def __getattr__(name: str) -> Any:
    if name == "RO_OPTIONS":  # compatibility: {fstype: read-only options} of the registry
        return {t: fs.mount_options(t).removesuffix(EVIDENCE_MOUNT_OPTIONS)
                for fs in filesystem.registry() for t in fs.types}
    raise AttributeError(name)


def mount(target: str | Path, mountpoint: str | Path, *, case: Case,
          select: str | None = None, members: list[str] | None = None,
          runner: SubprocessRunner | None = None) -> MountResult:
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
    state = mp
    if mount_state(case, mp) is not None:
        raise UsageError(f"{mp}: the case already has a mount recorded there; umount it first")
    runner = runner or SubprocessRunner(case)
    info = attach(target, case=case, runner=runner)
    try:
        cand = pick_candidate(runner, info, select)
        if not cand.info.get("TYPE"):
            raise EvidenceError(f"{cand.where}: no filesystem found (blkid -p)")
    except BaseException:
        release_or_keep(info, case, state, runner=runner)
        raise
    node, fsinfo, start = cand.node, cand.info, cand.start
    fstype = fsinfo["TYPE"]
    fs = filesystem.get(fstype)
    own = fs.mount(MountRequest(runner, case, info, node, fsinfo, start, target, mp, state,
                                members or []))
    if own is not None:  # mounted by its own means (a ZFS pool import)
        return own
    if members:
        release_or_keep(info, case, state, runner=runner)
        raise UsageError(f"{target} holds {fstype}, not a ZFS member: --member is for the other "
                         "devices of a ZFS pool")
    try:
        opts = fs.mount_options(fstype)
        uuid = fsinfo.get("UUID")
        extra, findings = fs.clone_options(runner, fsinfo, target)
        opts += extra
        res = runner.run(ToolCall.of("mount", "-t", fstype, "-o", opts, node, str(mp),
                                     timeout_s=120, purpose="read-only mount without log replay"))
        if res.refused:
            raise RefusedError(res.refused)
        if res.returncode != 0:
            raise ToolFailedError(f"mount {node} failed (rc {res.returncode}): "
                                  f"{res.stderr.strip() or res.stdout.strip()}",
                                  hint="use `ckptrescue fs inspect` and `locate` (offline)")
    except BaseException:
        release_or_keep(info, case, state, runner=runner)
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
    record_state(case, mp, result.to_json())
    result.findings_here()  # the engine records the findings, then the mount
    result.record("storage.mounted", result.to_json())
    return result


def umount(mountpoint: str | Path, *, case: Case, runner: SubprocessRunner | None = None) -> JsonObject:
    """Unmount what :func:`mount` mounted and detach exactly what it attached (the caller
    records :func:`unmounted_record`)."""
    data = mount_state(case, mountpoint)
    if data is None:
        raise UsageError(f"{mountpoint}: no mount recorded by this case",
                         hint="umount only what `ckptrescue mount` mounted with the same --case")
    runner = runner or SubprocessRunner(case)
    own = filesystem.get(data.get("fstype")).unmount(runner, data)  # a ZFS pool: export
    if not own and any(m.mountpoint == os.path.realpath(mountpoint) for m in sysfs.mounts()):
        res = runner.run(ToolCall.of("umount", str(mountpoint), timeout_s=120,
                                     purpose="unmount what the kit mounted"))
        if res.refused:
            raise RefusedError(f"umount {mountpoint}: {res.refused}")
        if res.returncode != 0:
            raise ToolFailedError(f"umount {mountpoint}: {res.stderr.strip()}",
                                  hint="a process may still use it (fuser -vm MOUNTPOINT)")
    problems: list[str] = []
    for m_info in data.get("members") or []:
        problems += release(m_info, case=case, runner=runner)
    problems += release({"target": data["target"], "loop_device": data["loop_device"],
                        "backing_file": data["backing_file"],
                        "set_readonly": data.get("set_readonly") or [],
                        "extra_loops": data.get("extra_loops") or [],
                        "dm_devices": data.get("dm_devices") or []}, case=case,
                        runner=runner)
    if problems:
        data["problems"] = problems
        record_state(case, mountpoint, data)
        raise ToolFailedError(f"{mountpoint}: unmounted, but not everything was released: "
                              + "; ".join(problems),
                              hint="the record is kept: run the same umount again")
    record_state(case, mountpoint, None)
    return data


def unmounted_record(mountpoint: str | Path, data: dict[str, Any]) -> AuditEvent:
    """The ``storage.unmounted`` record of what :func:`umount` released (the engine writes it)."""
    return AuditEvent("storage.unmounted", {"mountpoint": str(mountpoint),
                                            "device": data["device"]})


@contextlib.contextmanager
def mounted(target: str | Path, mountpoint: str | Path, *, case: Case,
            runner: SubprocessRunner | None = None) -> Iterator[MountResult]:
    res = mount(target, mountpoint, case=case, runner=runner)
    try:
        yield res
    finally:
        umount(mountpoint, case=case, runner=runner)
