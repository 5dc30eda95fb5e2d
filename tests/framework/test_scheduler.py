"""``Scheduler``: a consumer's timed chores on one ``Service`` — passes driven with a fake clock,
and the real thread running what is due."""

from __future__ import annotations

import logging
import threading

from postbox.framework.scheduler import IDLE_WAIT_MS, Scheduler
from postbox.storage_engine import FakeClock
from postbox.storage_engine.service import Service


def test_due_actions_run_in_time_order_when_a_pass_reaches_them():
    clock = FakeClock()
    scheduler = Scheduler(clock, "chores")
    ran: list[str] = []
    start_ms = clock.now_ms()
    scheduler.call_later(30, lambda: ran.append("c"))
    scheduler.call_at(start_ms + 10, lambda: ran.append("a"))
    scheduler.call_later(10, lambda: ran.append("b"))  # same time as "a": after it
    assert isinstance(scheduler, Service)
    assert scheduler.run_once(start_ms + 9) == 0
    assert scheduler.next_due_ms() == start_ms + 10
    assert scheduler.idle_wait_ms(start_ms + 9) == 1
    assert scheduler.run_due(start_ms + 10) == 2
    assert ran == ["a", "b"]
    assert scheduler.idle_wait_ms(start_ms + 10) == 20
    assert scheduler.run_once(start_ms + 1_000) == 1
    assert ran == ["a", "b", "c"]
    assert scheduler.next_due_ms() is None
    assert scheduler.idle_wait_ms(start_ms + 1_000) == IDLE_WAIT_MS


def test_call_every_repeats_and_a_failing_chore_does_not_stop_the_others(caplog):
    clock = FakeClock()
    scheduler = Scheduler(clock, "chores")
    beats: list[int] = []

    def broken() -> None:
        raise RuntimeError("chore failed")

    scheduler.call_every(100, lambda: beats.append(clock.now_ms()))
    scheduler.call_every(100, broken)
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            clock.advance(100)
            assert scheduler.run_once(clock.now_ms()) == 2
    assert beats == [clock.now_ms() - 200, clock.now_ms() - 100, clock.now_ms()]
    assert caplog.text.count("[chores] scheduled action failed") == 3


def test_stop_drops_pending_actions():
    clock = FakeClock()
    scheduler = Scheduler(clock, "chores")
    ran: list[int] = []
    scheduler.call_every(10, lambda: ran.append(1))
    scheduler.stop()
    clock.advance(1_000)
    assert scheduler.run_once(clock.now_ms()) == 0
    assert ran == [] and scheduler.next_due_ms() is None


def test_the_thread_runs_due_actions_and_stops_from_inside_an_action():
    scheduler = Scheduler(FakeClock(), "consumer-g")
    ran = threading.Event()
    stopped = threading.Event()
    threads: list[threading.Thread] = []

    def first() -> None:
        threads.append(threading.current_thread())
        ran.set()

    def last() -> None:
        scheduler.stop()  # the consumer may stop from a chore: no join of its own thread
        stopped.set()

    scheduler.call_later(0, first)
    scheduler.start()
    assert ran.wait(10)
    scheduler.call_later(0, last)  # wakes the idle thread at once
    assert stopped.wait(10)
    [thread] = threads
    thread.join(10)
    assert not thread.is_alive() and thread.name == "postbox-consumer-g" and thread.daemon
    assert scheduler.next_due_ms() is None
