"""A warm sandbox: one process that has made a child's heavy imports (torch) once, and forks a
fresh child for each load. Started only by ``effects/warm_sandbox.py``, inside bubblewrap.

Protocol, one JSON line each way on the socket ``argv[2]`` names (a file descriptor):

* the zygote says ``{"ready": true}`` once its imports are done;
* the parent sends a request: the child module, the request file, the view's binds, the
  scratch directory, the rlimits, a wall-clock limit, the environment, and the identity
  (device, inode) of each file to load as the parent sees it;
* the zygote answers ``{"ran": true, "wait_status": ..., "timed_out": ..., "duration_s": ...}``
  or ``{"ran": false, "reason": ...}`` when it must not fork this request (another thread is
  running in the zygote, so a fork could copy a held lock; or a file to load is not the one
  the parent named): the parent then runs the load cold.

The zygote itself never opens a file it is asked to load. The forked child:

1. goes into a process group of its own and sends its output to two files of its scratch
   directory;
2. takes the rlimits a cold child gets (address space, CPU time, file size, no core);
3. builds its view (``view.enter``: a mount namespace with exactly the cold child's binds,
   ``pivot_root``, every capability dropped);
4. runs the child module's ``main()`` as ``python -m`` would, with the cold child's environment; the module
   then marks itself started and installs the audit hook and the seccomp filter (``boundary``)
   as a cold child does.

The zygote first forbids user namespaces in its own (``user.max_user_namespaces`` = 0). It is
pid 1 of its pid namespace: orphans come to it. After each child, whatever it
started is killed and reaped (every process of the namespace but the zygote), so nothing
outlives its load.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import resource
import select
import signal
import socket
import sys
import tempfile
import time
import traceback
from typing import Any

from ckptrescue.model import JsonObject

OUTPUT_FILES = (".warm-stdout", ".warm-stderr")


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


def _same_files(identity: list[list[Any]]) -> str:
    """'' when each file to load is, in the zygote's view, the one the parent named."""
    for path, dev, ino in identity:
        try:
            st = os.stat(path)
        except OSError as exc:
            return f"{path!r} is not in the zygote's view ({exc.strerror})"
        if (st.st_dev, st.st_ino) != (dev, ino):
            return f"{path!r} in the zygote's view is not the file the parent named"
    return ""


def _prepare(module_name: str, request: JsonObject) -> None:
    """The child module's heavy imports, made here once (trusted: no file is touched)."""
    module = importlib.import_module(module_name)
    prepare = getattr(module, "prepare", None)
    if prepare is not None:
        prepare(request)


def _child(job: JsonObject) -> int:
    """The forked child: returns its exit status (never returns to the zygote's loop)."""
    from ckptrescue.sandbox_children import view

    os.setpgid(0, 0)
    scratch = job["scratch"]
    for fd, name in zip((1, 2), OUTPUT_FILES, strict=True):
        out = os.open(os.path.join(scratch, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)
    for name, (soft, hard) in job["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    try:
        view.enter(job["binds"], new_root=job["new_root"], cwd=scratch)
    except OSError as exc:
        print(f"ckptrescue warm sandbox: {exc}", file=sys.stderr)
        return 125
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


def _run_child(job: JsonObject) -> None:
    status = 1
    try:
        status = _child(job)
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status & 0xFF)


def _wait(pid: int, timeout_s: float, sock: socket.socket) -> tuple[int, bool]:
    """The child's wait status, and whether the wall-clock limit killed it. The parent that
    closes the socket meanwhile (it ended) ends the child and the zygote."""
    fd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([fd, sock], [], [], timeout_s)
        timed_out = not ready
        if sock in ready and fd not in ready:
            os.kill(pid, signal.SIGKILL)
            _kill_the_rest()
            _empty(os.getcwd())
            os._exit(0)
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        return status, timed_out
    finally:
        os.close(fd)


def _kill_the_rest() -> None:
    """Kill and reap every process of this pid namespace but the zygote (pid 1)."""
    me = os.getpid()
    for _ in range(3):
        others = [int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) not in (1, me)]
        if not others:
            return
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in others:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            except OSError:
                pass


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


def serve(sock: socket.socket, module_name: str) -> None:
    _no_user_namespaces()
    gc.disable()  # the imports make objects that live to the end (``boundary.start``)
    _prepare(module_name, {})
    gc.freeze()
    _send(sock, {"ready": True, "threads": _threads()})
    buf = bytearray()
    while True:
        line = _read_line(sock, buf)
        if line is None:  # the parent ended: leave nothing in its directory
            _empty(os.getcwd())
            return
        job = json.loads(line)
        _prepare(job["module"], job["request"])
        gc.freeze()
        refused = ("another thread runs in the zygote" if _threads() != 1
                   else _same_files(job["identity"]))
        if refused:
            _send(sock, {"ran": False, "reason": refused})
            continue
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            sock.close()
            _run_child(job)
        status, timed_out = _wait(pid, float(job["timeout_s"]), sock)
        _kill_the_rest()
        _send(sock, {"ran": True, "wait_status": status, "timed_out": timed_out,
                     "duration_s": time.monotonic() - start})


def main() -> None:
    module_name, fd = sys.argv[1], int(sys.argv[2])
    sock = socket.socket(fileno=fd)
    serve(sock, module_name)


if __name__ == "__main__":
    main()
