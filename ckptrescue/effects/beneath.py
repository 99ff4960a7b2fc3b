"""Write only beneath a root: every path the kit writes (salvage, recover, restore, preserve,
extraction, reports) is resolved *beneath* the directory the responder chose, so that no
symlink, ``..`` or bind mount in a key, a member name or a pre-existing directory can lead
outside it.

The root itself is the responder's own choice and is opened as given. Below it, each directory
component is opened with ``O_DIRECTORY | O_NOFOLLOW`` relative to its parent's descriptor
(created with ``mkdirat`` when missing), and must lie on the root's filesystem; the last
component is opened with ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)`` where the kernel has it (Linux 5.6+), else with
``O_NOFOLLOW`` from its parent's descriptor — the same result: a symlink anywhere below the root
is an error (``ELOOP``), never followed. A name holding ``..``, an empty component or a NUL is
refused before anything is opened.

Renames and hard links work between parent descriptors (``renameat``/``linkat``), which never
follow the last component: a symlink planted at a file's own name is replaced, not written
through. :func:`write_bytes` writes a temporary file and renames it, so a pre-existing hard
link at the name is replaced, not written through. :func:`creating` (a new file, whole or
absent) writes an anonymous file and links it into place once synced, so a killed writer leaves
nothing where the filesystem has anonymous files (else a hidden ``.partial`` file is left); a
rename that must not replace refuses a taken name in the same step with
``renameat2(RENAME_NOREPLACE)`` where the kernel and filesystem have it
(:func:`_rename_noreplace` for the fallbacks). Once :func:`creating`, :func:`write_bytes` or
:func:`rename` gives a name, and once a folder is made on the way to one, the folder that holds
it is synced, so the name outlives a power loss as the synced bytes do (:func:`link`,
:func:`open_file` and :func:`unlink` do not sync).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import IO, Any

from ckptrescue.effects.files import fsync, named_file, proven_regular
from ckptrescue.errors import RefusedError, named, naming, not_a_regular_file
from ckptrescue.guard.kernel import fd_mount_id as mount_id

# linux/openat2.h
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = 437  # the same number on every architecture (asm-generic and x86-64)
_RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


_openat2_state: dict[str, Any] = {}


def _libc() -> Any:
    if "libc" not in _openat2_state:
        try:
            _openat2_state["libc"] = ctypes.CDLL(None, use_errno=True)
        except OSError:
            _openat2_state["libc"] = None
    return _openat2_state["libc"]


def openat2(dirfd: int, path: str, flags: int, mode: int = 0, resolve: int = _RESOLVE) -> int:
    """``openat2(2)``; raises ``OSError`` (``ENOSYS`` where the kernel or libc lacks it)."""
    libc = _libc()
    if libc is None or _openat2_state.get("missing"):
        raise OSError(errno.ENOSYS, "openat2 unavailable")
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, resolve)
    fd = libc.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dirfd),
                      ctypes.c_char_p(os.fsencode(path)), ctypes.byref(how),
                      ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        err = ctypes.get_errno()
        if err == errno.ENOSYS:
            _openat2_state["missing"] = True
        raise OSError(err, f"{path}: {os.strerror(err)}")
    return int(fd)


def has_openat2() -> bool:
    """True when this kernel answers ``openat2`` (probed once on ``/``)."""
    if "probed" not in _openat2_state:
        rootfd = os.open("/", _DIR_FLAGS)
        try:
            os.close(openat2(rootfd, ".", os.O_RDONLY | os.O_DIRECTORY))
            _openat2_state["probed"] = True
        except OSError:
            _openat2_state["probed"] = False
        finally:
            os.close(rootfd)
    return bool(_openat2_state["probed"])


def parts_beneath(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> list[str]:
    """The components of ``path`` below ``root`` (``path`` absolute under ``root``, or
    relative to it); refused when it leaves ``root`` lexically or holds ``..``, ``.`` tricks
    or a NUL."""
    root_p = PurePosixPath(os.path.abspath(os.fsdecode(root)))
    raw = os.fsdecode(path)
    if "\x00" in raw:
        raise RefusedError(f"{raw!r}: a path holding a NUL byte is never written")
    given = PurePosixPath(raw)
    if given.is_absolute():
        try:
            rel = given.relative_to(root_p)
        except ValueError:
            raise RefusedError(f"{raw}: not beneath {root_p}; the kit writes only inside the "
                               "destination it was given") from None
    else:
        rel = given
    parts = [p for p in str(rel).split("/") if p not in ("", ".")]
    for part in parts:
        if part == "..":
            raise RefusedError(f"{raw}: a name holding '..' is never written (it could lead "
                               f"outside {root_p})")
    return parts


def _open_root(root: str | os.PathLike[str], create: bool) -> int:
    root_s = os.path.abspath(os.fsdecode(root))
    if create:
        os.makedirs(root_s, exist_ok=True)
    return os.open(root_s, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _refuse_symlink(root: str | os.PathLike[str], parts: list[str], exc: OSError) -> RefusedError:
    shown = os.path.join(os.fsdecode(root), *parts)
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        why = "is a symlink or not a directory"
    elif exc.errno == errno.EXDEV:
        why = "is on another filesystem (a mount inside the destination)"
    else:
        why = os.strerror(exc.errno or 0)
    return RefusedError(f"{shown}: {why}; the kit writes only beneath {os.fsdecode(root)}, "
                        "never through a symlink, '..' or a mount")


def _where(fd: int) -> tuple[int, int | None]:
    return os.fstat(fd).st_dev, mount_id(fd)


def _walk_dirs(rootfd: int, root: str | os.PathLike[str], dirs: list[str],
               create: bool) -> int:
    """A descriptor of ``root/dirs...`` opened component by component, never following a
    symlink and never leaving the root's mount; the caller closes it."""
    root_dev = _where(rootfd)
    cur = os.dup(rootfd)
    try:
        for i, name in enumerate(dirs):
            try:
                nxt = os.open(name, _DIR_FLAGS, dir_fd=cur)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, 0o755, dir_fd=cur)
                except FileExistsError:
                    pass
                else:
                    _sync_folder(cur)  # the new folder's own name, as a file's (below)
                try:
                    nxt = os.open(name, _DIR_FLAGS, dir_fd=cur)
                except OSError as exc:
                    raise _refuse_symlink(root, dirs[: i + 1], exc) from exc
            except OSError as exc:
                raise _refuse_symlink(root, dirs[: i + 1], exc) from exc
            if _where(nxt) != root_dev:
                os.close(nxt)
                raise _refuse_symlink(root, dirs[: i + 1], OSError(errno.EXDEV, "mount"))
            os.close(cur)
            cur = nxt
        return cur
    except BaseException:
        os.close(cur)
        raise


@contextlib.contextmanager
def _parent(root: str | os.PathLike[str], path: str | os.PathLike[str], *,
            create: bool) -> Iterator[tuple[int, str]]:
    parts = parts_beneath(root, path)
    if not parts:
        raise RefusedError(f"{os.fsdecode(path)}: names the destination itself, not a file in it")
    rootfd = _open_root(root, create)
    try:
        dirfd = _walk_dirs(rootfd, root, parts[:-1], create)
    finally:
        os.close(rootfd)
    try:
        yield dirfd, parts[-1]
    finally:
        os.close(dirfd)


def _refuse_alias(root: str | os.PathLike[str], path: str | os.PathLike[str], dirfd: int,
                  name: str, flags: int) -> None:
    """Before opening an existing name to write: refuse a bind mount at the name (another
    filesystem) and, when the open would write into the file (not ``O_EXCL``), a file with
    other hard links (writing through it would change the other names too)."""
    try:
        st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    crossed = st.st_dev != os.fstat(dirfd).st_dev
    if not crossed and not stat.S_ISLNK(st.st_mode):
        try:  # a bind mount of the same filesystem onto the name: another mount id
            probe = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dirfd)
        except OSError:
            probe = -1
        if probe >= 0:
            try:
                crossed = mount_id(probe) != mount_id(dirfd)
            finally:
                os.close(probe)
    if crossed:
        raise _refuse_symlink(root, parts_beneath(root, path), OSError(errno.EXDEV, "mount"))
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):
        raise not_a_regular_file(os.fspath(path), st.st_mode)
    writes = flags & (os.O_WRONLY | os.O_RDWR) and not flags & os.O_EXCL
    if writes and stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise RefusedError(f"{os.fsdecode(path)}: has {st.st_nlink} hard links; the kit never "
                           "writes through a name another file shares")


def makedirs(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """``mkdir -p`` of ``path`` beneath ``root`` (``root`` itself is created as given)."""
    parts = parts_beneath(root, path)
    rootfd = _open_root(root, True)
    try:
        os.close(_walk_dirs(rootfd, root, parts, True))
    finally:
        os.close(rootfd)


def open_fd(root: str | os.PathLike[str], path: str | os.PathLike[str], flags: int,
            mode: int = 0o644, *, create_parents: bool = True) -> int:
    """A descriptor of ``path`` opened beneath ``root`` (the last component is never a
    symlink)."""
    with _parent(root, path, create=create_parents) as (dirfd, name):
        _refuse_alias(root, path, dirfd, name, flags)
        try:
            if has_openat2():
                fd = openat2(dirfd, name, flags | os.O_NONBLOCK, mode)
            else:
                fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode,
                             dir_fd=dirfd)
            return proven_regular(fd, path, flags)
        except FileExistsError:
            raise
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EXDEV):
                raise _refuse_symlink(root, parts_beneath(root, path), exc) from exc
            raise


_MODES = {"xb": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
          "wb": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
          "ab": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
          "rb": os.O_RDONLY, "r+b": os.O_RDWR}


def open_file(root: str | os.PathLike[str], path: str | os.PathLike[str], mode: str = "xb",
              *, perms: int = 0o644, create_parents: bool = True) -> IO[bytes]:
    """``open(path, mode)`` beneath ``root`` (binary modes ``xb``, ``wb``, ``ab``, ``rb``,
    ``r+b``); parent directories are created beneath the root unless told not to."""
    if mode not in _MODES:
        raise ValueError(f"beneath.open_file: unsupported mode {mode!r}")
    fd = open_fd(root, path, _MODES[mode], perms, create_parents=create_parents)
    # its read, write and close errors (a full disk) name the file
    return named_file(fd, mode.replace("x", "w") if mode == "xb" else mode,
                      os.path.join(os.fspath(root), os.fspath(path)))


def write_bytes(root: str | os.PathLike[str], path: str | os.PathLike[str], data: bytes, *,
                exclusive: bool = False, perms: int = 0o644) -> None:
    """Write ``data`` to ``path`` beneath ``root`` through a temporary name and a rename, so
    that a file (or hard link, or symlink) already at the name is replaced, never written
    through; ``exclusive`` refuses an existing name."""
    with _parent(root, path, create=True) as (dirfd, name):
        if exclusive and _lexists_at(dirfd, name):
            raise FileExistsError(errno.EEXIST, f"{os.fsdecode(path)}: already exists")
        _replaceable_at(dirfd, name, path)
        tmp = _temp_name(name)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     perms, dir_fd=dirfd)
        shown = os.path.join(os.fspath(root), os.fspath(path))
        try:
            with named_file(fd, "wb", shown) as fh:  # a full disk names the file
                fh.write(data)
                fsync(fh)
            with naming(shown):
                os.rename(tmp, name, src_dir_fd=dirfd, dst_dir_fd=dirfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dirfd)
            raise
        _sync_folder(dirfd)


def replace_output(out: str | os.PathLike[str], data: bytes | str) -> None:
    """An output file the responder named (``report -o OUT``): its own name beneath its folder
    (:func:`write_bytes`; a relative OUT is not read under that folder again, where ``-o
    r2/report.md`` once wrote ``r2/r2/report.md``), a name planted there replaced, never
    followed, a device node or a FIFO refused."""
    path = PurePosixPath(os.fspath(out))
    write_bytes(path.parent, path.name, data.encode("utf-8") if isinstance(data, str) else data)


def _temp_name(name: str) -> str:
    """A fresh hidden name beside ``name`` for its bytes until they are whole (a name too long
    to extend gets a short one)."""
    tag = os.urandom(4).hex()
    tmp = f".{name}.{tag}.partial"
    return tmp if len(os.fsencode(tmp)) <= 255 else f".ckptrescue-{tag}.partial"


@contextlib.contextmanager
def creating(root: str | os.PathLike[str], path: str | os.PathLike[str], *,
             perms: int = 0o644) -> Iterator[IO[bytes]]:
    """A new file at ``path`` beneath ``root`` that gets its name only when it is whole: on any
    failure (a full disk, a read error of the source, Ctrl-C, and ``kill -9`` too) ``path``
    never appears, and nothing is left beside it (but for ``kill -9`` on the fallback below).
    An existing ``path`` is refused (``FileExistsError``), before and again when the name is
    given. Errors name ``path``.

    The bytes go to an anonymous file in ``path``'s directory (``O_TMPFILE``), given its name
    by a hard link once flushed and synced (``linkat``, which fails on a taken name): a killed
    process leaves no file at all, since the kernel frees a file no name holds. Where the
    filesystem has no anonymous files (NFS, some FUSE) or ``/proc`` is not mounted, a hidden
    temporary name beside ``path`` is renamed (:func:`_rename_noreplace`), which a
    ``kill -9`` leaves behind. Once named, the folder is synced; a Ctrl-C during that sync
    leaves the whole file at its name."""
    shown = os.path.join(os.fspath(root), os.fspath(path))
    with _parent(root, path, create=True) as (dirfd, name):
        if _lexists_at(dirfd, name):
            raise FileExistsError(errno.EEXIST, "File exists", shown)
        fd = _anonymous_file(dirfd, perms, shown)
        if fd is not None:
            with named_file(fd, "wb", shown) as fh:
                yield fh
                fsync(fh)
                _name_anonymous(fd, dirfd, name, shown, perms)
            _sync_folder(dirfd)
            return
    yield from _creating_named(root, path, perms=perms, shown=shown)


def _sync_folder(dirfd: int) -> None:
    """``fsync`` the folder ``dirfd`` after a name was given in it, so that the name outlives a
    power loss as the file's synced bytes do (an anonymous file whose link is lost is freed).
    A folder that cannot be synced (a filesystem without directory ``fsync``) makes the name
    less durable, not the write wrong: its error is not the caller's (as record.atomic)."""
    with contextlib.suppress(OSError):
        os.fsync(dirfd)


def _anonymous_file(dirfd: int, perms: int, shown: str) -> int | None:
    """An unnamed regular file in the directory ``dirfd`` with the mode a named one would get
    (``perms`` less the umask: kernels before 6.2 left the umask off on some filesystems);
    None: this filesystem (EOPNOTSUPP: NFS, FUSE, vfat; EISDIR: a kernel before 3.11) cannot
    make one, or this process's ``/proc`` cannot name it (absent, or another pid namespace's)."""
    try:
        # (read-write: where it cannot be linked after all, its bytes are copied out)
        fd = os.open(".", os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, perms, dir_fd=dirfd)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOSYS):
            return None
        raise named(exc, shown) from None
    try:
        own, seen = os.fstat(fd), os.stat(f"/proc/self/fd/{fd}")
        if (own.st_dev, own.st_ino) != (seen.st_dev, seen.st_ino):
            os.close(fd)
            return None
        umask = _umask()
        if umask is not None and not _default_acl(dirfd):  # (an ACL's mode is the kernel's)
            os.fchmod(fd, stat.S_IMODE(own.st_mode) & ~umask)  # only ever narrowed
    except OSError:
        os.close(fd)
        return None
    return fd


def _default_acl(dirfd: int) -> bool:
    """Whether the directory has a default POSIX ACL (then the umask plays no part in a new
    file's mode)."""
    try:
        os.getxattr(dirfd, "system.posix_acl_default")
    except OSError:
        return False
    return True


def _umask() -> int | None:
    """This process's umask, read without changing it (``/proc/self/status``, Linux 4.7+)."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


# what a link through /proc answers where something forbids it after all (an LSM, a sandboxing
# kernel): the bytes are then copied out rather than lost
_LINK_REFUSED = {errno.EPERM, errno.EACCES, errno.ENOENT, errno.EXDEV, errno.ENOTSUP,
                 errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


def _name_anonymous(fd: int, dirfd: int, name: str, shown: str, perms: int) -> None:
    """Give the anonymous file ``fd`` the name ``name`` in ``dirfd``; a taken name is refused
    (the link fails on it) and the file at it left as it is. Where the link is refused, the
    bytes written go to a hidden temporary name, renamed into place (:func:`_copy_out`)."""
    try:
        os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=dirfd, follow_symlinks=True)
    except FileExistsError:  # made by someone else while this one was written
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), shown) from None
    except OSError as exc:
        if exc.errno not in _LINK_REFUSED:
            raise named(exc, shown) from None
        _copy_out(fd, dirfd, name, shown, perms)


def _copy_out(fd: int, dirfd: int, name: str, shown: str, perms: int) -> None:
    """The anonymous file's bytes under a hidden temporary name beside ``name``, synced, then
    renamed to ``name`` (refused when taken); the temporary name is removed on any failure."""
    tmp = _temp_name(name)
    try:
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      perms, dir_fd=dirfd)
        try:
            offset = 0
            while chunk := os.pread(fd, 1 << 20, offset):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view):]
                offset += len(chunk)
            os.fsync(out)
        finally:
            os.close(out)
        _rename_noreplace(dirfd, tmp, dirfd, name, shown)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dirfd)
        if isinstance(exc, FileExistsError):  # made by someone else while this one was written
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), shown) from None
        if isinstance(exc, OSError):
            raise named(exc, shown) from None
        raise


def _creating_named(root: str | os.PathLike[str], path: str | os.PathLike[str], *, perms: int,
                    shown: str) -> Iterator[IO[bytes]]:
    """:func:`creating` through a hidden temporary name beside ``path``."""
    rel = PurePosixPath(os.fspath(path))
    tmp = rel.with_name(_temp_name(rel.name))
    fh = named_file(open_fd(root, tmp, _MODES["xb"], perms), "wb", shown)
    try:
        with fh:
            yield fh
            fsync(fh)
        try:
            rename(root, tmp, path, replace=False)
        except FileExistsError:  # made by someone else while this one was written
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), shown) from None
        except OSError as exc:
            raise named(exc, shown) from None
    except BaseException:
        with contextlib.suppress(OSError):
            unlink(root, tmp, missing_ok=True)
        raise


def write_text(root: str | os.PathLike[str], path: str | os.PathLike[str], text: str, *,
               exclusive: bool = False) -> None:
    write_bytes(root, path, text.encode("utf-8"), exclusive=exclusive)


def _replaceable_at(dirfd: int, name: str, path: str | os.PathLike[str]) -> None:
    """Refuse to rename over ``name`` unless it is absent, a regular file or a link: a rename
    over a device node replaces the node itself (``-o /dev/null`` as root replaced the
    machine's), over a FIFO or a socket what another program listens on."""
    try:
        mode = os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise not_a_regular_file(os.fspath(path), mode)


def _lexists_at(dirfd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dirfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def lexists(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` exists beneath ``root`` (a symlink counts; nothing is followed)."""
    try:
        with _parent(root, path, create=False) as (dirfd, name):
            return _lexists_at(dirfd, name)
    except FileNotFoundError:
        return False


def lstat(root: str | os.PathLike[str], path: str | os.PathLike[str]) -> os.stat_result:
    with _parent(root, path, create=False) as (dirfd, name):
        return os.stat(name, dir_fd=dirfd, follow_symlinks=False)


def rename(root: str | os.PathLike[str], src: str | os.PathLike[str],
           dst: str | os.PathLike[str], *, replace: bool = True) -> None:
    """``rename(src, dst)``, both beneath ``root``; ``replace=False`` refuses an existing
    ``dst`` (:func:`_rename_noreplace`: no moment in which another writer's file at ``dst``
    could be replaced)."""
    with _parent(root, src, create=False) as (sfd, sname), \
            _parent(root, dst, create=True) as (dfd, dname):
        try:  # (asked before the rename: nothing after it may fail a rename that happened)
            same = os.path.samestat(os.fstat(sfd), os.fstat(dfd))
        except OSError:
            same = False
        if not replace:
            if _lexists_at(dfd, dname):  # the common refusal, before any attempt
                raise FileExistsError(errno.EEXIST, f"{os.fspath(dst)}: already exists")
            _rename_noreplace(sfd, sname, dfd, dname, dst)
        else:
            _replaceable_at(dfd, dname, dst)
            os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
        _sync_folder(dfd)
        if not same:
            _sync_folder(sfd)  # (the old name's removal, too)


RENAME_NOREPLACE = 1  # linux/fs.h
# what a filesystem without RENAME_NOREPLACE answers (older NFS, some FUSE), and one without hard
# links (vfat, some FUSE; a directory, too)
_NO_NOREPLACE = {errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP,
                 errno.EPERM}  # (EPERM: a seccomp filter that does not know renameat2)
_NO_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}


def _rename_noreplace(sfd: int, sname: str, dfd: int, dname: str,
                      shown: str | os.PathLike[str]) -> None:
    """Rename that refuses an existing ``dname`` in the same step as it renames: the kernel's
    ``renameat2(RENAME_NOREPLACE)``; where the filesystem has no such rename, a hard link
    (which fails on an existing name) and the removal of the old name; where it has neither (a
    directory, vfat), a check and then the rename, the one way with a window. A name taken in
    the meantime is ``FileExistsError``, and the file at it is left as it was."""
    exists = FileExistsError(errno.EEXIST, f"{os.fspath(shown)}: already exists")
    libc = _libc()
    renameat2 = getattr(libc, "renameat2", None) if libc is not None else None
    if renameat2 is not None:
        if renameat2(sfd, os.fsencode(sname), dfd, os.fsencode(dname), RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise exists
        if err not in _NO_NOREPLACE:
            raise OSError(err, os.strerror(err), os.fspath(shown))
    try:
        os.link(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd, follow_symlinks=False)
    except FileExistsError:
        raise exists from None
    except OSError as exc:
        if exc.errno not in _NO_LINKS:
            raise
        if _lexists_at(dfd, dname):
            raise exists from None
        os.rename(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)
        return
    try:
        os.unlink(sname, dir_fd=sfd)
    except FileNotFoundError:
        pass  # the old name is gone already: the file has the new one alone
    except BaseException:  # not renamed after all: the new name goes again, if still ours
        with contextlib.suppress(OSError):
            old = os.stat(sname, dir_fd=sfd, follow_symlinks=False)
            new = os.stat(dname, dir_fd=dfd, follow_symlinks=False)
            if (old.st_dev, old.st_ino) == (new.st_dev, new.st_ino):
                os.unlink(dname, dir_fd=dfd)
        raise


def link(root: str | os.PathLike[str], src: str | os.PathLike[str],
         dst: str | os.PathLike[str]) -> None:
    """A hard link ``dst`` to ``src``, both beneath ``root`` (the source is never followed)."""
    with _parent(root, src, create=False) as (sfd, sname), \
            _parent(root, dst, create=True) as (dfd, dname):
        os.link(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd, follow_symlinks=False)


def unlink(root: str | os.PathLike[str], path: str | os.PathLike[str], *,
           missing_ok: bool = False) -> None:
    try:
        with _parent(root, path, create=False) as (dirfd, name):
            os.unlink(name, dir_fd=dirfd)
    except FileNotFoundError:
        if not missing_ok:
            raise


def chmod(root: str | os.PathLike[str], path: str | os.PathLike[str], mode: int) -> None:
    """``chmod`` of a regular file beneath ``root`` (through its descriptor: no symlink)."""
    fd = open_fd(root, path, os.O_RDONLY, create_parents=False)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise RefusedError(f"{os.fsdecode(path)}: not a regular file")
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
