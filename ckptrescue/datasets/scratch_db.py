"""What the kit's SQLite working files share (the audit state, the build store, the watch
state): one writer at a time, never a file inside the dataset, and file entries paged out of
SQL. Kept apart from :mod:`audit_state` so that a ``manifest build`` imports only these."""

from __future__ import annotations

import fcntl
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from ckptrescue.datasets.walk import FileEntry
from ckptrescue.errors import UsageError


def writes_inside(path: Path, root: str | os.PathLike[str]) -> bool:
    """A file written at ``path`` (its directory resolved; the name itself may be a link not
    yet followed) would land in ``root`` (resolved) or below it."""
    real_root = os.path.realpath(root)
    real_path = os.path.join(os.path.realpath(path.parent), path.name)  # noqa: PTH118
    return real_path == real_root or real_path.startswith(real_root.rstrip("/") + "/")


def lock_or_refuse(fd: int, busy: str, *, hint: str, name: str | os.PathLike[str],
                   best_effort: bool = False) -> None:
    """Take the exclusive lock on the open state file ``fd``; when another process holds it,
    close ``fd`` and refuse with ``busy`` (a second writer never waits, never shares). A
    filesystem that cannot lock at all (NFS without its lock daemon: ENOLCK) is that error,
    said of ``name``, or with ``best_effort`` no lock."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UsageError(busy, hint=hint) from None
    except OSError as exc:
        if best_effort:
            return
        os.close(fd)
        raise UsageError(f"{os.fspath(name)}: cannot be locked here ({exc.strerror})",
                         hint="keep it on a filesystem with file locks (a local disk)") from None


def entry_chunks(conn: sqlite3.Connection, sql: str, *, files: int,
                 max_bytes: int) -> Iterator[list[FileEntry]]:
    """Pages of ``sql`` (``SELECT rel, size, mtime_ns, inode ... WHERE rel > ? ... ORDER BY rel
    LIMIT ?``) as FileEntry lists of at most ``files`` entries, cut after ``max_bytes``."""
    after = b""
    while True:
        rows = conn.execute(sql, (after, files)).fetchall()
        if not rows:
            return
        chunk: list[FileEntry] = []
        nbytes = 0
        for rel, size, mtime_ns, inode in rows:
            chunk.append(FileEntry(bytes(rel), size, mtime_ns, inode))
            nbytes += size
            if nbytes >= max_bytes:
                break
        del rows
        after = chunk[-1].rel
        yield chunk
