"""``map_ordered``: a function over an iterator's items on a few threads, the results in the
items' order, at most a window of items in flight (memory stays flat on millions of files).

``concurrent.futures`` does this too, but importing it imports ``logging`` and ``traceback``,
which nothing else in a ``manifest build`` needs (about 3 ms of its start-up, measured with
``python -X importtime``); this is the part the build's hashing uses.

An exception the function raises (``KeyboardInterrupt`` too: a cancelled build's tracker raises
it on the hashing thread) is raised to the caller in order, after the results before it. When
the caller stops early (that exception, its own error, Ctrl-C, or closing the generator), no
further item is started, and the threads are waited for: each ends after its current item.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def map_ordered(fn: Callable[[T], R], items: Iterable[T], *, workers: int, window: int,
                name: str = "worker") -> Iterator[R]:
    """``fn(item)`` for each item, on up to ``workers`` threads named ``name_N``, yielded in
    order; at most ``window`` items (at least ``workers``) are given out before their results
    are taken. An error of ``items`` itself is raised after the results of the items before
    it."""
    workers = max(workers, 1)
    window = max(window, workers)
    tasks: queue.SimpleQueue[tuple[int, T] | None] = queue.SimpleQueue()
    results: dict[int, tuple[bool, Any]] = {}
    ready = threading.Condition()
    stopping = threading.Event()

    def work() -> None:
        while (task := tasks.get()) is not None:
            if stopping.is_set():
                continue  # the caller stopped: what is still queued is not started
            index, item = task
            try:
                outcome: tuple[bool, Any] | None = (True, fn(item))
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller, in order
                outcome = (False, exc)
            with ready:
                results[index] = outcome
                ready.notify()
            outcome = None  # (an exception kept here would keep its frames alive)

    source = iter(items)
    source_error: BaseException | None = None
    given = 0
    started: list[threading.Thread] = []
    _end = object()

    def pull() -> Any:
        """The next item, or ``_end`` once ``items`` has no more (or failed: kept to raise
        after the results of the items before it)."""
        nonlocal source_error
        if source_error is not None:
            return _end
        try:
            return next(source, _end)
        except Exception as exc:  # raised after the results before it (Ctrl-C: at once)
            source_error = exc
            return _end

    def give(item: Any) -> None:
        nonlocal given
        tasks.put((given, item))
        given += 1

    try:
        first: list[Any] = []
        while len(first) < window and (item := pull()) is not _end:
            first.append(item)
        # the threads start before there is work: each then waits in ``tasks.get`` (the GIL
        # released), and the second starts at once instead of after the first's Python-level
        # work (up to a switch interval, 5 ms, later: the end of the build waits for it)
        for n in range(min(workers, len(first))):
            thread = threading.Thread(target=work, name=f"{name}_{n}", daemon=True)
            started.append(thread)  # (before start: an interrupt in start() may follow the
            thread.start()          # thread's own start, and it is stopped like the others)
        for item in first:
            give(item)
        del first
        taken = 0
        while taken < given:
            with ready:
                while taken not in results:
                    ready.wait()
                ok, value = results.pop(taken)
            taken += 1
            if not ok:
                try:
                    raise value
                finally:
                    value = None
            if (item := pull()) is not _end:  # one more in flight for the one taken
                give(item)
            yield value
        if source_error is not None:
            try:
                raise source_error
            finally:
                source_error = None
    finally:
        stopping.set()
        for _ in started:
            tasks.put(None)
        for thread in started:
            if thread.ident is not None:  # (one whose start failed never ran)
                thread.join()
        results.clear()
