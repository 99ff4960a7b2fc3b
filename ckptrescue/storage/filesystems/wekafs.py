"""WekaFS (``wekafs``): a copy source the kit never mounts; identity (backend and filesystem
name from the mount source ``backend/fs``) in ``ckptrescue/storage/netfs.py``.

No kernel log patterns: no WekaFS client message text with a citable source was found. No
``weka`` CLI read forms (docs/storage.md).
"""

from __future__ import annotations

from typing import ClassVar

from ckptrescue.storage.filesystem import Filesystem


class WekaFs(Filesystem):
    """WekaFS client mounts; evidence on WekaFS is copied, never mounted by the kit."""

    name: ClassVar[str] = "wekafs"
    title: ClassVar[str] = "WekaFS"
    types: ClassVar[tuple[str, ...]] = ("wekafs",)
    order: ClassVar[int] = 70


FILESYSTEMS = [WekaFs]
