"""Write a file atomically: a temp file beside it, ``fsync``, rename over the old one, ``fsync``
of the directory. A reader sees the old file or the new one, never a mix; a crash leaves at most a
``.NAME.*.tmp`` file, which ``case verify`` notes and the next write replaces. Each write has a
temp file of its own (``mkstemp``): two writers of one path never write into the same temp
file, and the last rename wins whole. A write that fails removes its temp file.

:func:`replacing` streams (a manifest of millions of lines); :func:`write_atomic` writes bytes
held in memory (a case file, a plan) through it."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str], *, mode: int = 0o644,
              durable: bool = True) -> Iterator[IO[bytes]]:
    """A new file (binary) for the new content of ``path``: when the block ends, it is
    fsynced (``durable``) and renamed over ``path``; when the block raises, or the rename
    fails (``path`` is a directory), it is removed and the error goes on. ``durable=False``
    (a scratch case removed when its command ends) skips the ``fsync``s: still atomic for a
    reader, not kept through a crash. Nested blocks replace the inner file first."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if not durable:
        return
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
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
