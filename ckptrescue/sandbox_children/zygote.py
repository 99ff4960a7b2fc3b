"""A warm sandbox: one process that has made a child's heavy imports (torch) once, and forks a
fresh, confined loader for each load. Started only by ``effects/warm_sandbox.py``, inside
bubblewrap.

Protocol, one JSON line each way on the socket ``argv[2]`` names (a file descriptor):

* the zygote says ``{"ready": true}`` once its imports are done;
* for each load the parent first sends a note: the job's ``id``, the child module, and of the
  request only the keys the module's ``prepare`` reads (``PREPARE_KEYS``: no path). The zygote
  makes those imports and forks a one-shot **handler**, which says ``{"go": true}`` (or the
  zygote answers ``{"ran": false, ...}``: another thread runs in it, so a fork could copy a
  held lock);
* the parent sends the handler the job: the request file, the view's binds, the scratch
  directory, the rlimits, a wall-clock limit, the environment, and the identity (device,
  inode) of each file to load as the parent sees it. The handler runs it and answers with the
  job's ``id``: ``{"ran": true, "wait_status": ..., "timed_out": ..., "duration_s": ...}``, or
  ``{"ran": false, "reason": ...}`` when the load did not run (a file to load is not the one the
  parent named; the view could not be built): the parent then runs it cold. The handler exits;
  no job's paths ever sit in the zygote's memory, where a later loader would find them.

The zygote forbids user namespaces in its own first (``user.max_user_namespaces`` = 0). For
each job the handler opens each file to load (``O_PATH``) and checks it is the one the parent
named (device, inode); it never reads one. Then three processes:

1. a **fork** of the handler closes the parent's socket, enters a new pid and ipc namespace
   (``unshare``) and forks
2. the **init** of that pid namespace (pid 1; it dies with the fork: ``PR_SET_PDEATHSIG``).
   It builds the view (``view.build``; the files to load are bound from the handler's
   descriptors, so a path swapped since the check binds nothing else), tells the handler on a
   pipe that the view is built, and forks
3. the **loader** (pid 2), which closes every descriptor but 0, 1 and 2 first, takes the cold
   child's rlimits, drops every capability (``view.drop_capabilities``), sends its output to
   two files of its scratch directory and runs the child module's ``main()`` as ``python -m``
   would, with the cold child's environment (the module marks itself started and arms the
   audit hook and the seccomp filter as a cold child does).

The init waits for the loader and writes its wait status on the pipe; when the init ends, the
kernel ends everything else in the namespace, so nothing a load started outlives it. The
loader cannot name the zygote or the fork (they are outside its pid namespace) and cannot trace
the init (which keeps capabilities the loader lacks); no ``/dev``, ``/tmp``, ipc object or
process of one load is seen by the next.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

from ckptrescue.model import JsonObject

OUTPUT_FILES = (".warm-stdout", ".warm-stderr")
# CAP_SYS_ADMIN (mounts, namespaces), CAP_SETPCAP (a loader's bounding set), CAP_SYS_RESOURCE
# (user.max_user_namespaces)
KEEP_CAPS = (21, 8, 24)
CLONE_NEWIPC, CLONE_NEWPID = 0x08000000, 0x20000000
PR_SET_PDEATHSIG = 1
_STATUS = struct.Struct("<i")


def _read_line(sock: socket.socket, buf: bytearray) -> bytes | None:
    while b"\n" not in buf:
        block = sock.recv(1 << 16)
        if not block:
            return None
        buf += block
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line


def _send(sock: socket.socket, obj: JsonObject) -> None:
    sock.sendall(json.dumps(obj).encode() + b"\n")


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _open_inputs(identity: list[list[Any]]) -> tuple[dict[str, int], str]:
    """``{path: O_PATH descriptor}`` of each file to load, or why one is not the file the parent
    named (descriptors closed)."""
    fds: dict[str, int] = {}
    for path, dev, ino in identity:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError as exc:
            why = f"{path!r} is not in the zygote's view ({exc.strerror})"
        else:
            fds[path] = fd
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == (dev, ino):
                continue
            why = f"{path!r} in the zygote's view is not the file the parent named"
        for opened in fds.values():
            os.close(opened)
        return {}, why
    return fds, ""


def _prepare(module_name: str, request: JsonObject) -> None:
    """The child module's heavy imports, made here once (trusted: no file is touched)."""
    module = importlib.import_module(module_name)
    prepare = getattr(module, "prepare", None)
    if prepare is not None:
        prepare(request)


def _forked(work: Callable[[], int]) -> int:
    """Fork; the child runs ``work`` and exits with its status, never returning here."""
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            status = work()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(status & 0xFF)
    return pid


def _loader(job: JsonObject) -> int:
    """Process 3: the load. Returns its exit status."""
    from ckptrescue.sandbox_children import view

    # before anything else: the init's status pipe, the files' descriptors and anything else
    # inherited are the init's and the zygote's, never the loader's
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    for name, (soft, hard) in job["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    view.drop_capabilities()
    scratch = job["scratch"]
    for fd, name in zip((1, 2), OUTPUT_FILES, strict=True):
        out = os.open(os.path.join(scratch, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)
    os.environ.clear()
    os.environ.update(job["env"])
    tempfile.tempdir = None  # the zygote's temporary directory is not in this view
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = [job["module"], job["request_path"]]
    try:  # what ``python -m`` runs: the module's ``main()`` (imported by the zygote already)
        importlib.import_module(job["module"]).main()
    except SystemExit as exc:
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - what python -m prints, and its status
        traceback.print_exc()
        return 1
    return 0


def _init(job: JsonObject, pipe: int, fds: dict[str, int]) -> int:
    """Process 2: pid 1 of the load's namespace. Builds the view, forks the loader, reaps every
    process of the namespace until the loader ends, and writes the loader's wait status."""
    from ckptrescue.sandbox_children import view

    libc = ctypes.CDLL(None, use_errno=True)
    # the fork is outside this pid namespace (getppid() reads 0): it is killed only on the
    # wall-clock limit, long after this line
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)  # as pid 1, no signal from inside can end it
    sources = {path: f"/proc/self/fd/{fd}" for path, fd in fds.items()}
    binds = [(opt, sources.get(src, src) if opt != "--symlink" else src, dst)
             for opt, src, dst in job["binds"]]
    try:
        view.build(binds, new_root=job["new_root"], cwd=job["scratch"])
    except OSError as exc:
        os.write(pipe, b"E" + str(exc).encode("utf-8", "replace")[:2000])
        return 1
    os.write(pipe, b"V")
    pid = _forked(lambda: _loader(job))
    for fd in fds.values():
        os.close(fd)
    while True:
        try:
            done, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 1
        if done == pid:
            os.write(pipe, _STATUS.pack(status))
            return 0


def _fork(job: JsonObject, pipe: int, fds: dict[str, int]) -> int:
    """Process 1: enters the new pid and ipc namespaces and waits for their init."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWPID | CLONE_NEWIPC) != 0:
        err = ctypes.get_errno()
        os.write(pipe, b"E" + f"unshare(pid, ipc): {os.strerror(err)}".encode())
        return 1
    pid = _forked(lambda: _init(job, pipe, fds))
    os.close(pipe)
    for fd in fds.values():
        os.close(fd)
    os.waitpid(pid, 0)
    return 0


def _wait(pid: int, timeout_s: float, sock: socket.socket) -> tuple[int, bool]:
    """The fork's wait status, and whether the wall-clock limit killed it (its namespace's init
    dies with it, and the loader with the init). A parent that closes the socket meanwhile (it
    ended) ends the load and the zygote."""
    fd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([fd, sock], [], [], timeout_s)
        timed_out = not ready
        if sock in ready and fd not in ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            _empty(os.getcwd())
            os._exit(0)
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        return status, timed_out
    finally:
        os.close(fd)


def _read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    out = b""
    while len(out) < 4096:
        try:
            block = os.read(fd, 4096)
        except BlockingIOError:
            break
        if not block:
            break
        out += block
    return out


def _run(job: JsonObject) -> JsonObject:
    """One load: its answer (without the job's id)."""
    fds, why = _open_inputs(job["identity"])
    if why:
        return {"ran": False, "reason": why}
    read, write = os.pipe()
    start = time.monotonic()

    def fork() -> int:
        os.close(read)  # the zygote's end
        job["_sock"].close()  # the parent's socket: never in the load's namespace
        return _fork(job, write, fds)

    pid = _forked(fork)
    os.close(write)
    for fd in fds.values():
        os.close(fd)
    _status, timed_out = _wait(pid, float(job["timeout_s"]), job["_sock"])
    told = _read_all(read)
    os.close(read)
    duration = time.monotonic() - start
    if told.startswith(b"E") or (not told and not timed_out):
        reason = told[1:].decode("utf-8", "replace") or "the load's namespace did not start"
        return {"ran": False, "reason": f"the view could not be built: {reason}"}
    if told[:1] == b"V" and len(told) == 1 + _STATUS.size:
        (status,) = _STATUS.unpack(told[1:])
        return {"ran": True, "wait_status": status, "timed_out": timed_out,
                "duration_s": duration}
    # the view was built, and the init ended before it could tell how the loader ended (the
    # wall-clock limit, or the init itself killed): a load that did not end well
    return {"ran": True, "wait_status": None, "timed_out": timed_out, "duration_s": duration}


def _empty(base: str) -> None:
    """Remove what the zygote's directory holds (the parent may be gone, killed mid-load)."""
    import shutil

    for name in os.listdir(base):
        path = os.path.join(base, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


def _no_user_namespaces() -> None:
    """No process of this user namespace may create another (bubblewrap's
    ``--disable-userns``, which a zygote cannot use): the zygote's own limit set to 0."""
    with open("/proc/sys/user/max_user_namespaces", "w") as fh:
        fh.write("0")


def _handle(sock: socket.socket, buf: bytearray) -> int:
    """A one-shot fork of the zygote: takes a copy of the mount namespace (every mount private:
    nothing done in it reaches the host, and it ends with this load), reads one job, runs it,
    answers, and exits, so that no job's paths or request ever sit in the zygote's memory for a
    later loader to find."""
    from ckptrescue.sandbox_children import view

    view.private_mounts()
    _send(sock, {"go": True})
    line = _read_line(sock, buf)
    if line is None:
        _empty(os.getcwd())
        return 0
    job = json.loads(line)
    answer = _run({**job, "_sock": sock})
    _send(sock, {**answer, "id": job.get("id")})
    return 0


def _confine_self() -> None:
    """Of the root of its user namespace's capabilities, keep only what building a load's view
    needs; no further user namespaces; the cold child's host name."""
    from ckptrescue.sandbox_children import view

    view.keep_capabilities(KEEP_CAPS)
    _no_user_namespaces()
    name = b"ckptrescue-sandbox"
    ctypes.CDLL(None, use_errno=True).sethostname(name, len(name))


def serve(sock: socket.socket, module_name: str) -> None:
    """The zygote's loop (:func:`_serve`); however it ends (its parent gone, maybe killed
    mid-load, so that telling it how the load ended failed), nothing of its directory is
    left. A fork never returns here (:func:`_forked`)."""
    base = os.getcwd()
    try:
        _serve(sock, module_name)
    finally:
        # before it was ready, the parent reads why in zygote.log, then removes the directory
        if _STARTED:
            _empty(base)
            try:
                os.rmdir(base)
            except OSError:  # the parent's close() removed it first
                pass


_STARTED: list[bool] = []  # [True] once the zygote said it is ready


def _serve(sock: socket.socket, module_name: str) -> None:
    """Each message is only a child module and the few request keys its ``prepare`` reads
    (``PREPARE_KEYS``); the job itself goes to a fork (:func:`_handle`)."""
    _confine_self()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends the zygote, never a key
    gc.disable()  # the imports make objects that live to the end (``boundary.start``)
    _prepare(module_name, {})
    gc.freeze()
    _send(sock, {"ready": True, "threads": _threads()})
    _STARTED.append(True)
    buf = bytearray()
    while True:
        line = _read_line(sock, buf)
        if line is None:  # the parent ended
            return
        note = json.loads(line)
        module = importlib.import_module(note["module"])
        keys = getattr(module, "PREPARE_KEYS", ())
        _prepare(note["module"], {k: v for k, v in note["request"].items() if k in keys})
        gc.freeze()
        if _threads() != 1:
            _send(sock, {"ran": False, "reason": "another thread runs in the zygote",
                         "id": note.get("id")})
            continue
        _, status = os.waitpid(_forked(lambda: _handle(sock, buf)), 0)
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            # killed before it answered (or after: the parent then meets an answer out of turn
            # and ends this zygote): the parent runs the load cold
            _send(sock, {"ran": False, "reason": "the load's handler ended before it answered",
                         "id": note.get("id")})


def main() -> None:
    module_name, fd, base = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    os.chdir(base)
    sock = socket.socket(fileno=fd)
    serve(sock, module_name)


if __name__ == "__main__":
    main()
