"""The process behind :mod:`warm_python` (run as ``python -c <this file's text>``, so that its
``sys.path`` is that of ``python -c``). Replies go out on a descriptor of their own: whatever a
library prints never mixes with them.

It reads one JSON request a line on stdin and answers one JSON line:

- ``{"prefix": source}``: run the code's first statements here, once (its imports of the
  preloaded libraries; :func:`warm_python.prefix_of`), their output kept to be replayed at
  the start of every run's; answers ``{"ok": bool}``. Not ok (nothing is forked from this
  process then): the prefix failed, or a Python thread now runs (forking would copy its locks
  half-held).
- ``{"code", "args", "cwd", "env", "input", "timeout"}``: fork; the child runs ``code`` as
  ``python -c code args...`` runs it: ``sys.argv``, the cwd, the environment, a fresh
  ``__main__``, stdin the ``input``, stdout and stderr to files, the exit status of
  ``SystemExit``, an uncaught exception or a Ctrl-C, threads joined and atexit run at the end.
  Answers ``{"returncode", "stdout", "stderr"}`` (and ``"timeout": true`` after killing a
  child that overran). The child dies with this process, and this process with its parent.
"""

import gc
import json
import os
import select
import signal
import sys
import tempfile
import threading

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _child(req: dict, stdin: int, out: int, err: int) -> None:
    import atexit
    import builtins
    import io
    import types

    _exit = os._exit
    status, interrupted = 70, False
    try:
        _die_with_parent()
        for fd, target in ((stdin, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False),
                                                       write_through=True)
        sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False),
                                                       write_through=True,
                                                       errors="backslashreplace")
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = ["-c", *req["args"]]
        main = types.ModuleType("__main__")  # the code's globals, as under python -c
        main.__builtins__ = builtins
        sys.modules["__main__"] = main
        status = 0
        try:
            exec(compile(req["code"], "<string>", "exec"), main.__dict__)
        except SystemExit as exc:
            if exc.code is None:
                status = 0
            elif isinstance(exc.code, int):
                status = exc.code
            else:
                print(exc.code, file=sys.stderr)
                status = 1
        except BaseException as exc:  # shown as python -c shows it: without this frame
            tb = exc.__traceback__
            exc.__traceback__ = tb.tb_next if tb is not None else None
            sys.excepthook(type(exc), exc, exc.__traceback__)
            interrupted = isinstance(exc, KeyboardInterrupt)  # python -c then ends by SIGINT
            status = 1
        threading._shutdown()  # non-daemon threads finish, as at interpreter exit
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        if interrupted:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        _exit(status & 0xFF)


def _read(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while data := os.read(fd, 1 << 20):
        chunks.append(data)
    os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")


def _files(n: int) -> list[int]:
    """``n`` anonymous temporary files, as descriptors."""
    out = []
    for _ in range(n):
        with tempfile.TemporaryFile() as fh:
            out.append(os.dup(fh.fileno()))
    return out


def _run(req: dict, lead: tuple[str, str]) -> dict:
    ifd, ofd, efd = _files(3)
    os.write(ifd, req.get("input", "").encode())
    os.lseek(ifd, 0, os.SEEK_SET)
    pid = os.fork()
    if pid == 0:
        _child(req, ifd, ofd, efd)
    os.close(ifd)
    waiter = os.pidfd_open(pid)
    ready, _, _ = select.select([waiter], [], [], req["timeout"])
    if not ready:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.close(waiter)
    answer = {"returncode": os.waitstatus_to_exitcode(status), "stdout": lead[0] + _read(ofd),
              "stderr": lead[1] + _read(efd)}
    if not ready:
        answer["timeout"] = True
    return answer


def _prefix(source: str) -> tuple[bool, tuple[str, str]]:
    """Run the code's first statements, their stdout and stderr kept (and replayed)."""
    ofd, efd = _files(2)
    saved = os.dup(1), os.dup(2)
    os.dup2(ofd, 1)
    os.dup2(efd, 2)
    # the imports make about a million objects that every child keeps: a collection during them
    # frees nothing, and each full collection in a child would walk them all again (a quarter
    # of a Lightning load's CPU); paused for the imports, then frozen, they are never walked
    gc.disable()
    try:
        exec(compile(source, "<string>", "exec"), {"__name__": "__main__"})
        ok = threading.active_count() == 1
    except BaseException:  # the run goes cold and fails, or not, as python -c does
        ok = False
    finally:
        gc.freeze()
        gc.enable()
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
    return ok, (_read(ofd), _read(efd))


def serve() -> None:
    _die_with_parent()
    replies = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # a stray print of this process never reaches the replies
    os.close(null)
    forkable, lead = True, ("", "")
    for line in sys.stdin:
        req = json.loads(line)
        if "prefix" in req:
            forkable, lead = _prefix(req["prefix"])
            answer = {"ok": forkable}
        elif not forkable:
            answer = {"refused": True}
        else:
            answer = _run(req, lead)
        replies.write(json.dumps(answer) + "\n")
        replies.flush()


serve()
