"""One writer per case: an exclusive ``flock`` on ``CASE/.writer.lock``.

Every command that writes into a case holds this lock for as long as it writes (the engine for a
whole run; ``Case.log``, ``add_evidence``, ``seal`` around each write when no command holds it).
A second process that wants to write waits up to ``CKPTRESCUE_CASE_WAIT`` seconds (default 10)
and then fails with one line naming the holder's pid and command, which the holder wrote into the
lock file when it took the lock.

Within one process the lock is re-entrant and shared: every ``Case`` object of the same directory
and every thread use the one lock (``flock`` would otherwise block a process on itself). The
lock file is opened ``O_CLOEXEC``: programs the kit runs never inherit it; and only as a
regular file: a symlink planted in its place (to evidence, say) is refused, never written
through. A crashed holder's lock is released by the kernel when its last descriptor closes;
the holder line left in the file is only ever read while the lock is taken by someone.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ckptrescue.errors import CaseError
from ckptrescue.record.regular import kind_of, open_regular, read_regular

LOCK_NAME = ".writer.lock"
DEFAULT_WAIT_S = 10.0


class CaseBusyError(CaseError):
    """Another process is writing into the case."""


@dataclass
class _Held:
    """A case lock this process holds: its descriptor and how many holders nest in it."""

    fd: int
    depth: int


_HELD: dict[str, _Held] = {}
_MUTEX = threading.RLock()


def _key(root: Path) -> str:
    return os.path.realpath(root)


def command_line() -> str:
    """This process's command, as a responder would recognise it."""
    argv = list(sys.argv) or ["python"]
    first = Path(argv[0]).name
    if argv[0].endswith("ckptrescue/__main__.py"):
        first = "ckptrescue"
    elif argv[0] in {"-c", "-m"}:
        first = f"python {argv[0]}"
    line = " ".join([first, *argv[1:]])
    return line if len(line) <= 200 else line[:197] + "..."


def wait_seconds() -> float:
    try:
        return max(0.0, float(os.environ.get("CKPTRESCUE_CASE_WAIT", DEFAULT_WAIT_S)))
    except ValueError:
        return DEFAULT_WAIT_S


def holder(root: Path) -> dict[str, object]:
    """What the lock file says about its holder (empty when unknown)."""
    try:
        data = json.loads(read_regular(Path(root) / LOCK_NAME) or b"{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def held(root: Path) -> bool:
    """True when this process holds the case's writer lock."""
    with _MUTEX:
        return _key(root) in _HELD


def flock_within(fd: int, seconds: float, poll: float = 0.05) -> bool:
    """The exclusive ``flock`` on ``fd``, tried until it is free or ``seconds`` have passed
    (False); any other error of the lock (a filesystem without locks) is raised."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll)


def acquire(root: Path, *, wait: float | None = None) -> None:
    """Take the case's writer lock (re-entrant within this process)."""
    key = _key(root)
    with _MUTEX:
        entry = _HELD.get(key)
        if entry is not None:
            entry.depth += 1
            return
        path = Path(root) / LOCK_NAME
        try:
            fd = open_regular(path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            what = {errno.ELOOP: "it is a symlink", errno.EINVAL: f"it is a {kind_of(path)}"
                    }.get(exc.errno or 0, exc.strerror or str(exc))
            raise CaseError(f"{path}: cannot open the case's writer lock ({what})",
                            hint="the kit writes only regular files of the case, never through "
                            "a symlink; remove it if nobody is writing into the case"
                            ) from exc
        try:
            locked = flock_within(fd, wait_seconds() if wait is None else wait)
        except OSError as exc:
            os.close(fd)
            raise CaseError(f"{path}: cannot lock the case for writing "
                            f"({exc.strerror or exc})") from exc
        if not locked:
            os.close(fd)
            raise _busy(Path(root)) from None
        info = json.dumps({"pid": os.getpid(), "command": command_line(),
                           "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (info + "\n").encode(), 0)
        except OSError:
            pass  # the holder line is a courtesy to the next writer; the lock is what counts
        _HELD[key] = _Held(fd=fd, depth=1)


def release(root: Path) -> None:
    """Give back one level of the lock; the last one closes the descriptor."""
    key = _key(root)
    with _MUTEX:
        entry = _HELD.get(key)
        if entry is None:
            return
        entry.depth -= 1
        if entry.depth > 0:
            return
        del _HELD[key]
        os.close(entry.fd)


def _busy(root: Path) -> CaseBusyError:
    info = holder(root)
    pid = info.get("pid", "?")
    command = info.get("command") or "unknown command"
    since = f" since {info['since']}" if info.get("since") else ""
    return CaseBusyError(
        f"{root}: another process is writing into this case (pid {pid}: {command}{since})",
        hint="wait for it to finish, or record into another case; one writer per case")
