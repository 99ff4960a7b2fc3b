"""Fixtures built once and reused: across the workers of one run (pytest-xdist) and across runs.

``cached_dir(name, build, sources)`` returns ``build/test-fixtures/<name>-<key>/``, where ``key``
hashes the writer's source files (``sources``, paths under the repository), the Python version
and ``extra`` (library versions): a changed writer builds anew. The first caller builds under an
exclusive ``flock`` (other workers and runs wait on it and reuse the result) straight into that
directory (writers may record their own path) and marks it complete (``.done``) last, so a
killed build is rebuilt, never reused. Tests copy what they mutate: a cached fixture is shared.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO / "build" / "test-fixtures"
DONE = ".done"


def key_of(sources: Iterable[str | Path], extra: str = "") -> str:
    digest = hashlib.sha256()
    digest.update(sys.version.encode())
    digest.update(extra.encode())
    for src in sorted(str(s) for s in sources):
        path = REPO / src
        digest.update(src.encode())
        digest.update(path.read_bytes() if path.is_file() else b"<missing>")
    return digest.hexdigest()[:16]


def cached_dir(name: str, build: Callable[[Path], object], sources: Iterable[str | Path],
               extra: str = "") -> Path:
    """The complete directory ``build(directory)`` fills, built at most once per key."""
    ROOT.mkdir(parents=True, exist_ok=True)
    final = ROOT / f"{name}-{key_of(sources, extra)}"
    if (final / DONE).is_file():
        return final
    with open(ROOT / f".{final.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if (final / DONE).is_file():
                return final
            shutil.rmtree(final, ignore_errors=True)
            final.mkdir()
            build(final)
            (final / DONE).write_text(extra)
            return final
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
