"""The filesystem view of one warm load: what bubblewrap builds for a cold child, built with
system calls in the zygote's fork (``zygote.py``), before the loader touches anything.

The zygote runs in a user namespace of its own (``CAP_SYS_ADMIN``, ``CAP_SETPCAP`` and
``CAP_SYS_RESOURCE`` kept there, nothing else; no network; the host's mount namespace). For
each load, a one-shot handler takes a private copy of the mount namespace
(:func:`private_mounts`), and the init of a fresh pid and ipc namespace (:func:`build`):

1. enters a mount namespace of its own (``unshare(CLONE_NEWNS)``, every mount private);
2. mounts an empty tmpfs as the new root and binds into it exactly what a cold child's
   bubblewrap binds (the same list, :func:`ckptrescue.effects.sandbox.view_binds`): ``/usr``,
   the Python prefixes, the kit's package, the loader's configuration, the files being loaded
   (from the descriptors the zygote opened and checked; read-only, with every mount beneath
   them: ``mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY)``) and its scratch directory
   (writable); a procfs of the new pid namespace, with ``/proc/sys`` and the other knobs
   read-only; a ``/dev`` of its own (tmpfs, the harmless nodes, a new ``devpts``); a fresh
   tmpfs ``/tmp``;
3. makes that tree its root (``pivot_root``), detaches the old one and remounts the new root
   read-only.

The loader it then forks drops every capability (:func:`drop_capabilities`: bounding set,
ambient, effective, permitted, inheritable; no_new_privs). Any failure raises
:class:`ViewError`, and the load does not run warm. Linux x86-64 only, like the seccomp filter.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY = 0x1
NR_MOUNT_SETATTR, NR_PIVOT_ROOT, NR_OPEN_TREE, NR_MOVE_MOUNT = 442, 155, 428, 429
OPEN_TREE_CLONE, AT_EMPTY_PATH, MOVE_MOUNT_F_EMPTY_PATH = 1, 0x1000, 0x4
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 24, 38, 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
# what bubblewrap's callers bind read-only over /proc (effects/confine.PROC_READ_ONLY)
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")


class ViewError(OSError):
    """The view could not be built: the child must not run."""


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                           ctypes.c_char_p]
    libc.syscall.restype = ctypes.c_long
    return libc


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise ViewError(err, f"{what}: {os.strerror(err)}")


def _mount(libc: ctypes.CDLL, source: str | None, target: str, fstype: str | None,
           flags: int, data: str | None = None) -> None:
    _check(libc.mount(source and os.fsencode(source), os.fsencode(target),
                      fstype and fstype.encode(), flags, data and data.encode()),
           f"mount {source or fstype} on {target}")


def _read_only(libc: ctypes.CDLL, target: str | int) -> None:
    """Make a mount (a path, or a detached tree's descriptor) and every mount beneath it
    read-only."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    fd, path, flags = ((target, b"", AT_RECURSIVE | AT_EMPTY_PATH) if isinstance(target, int)
                       else (AT_FDCWD, os.fsencode(target), AT_RECURSIVE))
    _check(libc.syscall(ctypes.c_long(NR_MOUNT_SETATTR), ctypes.c_int(fd), path,
                        ctypes.c_uint(flags), ctypes.byref(attr),
                        ctypes.c_size_t(ctypes.sizeof(attr))),
           f"read-only {target}")


def _clone_tree(libc: ctypes.CDLL, source: str) -> int:
    """A detached copy of the mount tree at ``source`` (``open_tree(OPEN_TREE_CLONE)``): taken
    in the zygote's mount namespace, attached in the view's (``move_mount``), so a source that
    is a descriptor the zygote opened is bound as that very file."""
    fd = libc.syscall(ctypes.c_long(NR_OPEN_TREE), ctypes.c_int(AT_FDCWD), os.fsencode(source),
                      ctypes.c_uint(OPEN_TREE_CLONE | os.O_CLOEXEC | AT_RECURSIVE))
    if fd < 0:
        err = ctypes.get_errno()
        raise ViewError(err, f"open_tree {source}: {os.strerror(err)}")
    return int(fd)


def _attach(libc: ctypes.CDLL, tree: int, target: str) -> None:
    _check(libc.syscall(ctypes.c_long(NR_MOVE_MOUNT), ctypes.c_int(tree), b"",
                        ctypes.c_int(AT_FDCWD), os.fsencode(target),
                        ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH)),
           f"attach on {target}")


def _mount_point(target: str, is_dir: bool) -> None:
    """The empty directory or file a bind is mounted on."""
    if is_dir:
        os.makedirs(target, exist_ok=True)
        return
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if not os.path.lexists(target):
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
             "stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx"}


def build(binds: Sequence[Sequence[str]], *, new_root: str, cwd: str) -> None:
    """Build the view in ``new_root`` (an empty directory), make it the root and ``chdir`` to
    ``cwd``. ``binds``: ``(option, source, target)`` as bubblewrap takes them: ``--ro-bind``,
    ``--ro-bind-try``, ``--bind``, ``--symlink``. Called by the init of a fresh pid namespace
    (its procfs shows that namespace only); capabilities are dropped by the loader it forks
    (:func:`drop_capabilities`)."""
    libc = _libc()
    trees: dict[str, tuple[int, bool, bool]] = {}  # source -> (tree, read-only, a directory)
    try:
        for option, source, _target in binds:
            if option == "--symlink" or source in trees:
                continue
            if not os.path.exists(source):
                if option == "--ro-bind-try":
                    continue
                raise ViewError(2, f"{source}: not in the zygote's view")
            tree = _clone_tree(libc, source)
            trees[source] = (tree, option != "--bind", os.path.isdir(source))
            if option != "--bind":
                _read_only(libc, tree)
        _assemble(libc, binds, trees, new_root=new_root, cwd=cwd)
    finally:
        for tree, _ro, _dir in trees.values():
            os.close(tree)


def _assemble(libc: ctypes.CDLL, binds: Sequence[Sequence[str]],
              trees: dict[str, tuple[int, bool, bool]], *, new_root: str, cwd: str) -> None:
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    _mount(libc, "tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    # a procfs of this pid namespace (the loader and its init), with the kernel's knobs
    # read-only as bubblewrap leaves them
    os.makedirs(new_root + "/proc")
    _mount(libc, "proc", new_root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
           "hidepid=invisible")
    for knob in PROC_READ_ONLY:
        inside = new_root + knob
        if os.path.lexists(inside):
            _mount(libc, inside, inside, None, MS_BIND | MS_REC)
            _read_only(libc, inside)
    _fresh_dev(libc, new_root + "/dev")
    os.makedirs(new_root + "/tmp")
    _mount(libc, "tmpfs", new_root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV)
    for option, source, target in binds:
        inside = new_root + target
        if option == "--symlink":
            os.makedirs(os.path.dirname(inside), exist_ok=True)
            os.symlink(source, inside)
            continue
        if source not in trees:  # an optional one that is not there
            continue
        tree, _read_only_tree, is_dir = trees[source]
        _mount_point(inside, is_dir)
        _attach(libc, tree, inside)
    os.chdir(new_root)
    _check(libc.syscall(ctypes.c_long(NR_PIVOT_ROOT), b".", b"."), "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")
    _mount(libc, None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(cwd)


def _fresh_dev(libc: ctypes.CDLL, dev: str) -> None:
    """A ``/dev`` of this view's own, as bubblewrap's ``--dev`` makes one: a tmpfs with the
    harmless nodes (bound from the zygote's), the ``/proc/self/fd`` links, an empty ``shm`` and
    a ``pts`` of its own; nothing in it outlives the view."""
    os.makedirs(dev)
    _mount(libc, "tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755")
    for node in DEV_NODES:
        if os.path.exists("/dev/" + node):
            os.close(os.open(f"{dev}/{node}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            _mount(libc, "/dev/" + node, f"{dev}/{node}", None, MS_BIND)
    for name, target in DEV_LINKS.items():
        os.symlink(target, f"{dev}/{name}")
    os.mkdir(f"{dev}/shm")  # the loader runs as the same user as this init: its owner
    os.mkdir(f"{dev}/pts")
    _mount(libc, "devpts", f"{dev}/pts", "devpts", MS_NOSUID | MS_NOEXEC,
           "newinstance,ptmxmode=0666,mode=620")


def private_mounts() -> None:
    """A mount namespace of this process's own, every mount in it private."""
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)


def keep_capabilities(keep: Sequence[int]) -> None:
    """Drop every capability but ``keep`` from the bounding, ambient, effective, permitted and
    inheritable sets."""
    libc = _libc()
    _check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient caps")
    cap = 0
    while True:
        if cap not in keep and libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # EINVAL past the last capability
        cap += 1
        if cap > 63:
            break
    mask = sum(1 << c for c in keep)
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)(mask, mask, 0, 0, 0, 0)  # effective, permitted, inheritable
    _check(libc.capset(header, data), "capset")


def drop_capabilities() -> None:
    """no_new_privs, an empty bounding and ambient set, then no capability at all."""
    libc = _libc()
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient caps")
    cap = 0
    while libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:  # EINVAL past the last capability
        cap += 1
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(libc.capset(header, data), "capset")
