"""The filesystem view of one warm child: what bubblewrap builds for a cold child, built with
system calls by the forked child itself (``zygote.py``), before it touches anything.

The zygote runs inside bubblewrap (user, pid, network, ipc and uts namespaces; the host's
whole filesystem read-only; ``CAP_SYS_ADMIN``, ``CAP_SETPCAP`` and ``CAP_SYS_RESOURCE`` kept in
its own user namespace, nothing else). A forked child then:

1. enters a mount namespace of its own (``unshare(CLONE_NEWNS)``, every mount private);
2. mounts an empty tmpfs as its new root and binds into it exactly what a cold child's
   bubblewrap binds (the same list, :func:`ckptrescue.effects.sandbox.view_binds`): ``/usr``,
   the Python prefixes, the kit's package, the loader's configuration, the files being loaded
   (read-only, with every mount beneath them: ``mount_setattr(AT_RECURSIVE,
   MOUNT_ATTR_RDONLY)``) and its scratch directory (writable); a procfs of its own mounted
   ``hidepid=invisible`` (it lists only the processes the child may trace: itself and what it
   starts; the zygote is pid 1 and holds capabilities the child lacks, so the kernel hides it
   and refuses its ``/proc/1/root``), with ``/proc/sys`` and the other knobs read-only; the
   zygote's minimal ``/dev``; a fresh tmpfs ``/tmp``;
3. makes that tree its root (``pivot_root``), detaches the old one and remounts the new root
   read-only;
4. drops every capability (bounding set, ambient, effective, permitted, inheritable) and sets
   no_new_privs.

Any failure raises :class:`ViewError`; the child then exits before it has started, so the
parent never runs a load in a half-built view. Linux x86-64 only, like the seccomp filter.
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
NR_MOUNT_SETATTR, NR_PIVOT_ROOT = 442, 155
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


def _read_only(libc: ctypes.CDLL, target: str) -> None:
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    _check(libc.syscall(ctypes.c_long(NR_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD),
                        os.fsencode(target), ctypes.c_uint(AT_RECURSIVE), ctypes.byref(attr),
                        ctypes.c_size_t(ctypes.sizeof(attr))),
           f"read-only {target}")


def _mount_point(target: str, source: str) -> None:
    """The empty directory or file a bind of ``source`` is mounted on."""
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
        return
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if not os.path.lexists(target):
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def enter(binds: Sequence[Sequence[str]], *, new_root: str, cwd: str) -> None:
    """Build the view in ``new_root`` (an empty directory), make it the root, ``chdir`` to
    ``cwd`` and drop every capability. ``binds``: ``(option, source, target)`` as bubblewrap
    takes them: ``--ro-bind``, ``--ro-bind-try``, ``--bind``, ``--symlink``."""
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    _mount(libc, "tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    # a procfs of its own that shows only the processes the child may trace: itself and what it
    # starts (the zygote, pid 1, holds capabilities the child lacks), with the kernel's knobs
    # read-only as bubblewrap leaves them
    os.makedirs(new_root + "/proc")
    _mount(libc, "proc", new_root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
           "hidepid=invisible")
    # pid 1 is the zygote: its entry is covered (as root, the child is in procfs's gid group and
    # hidepid shows it; the kernel refuses its root, cwd, fds and memory, but not its mountinfo)
    _mount(libc, "tmpfs", new_root + "/proc/1", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
           "size=4k,mode=0555")
    _read_only(libc, new_root + "/proc/1")
    for knob in PROC_READ_ONLY:
        inside = new_root + knob
        if os.path.lexists(inside):
            _mount(libc, inside, inside, None, MS_BIND | MS_REC)
            _read_only(libc, inside)
    os.makedirs(new_root + "/dev")  # bubblewrap's minimal /dev, as the zygote has it
    _mount(libc, "/dev", new_root + "/dev", None, MS_BIND | MS_REC)
    os.makedirs(new_root + "/tmp")
    _mount(libc, "tmpfs", new_root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV)
    for option, source, target in binds:
        inside = new_root + target
        if option == "--symlink":
            os.makedirs(os.path.dirname(inside), exist_ok=True)
            os.symlink(source, inside)
            continue
        if not os.path.lexists(source):
            if option == "--ro-bind-try":
                continue
            raise ViewError(2, f"{source}: not in the zygote's view")
        _mount_point(inside, source)
        _mount(libc, source, inside, None, MS_BIND | MS_REC)
        if option != "--bind":
            _read_only(libc, inside)
    os.chdir(new_root)
    _check(libc.syscall(ctypes.c_long(NR_PIVOT_ROOT), b".", b"."), "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")
    _mount(libc, None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(cwd)
    drop_capabilities(libc)


def drop_capabilities(libc: ctypes.CDLL) -> None:
    """no_new_privs, an empty bounding and ambient set, then no capability at all."""
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient caps")
    cap = 0
    while libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:  # EINVAL past the last capability
        cap += 1
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(libc.capset(header, data), "capset")
