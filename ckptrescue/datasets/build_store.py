"""The temporary on-disk store of a local ``manifest build``: memory flat in the number of files.

A build keeps nothing per file in Python. The walk of DIR is streamed into an SQLite database
beside the manifest (``OUT.build.sqlite``; never inside DIR), the entries of an interrupted
build's ``OUT.partial.jsonl`` are imported into it for the resume join (same name, size and
mtime, and the recorded checksums cover the requested ones), the files left to hash are read
back in name order in chunks, each finished entry goes to the partial file (the durable record,
as before) and to the database, and the manifest and its sidecar are written from one ordered
scan of the finished entries (SQLite orders BLOBs by ``memcmp``: exactly Python's bytes sort,
which is what ``sha256sum`` of the sorted names prints).

The database is scratch: nothing in it needs to survive an interruption (the partial file is
what a rerun resumes from), so it runs without a journal and without fsync, is removed when the
build ends (also on Ctrl-C or an error) and is rebuilt from scratch by the next run when a
SIGKILL left it behind. It is held under an exclusive lock: two builds writing the same OUT at
once are refused. Disk: about the size of the sidecar plus the walk (~300 bytes a file).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ckptrescue.datasets.manifest_files import ManifestEntry, read_jsonl_entries
from ckptrescue.datasets.scratch_db import entry_chunks, lock_or_refuse, writes_inside
from ckptrescue.datasets.walk import FileEntry, Skipped, scan
from ckptrescue.errors import UsageError

BUILD_SUFFIX = ".build.sqlite"
WRITE_ROWS = 1024  # finished entries held before they are inserted (one executemany)
HASH_CHUNK_FILES = 8192  # files handed to hash_many at once (its input is a list) ...
CLUSTER_CHUNK_FILES = 65536  # ... and to a Dask cluster (one map_batches call per chunk)
HASH_CHUNK_BYTES = 4 << 30  # a chunk also ends after this many bytes
READ_CHUNK = 1024  # rows fetched at once when the outputs are written
CACHE_KIB = 8192  # SQLite's page cache (and sorter) limit for this connection
CANCEL_EVERY = 4096  # the walk looks at the cancel event every this many entries
_SIDE_FILES = ("-journal", "-wal", "-shm")

_TABLES = """
CREATE TABLE walk (rel BLOB PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    inode INTEGER) WITHOUT ROWID;
CREATE TABLE prev (rel BLOB PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    covers INTEGER NOT NULL, sha256 TEXT NOT NULL, format TEXT NOT NULL, line BLOB NOT NULL)
    WITHOUT ROWID;
CREATE TABLE done (rel BLOB PRIMARY KEY, sha256 TEXT NOT NULL, size INTEGER NOT NULL,
    format TEXT NOT NULL, line BLOB NOT NULL) WITHOUT ROWID;
"""


def store_path(out: str | os.PathLike[str]) -> Path:
    """Where the build of ``out`` keeps its scratch database."""
    return Path(str(out) + BUILD_SUFFIX)


class BuildStore:
    """One build's scratch database, locked until :meth:`remove`."""

    def __init__(self, path: Path, conn: sqlite3.Connection, lock_fd: int) -> None:
        self.path = path
        self.conn = conn
        self._lock_fd = lock_fd
        self.files = 0  # walked regular files
        self.bytes = 0

    @classmethod
    def create(cls, out: Path, root: Path) -> BuildStore:
        """A fresh store beside ``out`` (a stale one left by a killed build is replaced)."""
        path = store_path(out)
        if writes_inside(path, root):
            raise UsageError(f"{path}: the build's scratch database would be written inside "
                             f"{root}", hint="the dataset is evidence and is never written to: "
                                             "put the manifest outside DIR")
        from ckptrescue.effects.files import open_own_file, same_file

        try:  # never through a link, onto a device node or into a FIFO planted at the name
            fd = open_own_file(path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise UsageError(f"{path}: cannot write the build's scratch database beside the "
                             f"manifest ({exc.strerror})",
                             hint="write the manifest to a writable directory") from None
        lock_or_refuse(fd, busy(out), hint=BUSY_HINT, name=out)
        conn: sqlite3.Connection | None = None
        try:
            # whatever a killed build left is scratch: start from an empty database
            os.ftruncate(fd, 0)
            for suffix in _SIDE_FILES:
                Path(str(path) + suffix).unlink(missing_ok=True)
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            if not same_file(fd, path):  # swapped between the checked open and SQLite's own
                conn.close()
                raise UsageError(f"{path}: changed while the build opened it; not used")
            conn.execute("PRAGMA journal_mode=OFF")  # scratch: the partial file is the record
            conn.execute("PRAGMA synchronous=OFF")
            conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
            conn.execute("PRAGMA temp_store=FILE")
            conn.executescript(_TABLES)
        except BaseException:
            if conn is not None:  # (a full disk fails the first write of the schema)
                conn.close()
            try:  # removed only while the name is still the file opened (never a node or a
                # link someone put there)
                st, held = os.lstat(path), os.fstat(fd)
                if (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino):
                    _unlink(path)
            except OSError:
                pass
            os.close(fd)
            raise
        return cls(path, conn, fd)

    def remove(self) -> None:
        """Close and delete the database (the end of every build, also an interrupted one)."""
        try:
            self.conn.close()
        finally:
            _unlink(self.path)
            os.close(self._lock_fd)

    # -- the walk -------------------------------------------------------------------------------
    def load_walk(self, root: Path, cancel: threading.Event | None = None) -> list[Skipped]:
        """Stream the walk of ``root`` into ``walk``; the skipped entries, sorted by name
        (what was skipped and why is reported; it is not per file of the dataset)."""
        skipped: list[Skipped] = []

        def files() -> Iterator[tuple[bytes, int, int, int]]:
            for n, item in enumerate(scan(root), start=1):
                if cancel is not None and n % CANCEL_EVERY == 0 and cancel.is_set():
                    raise KeyboardInterrupt("cancelled")
                if type(item) is tuple:
                    self.files += 1
                    self.bytes += item[1]
                    yield item
                else:
                    assert isinstance(item, Skipped)
                    skipped.append(item)

        self.conn.execute("BEGIN")
        # executemany pulls the walk one file at a time: nothing per file is kept here
        self.conn.executemany("INSERT OR REPLACE INTO walk (rel, size, mtime_ns, inode) "
                              "VALUES (?, ?, ?, ?)", files())
        self.conn.execute("COMMIT")
        skipped.sort(key=lambda s: s.rel)
        return skipped

    # -- the resume -----------------------------------------------------------------------------
    def resume_from(self, partial: Path | IO[bytes], checksums: tuple[str, ...]) -> int:
        """Take over the partial file's entries whose file still has the same size and mtime
        and whose recorded checksums cover ``checksums`` (the last line of a name counts);
        how many were taken over."""
        import json

        wanted = set(checksums)

        def rows() -> Iterator[tuple[bytes, int, int, int, str, str, bytes]]:
            for e in read_jsonl_entries(partial):
                line = json.dumps(e.to_json()).encode()
                covers = 1 if set(e.checksums or ()) >= wanted else 0
                yield e.rel, e.size, e.mtime_ns, covers, e.sha256, e.format, line

        self.conn.execute("BEGIN")
        self.conn.executemany("INSERT OR REPLACE INTO prev (rel, size, mtime_ns, covers, sha256, "
                              "format, line) VALUES (?, ?, ?, ?, ?, ?, ?)", rows())
        cur = self.conn.execute(
            "INSERT OR REPLACE INTO done (rel, sha256, size, format, line) "
            "SELECT p.rel, p.sha256, p.size, p.format, p.line FROM prev p JOIN walk w "
            "ON w.rel = p.rel WHERE p.size = w.size AND p.mtime_ns = w.mtime_ns AND p.covers")
        taken = cur.rowcount
        self.conn.execute("DELETE FROM prev")
        self.conn.execute("COMMIT")
        return int(taken)

    # -- hashing --------------------------------------------------------------------------------
    def todo_totals(self) -> tuple[int, int]:
        """(files still to hash, their bytes)."""
        row = self.conn.execute(
            "SELECT count(*), coalesce(sum(w.size), 0) FROM walk w WHERE NOT EXISTS "
            "(SELECT 1 FROM done d WHERE d.rel = w.rel)").fetchone()
        return int(row[0]), int(row[1])

    def todo_chunks(self, files: int = HASH_CHUNK_FILES) -> Iterator[list[FileEntry]]:
        """The files still to hash, in name order, in lists of bounded length and bytes."""
        sql = ("SELECT w.rel, w.size, w.mtime_ns, w.inode FROM walk w WHERE w.rel > ? AND "
               "NOT EXISTS (SELECT 1 FROM done d WHERE d.rel = w.rel) ORDER BY w.rel LIMIT ?")
        return entry_chunks(self.conn, sql, files=files, max_bytes=HASH_CHUNK_BYTES)

    def writer(self) -> DoneWriter:
        return DoneWriter(self.conn)

    # -- the outputs ----------------------------------------------------------------------------
    def finished(self) -> Iterator[tuple[bytes, str, int, str, bytes]]:
        """Every finished entry (rel, sha256, size, format, sidecar line) in name order."""
        cur = self.conn.execute("SELECT rel, sha256, size, format, line FROM done ORDER BY rel")
        try:
            while rows := cur.fetchmany(READ_CHUNK):
                for rel, sha256, size, fmt, line in rows:
                    yield bytes(rel), sha256, size, fmt, bytes(line)
        finally:
            cur.close()


class DoneWriter:
    """Inserts finished entries as they arrive, committing every WRITE_ROWS rows (the
    database is scratch: the commits only bound the transaction, not durability)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.pending: list[tuple[bytes, str, int, str, bytes]] = []

    def add(self, entry: ManifestEntry, line: bytes) -> None:
        self.pending.append((entry.rel, entry.sha256, entry.size, entry.format, line))
        if len(self.pending) >= WRITE_ROWS:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.conn.execute("BEGIN")
            self.conn.executemany("INSERT OR REPLACE INTO done (rel, sha256, size, format, "
                                  "line) VALUES (?, ?, ?, ?, ?)", self.pending)
            self.conn.execute("COMMIT")
            self.pending.clear()


BUSY_HINT = "wait for it, or write the manifest elsewhere"


def busy(out: Path) -> str:
    return f"{out}: another manifest build or update is writing it now"


@contextlib.contextmanager
def writing(out: Path) -> Iterator[None]:
    """The lock a build holds on its scratch database, held by a ``manifest update`` of
    ``out`` for its whole run: a second writer of one manifest (a build, an update) is refused
    before it hashes anything, never left to interleave its renames with the first's (a sidecar
    of one run beside the manifest of the other). The lock file is removed at the end."""
    from ckptrescue.effects.files import open_own_file, same_file

    path = store_path(out)
    try:
        fd = open_own_file(path, os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        raise UsageError(f"{path}: cannot take the manifest's lock beside it ({exc.strerror})",
                         hint="write the manifest to a writable directory") from None
    # (best effort: an update on a filesystem without locks ran without one before)
    lock_or_refuse(fd, busy(out), hint=BUSY_HINT, name=out, best_effort=True)
    if not same_file(fd, path):  # removed by a writer ending in between: not this lock's file
        os.close(fd)
        raise UsageError(busy(out), hint=BUSY_HINT)
    try:
        yield
    finally:
        try:
            if same_file(fd, path):
                with contextlib.suppress(OSError):
                    _unlink(path)
        finally:
            os.close(fd)


def _unlink(path: Path) -> None:
    for p in (path, *(Path(str(path) + s) for s in _SIDE_FILES)):
        p.unlink(missing_ok=True)


__all__ = ["BUILD_SUFFIX", "CLUSTER_CHUNK_FILES", "HASH_CHUNK_FILES", "BuildStore", "DoneWriter",
           "store_path"]
