"""``PositionWaiters``: puts parked until a growing position covers them (the SYNC flush and
SYNC_MASTER acknowledgement waits), and the leadership the SYNC flush's producers pass on."""

from __future__ import annotations

import threading
import time

from postbox.storage_engine.group_commit import PositionWaiters
from tests.support.polling import wait_until


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
    wait_until(lambda: acks.waiting_count == 3, what="three waiters")
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
    wait_until(lambda: waiters.waiting_count == 3, what="three waiters")
    assert waiters.advance(4) == 0 and waiters.position == 5  # never backwards
    assert waiters.advance(25) == 2 and waiters.waiting_count == 1
    assert waiters.advance(30) == 1
    for thread in threads:
        thread.join(5)
    assert results == {10: True, 20: True, 30: True}


def test_the_first_waiter_leads_and_hands_leadership_to_the_lowest_uncovered_one():
    waiters = PositionWaiters()
    far = time.monotonic() + 10
    assert waiters.wait_or_lead(10, far) is None  # nobody leads: the caller does
    assert waiters.try_lead() is False  # one leader at a time
    outcomes: dict[int, list] = {20: [], 30: []}

    def follow(target: int) -> None:
        outcome = waiters.wait_or_lead(target, far)
        outcomes[target].append(outcome)
        if outcome is None:  # handed leadership: move the position, pass it on, wait again
            waiters.advance(target)
            waiters.end_lead()
            outcomes[target].append(waiters.wait_or_lead(target, far))

    threads = [threading.Thread(target=follow, args=(t,)) for t in (20, 30)]
    for thread in threads:
        thread.start()
    wait_until(lambda: waiters.waiting_count == 2, what="two followers")
    assert waiters.advance(10) == 0  # the leader's own target: no follower covered
    waiters.end_lead()  # to the lowest uncovered waiter (20), which covers only itself
    for thread in threads:
        thread.join(5)
    assert outcomes == {20: [None, True], 30: [None, True]}  # 20 led, then handed on to 30
    assert waiters.position == 30 and waiters.waiting_count == 0
    assert waiters.try_lead() is True  # nobody waited after 30: leadership lapsed
    waiters.end_lead()


def test_a_timed_out_follower_leaves_and_release_all_ends_leadership_for_good():
    waiters = PositionWaiters()
    assert waiters.try_lead() is True
    started = time.monotonic()
    assert waiters.wait_or_lead(10, time.monotonic() + 0.05) is False  # the leader is stuck
    assert time.monotonic() - started >= 0.045 and waiters.waiting_count == 0
    waiters.release_all(final=True)  # the leader's sync failed
    waiters.end_lead()
    assert waiters.try_lead() is False
    assert waiters.wait_or_lead(10, time.monotonic() + 10) is False  # at once, no leader


def test_a_final_release_lets_later_waits_return_at_once():
    """After the position's mover failed (the flusher's fail-stop) a put that parks later must
    not sit out its whole timeout: the position will never move again."""
    waiters = PositionWaiters(10)
    waiters.release_all(final=True)
    started = time.monotonic()
    assert waiters.wait(20, 10_000) is False
    assert time.monotonic() - started < 5  # not the 10 s timeout
    assert waiters.wait(10, 10_000) is True  # what is covered stays covered
