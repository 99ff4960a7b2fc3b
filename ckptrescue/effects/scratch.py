"""The kit's scratch directories under the temporary directory: none outlives its process for
long, a ``kill -9`` included.

Each holds ``.owner``, a file its process keeps open under an exclusive ``flock`` for as long as
it uses the directory; the kernel lets a lock go with the last descriptor of its file, however
the process ended. Before it makes its first scratch directory in a temporary directory, a
process removes the kit's earlier ones there whose lock it can take: their owner is gone. One
without ``.owner`` (being made, or another program's) and one whose lock a process still holds,
in whatever pid namespace, are never touched; nor is anything not a directory of this user.
``.owner`` is locked before it gets its name, so no directory is ever seen unlocked while its
owner runs.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
import threading

PREFIXES = ("ckptrescue-sandbox-", "ckptrescue-eval-", "ckptrescue-warm-", "ckptrescue-tool-",
            "ckptrescue-tmpcase-")
OWNER = ".owner"

_swept: set[str] = set()  # the temporary directories this process has swept
_swept_lock = threading.Lock()


class Scratch:
    """A scratch directory and the locked descriptor that says its owner runs."""

    def __init__(self, path: str, owner_fd: int) -> None:
        self.path = path
        self._fd: int | None = owner_fd

    def remove(self) -> None:
        """Remove the directory, then let the lock go (idempotent)."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def make(prefix: str) -> Scratch:
    """A fresh scratch directory under the temporary directory (after a sweep of the stale
    ones there, once per process). Raises OSError (a full disk) with nothing left behind."""
    if not prefix.startswith(PREFIXES):
        raise ValueError(f"{prefix!r}: not a scratch prefix of the kit")
    where = tempfile.gettempdir()
    sweep(where)
    path = os.path.realpath(tempfile.mkdtemp(prefix=prefix, dir=where))
    try:
        fd = os.open(os.path.join(path, OWNER + ".new"),
                     os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else has it
            os.rename(os.path.join(path, OWNER + ".new"), os.path.join(path, OWNER))
        except BaseException:
            os.close(fd)
            raise
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return Scratch(path, fd)


def sweep(where: str) -> list[str]:
    """Remove the kit's scratch directories in ``where`` whose owner is gone (the first call
    for ``where`` in this process; later ones return at once). Returns what it removed."""
    with _swept_lock:
        if where in _swept:
            return []
        _swept.add(where)
    removed: list[str] = []
    try:
        names = os.listdir(where)
    except OSError:
        return removed
    uid = os.geteuid()
    for name in names:
        if not name.startswith(PREFIXES):
            continue
        path = os.path.join(where, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            continue
        try:
            fd = os.open(os.path.join(path, OWNER), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # no owner file: being made, or not the kit's to judge
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its owner runs
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    return removed
