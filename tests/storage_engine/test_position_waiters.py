"""``PositionWaiters``: puts parked until a growing position covers them (the SYNC flush and
SYNC_MASTER acknowledgement waits), and the group flusher's wait for a number of parked puts."""

from __future__ import annotations

import threading
import time

from storage_engine.position_waiters import PositionWaiters


def until(predicate, timeout_s: float = 10, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def start_waiters(waiters: PositionWaiters, targets, results: dict[int, bool],
                  timeout_ms: int = 10_000) -> list[threading.Thread]:
    def wait(target: int) -> None:
        results[target] = waiters.wait(target, timeout_ms)

    threads = [threading.Thread(target=wait, args=(target,)) for target in targets]
    for thread in threads:
        thread.start()
    return threads


def test_waiters_are_released_in_target_order_and_time_out():
    acks = PositionWaiters()
    results: dict[int, bool] = {}
    threads = start_waiters(acks, (10, 20, 30), results)
    until(lambda: acks.waiting_count == 3, what="three waiters")
    acks.advance(20)
    threads[0].join(5)
    threads[1].join(5)
    assert results == {10: True, 20: True} and acks.waiting_count == 1
    acks.advance(15)  # never backwards
    assert acks.position == 20
    started = time.monotonic()
    assert acks.wait(40, 50) is False  # times out and leaves the heap clean
    assert time.monotonic() - started >= 0.045 and acks.waiting_count == 1
    acks.release_all()
    threads[2].join(5)
    assert results[30] is False and acks.waiting_count == 0
    assert acks.wait(20, 0) is True


def test_advance_returns_how_many_waiters_it_released():
    waiters = PositionWaiters(5)
    results: dict[int, bool] = {}
    threads = start_waiters(waiters, (10, 20, 30), results)
    until(lambda: waiters.waiting_count == 3, what="three waiters")
    assert waiters.advance(4) == 0 and waiters.position == 5  # never backwards
    assert waiters.advance(25) == 2 and waiters.waiting_count == 1
    assert waiters.advance(30) == 1
    for thread in threads:
        thread.join(5)
    assert results == {10: True, 20: True, 30: True}


def test_wait_for_waiters_returns_once_enough_threads_park():
    waiters = PositionWaiters()
    assert waiters.wait_for_waiters(0, 0.01) is True
    results: dict[int, bool] = {}
    gathered: list[bool] = []
    gatherer = threading.Thread(target=lambda: gathered.append(
        waiters.wait_for_waiters(2, 10)))
    gatherer.start()
    threads = start_waiters(waiters, (10,), results)
    until(lambda: waiters.waiting_count == 1, what="the first waiter")
    assert not gathered  # one of two
    threads += start_waiters(waiters, (20,), results)
    gatherer.join(5)
    assert gathered == [True]
    waiters.advance(20)
    for thread in threads:
        thread.join(5)
    assert results == {10: True, 20: True}


def test_wait_for_waiters_times_out_and_release_all_frees_the_gatherer():
    waiters = PositionWaiters()
    started = time.monotonic()
    assert waiters.wait_for_waiters(1, 0.05) is False
    assert time.monotonic() - started >= 0.045
    gathered: list[bool] = []
    gatherer = threading.Thread(target=lambda: gathered.append(
        waiters.wait_for_waiters(3, 10)))
    gatherer.start()
    until(lambda: waiters._count_gate is not None, what="the gatherer to park")
    waiters.release_all()
    gatherer.join(5)
    assert gathered == [True] and not gatherer.is_alive()


def test_a_final_release_lets_later_waits_return_at_once():
    """After the position's mover failed (the flusher's fail-stop) a put that parks later must
    not sit out its whole timeout: the position will never move again."""
    waiters = PositionWaiters(10)
    waiters.release_all(final=True)
    started = time.monotonic()
    assert waiters.wait(20, 10_000) is False
    assert time.monotonic() - started < 5  # not the 10 s timeout
    assert waiters.wait(10, 10_000) is True  # what is covered stays covered
