"""Walking a mounted filesystem without leaving it (read-only; shared by locate, copy)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path


def regular_files(root: Path, devs: set[int] | None = None,
                  sort: bool = False) -> Iterator[tuple[Path, os.stat_result]]:
    """Every regular file under ``root`` on ``root``'s filesystem — or, with ``devs``, on any of
    those filesystems (the datasets of a ZFS pool mounted below ``root``; directories that are
    not mount points are crossed to reach them). Symlinks are never followed."""
    ok = devs if devs is not None else {root.stat().st_dev}
    for dirpath, dirnames, filenames in os.walk(root):
        keep = [d for d in dirnames if (Path(dirpath) / d).lstat().st_dev in ok
                or (devs is not None and not os.path.ismount(Path(dirpath) / d))]
        dirnames[:] = sorted(keep) if sort else keep
        for name in sorted(filenames) if sort else filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if stat.S_ISREG(st.st_mode) and st.st_dev in ok:
                yield p, st
