"""FUSE (``fuse``, ``fuseblk``, ``fuse.<subtype>`` such as ``fuse.sshfs``): a copy source the
kit never mounts itself; identity (subtype, ``user@host:/path`` for sshfs, the daemon's pid when
visible) in ``ckptrescue/storage/netfs.py``. ``fuse.ceph-fuse`` belongs to ``cephfs.py``.

Kernel log patterns (``triage``, TR004), from the Linux source:

* ``fuse: ...`` — ``fs/fuse/`` prints its errors with ``pr_err``/``pr_warn`` and the
  ``fuse: `` prefix (``pr_fmt``), e.g. ``fuse: Bad value for 'fd'``; only lines that also say
  error/failed/invalid/bad/abort are reported (not ``fuse: init (API version 7.x)``).
* a task stuck on a FUSE daemon that stopped answering: the hung-task report
  (``kernel/hung_task.c``: ``INFO: task NAME:PID blocked for more than N seconds.``) prints the
  call trace, whose frames name ``request_wait_answer`` / ``fuse_simple_request``
  (``fs/fuse/dev.c``).
"""

from __future__ import annotations

import re
from typing import ClassVar

from ckptrescue.storage.filesystem import Filesystem

KERNEL_PATTERN = re.compile(r"\bfuse: .*(?:error|failed|invalid|bad|abort)|"
                            r"\b(?:request_wait_answer|fuse_simple_request)\b", re.IGNORECASE)


class Fuse(Filesystem):
    """FUSE mounts (sshfs, rclone, s3fs, local daemons); copied, never mounted by the kit."""

    name: ClassVar[str] = "fuse"
    title: ClassVar[str] = "FUSE"
    types: ClassVar[tuple[str, ...]] = ("fuse", "fuseblk", "fuse.sshfs", "fuse.rclone",
                                        "fuse.s3fs", "fuse.gcsfuse", "fuse.goofys",
                                        "fuse.blobfuse", "fuse.blobfuse2", "fuse.juicefs")
    order: ClassVar[int] = 80
    kernel_patterns: ClassVar[tuple[tuple[str, re.Pattern[str]], ...]] = (("fuse", KERNEL_PATTERN),)


FILESYSTEMS = [Fuse]
