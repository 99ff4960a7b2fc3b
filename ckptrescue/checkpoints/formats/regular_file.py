"""Opening evidence files without ever blocking: regular files only (formats layer, reads only).

``open(path, "rb")`` on a FIFO blocks until some process opens it for writing — forever, on
evidence — and a character device (``/dev/zero``) reads without end. :func:`open_regular` opens
with ``O_NONBLOCK`` (an open of a FIFO returns at once), ``fstat``s the descriptor it got (no
window between a check and the open) and refuses anything that is not a regular file with
:class:`NotRegularFile`, an ``OSError`` the probes already turn into a finding. ``follow=False``
adds ``O_NOFOLLOW`` for callers that must not follow a final symlink. A symlink loop fails in the
kernel (``ELOOP``), as any open would.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path
from typing import BinaryIO

KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
         (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symlink"))


class NotRegularFile(OSError):
    """The path is a FIFO, device, socket or directory: it is never read."""

    def __init__(self, path: str | Path, kind: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file ({kind}): not opened", str(path))
        self.kind = kind


def kind_of(mode: int) -> str:
    """``"a FIFO"``, ``"a character device"``, ... (``"a regular file"``) for an ``st_mode``."""
    for test, name in KINDS:
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def open_regular_fd(path: str | Path, *, follow: bool = True) -> int:
    """A read-only descriptor of the regular file at ``path`` (never blocks; see module)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, kind_of(mode))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: str | Path, *, follow: bool = True) -> BinaryIO:
    """``open(path, "rb")`` for regular files only; raises :class:`NotRegularFile` (an
    ``OSError``) for a FIFO, device, socket or directory, without blocking on the open."""
    return os.fdopen(open_regular_fd(path, follow=follow), "rb")


def not_regular(path: str | Path) -> str | None:
    """What ``path`` is when it is not a regular file (``"a FIFO"``, ...), None when it is one
    or cannot be examined (the caller's own open reports that). Follows symlinks; never opens."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else kind_of(mode)


def head_of(path: Path, size: int) -> bytes | None:
    """The first ``size`` bytes of the regular file at ``path`` (fewer when it is shorter), for a
    format's ``detect``; None when it is not a regular file or cannot be read."""
    if not path.is_file():
        return None
    try:
        with open_regular(path) as fh:
            return fh.read(size)
    except OSError:
        return None
