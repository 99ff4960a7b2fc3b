"""The folder a drill builds into: new or empty, made, and claimed before anything slow runs.

The claim is an atomic ``mkdir`` of the first thing the drill writes there: a second drill
started into the same folder while the first imports torch (seconds) finds it and is refused,
where both once passed the emptiness check and wrote over each other. A path that cannot hold
a folder (a file, a read-only or missing mount) is a one-line usage error, not an internal one.
"""

from __future__ import annotations

from pathlib import Path

from ckptrescue.errors import UsageError


def claim(root: Path, marker: str, *, what: str) -> Path:
    """Make ``root`` (it must be new or an empty directory) and claim it by making
    ``root/marker``; gives ``root/marker``."""
    try:
        if root.exists() or root.is_symlink():
            if not root.is_dir():
                raise UsageError(f"{root}: not a directory; {what} builds into a new directory")
            if any(root.iterdir()):
                raise UsageError(f"{root}: not empty; {what} builds into a new directory")
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{root}: {exc.strerror or exc} while making the drill's folder") \
            from None
    try:
        (root / marker).mkdir()
    except FileExistsError:
        raise UsageError(f"{root}: another drill is building here") from None
    except OSError as exc:
        raise UsageError(f"{root}: {exc.strerror or exc} while making the drill's folder") \
            from None
    return root / marker
