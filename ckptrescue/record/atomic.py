"""Write a derived case file atomically: a temp file beside it, ``fsync``, rename over the old
one, ``fsync`` of the directory. A reader sees the old file or the new one, never a mix; a crash
leaves at most a ``.NAME.*.tmp`` file, which ``case verify`` notes and the next write replaces."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically and (``durable``) durably. Raises OSError
    naming the path. ``durable=False`` (a scratch case removed when its command ends) skips
    the two ``fsync``s: still atomic for a reader, not kept through a crash."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:
            view, done = memoryview(data), 0
            while done < len(data):
                done += os.write(fd, view[done:])
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, 0o644)
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
