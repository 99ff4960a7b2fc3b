"""map_ordered, the build's hashing pool: results in order, a bounded window, errors in order,
and threads that stop when the caller does."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from ckptrescue.datasets.ordered_pool import map_ordered


def test_results_come_in_the_items_order_whatever_order_they_finish_in() -> None:
    def slow_first(i: int) -> int:
        time.sleep(0.02 if i % 3 == 0 else 0.0)
        return i * i

    assert list(map_ordered(slow_first, range(40), workers=3, window=6)) == [
        i * i for i in range(40)]
    assert list(map_ordered(slow_first, [], workers=2, window=8)) == []


def test_no_more_than_the_window_is_taken_from_the_items_before_a_result_is() -> None:
    taken: list[int] = []

    def items() -> Iterator[int]:
        for i in range(100):
            taken.append(i)
            yield i

    results = map_ordered(lambda i: i, items(), workers=2, window=5)
    assert next(results) == 0
    assert len(taken) == 6  # the window, and one more for the result taken
    results.close()


def test_an_error_is_raised_in_order_after_the_results_before_it() -> None:
    def fails_at_3(i: int) -> int:
        if i == 3:
            raise ValueError("item 3")
        return i

    got: list[int] = []
    with pytest.raises(ValueError, match="item 3"):
        for r in map_ordered(fails_at_3, range(10), workers=2, window=4):
            got.append(r)
    assert got == [0, 1, 2]


def test_an_interrupt_on_a_worker_reaches_the_caller() -> None:
    def cancelled(i: int) -> int:  # a cancelled build's tracker raises this on the thread
        if i == 1:
            raise KeyboardInterrupt("cancelled")
        return i

    with pytest.raises(KeyboardInterrupt):
        list(map_ordered(cancelled, range(5), workers=2, window=4))


def test_stopping_early_starts_nothing_more_and_leaves_no_thread_behind() -> None:
    started: list[int] = []
    release = threading.Event()

    def work(i: int) -> int:
        started.append(i)
        if i:
            release.wait(5)  # items 1 and 2 are still running when the caller stops
        return i

    before = set(threading.enumerate())
    results = map_ordered(work, range(50), workers=2, window=8, name="pooltest")
    assert next(results) == 0
    deadline = time.monotonic() + 5
    while len(started) < 3 and time.monotonic() < deadline:  # both threads on a held item
        time.sleep(0.01)
    threading.Timer(0.2, release.set).start()
    results.close()  # waits for the two running items; the queued ones are not started
    assert sorted(started) == [0, 1, 2]
    assert not [t for t in set(threading.enumerate()) - before
                if t.name.startswith("pooltest") and t.is_alive()]


def test_an_error_of_the_items_themselves_comes_after_the_results_before_it() -> None:
    def items() -> Iterator[int]:
        yield from range(5)
        raise OSError("the listing failed")

    got: list[int] = []
    with pytest.raises(OSError, match="the listing failed"):
        for r in map_ordered(lambda i: i * 10, items(), workers=1, window=2):
            got.append(r)
    assert got == [0, 10, 20, 30, 40]


def test_threads_that_cannot_all_start_leave_none_behind(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The process's thread limit reached while the pool starts (a container's pids limit):
    the error is raised, and the threads that did start are stopped and joined."""
    real = threading.Thread.start
    calls: list[str] = []

    def start(self: threading.Thread) -> None:
        calls.append(self.name)
        if len(calls) == 3:
            raise RuntimeError("can't start new thread")
        real(self)

    before = set(threading.enumerate())
    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        list(map_ordered(lambda i: i, range(10), workers=4, window=8, name="limited"))
    monkeypatch.undo()
    assert calls[:2] == ["limited_0", "limited_1"]
    assert not [t for t in set(threading.enumerate()) - before
                if t.name.startswith("limited") and t.is_alive()]


def test_an_interrupt_in_the_items_is_raised_at_once() -> None:
    """Ctrl-C while the items are being listed stops the map at once, not after the items
    already in flight (an error of the items waits for the results before it)."""
    def items() -> Iterator[int]:
        yield from range(3)
        raise KeyboardInterrupt

    got: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        for r in map_ordered(lambda i: i, items(), workers=1, window=2):
            got.append(r)
    assert got == [0]


def test_no_workers_asked_is_one() -> None:
    assert list(map_ordered(lambda i: i + 1, range(3), workers=0, window=0)) == [1, 2, 3]
