"""CephFS (kernel ``ceph``, ``fuse.ceph-fuse``): a copy source the kit never mounts; identity
(monitors, fsid, filesystem name) in ``ckptrescue/storage/netfs.py``.

Kernel log patterns (``triage``, TR004), from the Linux source:

* ``libceph: mon0 ADDR session lost, hunting for new mon`` — ``net/ceph/mon_client.c``
  (``reopen_session``); ``libceph: osdN ADDR socket closed`` / ``socket error on read|write``
  / ``connect error`` — ``net/ceph/messenger*.c``; ``libceph: osdN down`` —
  ``net/ceph/osdmap.c``/``osd_client.c``.
* ``ceph: mdsN hung`` / ``ceph: mdsN caps stale`` / ``ceph: mdsN reconnect denied`` —
  ``fs/ceph/mds_client.c`` (``pr_info("mds%d hung\\n")``, ``"mds%d caps stale\\n"``), and
  ``blocklisted``/``evicted`` client messages there.

No ``ceph fs status`` read form is allowlisted: see docs/storage.md.
"""

from __future__ import annotations

import re
from typing import ClassVar

from ckptrescue.storage.filesystem import Filesystem

KERNEL_PATTERN = re.compile(r"libceph: .*(?:session lost|socket closed|socket error|connect "
                            r"error|\bdown\b|timed out)|ceph: .*(?:\bhung\b|caps stale|reconnect "
                            r"denied|evicted|block(?:list|lacklist)ed|blacklisted)")


class CephFs(Filesystem):
    """CephFS client mounts; evidence on CephFS is copied, never mounted by the kit."""

    name: ClassVar[str] = "cephfs"
    title: ClassVar[str] = "CephFS"
    types: ClassVar[tuple[str, ...]] = ("ceph", "fuse.ceph-fuse")
    order: ClassVar[int] = 70
    kernel_patterns: ClassVar[tuple[tuple[str, re.Pattern[str]], ...]] = (
        ("cephfs", KERNEL_PATTERN),)


FILESYSTEMS = [CephFs]
