"""Write a file atomically: a temp file beside it, ``fsync``, rename over the old one, ``fsync``
of the directory. A reader sees the old file or the new one, never a mix; a crash leaves at most
a ``.NAME.*.tmp`` file, which ``case verify`` notes. Each write has a temp file of its own
(``mkstemp``): two writers of one path never write into the same temp file, and the last rename
wins whole; two writers of one set of files (:func:`replacing_all`) rename theirs under a lock
on the folder, so the last set wins whole too. A write that fails removes its temp file.

Only a regular file (or nothing) is ever replaced: a device, a pipe, a socket or a folder at
the path is refused before anything is written, and checked again before the rename (renaming
over ``/dev/null`` as root would replace the machine's device node). A symbolic link at the
path is replaced itself, never written through: an output never lands where a link points. An
error of this module's own steps names the path asked for, not the temp file.

:func:`replacing` streams (a manifest of millions of lines); :func:`write_atomic` writes bytes
held in memory (a case file, a plan) through it."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from ckptrescue.effects.files import fsync, named_file
from ckptrescue.errors import named, not_a_regular_file


def refuse_non_regular(path: Path) -> None:
    """Return when ``path`` is a regular file, a symlink or absent; a folder there is an
    ``IsADirectoryError``, a device node, a FIFO or a socket the kit's refusal (exit 3,
    :func:`errors.not_a_regular_file`); an error reaching it names ``path``."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:  # a file where a folder of the path must be
        raise named(exc, path, replace=True) from None
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    raise not_a_regular_file(str(path), mode)


class _Temp:
    """The temporary file that becomes ``path`` (:func:`replacing_all`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            # (a name too long to extend gets a short temporary name, still ``.*.tmp``)
            prefix = f".{path.name}." if len(os.fsencode(path.name)) <= 230 else ".ckptrescue-"
            fd, self.tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
        except OSError as exc:
            raise named(exc, path, replace=True) from None
        self.fh = named_file(fd, "wb", path)  # a write to a full disk names the file

    def finish(self, mode: int, durable: bool) -> None:
        """Every byte written and (``durable``) synced; the file closed with its mode."""
        if durable:
            fsync(self.fh)
        self.fh.close()  # (flushed)
        os.chmod(self.tmp, mode)

    def install(self) -> None:
        refuse_non_regular(self.path)  # again: a streaming write may have taken an hour
        os.replace(self.tmp, self.path)
        self.tmp = ""

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            self.fh.close()
        if self.tmp:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp)


RENAME_LOCK_WAIT_S = 5.0  # a kit writer holds the folder's lock for its renames only


@contextlib.contextmanager
def _renaming_together(temps: list[_Temp]) -> Iterator[None]:
    """Two writers of one set of files (two diffs to one OUT) each rename a whole set; held
    while the renames run (a moment), an exclusive lock on the first file's folder keeps one
    writer's renames from falling between the other's (a changes file of one run beside the
    diff of the other). One file alone needs none. Best effort, never a wait without end: a
    folder that cannot be locked (some network filesystems), or that something else holds
    locked for longer than a kit writer ever does (a wrapper's ``flock DIR``), is renamed into
    without it after :data:`RENAME_LOCK_WAIT_S`."""
    if len(temps) < 2:
        yield
        return
    from ckptrescue.record.lock import flock_within

    try:
        dfd = os.open(temps[0].path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):  # (not locked: renamed without it)
            flock_within(dfd, RENAME_LOCK_WAIT_S, poll=0.01)
        yield
    finally:
        os.close(dfd)


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], *, mode: int = 0o644,
              durable: bool = True) -> Iterator[IO[bytes]]:
    """A new file (binary) for the new content of ``path``: when the block ends, it is
    fsynced (``durable``) and renamed over ``path``; when the block raises, or a step of the
    write fails, it is removed and the error goes on (the block's own error unchanged; a
    failed step's naming ``path``). ``durable=False`` (a scratch case removed when its command
    ends, a metrics file) skips the ``fsync``s: still atomic for a reader, not kept through a
    crash. Files that belong together (a manifest and its sidecar): :func:`replacing_all`."""
    with replacing_all(path, mode=mode, durable=durable) as (fh,):
        yield fh


@contextlib.contextmanager
def replacing_all(*paths: str | os.PathLike[str], mode: int = 0o644,
                  durable: bool = True) -> Iterator[tuple[IO[bytes], ...]]:
    """:func:`replacing` for files that belong together (a manifest and its sidecar): every
    path is checked before any is written, and none is renamed until every one is written
    whole and synced, so that a full disk or an error in the block leaves all of them as they
    were. They are then renamed in the order given; only a failure of a rename itself leaves
    the earlier ones new."""
    if not paths:
        raise ValueError("replacing_all: no path")
    temps: list[_Temp] = []
    try:
        for p in paths:
            refuse_non_regular(Path(p))
        for p in paths:
            temps.append(_Temp(Path(p)))
        yield tuple(t.fh for t in temps)
    except BaseException:
        for t in temps:
            t.discard()
        raise
    current = temps[0]
    try:
        for current in temps:
            current.finish(mode, durable)
        with _renaming_together(temps):
            for current in temps:
                current.install()
    except BaseException as exc:
        for t in temps:
            t.discard()
        if isinstance(exc, OSError) and exc.filename != str(current.path):
            raise named(exc, current.path, replace=True) from None
        raise
    if not durable:
        return
    # the files are in place: a folder that cannot be synced (a filesystem without directory
    # fsync) makes the renames less durable, not the writes wrong
    for parent in dict.fromkeys(t.path.parent for t in temps):
        with contextlib.suppress(OSError):
            dfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)


def write_atomic(path: str | os.PathLike[str], data: bytes, *, durable: bool = True,
                 mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically and (``durable``) durably (:func:`replacing`).
    Raises OSError naming the path."""
    with replacing(path, mode=mode, durable=durable) as fh:
        fh.write(data)


def write_json_atomic(path: Path, data: Any, *, durable: bool = True) -> None:
    write_atomic(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode(),
                 durable=durable)


def leftovers(directory: Path) -> list[Path]:
    """Temp files an interrupted atomic write left in ``directory``."""
    try:
        return sorted(p for p in Path(directory).iterdir()
                      if p.name.startswith(".") and p.name.endswith(".tmp") and p.is_file())
    except OSError:
        return []
