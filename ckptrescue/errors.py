"""Exception hierarchy and process exit codes.

Damage is a :class:`~ckptrescue.model.Finding`, a refusal is a ``ToolResult.refused`` value; only
"could not do what was asked" is an exception. ``cli.main.run`` is the only place that turns these
into exit codes and one-line messages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    """Process exit codes (documented in the README)."""

    OK = 0  # done, nothing wrong
    FINDINGS = 1  # done, problems found
    USAGE = 2  # bad usage or bad input
    REFUSED = 3  # refused by the safety guard
    FAILURE = 4  # a tool or internal failure
    INTERRUPT = 130


class CkptRescueError(Exception):
    """Base class: an expected failure with a one-line message."""

    exit_code: ExitCode = ExitCode.FAILURE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UsageError(CkptRescueError):
    """Bad arguments or bad input (a missing file, a malformed playbook, ...)."""

    exit_code = ExitCode.USAGE


class EvidenceError(UsageError):
    """Evidence that cannot be opened or identified at all."""


class CaseError(UsageError):
    """A case directory that is missing, malformed or sealed."""


class PlaybookError(UsageError):
    """A playbook that does not load or validate."""


class RefusedError(CkptRescueError):
    """The safety guard refused what was asked."""

    exit_code = ExitCode.REFUSED


class ToolMissingError(CkptRescueError):
    """An external tool is not installed."""

    exit_code = ExitCode.FAILURE


@contextmanager
def optional_module(message: str, *, hint: str | None = None,
                    also: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Around the import of an optional module: when it is missing (or fails with one of
    ``also``), a :class:`ToolMissingError` with ``message`` and ``hint``, never a traceback."""
    try:
        yield
    except (ImportError, *also) as exc:
        raise ToolMissingError(message, hint=hint) from exc


class ToolFailedError(CkptRescueError):
    """An external tool could not do its job."""

    exit_code = ExitCode.FAILURE


class SandboxError(CkptRescueError):
    """The sandboxed loader child could not be run."""

    exit_code = ExitCode.FAILURE


class RemoteError(CkptRescueError):
    """A remote service (S3 endpoint, cluster scheduler) failed or refused access."""

    exit_code = ExitCode.FAILURE


class NotThisFormat(Exception):  # noqa: N818 - control-flow fact, not an error
    """Raised by a format's ``detect``/``scan`` when the bytes are not its format."""


def os_error_line(exc: OSError) -> str:
    """An operating-system error that reached a command's edge, as its one line: the path(s)
    the system refused and why (``out/x: Not a directory``), not the exception's repr
    (``NotADirectoryError: [Errno 20] Not a directory: 'out/x'``). A failed write or open of
    a path the responder named (a file where a folder must be, a read-only mount, a full disk)
    is an expected failure of the environment, never an internal error."""
    import os

    paths = [os.fsdecode(p) if isinstance(p, bytes) else str(p)
             for p in (exc.filename, exc.filename2) if p is not None]
    if paths:
        return f"{' -> '.join(paths)}: {exc.strerror or exc}"
    if exc.errno is not None and exc.strerror:  # a system call's error: its words say it
        return exc.strerror  # ('No space left on device')
    return f"{type(exc).__name__}: {exc}"  # a library's own (a bad gzip, a TLS failure)


def named(exc: OSError, path: str | bytes | object, *, replace: bool = False) -> OSError:
    """``exc`` naming ``path`` when it names nothing: a write, flush, truncate or fsync on an
    open file fails without a name (``No space left on device``), and the responder must learn
    which file of the many a command writes could not be written. ``replace``: naming ``path``
    in place of the name it has (the file asked for, not the temporary file written)."""
    import os

    shown = os.fsdecode(path) if isinstance(path, bytes | str) else str(path)
    if replace:
        return OSError(exc.errno, exc.strerror or str(exc), shown)
    if exc.filename is not None or exc.errno is None:
        return exc
    return type(exc)(exc.errno, exc.strerror or os.strerror(exc.errno), shown)


@contextmanager
def _said_as(kind: type[Exception], say: Callable[[Any], Exception]) -> Iterator[None]:
    """A block whose errors of ``kind`` are raised as ``say`` gives them back (the same one
    when it has nothing to add)."""
    try:
        yield
    except kind as exc:
        out = say(exc)
        if out is exc:
            raise
        raise out from exc


def naming(path: str | bytes | object) -> AbstractContextManager[None]:
    """A block whose nameless operating-system errors name ``path`` (:func:`named`)."""
    return _said_as(OSError, lambda exc: named(exc, path))


def database_error(exc: Exception, path: str | object) -> Exception:
    """A SQLite error of the kit's own database at ``path`` as the operating-system error it
    stands for, naming the file: ``database or disk is full`` is ENOSPC; a ``disk I/O
    error`` (which SQLite also gives when growing its WAL index fails on a full disk) is said
    with SQLite's own name for it and the free space of the file's filesystem, never as a bare
    "Input/output error" that a responder would take for a failing drive. Any other SQLite
    error is returned as it is."""
    import errno
    import os

    code = getattr(exc, "sqlite_errorcode", None)
    if not isinstance(code, int):
        return exc
    primary = code & 0xFF  # the extended codes keep the primary one in the low byte
    if primary == 13:  # SQLITE_FULL
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    if primary != 10:  # SQLITE_IOERR
        return exc
    said = f"disk I/O error ({getattr(exc, 'sqlite_errorname', '') or code})"
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(str(path))))
        said += f"; its filesystem has {st.f_bavail * st.f_frsize} bytes free"
    except OSError:
        pass
    return OSError(errno.EIO, said, str(path))


def raise_if_system_error(exc: Exception, path: str | object) -> None:
    """Raise the operating-system error a SQLite error of the kit's database at ``path``
    stands for (a full disk, EIO: :func:`database_error`); return when it is another error (a
    foreign or damaged database, for the caller to say)."""
    said = database_error(exc, path)
    if said is not exc:
        raise said from exc


def database(path: str | object) -> AbstractContextManager[None]:
    """A block whose SQLite errors of the kit's database at ``path`` say what they are and
    which file (:func:`database_error`)."""
    return _said_as(Exception, lambda exc: database_error(exc, path))


def not_a_regular_file(path: str | bytes | object, mode: int) -> RefusedError:
    """The refusal of a path the kit would open or replace that is not a regular file: a
    device node (a write sends its bytes to the device; a rename replaces the node itself:
    ``-o /dev/null`` as root once replaced the machine's), a FIFO (blocks the reader or the
    writer for good), a socket or a folder."""
    import os
    import stat

    what = ("a FIFO" if stat.S_ISFIFO(mode) else "a device node" if stat.S_ISBLK(mode)
            or stat.S_ISCHR(mode) else "a socket" if stat.S_ISSOCK(mode) else
            "a directory" if stat.S_ISDIR(mode) else "not a regular file")
    shown = os.fsdecode(path) if isinstance(path, bytes | str) else str(path)
    if stat.S_ISDIR(mode):
        return RefusedError(f"{shown}: a directory; the kit writes its output as a file here "
                            "(name a file, inside the folder or elsewhere)")
    return RefusedError(f"{shown}: {what}; the kit reads and writes only regular files (it "
                        "never opens a device node or a FIFO, and never renames over one)")
