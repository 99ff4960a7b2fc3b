"""ZFS members (blkid ``zfs_member``; ``zfs`` in mount records): the pool is imported read-only
instead of mounted (``readonly=on``, ``cachefile=none``, ``-N``, datasets ``zfs mount -o ro``:
``storage/zfs_mount.py``, ``zfs_pool.py``) and exported by ``umount``; ``fs inspect`` reads the
labels and the pool's state (``storage/zfs_inspect.py``); ``locate`` imports the image and lets
ZFS's checksums name the files (``storage/locate_zfs.py``: there is no FIEMAP); ``copy`` of a
pool's mount copies every mounted dataset below it. No kernel log patterns of its own (I/O
errors are matched by ``triage``'s generic pattern; ZFS reports to ``zpool events``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ckptrescue.effects.runner import SubprocessRunner
from ckptrescue.storage.filesystem import CopySources, Facts, Filesystem, MountRequest

if TYPE_CHECKING:
    from ckptrescue.record.case import Case
    from ckptrescue.storage.hits import LocateResult
    from ckptrescue.storage.mount_state import MountResult


class Zfs(Filesystem):
    name: ClassVar[str] = "zfs"
    title: ClassVar[str] = "ZFS"
    types: ClassVar[tuple[str, ...]] = ("zfs_member", "zfs")
    order: ClassVar[int] = 40

    @classmethod
    def mount(cls, request: MountRequest) -> MountResult | None:
        from ckptrescue.storage.zfs_mount import mount_zfs

        return mount_zfs(request)

    @classmethod
    def unmount(cls, runner: SubprocessRunner, record: dict[str, Any]) -> bool:
        from ckptrescue.storage.zfs_mount import export_recorded

        return export_recorded(runner, record)

    @classmethod
    def inspect(cls, runner: SubprocessRunner, node: str, fsinfo: dict[str, str], ev: str, *,
                case: Case | None, target: str) -> Facts | None:
        from ckptrescue.storage.zfs_inspect import inspect_zfs

        return inspect_zfs(runner, node, fsinfo, ev, target)

    @classmethod
    def locate_image(cls, case: Case, image: str | Path, ranges: list[tuple[int, int]], *,
                     member_start: int, select: str | None = None,
                     runner: SubprocessRunner | None = None) -> LocateResult | None:
        from ckptrescue.storage.locate_zfs import locate_zfs

        return locate_zfs(case, image, ranges, member_start=member_start, select=select,
                          runner=runner)

    @classmethod
    def mounted_locate_refusal(cls) -> str | None:
        return ("locate: a ZFS mount has no FIEMAP; give the image (without --mountpoint): locate "
                "imports it read-only and lets ZFS's checksums name what lies at the bad bytes")

    @classmethod
    def copy_sources(cls, case: Case, src: Path) -> CopySources | None:
        """A pool imported by ``mount``: its physical media are the member images/devices, and
        its datasets are separate (read-only) mounts below the altroot, all copied."""
        from ckptrescue.storage.mount_state import zfs_mount_holding

        zfs = zfs_mount_holding(case, src)
        if zfs is None:
            return None
        media = [zfs["target"], *[m["target"] for m in zfs.get("members") or []]]

        def inside(d: dict[str, Any]) -> bool:
            mp = Path(os.path.realpath(d["mountpoint"]))
            return mp == src or src in mp.parents or mp in src.parents

        datasets = zfs.get("datasets") or []
        return CopySources(
            media=media,
            mounted=[Path(os.path.realpath(d["mountpoint"])) for d in datasets
                     if d.get("mounted") and inside(d)],
            left_out=[f"{d['dataset']} ({d.get('reason') or 'not mounted'})" for d in datasets
                      if not d.get("mounted") and inside(d)],
            one_filesystem=False,  # datasets are nested mounts
            nothing_mounted=f"{src}: no dataset of pool {zfs['zfs_pool']} is mounted there",
            nothing_hint="give the mount point used with `ckptrescue mount` or a dataset below it")


FILESYSTEMS = [Zfs]
