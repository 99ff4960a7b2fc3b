"""Filesystems without a journal to replay or kit-specific knowledge: mounted ``ro`` (+
``nosuid,nodev,noexec``), no inspection, no offline mapping (``fs inspect`` notes "no
filesystem-specific checks"; ``locate`` needs them mounted). ``ntfs``/``ntfs3`` are known here
but the guard's mount grammar has no read-only form for them (refused)."""

from __future__ import annotations

from typing import ClassVar

from ckptrescue.storage.filesystem import Filesystem


class Generic(Filesystem):
    name: ClassVar[str] = "generic"
    title: ClassVar[str] = "vfat/exfat/iso9660/squashfs/udf/ntfs"
    types: ClassVar[tuple[str, ...]] = ("vfat", "exfat", "iso9660", "squashfs", "udf", "ntfs",
                                        "ntfs3")
    order: ClassVar[int] = 90
    read_only: ClassVar[str] = "ro"


FILESYSTEMS = [Generic]
