"""btrfs: ``mount -o ro,rescue=nologreplay`` (``ro,nologreplay`` before Linux 5.9): a plain ro
mount replays the log tree and changes the disk. No btrfs-specific inspection, offline mapping
or kernel log patterns yet (``fs inspect`` notes "no filesystem-specific checks")."""

from __future__ import annotations

import os
from typing import ClassVar

from ckptrescue.storage.filesystem import EVIDENCE_MOUNT_OPTIONS, Filesystem


class Btrfs(Filesystem):
    name: ClassVar[str] = "btrfs"
    title: ClassVar[str] = "btrfs"
    types: ClassVar[tuple[str, ...]] = ("btrfs",)
    order: ClassVar[int] = 30
    read_only: ClassVar[str] = "ro,rescue=nologreplay"

    @classmethod
    def mount_options(cls, fstype: str, kernel: str | None = None) -> str:
        """btrfs spells "do not replay the log tree" ``rescue=nologreplay`` since Linux 5.9;
        the old ``nologreplay`` is rejected by newer kernels ("Unknown parameter")."""
        release = kernel if kernel is not None else os.uname().release
        nums = [int(x) for x in release.split("-")[0].split(".")[:2] if x.isdigit()]
        if len(nums) == 2 and tuple(nums) < (5, 9):
            return "ro,nologreplay" + EVIDENCE_MOUNT_OPTIONS
        return cls.read_only + EVIDENCE_MOUNT_OPTIONS


FILESYSTEMS = [Btrfs]
