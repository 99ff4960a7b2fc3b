"""BeeGFS (``beegfs``): a copy source the kit never mounts; identity (the management host from
the client's ``cfgFile=``) in ``ckptrescue/storage/netfs.py``.

No kernel log patterns: no BeeGFS client message text with a citable source was found; triage
still reports block-layer I/O errors. No ``beegfs-ctl`` read forms (docs/storage.md).
"""

from __future__ import annotations

from typing import ClassVar

from ckptrescue.storage.filesystem import Filesystem


class BeeGfs(Filesystem):
    """BeeGFS client mounts; evidence on BeeGFS is copied, never mounted by the kit."""

    name: ClassVar[str] = "beegfs"
    title: ClassVar[str] = "BeeGFS"
    types: ClassVar[tuple[str, ...]] = ("beegfs", "fhgfs")
    order: ClassVar[int] = 70


FILESYSTEMS = [BeeGfs]
