"""``TaskLease``: one run at a time per periodic task, on a real database (SQLite by default,
PostgreSQL/MariaDB with ``POSTBOX_TEST_DATABASE_URL``); time is a clock the test moves."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, select

from postbox.outbox.clock import utc_now
from postbox.outbox.tables import outbox_task
from postbox.outbox.task_lease import TaskLease, TaskRun

LEASE = timedelta(minutes=1)
THREADS = 8


class Clock:
    """The database time the leases read (naive UTC), moved by the test."""

    def __init__(self) -> None:
        self.now = utc_now()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def leases(engine: Engine, clock: Clock) -> TaskLease:
    return TaskLease(engine, owner="host-a:1", now=clock)


def task_row(engine: Engine, name: str) -> Any:
    with engine.connect() as connection:
        return connection.execute(select(outbox_task).where(
            outbox_task.c.name == name)).mappings().one()


def test_first_begin_takes_the_lease_and_finish_releases_it(
        leases: TaskLease, engine: Engine, clock: Clock):
    run = leases.begin("cleanup", lease=LEASE, scheduler="beat-a")
    assert isinstance(run, TaskRun)
    assert (run.name, run.started_at, run.state) == ("cleanup", clock.now, {})
    assert run.token.startswith("host-a:1:")
    row = task_row(engine, "cleanup")
    assert (row["runs"], row["skipped"]) == (1, 0)
    assert row["lease_owner"] == run.token and row["lease_until"] == clock.now + LEASE
    assert row["last_started_at"] == clock.now and row["last_scheduler"] == "beat-a"
    assert row["last_finished_at"] is None and row["state"] is None

    clock.advance(seconds=5)
    assert leases.finish(run) is True
    row = task_row(engine, "cleanup")
    assert row["lease_owner"] is None and row["lease_until"] is None
    assert row["last_finished_at"] == clock.now
    assert row["state"] is None  # no state given: none stored


def test_a_second_begin_while_the_lease_is_held_is_skipped(leases: TaskLease, engine: Engine,
                                                          clock: Clock):
    run = leases.begin("relay_pending", lease=LEASE)
    other = TaskLease(engine, owner="host-b:2", now=clock)
    clock.advance(seconds=59)
    assert other.begin("relay_pending", lease=LEASE) is None
    assert leases.begin("relay_pending", lease=LEASE) is None
    row = task_row(engine, "relay_pending")
    assert (row["runs"], row["skipped"]) == (1, 2)
    assert row["lease_owner"] == run.token


def test_min_interval_counts_from_the_last_start(leases: TaskLease, engine: Engine,
                                                 clock: Clock):
    interval = timedelta(seconds=30)
    first = leases.begin("resend_due", lease=LEASE, min_interval=interval)
    clock.advance(seconds=1)
    assert leases.finish(first)

    clock.advance(seconds=28, microseconds=999_999)  # 29.999999 s after the start
    assert leases.begin("resend_due", lease=LEASE, min_interval=interval) is None
    clock.advance(microseconds=1)
    second = leases.begin("resend_due", lease=LEASE, min_interval=interval)
    assert second is not None and second.started_at == clock.now
    row = task_row(engine, "resend_due")
    assert (row["runs"], row["skipped"]) == (2, 1)
    assert row["last_started_at"] == clock.now


def test_an_expired_lease_is_taken_over_and_the_late_finish_changes_nothing(
        leases: TaskLease, engine: Engine, clock: Clock):
    stale = leases.begin("resend_due", lease=timedelta(seconds=10))
    successor_leases = TaskLease(engine, owner="host-b:2", now=clock)
    clock.advance(seconds=10)  # lease_until is not past yet
    assert successor_leases.begin("resend_due", lease=LEASE) is None

    clock.advance(microseconds=1)
    successor = successor_leases.begin("resend_due", lease=LEASE)
    assert successor is not None and successor.token != stale.token
    assert leases.finish(stale, {"cursor": 99}) is False
    row = task_row(engine, "resend_due")
    assert row["lease_owner"] == successor.token
    assert row["lease_until"] == clock.now + LEASE
    assert row["state"] is None and row["last_finished_at"] is None

    assert successor_leases.finish(successor, {"cursor": 7}) is True
    assert task_row(engine, "resend_due")["state"] == '{"cursor": 7}'
    assert leases.begin("resend_due", lease=LEASE).state == {"cursor": 7}


def test_state_round_trips_as_json_through_hold(leases: TaskLease, engine: Engine,
                                                clock: Clock):
    with leases.hold("resend_due", lease=LEASE) as run:
        assert run is not None and run.state == {}
        run.state["dead_letter_cursors"] = {"billing": 3, "audit": 0}
        run.state["note"] = "naïve ✓"
    row = task_row(engine, "resend_due")
    assert row["lease_owner"] is None and row["last_finished_at"] == clock.now

    with leases.hold("resend_due", lease=LEASE) as run:
        assert run.state == {"dead_letter_cursors": {"audit": 0, "billing": 3},
                             "note": "naïve ✓"}
        run.state["dead_letter_cursors"]["billing"] = 4
        with leases.hold("resend_due", lease=LEASE) as nested:
            assert nested is None  # the outer run holds it
    assert task_row(engine, "resend_due")["skipped"] == 1

    with pytest.raises(RuntimeError, match="failed run"), \
            leases.hold("resend_due", lease=LEASE) as run:
        run.state["dead_letter_cursors"]["billing"] = 1_000
        raise RuntimeError("failed run")
    row = task_row(engine, "resend_due")
    assert row["lease_owner"] is None  # released, but the failed run's state was not kept
    with leases.hold("resend_due", lease=LEASE) as run:
        assert run.state["dead_letter_cursors"] == {"audit": 0, "billing": 4}
    assert task_row(engine, "resend_due")["runs"] == 4


def test_a_run_skipped_for_another_scheduler_warns_naming_both(
        leases: TaskLease, clock: Clock, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.WARNING, logger="postbox.outbox.task_lease")
    interval = timedelta(seconds=24)
    run = leases.begin("relay_pending", lease=LEASE, min_interval=interval,
                       scheduler="beat@host-a")
    assert leases.finish(run)
    clock.advance(seconds=3)
    assert leases.begin("relay_pending", lease=LEASE, min_interval=interval,
                        scheduler="beat@host-a") is None
    assert caplog.records == []  # its own schedule firing early: no warning

    assert leases.begin("relay_pending", lease=LEASE, min_interval=interval,
                        scheduler="beat@host-b") is None
    [warning] = caplog.records
    assert warning.levelno == logging.WARNING
    message = warning.getMessage()
    assert "task relay_pending was fired by scheduler beat@host-b while beat@host-a" in message
    assert "two schedulers" in message and str(clock.now - timedelta(seconds=3)) in message


def concurrent_begins(engines: list[Engine], now: Callable[[], datetime]) -> list[Any]:
    """``begin`` of one task from one thread per engine, all at once; what each got."""
    start = threading.Barrier(len(engines))
    results: list[Any] = [None] * len(engines)

    def begin(index: int) -> None:
        leases = TaskLease(engines[index], owner=f"worker-{index}", now=now)
        try:
            start.wait()
            results[index] = leases.begin("cleanup", lease=LEASE)
        except BaseException as error:  # reported by the caller
            results[index] = error

    threads = [threading.Thread(target=begin, args=(index,)) for index in range(len(engines))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    return results


@pytest.mark.parametrize("row_exists", [False, True], ids=["new-task", "known-task"])
def test_concurrent_begins_give_exactly_one_run(
        engine: Engine, make_engine: Callable[[], Engine], clock: Clock, row_exists: bool):
    """Eight workers (each its own engine, like processes) begin one task at the same time —
    also while its row does not exist yet, so they race to insert it."""
    if row_exists:
        leases = TaskLease(engine, owner="earlier", now=clock)
        assert leases.finish(leases.begin("cleanup", lease=LEASE))
        clock.advance(seconds=1)
    results = concurrent_begins([make_engine() for _ in range(THREADS)], clock)

    errors = [result for result in results if isinstance(result, BaseException)]
    assert errors == []
    runs = [result for result in results if result is not None]
    assert len(runs) == 1
    row = task_row(engine, "cleanup")
    assert row["lease_owner"] == runs[0].token
    assert (row["runs"], row["skipped"]) == (1 + row_exists, THREADS - 1)
