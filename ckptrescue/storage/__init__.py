"""Block storage: preserve, inspect and map damage, read-only.

Modules (import the one you need; nothing heavy is imported here):

* ``imaging.image`` — ddrescue imaging, the mapfile as the truth;
* ``mounting.mount`` / ``umount`` — read-only loop + ro,norecovery / ro,noload;
* ``locate.locate`` — mapfile ranges -> files (FIEMAP; xfs_db/debugfs offline) -> tensors;
* ``fsinspect.fs_inspect`` — XFS/ext4/ZFS state and SMART/NVMe health;
* ``devices.devices``, ``triage.triage``, ``copy.copy_tree``, ``extract.extract``;
* ``writeblock`` — the kernel write block: BLKROSET on evidence devices, ``chattr +i`` on
  acquired images, recorded as ``safety.kernel``; kept until ``writeblock.release``;
* ``filesystem`` + ``filesystems/`` — the filesystem registry (per-fs detection, read-only
  mount options, inspection, offline locate, kernel log patterns); ``filesystems/_example.py``;
* ``loops``, ``candidates``, ``lvm``, ``zfs_mount``, ``mount_state`` — the parts of ``mounting``;
* ``samedisk``, ``sysfs``, ``fiemap`` — read-only helpers.
"""
