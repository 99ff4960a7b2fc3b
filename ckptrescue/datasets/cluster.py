"""Fan-out over an existing Dask cluster (``--scheduler ADDRESS``, the ``[cluster]`` extra).

Files are grouped into batches by byte volume (:func:`plan_batches`): the batch size comes from
the total bytes and the worker threads the cluster has (about :data:`BATCHES_PER_THREAD` batches
per thread, between :data:`MIN_BATCH_BYTES` and :data:`MAX_BATCH_BYTES`), so a slow or lost
worker costs little; many tiny files are grouped by bytes too, with only a safety cap of
:data:`MAX_BATCH_FILES` files so one task's result stays small. A file larger than the batch size
is a batch of its own (a whole-file SHA-256 cannot be split). Each batch runs on a worker, which
reads the files where they live (the workers must see DIR at the same path: a shared filesystem).
Results come back as plain dataclasses and merge into the same outputs as a local run.

Worker loss: a batch that was running (or whose result was held) on a worker that dies is re-run
on another worker by the scheduler (``distributed.scheduler.allowed-failures`` deaths per batch
before it gives up); every batch's result is taken exactly once, as it arrives, and released on
the cluster at once. When no worker is left for :data:`NO_WORKER_GRACE_S` seconds, when a batch
keeps killing its workers, or when the scheduler goes away, the run stops with a one-line
:class:`RemoteError` (what was yielded so far stays yielded: ``manifest build`` keeps it in its
partial file for the rerun).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from ckptrescue.datasets.walk import FileEntry
from ckptrescue.errors import CkptRescueError, RemoteError, UsageError, optional_module

T = TypeVar("T")


class HasSize(Protocol):
    @property
    def size(self) -> int: ...


E = TypeVar("E", bound=HasSize)
# the local thread pool's grouping (``batches``) defaults
BATCH_BYTES = 256 << 20
BATCH_FILES = 512
# the cluster plan (``plan_batches``): batches per worker thread, byte floor and ceiling, file cap
BATCHES_PER_THREAD = 8
MIN_BATCH_BYTES = 64 << 20
MAX_BATCH_BYTES = 2 << 30
MAX_BATCH_FILES = 10_000
# seconds the client waits to connect, and to reconnect after losing the scheduler
CONNECT_TIMEOUT_S = 20.0
# seconds the run waits for a worker (at the start, or after the last one is gone) before it
# gives up; seconds between two looks at the cluster while waiting for results
NO_WORKER_GRACE_S = 60.0
POLL_S = 1.0
# batches in flight per worker thread (the rest wait on the client: scheduler memory stays flat
# on trees of millions of files)
IN_FLIGHT_PER_THREAD = 4
# polls without a result after which finished batches are fetched directly
STALL_POLLS = 10


def batches(entries: Sequence[E], *, max_bytes: int = BATCH_BYTES,
            max_files: int = BATCH_FILES) -> list[list[E]]:
    """Consecutive groups of at most ``max_files`` files or about ``max_bytes`` bytes."""
    out: list[list[E]] = []
    cur: list[E] = []
    size = 0
    for e in entries:
        if cur and (len(cur) >= max_files or size + e.size > max_bytes):
            out.append(cur)
            cur, size = [], 0
        cur.append(e)
        size += e.size
    if cur:
        out.append(cur)
    return out


def batch_bytes(total_bytes: int, threads: int, *, per_thread: int = BATCHES_PER_THREAD,
                floor: int = MIN_BATCH_BYTES, ceiling: int = MAX_BATCH_BYTES) -> int:
    """Target bytes per batch: ``total / (threads * per_thread)`` clamped to [floor, ceiling]."""
    want = math.ceil(total_bytes / (max(1, threads) * max(1, per_thread)))
    return max(floor, min(ceiling, want))


def plan_batches(entries: Sequence[E], threads: int, *,
                 per_thread: int = BATCHES_PER_THREAD, floor: int = MIN_BATCH_BYTES,
                 ceiling: int = MAX_BATCH_BYTES,
                 max_files: int = MAX_BATCH_FILES) -> list[list[E]]:
    """Split ``entries`` into batches of about :func:`batch_bytes` bytes for ``threads`` threads.

    Files stay in walk order inside a batch (neighbours in a directory travel together); a file
    larger than the target is a batch of its own; no batch has more than ``max_files`` files.
    Batches come largest first, so that big files start early and do not make the tail.
    """
    target = batch_bytes(sum(e.size for e in entries), threads, per_thread=per_thread,
                         floor=floor, ceiling=ceiling)
    out = batches(entries, max_bytes=target, max_files=max_files)
    out.sort(key=lambda b: -sum(e.size for e in b))  # stable: walk order among equals
    return out


_ADDRESS = re.compile(r"^((tcp|tls|ucx|ws|wss|inproc)://)?[^\s:/]+(:\d+)?$|"
                      r"^(tcp|tls|ucx|ws|wss)://\[[0-9a-fA-F:]+\](:\d+)?$")


def _client(address: str) -> Any:
    if not _ADDRESS.match(address) or ":" not in address.split("://")[-1]:
        raise UsageError(f"--scheduler {address!r}: not a Dask scheduler address "
                         "(expected tcp://HOST:PORT)")
    with optional_module("--scheduler needs Dask distributed, which is not installed",
                         hint="pip install 'ckptrescue[cluster]'  (or: pip install "
                              "'dask[distributed]')"):
        from distributed import Client
    refused = _refused(address)
    if refused:
        raise RemoteError(f"cannot reach the Dask scheduler at {address}: {refused}")
    try:
        return Client(address, timeout=f"{CONNECT_TIMEOUT_S:g}s", set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise RemoteError(f"cannot reach the Dask scheduler at {address}: {exc}") from exc


def _refused(address: str) -> str:
    """Why a ``tcp://HOST:PORT`` scheduler cannot be reached at all, at once: a refused
    connection or a name that does not resolve (Dask's client would retry either until its
    20 s timeout). "" when it answers, for any other scheme, or when it only seems slow (the
    client's own timeout then decides)."""
    import socket

    scheme, _, rest = address.rpartition("://")
    if scheme not in ("", "tcp"):
        return ""
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=min(5.0, CONNECT_TIMEOUT_S)):
            return ""
    except ConnectionRefusedError:
        return "connection refused (nothing listens on that port)"
    except socket.gaierror as exc:
        return f"the host name does not resolve ({exc.strerror or exc})"
    except (OSError, ValueError):
        return ""


def connect(address: str) -> Any:
    """A Dask client for ``address`` (one-line errors when Dask is missing or unreachable)."""
    return _client(address)


def worker_threads(client: Any, address: str) -> int:
    """Worker threads on the cluster now (0 when the scheduler cannot be asked)."""
    try:
        return int(sum(client.nthreads().values()))
    except Exception as exc:  # noqa: BLE001 - any failure to ask is a lost scheduler
        if client.status in ("closing", "closed", "connecting") or _connection_gone(exc):
            raise _lost_scheduler(address) from exc
        raise RemoteError(f"the Dask scheduler at {address} did not answer: {exc}") from exc


def _connection_gone(exc: BaseException) -> bool:
    """The connection to the scheduler was closed or reset: it went away, though the client
    may not say so yet (its status still "running" for a moment after the reset)."""
    from distributed.comm.core import CommClosedError

    return isinstance(exc, CommClosedError | ConnectionError)


def _lost_scheduler(address: str) -> RemoteError:
    return RemoteError(f"lost the connection to the Dask scheduler at {address}",
                       hint="files finished so far are kept; rerun to resume")


def _wait_for_workers(client: Any, address: str, grace: float, what: str) -> int:
    """Threads on the cluster, waiting up to ``grace`` seconds for a first worker."""
    deadline = time.monotonic() + grace
    while True:
        threads = worker_threads(client, address)
        if threads:
            return threads
        if client.status != "running" and client.status != "connecting":
            raise _lost_scheduler(address)
        if time.monotonic() >= deadline:
            raise RemoteError(f"the Dask cluster at {address} {what} (waited {grace:g} s)",
                              hint="files finished so far are kept; rerun to resume")
        time.sleep(min(POLL_S, max(0.05, deadline - time.monotonic())))


def _batch_error(exc: BaseException, batch: list[FileEntry], address: str,
                 client: Any) -> CkptRescueError:
    """The one-line error for a batch that did not come back."""
    from distributed import KilledWorker

    first = os.fsdecode(batch[0].rel) if batch else "?"
    if isinstance(exc, KilledWorker):
        return RemoteError(
            f"a batch of {len(batch)} file(s) from {first} was on {exc.allowed_failures + 1} "
            "Dask workers that all died while running it",
            hint="a file in it may exhaust a worker's memory, or workers are being killed; "
                 "the scheduler gives up after distributed.scheduler.allowed-failures deaths")
    if client.status != "running" or type(exc).__name__ in ("CancelledError",
                                                            "FutureCancelledError"):
        return _lost_scheduler(address)
    if isinstance(exc, ImportError):
        return RemoteError(f"a Dask worker cannot run the batch: {exc}",
                           hint="install ckptrescue (same version) on every worker")
    return RemoteError(f"a Dask worker failed on the batch from {first}: "
                       f"{type(exc).__name__}: {exc}")


class _Batch:
    """A batch as one opaque argument: Dask does not walk its thousands of entries on submit."""

    __slots__ = ("entries",)

    def __init__(self, entries: list[FileEntry]) -> None:
        self.entries = entries

    def __reduce__(self) -> tuple[type[_Batch], tuple[list[FileEntry]]]:
        return (_Batch, (self.entries,))


def batch_failure(result: Any) -> BaseException | None:
    """What a batch's entry from ``as_completed(with_results=True, raise_errors=False)`` says
    went wrong, else None: an error comes as ``(type, exception, traceback)``, a cancel as the
    exception, a result as the batch's list. Judged by the entry, not by the future's status
    now: a result fetched before its worker died is whole, though the future reads "lost"."""
    if isinstance(result, BaseException):
        return result
    if isinstance(result, tuple) and len(result) == 3 and isinstance(result[1], BaseException):
        return result[1]
    return None


def _run_batch(fn: Callable[[bytes, list[FileEntry]], list[T]], root: bytes,
               batch: _Batch) -> list[T]:
    return fn(root, batch.entries)


@contextlib.contextmanager
def _quiet_client_logs() -> Iterator[None]:
    """Dask's own client-side log lines (rescheduling, reconnecting) stay off stderr while the
    run says what matters in one line; CKPTRESCUE_DEBUG=1 keeps them."""
    if os.environ.get("CKPTRESCUE_DEBUG"):
        yield
        return
    import logging  # (here: the local build's hashing pool groups files with ``batches``)

    # tornado.application and asyncio carry the tracebacks of the client's background tasks
    # (a result being fetched when the scheduler went away)
    names = ["distributed", "tornado.application", "asyncio",
             *(n for n in logging.root.manager.loggerDict if n.startswith("distributed."))]
    saved = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for n, level in saved.items():
            logging.getLogger(n).setLevel(level)


def map_batches(address: str, fn: Callable[[bytes, list[FileEntry]], list[T]], root: bytes,
                entries: list[FileEntry]) -> Iterator[list[T]]:
    """Run ``fn(root, batch)`` for every batch on the cluster; yield results as they finish.

    Every batch's result is yielded exactly once, also when workers die and batches are re-run.
    """
    if not entries:
        return
    client = _client(address)
    from distributed import as_completed

    quiet = _quiet_client_logs()
    quiet.__enter__()
    try:
        threads = _wait_for_workers(client, address, NO_WORKER_GRACE_S, "has no workers")
        try:
            seen = client.run(os.path.isdir, root)
        except CkptRescueError:
            raise
        except Exception as exc:  # noqa: BLE001 - a worker or the scheduler went away here
            raise RemoteError(f"the Dask cluster at {address} could not be asked about "
                              f"{os.fsdecode(root)}: {type(exc).__name__}: {exc}") from exc
        blind = sorted(w for w, ok in seen.items() if not ok)
        if not seen:
            raise RemoteError(f"the Dask cluster at {address} has no workers")
        if blind:
            raise RemoteError(f"{len(blind)} Dask worker(s) do not see {os.fsdecode(root)}: "
                              + ", ".join(blind[:3]),
                              hint="workers read files where they live: mount DIR at the same "
                                   "path on every worker")
        todo = iter(plan_batches(entries, threads, per_thread=BATCHES_PER_THREAD,
                                 floor=MIN_BATCH_BYTES, ceiling=MAX_BATCH_BYTES,
                                 max_files=MAX_BATCH_FILES))
        # results are fetched on the client's event loop as batches finish; this loop only takes
        # them, keeps the window full and looks at the cluster every POLL_S seconds
        ac = as_completed(loop=client.loop, with_results=True, raise_errors=False)
        pending: dict[Any, list[FileEntry]] = {}

        def top_up(threads: int) -> None:
            new = []
            while len(pending) < max(2, threads * IN_FLIGHT_PER_THREAD):
                batch = next(todo, None)
                if batch is None:
                    break
                fut = client.submit(_run_batch, fn, root, _Batch(batch), pure=False)
                pending[fut] = batch
                new.append(fut)
            if new:
                ac.update(new)

        top_up(threads)
        last_look = last_worker_seen = last_result = time.monotonic()
        while pending:
            with ac.thread_condition:  # checked under the lock: no wake-up is missed
                if not ac.has_ready():
                    ac.thread_condition.wait(timeout=POLL_S)
            for fut, result in ac.next_batch(block=False):
                batch = pending.pop(fut, None)
                if batch is None:  # taken already by the stall fallback below
                    continue
                failure = batch_failure(result)
                if failure is not None:
                    raise _batch_error(failure, batch, address, client) from None
                fut.release()  # the result leaves the worker's memory now
                last_result = time.monotonic()
                yield result
            now = time.monotonic()
            if now - last_look >= POLL_S or not ac.has_ready():
                if client.status not in ("running", "connecting"):
                    raise _lost_scheduler(address)
                if now - last_look >= POLL_S:
                    last_look = now
                    threads = worker_threads(client, address)
                    if threads:
                        last_worker_seen = now
                    elif now - last_worker_seen > NO_WORKER_GRACE_S:
                        raise RemoteError(f"every Dask worker of {address} is gone (none for "
                                          f"{NO_WORKER_GRACE_S:g} s)",
                                          hint="files finished so far are kept; rerun to "
                                               "resume")
            if now - last_result > STALL_POLLS * POLL_S:
                # a result whose background fetch failed (a connection reset) is never queued:
                # take finished batches directly; each still comes out once (pending decides)
                for fut in [f for f in pending if f.status == "finished"]:
                    try:
                        result = fut.result(timeout=POLL_S)
                    except TimeoutError:
                        continue
                    except Exception as exc:  # noqa: BLE001 - every remote failure: one line
                        raise _batch_error(exc, pending[fut], address, client) from exc
                    pending.pop(fut)
                    fut.release()
                    last_result = time.monotonic()
                    yield result
            top_up(threads)
    finally:
        try:
            client.close()
        finally:
            quiet.__exit__(None, None, None)
