"""Directories the kit made for a tool's outputs, recorded in the case's log.

A tool writes only into a directory the kit created (or took while it was empty) for a step,
and into files it creates there: nothing the tool writes through can then be a hard link,
symlink or bind mount reaching evidence, because nothing was there before the kit. Each such
directory is one ``safety.output_dir`` record with its identity (device, inode); the guard
(``GuardContext.output_refusal``) allows a write only beneath one of them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ckptrescue.errors import RefusedError, not_a_regular_file

if TYPE_CHECKING:
    from ckptrescue.record.case import Case

RECORD = "safety.output_dir"


def recorded(case: Case) -> list[tuple[int, int]]:
    """Identities (st_dev, st_ino) of the output directories this case's log records."""
    out: list[tuple[int, int]] = []
    for rec in case.records(RECORD):
        d = rec.get("details") or {}
        if isinstance(d.get("dev"), int) and isinstance(d.get("ino"), int):
            out.append((d["dev"], d["ino"]))
    return out


def _record(case: Case, path: Path, st: os.stat_result, how: str, purpose: str) -> None:
    case.log(RECORD, {"path": os.path.realpath(path), "dev": st.st_dev, "ino": st.st_ino,
                      "how": how, "purpose": purpose})


def claim(case: Case, path: str | os.PathLike[str], *, purpose: str = "") -> Path:
    """Make ``path`` an output directory of this case: created by the kit when missing (its
    parents as needed), taken as it is when it is an empty directory, reused when this case
    recorded it already; anything else (a file, a symlink, a directory holding files the kit
    did not put there) is refused."""
    p = Path(os.path.abspath(path))
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        p.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(p, 0o755)
        st = os.lstat(p)
        _record(case, p, st, "created", purpose)
        return p
    if not stat.S_ISDIR(st.st_mode):
        raise RefusedError(f"{p}: not a directory (a symlink or file); outputs go into a "
                           "directory the kit makes")
    if (st.st_dev, st.st_ino) in recorded(case):
        return p
    with os.scandir(p) as it:
        if any(True for _ in it):
            raise RefusedError(f"{p}: already holds files the kit did not put there; a tool "
                               "writes only into a new (or empty) directory",
                               hint="give a directory that does not exist yet")
    _record(case, p, st, "taken empty", purpose)
    return p


def create_parents(case: Case, target: str, *, purpose: str = "") -> bool:
    """For a tool output whose directory does not exist yet (or a directory output, ``DIR/``,
    that does not exist yet): create it (and what is missing above it) and record the topmost
    created directory as an output directory. False when the directory already exists (the
    guard then judges it)."""
    path = Path(os.path.abspath(target))
    parent = path if target.endswith("/") else path.parent  # "DIR/": a directory output
    if os.path.lexists(parent):
        return False
    top = parent
    while not os.path.lexists(top.parent) and top.parent != top:
        top = top.parent
    claim(case, top, purpose=purpose)
    parent.mkdir(parents=True, exist_ok=True)
    return True


def refuse_aliasing(target: str | os.PathLike[str], *, evidence: Sequence[str],
                    protected: Sequence[str] = ()) -> None:
    """The destination of a writer inside the kit (salvage, extract, restore, recover,
    preserve, a profile or a list): refused, like every tool output, when it is or lies inside
    evidence by any name that reaches it — a symlink, a bind mount of an evidence
    subdirectory, an overlay whose layer is evidence — or is one of the case's records, a
    device or one of the host's trees (``GuardContext.writes_forbidden``, which decides in the
    filesystem's own coordinates, not by the spelling of the path)."""
    from ckptrescue import guard

    context = guard.GuardContext(evidence_paths=tuple(str(e) for e in evidence),
                                 protected_paths=tuple(str(p) for p in protected))
    reason = context.writes_forbidden(os.fspath(target))
    if reason:
        raise RefusedError(f"{os.fspath(target)}: {reason}")
    # the kit's own writers replace their outputs by a rename: a device node there (even the
    # /dev/null a tool may write to), a FIFO or a socket is refused now, before the work
    try:
        mode = os.lstat(target).st_mode
    except (OSError, ValueError):
        return
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        raise not_a_regular_file(os.fspath(target), mode)
