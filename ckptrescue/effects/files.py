"""Opening evidence files read-only without updating their access time."""

from __future__ import annotations

import os

NOATIME = getattr(os, "O_NOATIME", 0)


def open_read_only(path: str | bytes | os.PathLike[str], flags: int = 0) -> int:
    """``os.open`` read-only with ``O_NOATIME``, and without it where the kernel refuses it
    (EPERM: a file the caller does not own); ``flags`` are added to both attempts."""
    try:
        return os.open(path, os.O_RDONLY | NOATIME | flags)
    except PermissionError:
        return os.open(path, os.O_RDONLY | flags)
