"""``Service``, the one background loop: passes driven with a fake clock, and the real thread's
wake-ups, idle waits, failure and stop (waits on events, never sleeps)."""

from __future__ import annotations

import threading

import pytest

from postbox.storage_engine import FakeClock
from postbox.storage_engine.service import Service, ServiceState

WAIT_S = 10.0  # a liveness bound for the thread, not a latency


class Counting(Service):
    """Counts its passes; ``work`` says what the next pass reports as done."""

    name = "counting"

    def __init__(self, clock: FakeClock, idle_ms: int = 60_000) -> None:
        super().__init__(clock)
        self.passes: list[int] = []
        self.work = 0
        self.idle_ms = idle_ms
        self.passed = threading.Event()
        self.passed_twice = threading.Event()

    def run_once(self, now_ms: int) -> int:
        self.passes.append(now_ms)
        self.passed.set()
        if len(self.passes) >= 2:
            self.passed_twice.set()
        done, self.work = self.work, 0
        return done

    def idle_wait_ms(self, now_ms: int) -> int:
        return self.idle_ms


def test_a_pass_is_driven_directly_with_the_fake_clock():
    clock = FakeClock()
    service = Counting(clock)
    service.work = 3
    assert service.run_once(clock.now_ms()) == 3
    clock.advance(250)
    assert service.run_once(clock.now_ms()) == 0
    assert service.passes == [clock.now_ms() - 250, clock.now_ms()]
    assert not service.is_running


def test_the_thread_is_named_runs_a_pass_and_sleeps_until_woken():
    clock = FakeClock()
    service = Counting(clock, idle_ms=60_000)
    assert service.start() is service
    try:
        assert service.passed.wait(WAIT_S)
        assert [t.name for t in threading.enumerate()].count("postbox-counting") == 1
        assert not service._thread.daemon  # storage threads are joined, never abandoned
        service.passed.clear()
        assert not service.passed.wait(0.05)  # idle: the next pass is a minute away
        service.wakeup()
        assert service.passed.wait(WAIT_S)  # woken: it ran at once
    finally:
        service.stop()
    assert not service.is_running
    assert "postbox-counting" not in [t.name for t in threading.enumerate()]


def test_a_pass_that_did_work_is_followed_by_another_at_once():
    clock = FakeClock()
    service = Counting(clock, idle_ms=60_000)
    service.work = 1
    service.start()
    try:
        assert service.passed_twice.wait(WAIT_S)  # no minute-long idle wait after the work
    finally:
        service.stop()


class Failing(Service):
    name = "failing"

    def run_once(self, now_ms: int) -> int:
        raise OSError("disk gone")


def test_a_pass_that_raises_stops_the_loop_and_is_reported():
    service = Failing(FakeClock())
    heard: list[BaseException] = []
    reported = threading.Event()
    service.failure_listeners.append(lambda error: (heard.append(error), reported.set()))
    service.start()
    assert reported.wait(WAIT_S)
    service._thread.join(WAIT_S)
    assert not service.is_running
    assert isinstance(service.failure, OSError) and heard == [service.failure]
    assert service.state == ServiceState("failing", "failed", f"OSError: {service.failure}")
    service.stop()
    assert service.state.state == "failed"  # stopping does not hide why it ended


def test_the_state_says_stopped_before_the_start_and_after_the_stop():
    service = Counting(FakeClock())
    assert service.state == ServiceState("counting", "stopped")
    service.start()
    assert service.passed.wait(WAIT_S)
    assert service.state == ServiceState("counting", "running")
    service.stop()
    assert service.state == ServiceState("counting", "stopped")


class StopsItself(Service):
    name = "stops-itself"
    daemon = True

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def run_once(self, now_ms: int) -> int:
        self.thread = threading.current_thread()
        self.stop()  # from its own thread: no join of itself
        self.stopped.set()
        return 0


def test_stop_from_the_services_own_thread_ends_the_loop():
    service = StopsItself(FakeClock())
    service.start()
    assert service.stopped.wait(WAIT_S)
    thread = service.thread
    assert thread is not None and thread.daemon
    thread.join(WAIT_S)
    assert not thread.is_alive() and service.failure is None


def test_base_run_once_must_be_overridden():
    with pytest.raises(NotImplementedError):
        Service(FakeClock()).run_once(0)
