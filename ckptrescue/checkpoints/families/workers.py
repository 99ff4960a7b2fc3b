"""The processes of ``probe --jobs N``: they die with the kit, and Ctrl-C is the kit's alone.

* Each worker asks the kernel to kill it when its parent goes (``PR_SET_PDEATHSIG`` through
  ``prctl``, and a check that the parent had not already gone before it asked): a ``kill -9`` of
  ``probe RUN --jobs 2`` leaves no worker behind holding the terminal or the case.
* Workers ignore SIGINT: a Ctrl-C at the terminal reaches the whole process group, and only the
  kit decides what it means (one line, exit 130), so no worker prints a ``KeyboardInterrupt`` or
  ``EOFError`` traceback.
* :func:`pool` is the pool the families use; on Ctrl-C (the step's ``cancel`` event, which the
  engine sets) or any error it cancels what has not started and kills its workers at once
  instead of waiting for them to finish.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ckptrescue.errors import CkptRescueError, ExitCode

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

PR_SET_PDEATHSIG = 1


class ProbeCancelled(CkptRescueError):  # noqa: N818 - a cancellation, not a failure
    """The probe was interrupted (Ctrl-C): its workers were stopped."""

    exit_code = ExitCode.INTERRUPT


def die_with_parent(parent: int) -> None:
    """In a child: be killed (SIGKILL) when the parent exits; exit now if it already has."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the pool's shutdown still ends workers
        pass
    if os.getppid() != parent:
        os._exit(1)


def worker_init(parent: int) -> None:
    """Initializer of every probe worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent)


@contextlib.contextmanager
def pool(jobs: int, cancel: threading.Event | None = None) -> Iterator[ProcessPoolExecutor]:
    """A process pool whose workers die with this process, and are killed (not waited for) when
    the block is left by an error or a cancellation."""
    from concurrent.futures import ProcessPoolExecutor  # noqa: PLC0415 - imports multiprocessing

    executor = ProcessPoolExecutor(max_workers=jobs, initializer=worker_init,
                                   initargs=(os.getpid(),))
    try:
        yield executor
    except BaseException:
        stop(executor)
        raise
    else:
        executor.shutdown(wait=True)


def stop(executor: ProcessPoolExecutor) -> None:
    """Cancel what has not started and kill the workers now."""
    processes = list((getattr(executor, "_processes", None) or {}).values())
    executor.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(Exception):
            process.kill()
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(timeout=5)


def completed(pending: Iterable[Future[Any]],
              cancel: threading.Event | None) -> tuple[set[Future[Any]], set[Future[Any]]]:
    """``wait(..., FIRST_COMPLETED)`` that raises :class:`ProbeCancelled` once ``cancel`` is
    set (checked five times a second)."""
    from concurrent.futures import FIRST_COMPLETED, wait

    waiting = set(pending)
    while True:
        if cancel is not None and cancel.is_set():
            raise ProbeCancelled("probe interrupted: its workers were stopped")
        done, rest = wait(waiting, timeout=0.2, return_when=FIRST_COMPLETED)
        if done:
            return set(done), set(rest)
