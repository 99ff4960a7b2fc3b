"""The on-disk state of a ``manifest audit`` (SQLite): bounded memory, and resumable.

Everything the audit knows per file lives in one SQLite database, never in a Python structure
for the whole tree: the manifest's entries (imported streaming from the ``sha256sum`` text, with
sizes and mtimes from its ``.jsonl`` sidecar), the walk of DIR (streamed in), every hash as it
finishes (committed every :data:`COMMIT_ROWS` rows or :data:`COMMIT_SECONDS`, whichever comes
first) and, once the audit completes, every result row. The result is computed in SQL and read
back in chunks.

Where: beside the manifest as ``MANIFEST.audit.sqlite`` unless ``--state PATH``; never inside
DIR (the dataset is evidence). An audit is identified by the real path of DIR, the SHA-256 of
the manifest's bytes (and of its sidecar's) and the mode (full, quick, or sample share + seed).

Resume: rerunning the same audit over an unfinished state (Ctrl-C, SIGKILL, a lost Dask worker,
a crash) walks DIR again and re-hashes only files without a hash row whose size, mtime and
inode still match the walk; every other file's hash is taken from the state (``resumed``).
A state marked complete is kept (it holds every row) but never reused as a result: the next run
of the same audit starts over and reads the data again; only the imported manifest is reused
when its bytes hash the same.

Durability: WAL with ``synchronous=NORMAL``. A killed process (SIGKILL, OOM killer, a lost
worker) loses at most the last uncommitted batch; committed rows survive because they are in the
WAL in the OS page cache. A power loss or kernel crash may also roll back the transactions
committed since the last checkpoint (they are not fsynced one by one) but never corrupts the
database: the rerun re-hashes those files.
"""

# the SQL here is put together from this module's fixed fragments only; values are always bound
# ruff: noqa: S608

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckptrescue.datasets import sha256sum_format
from ckptrescue.datasets.manifest_files import (
    ManifestEntry,
    UnreadableFile,
    read_jsonl_entries,
    sidecar_path,
)
from ckptrescue.datasets.scratch_db import entry_chunks, lock_or_refuse, writes_inside
from ckptrescue.datasets.walk import FileEntry, Skipped, safe_relative, scan
from ckptrescue.errors import UsageError, raise_if_system_error
from ckptrescue.model import JsonObject

SCHEMA = 2
STATE_SUFFIX = ".audit.sqlite"
COMMIT_ROWS = 64  # a hash row is committed at most this many rows ...
COMMIT_SECONDS = 1.0  # ... or this many seconds after it finished
INSERT_CHUNK = 4096  # rows per executemany while streaming the manifest and the walk
HASH_CHUNK_FILES = 8192  # files handed to hash_many at once (its input is a list) ...
CLUSTER_CHUNK_FILES = 65536  # ... and to a Dask cluster (each call plans and submits anew)
HASH_CHUNK_BYTES = 4 << 30
CACHE_KIB = 8192  # SQLite's page cache (and sorter) limit for this connection
_SIDE_FILES = ("-wal", "-shm", "-journal")

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS expected (rel BLOB PRIMARY KEY, sha256 TEXT NOT NULL, size INTEGER,
    mtime_ns INTEGER, drawn INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS present (rel BLOB NOT NULL, size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL, inode INTEGER);
CREATE TABLE IF NOT EXISTS skipped (rel BLOB, reason TEXT);
CREATE TABLE IF NOT EXISTS hashed (rel BLOB PRIMARY KEY, size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL, inode INTEGER, sha256 TEXT, nbytes INTEGER, error TEXT,
    error_offset INTEGER) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS result (rel BLOB PRIMARY KEY, status TEXT NOT NULL, expected TEXT,
    actual TEXT, error_offset INTEGER, error TEXT, reason TEXT NOT NULL DEFAULT '')
    WITHOUT ROWID;
"""

_OUR_TABLES = {"meta", "expected", "present", "skipped", "hashed", "result"}

# a hash row counts for the current walk only when the file still has the size, mtime and inode
# it had when it was hashed
_VALID = "h.rel = p.rel AND h.size = p.size AND h.mtime_ns = p.mtime_ns AND h.inode IS p.inode"


def default_path(manifest: str | os.PathLike[str]) -> Path:
    return Path(str(manifest) + STATE_SUFFIX)


def manifest_id(manifest: str | os.PathLike[str]) -> str:
    """SHA-256 over the manifest's bytes and its sidecar's (the sidecar gives sizes)."""
    digest = hashlib.sha256()
    paths = [Path(manifest)]
    side = sidecar_path(manifest)
    if not str(manifest).endswith(".jsonl") and side.is_file():
        paths.append(side)
    for p in paths:
        part = hashlib.sha256()
        with p.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                part.update(chunk)
        digest.update(p.name.encode() + b"\0" + part.digest())
    return digest.hexdigest()


@dataclass(frozen=True)
class Identity:
    """What makes two runs the same audit."""

    root: str  # real path of DIR
    manifest: str  # manifest_id()
    mode: str  # "full", "quick" or "sample:<value>:<fraction|count>:<seed>"

    def describe(self) -> str:
        return f"{self.root} (mode {self.mode}, manifest sha256 {self.manifest[:12]}...)"


def check_location(state: Path, root: str | os.PathLike[str], *, default: bool) -> None:
    """Refuse a state inside DIR (the dataset is evidence), with the way out."""
    if writes_inside(state, root):
        why = "beside the manifest, which is inside DIR" if default else "inside DIR"
        raise UsageError(f"{state}: the audit state would be written {why} ({root})",
                         hint="the dataset is evidence and is never written to: pass "
                              "--state PATH outside DIR")


class AuditState:
    """One open state database (held under an exclusive lock until :meth:`close`)."""

    def __init__(self, path: Path, conn: sqlite3.Connection, lock_fd: int) -> None:
        self.path = path
        self.conn = conn
        self._lock_fd = lock_fd
        self.fresh = True
        self.notes: list[str] = []

    # -- opening --------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path, identity: Identity, *, restart: bool = False,
             default: bool = False) -> AuditState:
        """Open or create the state at ``path`` for ``identity``: resumed when it holds an
        unfinished run of the same audit (and not ``restart``), started over otherwise."""
        hint = "pass --state PATH (a writable place outside DIR)"
        from ckptrescue.effects.files import open_own_file, same_file

        existed = path.exists()
        try:  # never through a link, onto a device node or into a FIFO planted at the name
            fd = open_own_file(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            where = "beside the manifest" if default else "at"
            raise UsageError(f"{path}: cannot write the audit state {where} it "
                             f"({exc.strerror})", hint=hint) from None
        lock_or_refuse(fd, f"{path}: another audit is using this state",
                       hint="wait for it, or pass --state PATH", name=path)
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            if not same_file(fd, path):  # swapped between the checked open and SQLite's own
                raise UsageError(f"{path}: changed while the audit opened it; not used",
                                 hint=hint)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")  # the page cache stays bounded
            conn.execute("PRAGMA temp_store=FILE")
            state = cls(path, conn, fd)
            state._start(identity, restart=restart, existed=existed)
        except BaseException as exc:
            try:
                if conn is not None:
                    with contextlib.suppress(sqlite3.Error):
                        conn.close()
                if not existed and same_file(fd, path):  # a state this open made (a full
                    # disk failed it) is not left behind
                    for made in [path] + [Path(str(path) + s) for s in _SIDE_FILES]:
                        with contextlib.suppress(OSError):
                            made.unlink(missing_ok=True)
            finally:
                os.close(fd)
            if not isinstance(exc, sqlite3.DatabaseError):
                raise
            raise_if_system_error(exc, path)  # a full disk is not a foreign database
            raise UsageError(f"{path}: not an audit state this kit can use ({exc}); "
                             "refusing to overwrite it", hint=hint) from None
        return state

    def _start(self, identity: Identity, *, restart: bool, existed: bool) -> None:
        tables = {r[0] for r in self.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if existed and tables and "meta" not in tables:
            raise sqlite3.DatabaseError("no meta table")
        if "meta" in tables:
            old = self.meta().get("schema")
            if old != str(SCHEMA):
                if old is None or not (tables <= _OUR_TABLES):
                    raise sqlite3.DatabaseError("not a ckptrescue audit state")
                # a state written by another version of the kit: nothing in it can be resumed
                for table in sorted(tables):
                    self.conn.execute(f"DROP TABLE {table}")
                self.notes.append(f"{self.path} held an audit state of another kit version "
                                  f"(schema {old}); it was replaced")
        self.conn.executescript(_TABLES)
        meta = self.meta()
        same = (meta.get("root"), meta.get("manifest"), meta.get("mode")) == (
            identity.root, identity.manifest, identity.mode)
        unfinished = meta.get("status") == "running"
        if unfinished and not same:
            # an unfinished run that hashed nothing (a quick audit, a manifest that failed to
            # import) holds nothing worth keeping
            unfinished = self.conn.execute("SELECT 1 FROM hashed LIMIT 1").fetchone() is not None
        if unfinished and not same and not restart:
            held = Identity(meta.get("root", "?"), meta.get("manifest", "?"),
                            meta.get("mode", "?"))
            raise UsageError(f"{self.path}: holds an unfinished audit of {held.describe()}",
                             hint="rerun that audit to resume it, pass --restart to discard it, "
                                  "or --state PATH to keep it")
        if unfinished and same and not restart:
            self.fresh = False
            with self.transaction():
                self.conn.execute("DELETE FROM present")
                self.conn.execute("DELETE FROM skipped")
                self.conn.execute("DELETE FROM result")
            return
        if meta.get("status") == "complete" and same:
            self.notes.append(f"the completed audit in {self.path} was replaced by this new run")
        keep_manifest = meta.get("imported") == identity.manifest
        with self.transaction():
            for table in ("present", "skipped", "hashed", "result"):
                self.conn.execute(f"DELETE FROM {table}")
            if keep_manifest:
                self.conn.execute("UPDATE expected SET drawn = 0 WHERE drawn != 0")
            else:
                self.conn.execute("DELETE FROM expected")
                self.conn.execute("DELETE FROM meta WHERE key = 'imported'")
            self.set_meta(schema=str(SCHEMA), root=identity.root, manifest=identity.manifest,
                          mode=identity.mode, status="running", started=_now(), completed="")

    # -- small helpers --------------------------------------------------------------------------
    def meta(self) -> dict[str, str]:
        return dict(self.conn.execute("SELECT key, value FROM meta"))

    def set_meta(self, **values: str) -> None:
        self.conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                              list(values.items()))

    def transaction(self) -> _Transaction:
        return _Transaction(self.conn)

    def close(self) -> None:
        try:
            self.conn.close()
        finally:
            os.close(self._lock_fd)

    def hashed_nothing(self) -> bool:
        """No file was hashed into this state (nothing a rerun could resume)."""
        return self.conn.execute("SELECT 1 FROM hashed LIMIT 1").fetchone() is None

    def remove_files(self) -> None:
        """Remove the state's files (after :meth:`close`)."""
        for p in self.excluded():
            p.unlink(missing_ok=True)

    def excluded(self) -> list[Path]:
        """The state's own files (never walked as part of DIR)."""
        return [self.path] + [Path(str(self.path) + s) for s in _SIDE_FILES]

    # -- the manifest ---------------------------------------------------------------------------
    def import_manifest(self, manifest: Path, identity: Identity) -> bool:
        """Stream the manifest (and its sidecar) into ``expected`` unless this state already
        holds the same bytes imported; True when sizes and mtimes are known."""
        side = sidecar_path(manifest)
        is_jsonl = manifest.name.endswith(".jsonl")
        has_sizes = is_jsonl or side.is_file()
        if self.meta().get("imported") == identity.manifest:
            return has_sizes
        with self.transaction():
            self.conn.execute("DELETE FROM expected")
            if is_jsonl:
                self._insert("INSERT OR REPLACE INTO expected (rel, sha256, size, mtime_ns) "
                             "VALUES (?, ?, ?, ?)",
                             ((e.rel, e.sha256, e.size, e.mtime_ns)
                              for e in read_jsonl_entries(manifest)))
            elif not has_sizes:
                self._insert("INSERT OR REPLACE INTO expected (rel, sha256) VALUES (?, ?)",
                             _text_entries(manifest))
            else:
                # names and hashes from the text, sizes and mtimes from the sidecar where it
                # agrees on the hash: both into temporary tables, joined once into expected
                conn = self.conn
                conn.execute("CREATE TEMP TABLE IF NOT EXISTS text_rows (rel BLOB, sha256 TEXT)")
                conn.execute("DELETE FROM text_rows")
                self._insert("INSERT INTO text_rows (rel, sha256) VALUES (?, ?)",
                             _text_entries(manifest))
                self._load_sidecar(side)
                conn.execute("INSERT OR REPLACE INTO expected (rel, sha256, size, mtime_ns) "
                             "SELECT t.rel, t.sha256, s.size, s.mtime_ns FROM text_rows t "
                             "LEFT JOIN side_rows s ON s.rel = t.rel AND s.sha256 = t.sha256 "
                             "ORDER BY t.rowid")
                conn.execute("DELETE FROM text_rows")
                conn.execute("DELETE FROM side_rows")
            self.set_meta(imported=identity.manifest)
        return has_sizes

    def _load_sidecar(self, side: Path) -> None:
        """The sidecar's (name, sha256, size, mtime) into the temporary ``side_rows`` (the last
        line of a name wins, as a dict would).

        Plain lines (the kit's own: ASCII, no escapes) are decoded by SQLite's JSON functions;
        a line with an escape (a name that is not plain ASCII) or of another shape goes through
        ``ManifestEntry.from_json`` as before."""
        conn = self.conn
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS side_raw (j TEXT)")
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS side_rows (rel BLOB PRIMARY KEY, "
                     "sha256 TEXT, size INTEGER, mtime_ns INTEGER) WITHOUT ROWID")
        conn.execute("DELETE FROM side_raw")
        conn.execute("DELETE FROM side_rows")
        odd: list[bytes] = []

        def apply_odd() -> None:
            conn.executemany("INSERT OR REPLACE INTO side_rows (rel, sha256, size, mtime_ns) "
                             "VALUES (?, ?, ?, ?)", [(e.rel, e.sha256, e.size, e.mtime_ns)
                                                     for e in _entries(odd)])
            odd.clear()

        def plain() -> Iterator[tuple[str]]:
            with side.open("rb") as fh:
                for raw in fh:
                    if not raw.endswith(b"\n"):
                        break  # a torn last line (an interrupted write) is ignored
                    if b"\\" in raw or not raw.isascii():
                        odd.append(raw)
                        if len(odd) >= INSERT_CHUNK:  # no statement runs while this yields
                            apply_odd()
                    else:
                        yield (raw.decode("ascii"),)

        self._insert("INSERT INTO side_raw (j) VALUES (?)", plain())
        apply_odd()
        conn.execute(_SIDECAR_SQL)
        leftovers = conn.execute(f"SELECT j FROM side_raw WHERE NOT ({_SIDECAR_PLAIN})")
        odd += [row[0].encode("ascii") + b"\n" for row in leftovers.fetchall()]
        conn.execute("DELETE FROM side_raw")
        apply_odd()

    def _insert(self, sql: str, rows: Iterable[tuple[Any, ...]]) -> None:
        it = iter(rows)
        while True:
            chunk = [row for _, row in zip(range(INSERT_CHUNK), it, strict=False)]
            if not chunk:
                return
            self.conn.executemany(sql, chunk)

    # -- the walk -------------------------------------------------------------------------------
    def record_walk(self, root: Path, exclude: Iterable[str | os.PathLike[str]],
                    follow_into: Iterable[str | os.PathLike[str]] = ()) -> None:
        """The walk of DIR into ``present`` (appended in walk order, indexed by name after:
        cheaper than inserting into a name-ordered tree as the walk goes)."""
        skipped: list[tuple[bytes, str]] = []

        def files() -> Iterator[tuple[bytes, int, int, int]]:
            for item in scan(root, exclude=exclude, follow_into=follow_into):
                if type(item) is tuple:
                    yield item
                else:
                    assert isinstance(item, Skipped)
                    skipped.append((item.rel, item.reason))

        with self.transaction():
            self.conn.execute("DROP INDEX IF EXISTS present_rel")
            self.conn.execute("DELETE FROM present")
            self.conn.execute("DELETE FROM skipped")
            # executemany pulls the walk one file at a time: nothing per file is kept here
            self.conn.executemany("INSERT INTO present (rel, size, mtime_ns, inode) "
                                  "VALUES (?, ?, ?, ?)", files())
            self.conn.executemany("INSERT INTO skipped (rel, reason) VALUES (?, ?)", skipped)
            self.conn.execute("CREATE UNIQUE INDEX present_rel ON present (rel)")

    def skipped(self) -> Iterator[Skipped]:
        for rel, reason in self.conn.execute("SELECT rel, reason FROM skipped ORDER BY rel"):
            yield Skipped(bytes(rel), reason)

    # -- the sample draw ------------------------------------------------------------------------
    def expected_count(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM expected").fetchone()[0])

    def mark_drawn(self, indices: Iterable[int]) -> None:
        """Mark the entries at these positions of the name-sorted manifest as drawn."""
        wanted = sorted(set(indices))
        if not wanted:
            return
        with self.transaction():
            batch: list[tuple[bytes]] = []
            pos = 0
            cursor = self.conn.cursor()
            cursor.execute("SELECT rel FROM expected ORDER BY rel")
            for i, (rel,) in enumerate(cursor):
                if i == wanted[pos]:
                    batch.append((rel,))
                    pos += 1
                    if pos == len(wanted):
                        break
            cursor.close()
            self._insert("UPDATE expected SET drawn = 1 WHERE rel = ?", batch)

    # -- hashing --------------------------------------------------------------------------------
    def _todo_sql(self, mode: str) -> str:
        if mode == "quick":
            return "SELECT p.rel, p.size, p.mtime_ns, p.inode FROM present p WHERE 0"
        if mode.startswith("sample"):
            return ("SELECT p.rel, p.size, p.mtime_ns, p.inode FROM expected e "
                    "JOIN present p ON p.rel = e.rel WHERE e.drawn = 1 AND "
                    "NOT (e.size IS NOT NULL AND e.size != p.size)")
        return "SELECT p.rel, p.size, p.mtime_ns, p.inode FROM present p"

    def hash_plan(self, mode: str) -> tuple[int, int, int]:
        """(files to hash now, their bytes, files whose hash is taken from the state)."""
        sql = self._todo_sql(mode)
        left = self.conn.execute(
            f"SELECT count(*), coalesce(sum(t.size), 0) FROM ({sql}) t "
            f"WHERE NOT EXISTS (SELECT 1 FROM hashed h, present p WHERE p.rel = t.rel AND "
            f"{_VALID})").fetchone()
        total = self.conn.execute(f"SELECT count(*) FROM ({sql})").fetchone()
        return int(left[0]), int(left[1]), int(total[0]) - int(left[0])

    def todo_chunks(self, mode: str, *, files: int = HASH_CHUNK_FILES
                    ) -> Iterator[list[FileEntry]]:
        """The files still to hash, in name order, in lists of bounded length and bytes."""
        sql = (f"SELECT t.rel, t.size, t.mtime_ns, t.inode FROM ({self._todo_sql(mode)}) t "
               f"WHERE t.rel > ? AND NOT EXISTS (SELECT 1 FROM hashed h, present p "
               f"WHERE p.rel = t.rel AND {_VALID}) ORDER BY t.rel LIMIT ?")
        return entry_chunks(self.conn, sql, files=files, max_bytes=HASH_CHUNK_BYTES)

    def writer(self) -> HashWriter:
        return HashWriter(self.conn)

    # -- the result -----------------------------------------------------------------------------
    def compute_result(self, mode: str) -> None:
        """Every result row, in SQL, into ``result``; the state is then marked complete."""
        self.conn.create_function("unsafe_name", 1, lambda rel: 0 if safe_relative(bytes(rel))
                                  else 1, deterministic=True)
        with self.transaction():
            self.conn.execute("DELETE FROM result")
            self.conn.execute(_RESULT_SQL[mode if mode in _RESULT_SQL else "sample"])
            self.conn.execute(_NEW_SQL["full" if mode == "full" else "stat"])
            self.set_meta(status="complete", completed=_now())

    def counts(self) -> dict[str, int]:
        return {s: int(n) for s, n in self.conn.execute(
            "SELECT status, count(*) FROM result GROUP BY status")}

    def result_rows(self, *, ok_too: bool) -> Iterator[tuple[Any, ...]]:
        """Result rows in name order (all, or all but ``ok``), read in chunks."""
        where = "" if ok_too else "AND status != 'ok'"
        sql = ("SELECT rel, status, expected, actual, error_offset, error, reason FROM result "
               f"WHERE rel > ? {where} ORDER BY rel LIMIT {INSERT_CHUNK}")
        after = b""
        while True:
            rows = self.conn.execute(sql, (after,)).fetchall()
            if not rows:
                return
            yield from rows
            after = rows[-1][0]

    def sample_stats(self) -> tuple[int, int, int, int]:
        """(drawn files hashed, population, bad among them, unreadable among them)."""
        size, bad, unreadable = self.conn.execute(
            "SELECT count(*), coalesce(sum(r.status IN ('corrupted', 'unreadable')), 0), "
            "coalesce(sum(r.status = 'unreadable'), 0) FROM expected e JOIN present p "
            "ON p.rel = e.rel JOIN result r ON r.rel = e.rel WHERE e.drawn = 1 AND "
            "NOT (e.size IS NOT NULL AND e.size != p.size)").fetchone()
        population = self.conn.execute(
            "SELECT count(*) FROM expected e JOIN present p ON p.rel = e.rel WHERE "
            "NOT (e.size IS NOT NULL AND e.size != p.size)").fetchone()[0]
        return int(size), int(population), int(bad), int(unreadable)


# the rows of the manifest's entries, per mode (hash rows count only when _VALID)
_MISSING = ("WHEN p.rel IS NULL THEN 'missing'")
_MISSING_REASON = ("WHEN p.rel IS NULL THEN CASE WHEN unsafe_name(e.rel) THEN "
                   "'the name leads outside DIR; never opened' ELSE '' END")
_HASHED_STATUS = ("WHEN h.error IS NOT NULL THEN 'unreadable' "
                  "WHEN h.sha256 = e.sha256 THEN 'ok' "
                  "WHEN e.size IS NOT NULL AND e.size != h.nbytes THEN 'changed' "
                  "ELSE 'corrupted'")
_HASHED_REASON = ("WHEN h.error IS NOT NULL THEN h.error || ' at offset ' || "
                  "coalesce(h.error_offset, 'None') "
                  "WHEN h.sha256 = e.sha256 THEN '' "
                  "WHEN e.size IS NOT NULL AND e.size != h.nbytes THEN "
                  "'size ' || e.size || ' -> ' || h.nbytes "
                  "WHEN e.size IS NOT NULL THEN 'same size, different SHA-256' "
                  "ELSE 'different SHA-256'")
_STAT_CHANGED = "e.size IS NOT NULL AND e.size != p.size"
_FROM = (" FROM expected e LEFT JOIN present p ON p.rel = e.rel "
         f"LEFT JOIN hashed h ON {_VALID}")
_COLUMNS = "INSERT INTO result (rel, status, expected, actual, error_offset, error, reason) "
_QUICK_WANT = "'size=' || coalesce(e.size, 'None') || ' mtime_ns=' || coalesce(e.mtime_ns, 'None')"
_QUICK_GOT = "'size=' || p.size || ' mtime_ns=' || p.mtime_ns"
_RESULT_SQL = {
    "full": (_COLUMNS + "SELECT e.rel, "
             f"CASE {_MISSING} {_HASHED_STATUS} END, e.sha256, "
             "CASE WHEN p.rel IS NULL OR h.error IS NOT NULL THEN NULL ELSE h.sha256 END, "
             "h.error_offset, h.error, "
             f"CASE {_MISSING_REASON} {_HASHED_REASON} END" + _FROM),
    "quick": (_COLUMNS + "SELECT e.rel, "
              f"CASE {_MISSING} WHEN e.size IS NOT p.size OR e.mtime_ns IS NOT p.mtime_ns "
              "THEN 'changed' ELSE 'ok' END, "
              f"CASE WHEN p.rel IS NULL THEN e.sha256 ELSE {_QUICK_WANT} END, "
              f"CASE WHEN p.rel IS NULL THEN NULL ELSE {_QUICK_GOT} END, NULL, NULL, "
              f"CASE {_MISSING_REASON} WHEN e.size IS NOT p.size THEN 'size differs' "
              "WHEN e.mtime_ns IS NOT p.mtime_ns THEN 'same size, mtime differs' ELSE '' END"
              " FROM expected e LEFT JOIN present p ON p.rel = e.rel"),
    # sampled: missing and size-changed files from the stat, drawn ones from their hash; the
    # rest of the present files have no row (they were not read)
    "sample": (_COLUMNS + "SELECT e.rel, "
               f"CASE {_MISSING} WHEN {_STAT_CHANGED} THEN 'changed' {_HASHED_STATUS} END, "
               "e.sha256, CASE WHEN p.rel IS NULL OR h.error IS NOT NULL THEN NULL "
               "ELSE h.sha256 END, CASE WHEN h.rel IS NOT NULL AND NOT "
               f"({_STAT_CHANGED}) THEN h.error_offset END, "
               f"CASE WHEN h.rel IS NOT NULL AND NOT ({_STAT_CHANGED}) THEN h.error END, "
               f"CASE {_MISSING_REASON} WHEN {_STAT_CHANGED} THEN "
               f"'size ' || e.size || ' -> ' || p.size || ' (stat)' {_HASHED_REASON} END"
               + _FROM + f" WHERE p.rel IS NULL OR {_STAT_CHANGED} OR h.rel IS NOT NULL"),
}
# files not in the manifest: hashed in a full audit (so "new" carries its SHA-256, or the file
# is unreadable), stat'ed only otherwise
_NOT_IN_MANIFEST = " WHERE NOT EXISTS (SELECT 1 FROM expected e WHERE e.rel = p.rel)"
_NEW_SQL = {
    "full": (_COLUMNS + "SELECT p.rel, CASE WHEN h.error IS NOT NULL THEN 'unreadable' "
             "ELSE 'new' END, NULL, CASE WHEN h.error IS NULL THEN h.sha256 END, "
             "h.error_offset, h.error, CASE WHEN h.error IS NOT NULL THEN h.error || "
             "' at offset ' || coalesce(h.error_offset, 'None') ELSE '' END "
             f"FROM present p LEFT JOIN hashed h ON {_VALID}" + _NOT_IN_MANIFEST),
    "stat": (_COLUMNS + "SELECT p.rel, 'new', NULL, NULL, NULL, NULL, '' FROM present p"
             + _NOT_IN_MANIFEST),
}


class HashWriter:
    """Writes each finished hash as it arrives; commits every COMMIT_ROWS rows or COMMIT_SECONDS
    (and on close, also after an interruption)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.pending = 0
        self.written = 0
        self.last = time.monotonic()
        self.conn.execute("BEGIN")

    def add(self, entry: FileEntry, item: ManifestEntry | UnreadableFile) -> None:
        if isinstance(item, UnreadableFile):
            row = (entry.rel, entry.size, entry.mtime_ns, entry.inode, None, None, item.error,
                   item.offset)
        else:
            row = (entry.rel, entry.size, entry.mtime_ns, entry.inode, item.sha256, item.size,
                   None, None)
        self.conn.execute("INSERT OR REPLACE INTO hashed (rel, size, mtime_ns, inode, sha256, "
                          "nbytes, error, error_offset) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)
        self.pending += 1
        self.written += 1
        now = time.monotonic()
        if self.pending >= COMMIT_ROWS or now - self.last >= COMMIT_SECONDS:
            self.conn.execute("COMMIT")
            self.conn.execute("BEGIN")
            self.pending = 0
            self.last = now

    def close(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")


class _Transaction:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN")
        return self.conn

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        self.conn.execute("COMMIT" if kind is None else "ROLLBACK")


_SIDECAR_PLAIN = ("json_valid(j) AND json_type(j, '$.path') = 'text' AND "
                  "json_type(j, '$.size') = 'integer' AND json_type(j, '$.sha256') = 'text' AND "
                  "json_type(j, '$.mtime_ns') = 'integer'")
_SIDECAR_SQL = ("INSERT OR REPLACE INTO side_rows (rel, sha256, size, mtime_ns) SELECT "
                "CAST(json_extract(j, '$.path') AS BLOB), lower(json_extract(j, '$.sha256')), "
                "json_extract(j, '$.size'), json_extract(j, '$.mtime_ns') FROM side_raw WHERE "
                f"{_SIDECAR_PLAIN} ORDER BY rowid")


def _entries(lines: list[bytes]) -> Iterator[ManifestEntry]:
    for raw in lines:
        try:
            yield ManifestEntry.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError):
            continue


_FAST_LINE = re.compile(rb"([0-9a-fA-F]{64})  ([^\r\n]+)\n?")


def _text_entries(manifest: Path) -> Iterator[tuple[bytes, str]]:
    """(normalised name, sha256) of every line of a sha256sum manifest, streaming."""
    try:
        with manifest.open("rb") as fh:
            for lineno, raw in enumerate(fh, start=1):
                fast = _FAST_LINE.fullmatch(raw)
                if fast is not None and not raw.startswith(b"\\"):
                    name = fast.group(2)
                    if name.startswith(b"./"):
                        name = sha256sum_format.plain_name(name)
                    yield name, fast.group(1).decode("ascii").lower()
                    continue
                line = sha256sum_format.parse_line(raw[:-1] if raw.endswith(b"\n") else raw,
                                                   lineno)
                if line is not None:
                    yield sha256sum_format.plain_name(line.name), line.sha256
    except sha256sum_format.ManifestSyntaxError as exc:
        raise UsageError(f"{manifest}: not a sha256sum manifest: {exc}") from exc



def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def describe(path: str | os.PathLike[str]) -> JsonObject:
    """What a state file holds (for messages and tests): its meta and row counts."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        hashed = conn.execute("SELECT count(*) FROM hashed").fetchone()[0]
        return {"meta": meta, "hashed": int(hashed)}
    finally:
        conn.close()


__all__ = ["AuditState", "Identity", "check_location", "default_path", "describe", "manifest_id"]
