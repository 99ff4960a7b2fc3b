"""Moved to :mod:`ckptrescue.guard.sysfs` (the guard applies the same rules to every tool);
the storage code keeps importing it from here."""

from __future__ import annotations

from ckptrescue.guard.sysfs import (
    BLKGETSIZE64,
    SYS_BLOCK,
    MountEntry,
    dev_name,
    holders,
    is_block_device,
    is_partition,
    is_readonly,
    logical_sector_size,
    loop_backing_file,
    mount_of,
    mounts,
    mounts_of_device,
    parent_disk,
    parse_mountinfo,
    partition_start_bytes,
    partitions,
    read_attr,
    size_bytes,
    slaves,
    sys_dir,
)

__all__ = [
    "BLKGETSIZE64", "SYS_BLOCK", "MountEntry", "dev_name", "holders", "is_block_device",
    "is_partition", "is_readonly", "logical_sector_size", "loop_backing_file", "mount_of", "mounts",
    "mounts_of_device", "parent_disk", "parse_mountinfo", "partition_start_bytes", "partitions",
    "read_attr", "size_bytes", "slaves", "sys_dir",
]
