"""The case's own files are regular files in the case: read and hashed without following a
symlink planted in their place, without blocking on a FIFO, without reading a device forever.

A case directory can come from someone else (a colleague's case to verify, a case restored from
a backup). A symlink at ``artifacts/<sha256>`` leads out of the case (to a copy that can change
later, to ``/dev/zero``); a FIFO blocks whoever opens it. These functions refuse both with an
``OSError`` that names the path (``ELOOP``: a symlink; ``EINVAL``: not a regular file).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from pathlib import Path

SHA256_NAME = re.compile(r"[0-9a-f]{64}")
_CHUNK = 1 << 20


def is_sha256(name: object) -> bool:
    """True for the name of an artifact: 64 lowercase hex digits."""
    return isinstance(name, str) and SHA256_NAME.fullmatch(name) is not None


def open_regular(path: Path | str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A descriptor of ``path`` if it is a regular file reached without a symlink at its last
    component; else ``OSError`` (``ELOOP`` or ``EINVAL``) naming it. ``flags`` may hold
    ``O_CREAT``, ``O_APPEND``, ``O_RDWR``."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def kind_of(path: Path | str) -> str:
    """What ``path`` is, without following it: ``file``, ``symlink``, ``fifo``, ..."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISFIFO, "fifo"), (stat.S_ISDIR, "directory"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def read_regular(path: Path | str) -> bytes:
    """The bytes of a regular file (see :func:`open_regular`)."""
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def sha256_regular(path: Path | str) -> str:
    """Streaming SHA-256 of a regular file (see :func:`open_regular`)."""
    fd = open_regular(path)
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb", buffering=0) as fh:
        while block := fh.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()
