"""The watch's memory: one SQLite file per watched source (never inside the source).

Table ``files``: per path its size, mtime (ns), inode, last status (ok, bad, missing) and when
it was checked; ``meta``: counters and the time of the last full pass. Everything the next
pass needs to skip unchanged files, so memory stays flat however large the tree is.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ckptrescue.errors import raise_if_system_error

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
  path BLOB PRIMARY KEY, size INTEGER, mtime_ns INTEGER, ino INTEGER,
  status TEXT, problem TEXT, checked_at REAL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
"""
# the tables, and their columns in order, of a state SCHEMA made
_OWN_TABLES = {"files": ["path", "size", "mtime_ns", "ino", "status", "problem", "checked_at"],
               "meta": ["key", "value"]}


@dataclass(frozen=True)
class Seen:
    size: int
    mtime_ns: int
    ino: int
    status: str
    problem: str


def check_location(path: Path, source: str) -> Path:
    """``path`` made absolute, refused when it would be written inside the watched source
    (evidence), by its name or through a link on the way (the folders resolved)."""
    from ckptrescue.datasets.scratch_db import writes_inside
    from ckptrescue.errors import UsageError

    path = Path(path).absolute()
    if not source.startswith("s3:") and writes_inside(path, source):
        raise UsageError(f"{path}: the watch state must live outside {source}")
    return path


@dataclass(frozen=True)
class Held:
    """A whole watch run's exclusive lock on its state (:func:`hold`)."""

    path: Path
    fd: int
    made: bool  # the state did not exist: made empty by the hold
    identity: tuple[int, int]  # the file held (device, inode)


def hold(path: Path, source: str) -> Held:
    """A whole watch run's exclusive lock on its state (created empty when new): a second
    watch of the same state is refused before its first pass, never left to meet the first in
    the middle of one (``database is locked``). The lock is ``flock``'s: advisory, and on NFS
    the client's emulation with POSIX locks, which the kernel drops when any descriptor of the
    file closes (the watch's passes open and close it). :func:`release` ends it. The run's
    passes (:func:`held_for_a_pass`) find it as this process's."""
    held = _take(path, source)
    with _HELD_LOCK:
        _HELD[held.identity] = held
    return held


def _take(path: Path, source: str) -> Held:
    """The state's exclusive lock (:func:`hold`), not registered as the run's."""
    from ckptrescue.datasets.scratch_db import lock_or_refuse
    from ckptrescue.effects.files import open_own_file
    from ckptrescue.errors import UsageError

    path = check_location(path, source)
    made = not os.path.lexists(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_own_file(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise UsageError(f"{path}: cannot keep the watch state here ({exc.strerror or exc})",
                         hint="give --state a new file") from None
    lock_or_refuse(fd, f"{path}: another watch is using this state",
                   hint="stop that watch, or give this one its own --state", name=path,
                   best_effort=True)
    from ckptrescue.effects.files import same_file

    if not same_file(fd, path):  # removed (by a watch ending) or replaced since the open
        os.close(fd)
        raise UsageError(f"{path}: changed while the watch took it; not used",
                         hint="run the watch again")
    st = os.fstat(fd)
    return Held(path, fd, made, (st.st_dev, st.st_ino))


def release(held: Held) -> None:
    """End the hold; a state it made that no pass wrote into (the first failed: a full disk)
    is removed, as it held nothing."""
    from ckptrescue.effects.files import same_file

    try:
        with _HELD_LOCK:
            if _HELD.get(held.identity) is held:
                del _HELD[held.identity]
        if held.made and os.fstat(held.fd).st_size == 0 and same_file(held.fd, held.path):
            with contextlib.suppress(OSError):
                held.path.unlink()
    finally:
        os.close(held.fd)


# the states a ``watch`` run of this process holds for all its passes, by file (a pass's own
# hold is not here: a second pass in the same process is refused by the lock itself)
_HELD: dict[tuple[int, int], Held] = {}
_HELD_LOCK = threading.Lock()


@contextlib.contextmanager
def held_for_a_pass(path: Path, source: str) -> Iterator[None]:
    """One pass's hold of its state: the one this process already has (a ``watch`` run holds
    its state from before its first pass to its end), else a hold for this pass alone (a
    playbook's ``watch.pass`` step), so that a pass never meets another watch's in the same
    state (``database is locked``, or counters of two passes mixed): it is refused before it
    starts, as a second ``watch`` is."""
    try:
        st = os.stat(check_location(path, source))
    except OSError:  # (absent; any other error is hold's to say, naming the state)
        st = None
    with _HELD_LOCK:
        ours = st is not None and (st.st_dev, st.st_ino) in _HELD
    if ours:
        yield
        return
    held = _take(path, source)
    try:
        yield
    finally:
        release(held)


class WatchState:
    def __init__(self, path: Path, source: str) -> None:
        from ckptrescue.effects.files import open_own_file, same_file
        from ckptrescue.errors import UsageError

        self.path = path
        hint = "give --state a new file"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # never through a link, onto a device node or into a FIFO planted at the name;
            # SQLite then opens it by name, and must have opened that file
            self._fd = open_own_file(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise UsageError(f"{path}: cannot keep the watch state here ({exc.strerror or exc})",
                             hint=hint) from None
        db: sqlite3.Connection | None = None
        try:
            # used by one thread at a time (the engine runs a step in a worker thread)
            db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
            self.db = db
            if not same_file(self._fd, path):
                raise UsageError(f"{path}: changed while the watch opened it; not used",
                                 hint=hint)
            try:
                tables = {r[0]: [c[1] for c in db.execute(f"PRAGMA table_info({r[0]!r})")]
                          for r in db.execute(
                              "SELECT name FROM sqlite_master WHERE type = 'table'")}
                if tables and tables != _OWN_TABLES:  # another program's database (or a
                    # part of one): never given the watch's tables
                    raise UsageError(f"{path}: not a watch state (its tables are not the "
                                     "watch's); not used", hint=hint)
                db.executescript(SCHEMA)
            except sqlite3.OperationalError as exc:
                raise_if_system_error(exc, path)
                if "locked" in str(exc):
                    raise UsageError(f"{path}: another watch is using this state", hint=hint) \
                        from None
                raise UsageError(f"{path}: cannot use the watch state ({exc})",
                                 hint=hint) from None
            except sqlite3.DatabaseError as exc:
                raise UsageError(f"{path}: not a watch state ({exc}); refusing to overwrite it",
                                 hint=hint) from None
            try:
                known = self.meta("source")
                if known is None:
                    self.set_meta("source", source)
            except sqlite3.Error as exc:  # another program's SQLite database
                raise_if_system_error(exc, path)
                raise UsageError(f"{path}: not a watch state ({exc}); not used", hint=hint) \
                    from None
            if known is not None and known != source:
                raise UsageError(f"{path}: this watch state belongs to {known}, not {source}",
                                 hint="give each watched source its own --state file")
        except BaseException:
            if db is not None:
                db.close()
            os.close(self._fd)
            raise

    def close(self) -> None:
        try:
            self.db.close()
        finally:
            os.close(self._fd)

    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: object) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, str(value)))

    def counter(self, key: str) -> int:
        return int(self.meta(key) or 0)

    def add(self, key: str, n: int) -> None:
        self.set_meta(key, self.counter(key) + n)

    def get(self, path: bytes) -> Seen | None:
        row = self.db.execute("SELECT size, mtime_ns, ino, status, problem FROM files "
                              "WHERE path = ?", (path,)).fetchone()
        return None if row is None else Seen(*row)

    def put(self, path: bytes, *, size: int, mtime_ns: int, ino: int, status: str,
            problem: str = "") -> None:
        self.db.execute("INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (path, size, mtime_ns, ino, status, problem, time.time()))

    def paths(self) -> Iterator[bytes]:
        for (path,) in self.db.execute("SELECT path FROM files WHERE status != 'missing'"):
            yield bytes(path)

    def bad(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM files WHERE status IN ('bad', "
                                   "'missing')").fetchone()[0])

    def begin(self) -> None:
        self.db.execute("BEGIN")

    def commit(self) -> None:
        self.db.execute("COMMIT")

