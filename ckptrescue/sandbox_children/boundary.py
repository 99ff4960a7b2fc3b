"""The child's side of the loader sandbox: what it tried, and the seccomp filter.

Every child calls :func:`start` first (it reads the request and calls :func:`started`: the
parent tells a child that never ran, because bubblewrap could not build the sandbox, from a
child that failed) and :func:`enter` after its heavy imports and before it touches the file.
``enter`` installs, in this order:

1. a Python audit hook (``sys.addaudithook``) for **attribution**: an attempt to run a program
   (``os.system``, ``os.exec*``, ``os.posix_spawn``, ``os.fork``, ``subprocess.Popen``,
   ``pty.spawn``), to open a socket or connect, to load a library with ``ctypes`` or look up a
   symbol that runs programs or opens sockets (``system``, ``execve``, ``socket``...), to write,
   rename, remove or chmod a file outside the scratch directory (``TMPDIR`` points there), to signal a
   process, or (in an unpickler) to resolve a global that is not on the exact allowlist of the
   kit's static scanner (``pickle.find_class``) is written as one JSON line to a dedicated file
   descriptor (``attempts.jsonl`` in the scratch directory, opened before the hook) and refused
   with ``PermissionError``;
2. the seccomp filter (:mod:`confine`): the **boundary**. If anything gets past the hook, the
   kernel kills the process on exec, process creation or a non-``AF_UNIX`` socket.

Around both, bubblewrap (``effects/sandbox.py``) gives the child no network, a read-only view of
only the files it loads, and one writable scratch directory.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

ATTEMPTS = "attempts.jsonl"
STARTED = "started"

_RUN_EVENTS = {"os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
               "subprocess.Popen", "pty.spawn", "os.startfile", "webbrowser.open"}
_NET_EVENTS = {"socket.connect", "socket.bind", "socket.sendto",
               "socket.sendmsg", "socket.getaddrinfo", "socket.gethostbyname",
               "socket.gethostbyaddr", "socket.getnameinfo"}
# ctypes: loading a library is refused; looking up a symbol only when it runs programs or opens
# sockets (libraries look up C-API symbols, e.g. fsspec ``PyBytes_FromStringAndSize``)
_NATIVE_SYMBOLS = ("system", "exec", "popen", "spawn", "fork", "socket", "connect", "dlopen",
                   "ptrace", "prctl", "seccomp", "syscall", "mprotect", "unshare", "setns")
_FS_EVENTS = {"os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
              "os.link", "os.symlink", "os.truncate", "os.utime", "shutil.rmtree",
              "shutil.copyfile", "shutil.move", "os.chflags", "os.setxattr", "os.removexattr"}
_DEST_ONLY = {"shutil.copyfile", "os.link", "os.symlink"}
_PROC_EVENTS = {"os.kill", "os.killpg", "os.setuid", "os.setgid"}
_AF_UNIX = 1
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class _State:
    fd: int | None = None
    scratch: str = ""
    writable: tuple[str, ...] = ()
    allowed_globals: frozenset[str] = frozenset()
    admitted: frozenset[str] = frozenset()  # more, for one block only (:func:`admitting`)
    armed = False
    count = 0


def start() -> dict[str, Any]:
    """A child's first step: its request (the JSON file ``argv[1]`` names), once
    :func:`started` has marked the child as running.

    Garbage collection pauses here until :func:`enter`: the heavy imports in between make
    modules and classes that live to the end, and a collection during them frees nothing but
    walks all of them (``import torch`` took 1.13 s with it, 1.04 s without; tensorflow 3.5 s
    and 3.0 s)."""
    gc.disable()
    with open(sys.argv[1]) as fh:
        req = json.load(fh)
    started(req)
    return req


def started(req: dict[str, Any]) -> None:
    """Mark the child as running (inside the sandbox) and open the attempts descriptor."""
    scratch = req.get("scratch")
    if not scratch:
        return
    with open(os.path.join(scratch, STARTED), "w") as fh:
        fh.write(str(os.getpid()))
    _State.fd = os.open(os.path.join(scratch, ATTEMPTS),
                        os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    _State.scratch = os.path.realpath(scratch)


def _record(event: str, args: tuple[Any, ...]) -> None:
    _State.count += 1
    if _State.fd is None or _State.count > 200:
        return
    shown = [a if isinstance(a, (int, float, bool, type(None))) else repr(a)[:300]
             for a in args[:4]]
    line = json.dumps({"event": event, "args": shown}) + "\n"
    try:
        os.write(_State.fd, line.encode())
    except OSError:
        pass


def _inside(path: str) -> bool:
    real = os.path.realpath(path)
    return any(real == w or real.startswith(w + os.sep) for w in _State.writable)


def _write_outside(args: tuple[Any, ...]) -> bool:
    path, mode, flags = [*args, None, None, None][:3]
    if isinstance(path, int) or path is None:
        return False
    writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
        isinstance(flags, int) and bool(flags & _WRITE_FLAGS))
    if not writes:
        return False
    try:
        path = os.fsdecode(path)
    except (TypeError, ValueError):
        return True
    return not _inside(path)


def _decide(event: str, args: tuple[Any, ...]) -> bool:
    """True when the event is an attempt the sandbox refuses."""
    if event == "socket.__new__":
        return len(args) < 2 or args[1] != _AF_UNIX
    if event in _RUN_EVENTS or event in _NET_EVENTS or event == "ctypes.dlopen":
        return True
    if event == "ctypes.dlsym":
        symbol = str(args[1]) if len(args) > 1 else ""
        return any(word in symbol.lower() for word in _NATIVE_SYMBOLS)
    if event == "pickle.find_class":
        module, name = (str(a) for a in args[:2])
        qual = f"{module}.{name}"
        return "." in name or (qual not in _State.allowed_globals
                               and qual not in _State.admitted)
    if event == "open":
        return _write_outside(args)
    if event in _FS_EVENTS:  # a copy/link only writes its destination
        targets = args[1:2] if event in _DEST_ONLY else args[:2]
        return not all(_inside(os.fsdecode(a)) for a in targets
                       if isinstance(a, (str, bytes, os.PathLike)))
    return event in _PROC_EVENTS


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if not _State.armed:
        return
    if _decide(event, args):
        _State.armed = False  # the hook itself must not re-enter
        try:
            _record(event, args)
        finally:
            _State.armed = True
        raise PermissionError(f"ckptrescue sandbox: {event} refused")


@contextlib.contextmanager
def admitting(names: Any) -> Iterator[None]:
    """Globals the hook admits for this block alone, never registered with torch: the
    request's ``hook_globals`` (``builtins.getattr``) while DCP reads a ``.metadata`` in which
    the static scan proved every ``getattr`` an enum member looked up by name (Python 3.11.0-x
    pickles them so); the byte items the load unpickles after it are refused it as before."""
    before = _State.admitted
    _State.admitted = before | frozenset(names)
    try:
        yield
    finally:
        _State.admitted = before


def allowed_globals() -> frozenset[str]:
    """The exact qualified globals an unpickler in the child may resolve."""
    from ckptrescue.checkpoints.formats import pickle_scan

    return frozenset(pickle_scan.exact_allowed_globals())


def failure(exc: BaseException, limit: int = 2000) -> dict[str, Any]:
    """A child's result for what raised: the exception's qualified type and its message (cut to
    ``limit`` characters)."""
    return {"ok": False, "exception": f"{type(exc).__module__}.{type(exc).__name__}",
            "message": str(exc)[:limit]}


def enter(req: dict[str, Any]) -> None:
    """Arm the audit hook and install the seccomp filter (see the module docstring).

    ``req["layers"]`` may leave out ``"hook"`` or ``"seccomp"``: the sandbox's own tests use that
    to show each layer stops a payload alone. A filter that cannot be installed stops the child.
    """
    gc.freeze()  # what the imports made is kept to the end: no collection walks it again
    gc.enable()  # the load's own objects are collected as usual
    layers = req.get("layers", ["hook", "seccomp"])
    if "hook" in layers:
        # a family's exact extra names (DCP ``.metadata`` of megatron-core: its plan classes)
        _State.allowed_globals = allowed_globals() | frozenset(req.get("allowed_globals", ()))
        _State.writable = tuple(os.path.realpath(p) for p in
                                (_State.scratch or None, "/dev/shm", "/dev/null") if p)
        sys.addaudithook(_hook)
    if "seccomp" in layers:
        from ckptrescue.sandbox_children import confine

        confine.install()
    _State.armed = "hook" in layers
