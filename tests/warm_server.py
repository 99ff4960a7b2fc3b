"""The process behind :mod:`warm_python` (run as ``python -c <this file's text>``, so that its
``sys.path`` and ``__main__`` are those of ``python -c``).

It reads one JSON request a line on stdin and answers one JSON line on stdout:

- ``{"preload": [modules]}``: import them here, once (later runs fork with them imported);
  answers ``{"ok": bool}``: false when a Python thread now runs (forking would copy its locks
  half-held), and nothing is forked from this process again.
- ``{"code", "args", "cwd", "timeout"}``: fork; the child runs ``code`` as ``python -c code
  args...`` runs it (``sys.argv``, the cwd, ``__main__``, stdin the ``input`` given (else
  empty), stdout and stderr to files, the exit status of an uncaught exception or ``SystemExit``); answers
  ``{"returncode", "stdout", "stderr"}``, or ``{"timeout": true}`` after killing a child
  that overran.
"""

import json
import os
import select
import signal
import sys
import tempfile
import threading


def _child(code: str, args: list[str], cwd: str, stdin: int, out: int, err: int) -> None:
    import atexit
    import builtins
    import io
    import os
    import sys

    os.dup2(stdin, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
    os.chdir(cwd)
    sys.argv = ["-c", *args]
    main = sys.modules["__main__"]
    space = main.__dict__
    space.clear()  # the code's globals are __main__'s, as under python -c
    space.update(__name__="__main__", __builtins__=builtins, __doc__=None, __spec__=None,
                 __loader__=None, __package__=None)
    status = 0
    try:
        exec(compile(code, "<string>", "exec"), space)
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
        status = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(status & 0xFF)


def _read(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while data := os.read(fd, 1 << 20):
        chunks.append(data)
    os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")


def _run(req: dict) -> dict:
    with tempfile.TemporaryFile() as given, tempfile.TemporaryFile() as out, \
            tempfile.TemporaryFile() as err:
        given.write(req.get("input", "").encode())
        given.seek(0)
        ifd, ofd, efd = os.dup(given.fileno()), os.dup(out.fileno()), os.dup(err.fileno())
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        try:
            _child(req["code"], req["args"], req["cwd"], ifd, ofd, efd)
        finally:
            os._exit(70)
    waiter = os.pidfd_open(pid)
    ready, _, _ = select.select([waiter], [], [], req["timeout"])
    if not ready:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    os.close(waiter)
    os.close(ifd)
    answer = {"returncode": os.waitstatus_to_exitcode(status), "stdout": _read(ofd),
              "stderr": _read(efd)}
    if not ready:
        answer["timeout"] = True
    return answer


def serve() -> None:
    forkable = True
    for line in sys.stdin:
        req = json.loads(line)
        if "preload" in req:
            import importlib

            for name in req["preload"]:
                try:
                    importlib.import_module(name)
                except Exception:  # noqa: S112 - the child imports it again and fails as python -c would
                    continue
            forkable = forkable and threading.active_count() == 1
            answer = {"ok": forkable}
        elif not forkable:
            answer = {"refused": True}
        else:
            answer = _run(req)
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


serve()
