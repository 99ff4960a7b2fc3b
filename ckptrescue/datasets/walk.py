"""List the regular files under a dataset directory without ever leaving it.

Names are bytes relative to the root (as ``sha256sum`` sees them, so odd names survive). A symlink
is followed only when it resolves to a regular file inside the root (what ``sha256sum`` would read
under that name), or inside one of the directories given as ``follow_into``; symlinks that lead
out of those, dangle, or point at directories are skipped and said so. FIFOs, sockets and device
nodes are skipped: reading them would block or read a device, not a dataset file.
"""

from __future__ import annotations

import operator
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ckptrescue.checkpoints.formats.regular_file import kind_of


@dataclass(frozen=True)
class FileEntry:
    """A regular file to hash or check: relative name (bytes), size and mtime from one stat."""

    rel: bytes
    size: int
    mtime_ns: int
    # the inode, when the walk saw one (``manifest update`` re-hashes a file whose inode changed)
    inode: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Skipped:
    """An entry the walk did not hash (not a regular file, not listable or statable, a
    symlink leading out), and why."""

    rel: bytes
    reason: str


@dataclass
class WalkResult:
    """The regular files a walk found and the entries it skipped."""

    files: list[FileEntry] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def _inside(path: bytes, root: bytes) -> bool:
    return path == root or path.startswith(root.rstrip(b"/") + b"/")


def walk(root: str | os.PathLike[str] | bytes, *,
         exclude: Iterable[str | bytes | os.PathLike[str]] = (),
         follow_into: Iterable[str | bytes | os.PathLike[str]] = ()) -> WalkResult:
    """Every regular file under ``root`` (sorted by name), and what was skipped and why.

    ``follow_into``: more directories a symlink may lead into (their real paths), besides
    ``root`` itself: e.g. a clean view's links into DIR and the recovery directory."""
    root_b = os.fsencode(root)
    real_root = _roots(root_b, follow_into)
    excluded = _identities(exclude)
    result = WalkResult()
    stack: list[bytes] = [b""]
    while stack:
        rel_dir = stack.pop()
        abs_dir = join(root_b, rel_dir) if rel_dir else root_b
        try:
            entries = sorted(os.scandir(abs_dir), key=lambda e: e.name)
        except OSError as exc:
            reason = f"cannot list directory: {exc.strerror}"
            result.skipped.append(Skipped(rel_dir or b".", reason))
            continue
        for entry in entries:
            rel = join(rel_dir, entry.name) if rel_dir else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                result.skipped.append(Skipped(rel, f"cannot stat: {exc.strerror}"))
                continue
            if excluded and (st.st_dev, st.st_ino) in excluded:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(rel)
            elif stat.S_ISREG(st.st_mode):
                result.files.append(FileEntry(rel, st.st_size, st.st_mtime_ns, st.st_ino))
            elif stat.S_ISLNK(st.st_mode):
                _symlink(entry.path, rel, real_root, excluded, result)
            else:
                result.skipped.append(Skipped(rel, f"{kind_of(st.st_mode)}, not hashed"))
    result.files.sort(key=lambda f: f.rel)
    result.skipped.sort(key=lambda s: s.rel)
    return result


def iter_walk(root: str | os.PathLike[str] | bytes, *,
              exclude: Iterable[str | bytes | os.PathLike[str]] = (),
              follow_into: Iterable[str | bytes | os.PathLike[str]] = ()
              ) -> Iterator[FileEntry | Skipped]:
    """The same files and skips as :func:`walk`, yielded as they are found, in no particular
    order: nothing per file is kept (for trees of millions of files; sort elsewhere)."""
    for item in scan(root, exclude=exclude, follow_into=follow_into):
        yield item if isinstance(item, Skipped) else FileEntry(*item)


def scan(root: str | os.PathLike[str] | bytes, *,
         exclude: Iterable[str | bytes | os.PathLike[str]] = (),
         follow_into: Iterable[str | bytes | os.PathLike[str]] = ()
         ) -> Iterator[tuple[bytes, int, int, int] | Skipped]:
    """:func:`iter_walk` with each regular file as a plain ``(rel, size, mtime_ns, inode)``
    tuple (the fast path of the audit's walk into its state database)."""
    root_b = os.fsencode(root)
    real_root = _roots(root_b, follow_into)
    excluded = _identities(exclude)
    stack: list[bytes] = [b""]
    is_dir, is_reg, is_lnk = stat.S_ISDIR, stat.S_ISREG, stat.S_ISLNK
    while stack:
        rel_dir = stack.pop()
        prefix = rel_dir + b"/" if rel_dir else b""
        try:
            it = os.scandir(join(root_b, rel_dir) if rel_dir else root_b)
        except OSError as exc:
            yield Skipped(rel_dir or b".", f"cannot list directory: {exc.strerror}")
            continue
        with it:
            for entry in it:
                rel = prefix + entry.name
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError as exc:
                    yield Skipped(rel, f"cannot stat: {exc.strerror}")
                    continue
                mode = st.st_mode
                if excluded and (st.st_dev, st.st_ino) in excluded:
                    continue
                if is_reg(mode):
                    yield rel, st.st_size, st.st_mtime_ns, st.st_ino
                elif is_dir(mode):
                    stack.append(rel)
                elif is_lnk(mode):
                    side = WalkResult()
                    _symlink(entry.path, rel, real_root, excluded, side)
                    for f in side.files:
                        yield f.rel, f.size, f.mtime_ns, f.inode or 0
                    yield from side.skipped
                else:
                    yield Skipped(rel, f"{kind_of(mode)}, not hashed")


def sorted_scan(root: str | os.PathLike[str] | bytes, *,
                exclude: Iterable[str | bytes | os.PathLike[str]] = (),
                follow_into: Iterable[str | bytes | os.PathLike[str]] = ()
                ) -> Iterator[tuple[bytes, int, int, int] | Skipped]:
    """:func:`scan` with the regular files yielded in plain bytewise order of their relative
    names (the order ``manifest build`` writes), without collecting the tree.

    Within each directory the entries are sorted by name bytes, a directory's name with a
    ``/`` appended: the depth-first order is then the bytewise order of the full relative names
    (``a.txt`` < ``a/b`` because ``.`` < ``/``). Held at once: one sorted listing per level of
    the current path (memory grows with depth and the widest directory, not with the tree).
    Skips are yielded as they are found, in no particular order."""
    skips: list[Skipped] = []
    for item in sorted_files(root, exclude=exclude, follow_into=follow_into, skips=skips):
        if skips:
            yield from skips
            skips.clear()
        yield item[1:]
    yield from skips


def sorted_files(root: str | os.PathLike[str] | bytes, *,
                 exclude: Iterable[str | bytes | os.PathLike[str]] = (),
                 follow_into: Iterable[str | bytes | os.PathLike[str]] = (),
                 skips: list[Skipped]) -> Iterator[tuple[bytes, bytes, int, int, int]]:
    """:func:`sorted_scan`'s files as ``(sort key, rel, size, mtime_ns, inode)``, the skips
    appended to ``skips`` as they are found (the quick audit's merge reads these)."""
    root_b = os.fsencode(root)
    real_root = _roots(root_b, follow_into)
    excluded = _identities(exclude)
    stack = [iter(_sorted_dir(root_b, b"", real_root, excluded, skips))]
    while stack:
        for item in stack[-1]:
            if item[2] < 0:  # a directory: its files come next, in order
                stack.append(iter(_sorted_dir(join(root_b, item[1]), item[1], real_root,
                                              excluded, skips)))
                break
            yield item
        else:
            stack.pop()


_first = operator.itemgetter(0)


def _sorted_dir(abs_dir: bytes, rel_dir: bytes, real_root: tuple[bytes, ...],
                excluded: set[tuple[int, int]], skips: list[Skipped]
                ) -> list[tuple[bytes, bytes, int, int, int]]:
    """One directory's entries as (sort key, rel, size, mtime_ns, inode), sorted; a
    subdirectory has size -1 and its name + ``/`` as key. Skips go to ``skips``."""
    prefix = rel_dir + b"/" if rel_dir else b""
    try:
        it = os.scandir(abs_dir)
    except OSError as exc:
        skips.append(Skipped(rel_dir or b".", f"cannot list directory: {exc.strerror}"))
        return []
    items: list[tuple[bytes, bytes, int, int, int]] = []
    append = items.append
    is_dir, is_reg, is_lnk = stat.S_ISDIR, stat.S_ISREG, stat.S_ISLNK
    with it:
        for entry in it:
            name = entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                skips.append(Skipped(prefix + name, f"cannot stat: {exc.strerror}"))
                continue
            mode = st.st_mode
            if excluded and (st.st_dev, st.st_ino) in excluded:
                continue
            if is_reg(mode):
                append((name, prefix + name, st.st_size, st.st_mtime_ns, st.st_ino))
            elif is_dir(mode):
                append((name + b"/", prefix + name, -1, 0, 0))
            elif is_lnk(mode):
                side = WalkResult()
                _symlink(entry.path, prefix + name, real_root, excluded, side)
                for f in side.files:
                    append((name, f.rel, f.size, f.mtime_ns, f.inode or 0))
                skips.extend(side.skipped)
            else:
                skips.append(Skipped(prefix + name, f"{kind_of(mode)}, not hashed"))
    items.sort(key=_first)  # the keys are unique: comparing them alone is enough
    return items


def _identities(paths: Iterable[str | bytes | os.PathLike[str]]) -> set[tuple[int, int]]:
    """(device, inode) of each path that exists: how excluded files are recognised."""
    out = set()
    for p in paths:
        try:
            st = os.stat(os.fsencode(p))  # noqa: PTH116 - bytes path
        except OSError:
            continue
        out.add((st.st_dev, st.st_ino))
    return out


def _roots(root_b: bytes, follow_into: Iterable[str | bytes | os.PathLike[str]]
           ) -> tuple[bytes, ...]:
    """The real paths a followed symlink may lead into: the root's, then ``follow_into``'s."""
    return (os.path.realpath(root_b),
            *(os.path.realpath(os.fsencode(p)) for p in follow_into))


def _symlink(path: bytes, rel: bytes, real_root: tuple[bytes, ...],
             excluded: set[tuple[int, int]], result: WalkResult) -> None:
    target = os.path.realpath(path)
    if not any(_inside(target, r) for r in real_root):
        result.skipped.append(Skipped(rel, "symlink leading out of the directory, not followed"))
        return
    try:
        st = os.stat(target)  # noqa: PTH116 - bytes path
    except OSError:
        result.skipped.append(Skipped(rel, "dangling symlink"))
        return
    if (st.st_dev, st.st_ino) in excluded:
        return
    if stat.S_ISDIR(st.st_mode):
        result.skipped.append(Skipped(rel, "symlink to a directory, not followed"))
    elif stat.S_ISREG(st.st_mode):
        result.files.append(FileEntry(rel, st.st_size, st.st_mtime_ns, st.st_ino))
    else:
        result.skipped.append(Skipped(rel, f"symlink to {kind_of(st.st_mode)}, not hashed"))


def display(rel: bytes) -> str:
    """A printable form of a relative name (non-UTF-8 bytes as surrogate escapes -> \\xNN)."""
    text = os.fsdecode(rel)
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\n", "\\n")


def to_json_path(rel: bytes) -> str:
    """The JSON form of a name: surrogate-escaped text (``os.fsencode`` gives the bytes back)."""
    return os.fsdecode(rel)


def from_json_path(text: str) -> bytes:
    return os.fsencode(text)


def join(a: bytes, b: bytes) -> bytes:
    """Join byte paths (pathlib has no bytes paths; names may not be UTF-8)."""
    return os.path.join(a, b)  # noqa: PTH118


def shown_path(root: str, rel: bytes) -> str:
    """``root/rel`` for messages and findings."""
    return str(Path(root) / display(rel))


def safe_relative(rel: bytes) -> bool:
    """True when ``rel`` stays inside its root: not absolute, no ``..``, no empty component."""
    if not rel or rel.startswith(b"/"):
        return False
    parts = rel.split(b"/")
    return all(p not in (b"", b".", b"..") for p in parts)
