"""Cleanup: old confirmed stubs, orphaned log rows and old dedup records go, in bounded batches;
in-flight messages stay."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, insert, select, update
from sqlalchemy.exc import OperationalError

from postbox.framework import ConfigurationError
from postbox.outbox import (
    StubStatus,
    cleanup,
    create_database_engine,
    message_log,
    message_processed,
    message_stub,
)
from postbox.outbox.cleanup import (
    MAX_BATCH_SIZE,
    MAX_WORKERS,
    CleanupPolicy,
    CleanupReport,
    run_cleanup,
)
from postbox.outbox.clock import utc_now
from postbox.outbox.database import dialect_name
from tests.support.lock_waits import sessions, waiting_on_a_lock
from tests.support.polling import wait_until

NOW = datetime(2030, 1, 2, 3, 4, 5, 678901)
DAY = timedelta(days=1)
OLD = NOW - 8 * DAY
"""Past the default seven-day retentions."""
YOUNG = NOW - 6 * DAY
HORIZON = timedelta(hours=30)


# ---- helpers ---------------------------------------------------------------------------------


def add_stubs(engine: Engine, ids: list[str], status: StubStatus, *,
              confirmed_at: datetime | None = None, updated_at: datetime = OLD) -> list[str]:
    with engine.begin() as connection:
        connection.execute(insert(message_stub), [
            {"message_id": message_id, "topic": "orders", "content": b"body",
             "status": status.value, "send_count": 1, "created_at": updated_at,
             "updated_at": updated_at, "confirmed_at": confirmed_at}
            for message_id in ids])
    return ids


def add_logs(engine: Engine, keys: list[tuple[str, str]], created_at: datetime) -> None:
    with engine.begin() as connection:
        connection.execute(insert(message_log), [
            {"consumer_group": group, "message_id": message_id, "topic": "orders",
             "queue_id": 0, "queue_offset": number, "created_at": created_at}
            for number, (group, message_id) in enumerate(keys)])


def add_processed(engine: Engine, keys: list[tuple[str, str]], processed_at: datetime) -> None:
    with engine.begin() as connection:
        connection.execute(insert(message_processed), [
            {"consumer_group": group, "message_id": message_id, "topic": "orders",
             "processed_at": processed_at}
            for group, message_id in keys])


def stub_ids(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        return set(connection.execute(select(message_stub.c.message_id)).scalars())


def log_keys(engine: Engine) -> set[tuple[str, str]]:
    with engine.connect() as connection:
        return {tuple(row) for row in connection.execute(
            select(message_log.c.consumer_group, message_log.c.message_id))}


def processed_keys(engine: Engine) -> set[tuple[str, str]]:
    with engine.connect() as connection:
        return {tuple(row) for row in connection.execute(
            select(message_processed.c.consumer_group, message_processed.c.message_id))}


def ids(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{number:05d}" for number in range(count)]


@dataclass
class Statements:
    """Every statement an engine ran, by kind, with the bind parameters of each DELETE."""

    selects: int = 0
    deletes: list[tuple[str, int]] = field(default_factory=list)
    """(statement, number of bind parameters) per DELETE."""
    batches: list[tuple[str, int]] = field(default_factory=list)
    """The same per one-statement batch (PostgreSQL: ``WITH picked AS (…), gone AS (DELETE
    …) SELECT …``)."""
    others: list[str] = field(default_factory=list)
    """Anything else but a transaction's BEGIN."""

    def batches_of(self, table: str) -> list[int]:
        """The bind parameters of each one-statement batch deleting from ``table``."""
        return [count for statement, count in self.batches
                if f"DELETE FROM {table} " in statement]


def by_address(engine: Engine) -> bool:
    """Whether cleanup's batches are one statement deleting by ``ctid`` (PostgreSQL)."""
    return dialect_name(engine) == "postgresql"


@contextmanager
def recorded(engine: Engine) -> Iterator[Statements]:
    seen = Statements()

    def before(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any,
               executemany: bool) -> None:
        kind = statement.lstrip().split(None, 1)[0].upper()
        if kind == "DELETE":
            assert not executemany
            seen.deletes.append((statement, len(parameters)))
        elif kind == "WITH" and "DELETE FROM " in statement:
            seen.batches.append((statement, len(parameters)))
        elif kind == "SELECT":
            seen.selects += 1
        elif kind != "BEGIN":  # SQLite's BEGIN IMMEDIATE (create_database_engine)
            seen.others.append(statement)

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", before)


# ---- confirmed stubs -------------------------------------------------------------------------


def test_only_confirmed_stubs_past_retention_are_deleted(engine: Engine):
    old_confirmed = add_stubs(engine, ids("old-confirmed", 3), StubStatus.CONFIRMED,
                              confirmed_at=OLD)
    young_confirmed = add_stubs(engine, ids("young-confirmed", 2), StubStatus.CONFIRMED,
                                confirmed_at=YOUNG)
    at_cutoff = add_stubs(engine, ["at-cutoff"], StubStatus.CONFIRMED,
                          confirmed_at=NOW - 7 * DAY)
    unconfirmed = add_stubs(engine, ids("old-unconfirmed", 2), StubStatus.UNCONFIRMED,
                            updated_at=OLD - 100 * DAY)
    void = add_stubs(engine, ids("old-void", 2), StubStatus.VOID, updated_at=OLD - 100 * DAY)

    report = run_cleanup(engine, CleanupPolicy(), now=NOW)

    assert report == CleanupReport(stubs=3, batches=1, largest_batch=3)
    assert stub_ids(engine) == {*young_confirmed, *at_cutoff, *unconfirmed, *void}
    assert not stub_ids(engine) & set(old_confirmed)
    assert run_cleanup(engine, CleanupPolicy(), now=NOW) == CleanupReport()


def test_now_defaults_to_the_current_utc_time(engine: Engine):
    current = utc_now()
    add_stubs(engine, ["stale"], StubStatus.CONFIRMED, confirmed_at=current - 8 * DAY)
    add_stubs(engine, ["fresh"], StubStatus.CONFIRMED, confirmed_at=current - 6 * DAY)

    assert run_cleanup(engine, CleanupPolicy()).stubs == 1
    assert stub_ids(engine) == {"fresh"}


def test_batches_are_bounded_by_batch_size(engine: Engine):
    count, batch_size = 1234, 100
    add_stubs(engine, ids("confirmed", count), StubStatus.CONFIRMED, confirmed_at=OLD)
    add_stubs(engine, ["in-flight"], StubStatus.UNCONFIRMED)

    with recorded(engine) as statements:
        report = run_cleanup(engine, CleanupPolicy(batch_size=batch_size), now=NOW)

    assert report.stubs == count
    assert report.batches == math.ceil(count / batch_size) == 13
    assert report.largest_batch == batch_size
    assert report.complete
    assert stub_ids(engine) == {"in-flight"}
    assert not statements.others
    if by_address(engine):
        # one statement per batch, the last one picking fewer than a batch; the same
        # parameters in each (the condition's and the limit), none per row
        assert not statements.deletes
        assert len(statements.batches_of("message_stub")) == report.batches
        assert len(set(statements.batches_of("message_stub")[1:])) == 1
        return
    # every DELETE names its rows by key: the status and cutoff parameters plus one per key
    assert len(statements.deletes) == report.batches
    keys_per_delete = [parameters - 2 for _, parameters in statements.deletes]
    assert sum(keys_per_delete) == count
    assert max(keys_per_delete) <= batch_size
    for statement, _ in statements.deletes:
        assert "WHERE" in statement and " IN " in statement, statement


def test_max_batches_stops_a_run_early_and_the_next_run_continues(engine: Engine):
    add_stubs(engine, ids("confirmed", 250), StubStatus.CONFIRMED, confirmed_at=OLD)
    policy = CleanupPolicy(batch_size=50, max_batches=3)

    first = run_cleanup(engine, policy, now=NOW)
    assert first == CleanupReport(stubs=150, batches=3, largest_batch=50, complete=False)
    assert len(stub_ids(engine)) == 100

    second = run_cleanup(engine, policy, now=NOW)
    assert second == CleanupReport(stubs=100, batches=2, largest_batch=50, complete=True)
    assert stub_ids(engine) == set()


def test_max_batches_that_happen_to_finish_the_table_report_complete(engine: Engine):
    add_stubs(engine, ids("confirmed", 150), StubStatus.CONFIRMED, confirmed_at=OLD)

    report = run_cleanup(engine, CleanupPolicy(batch_size=50, max_batches=3), now=NOW)

    assert report == CleanupReport(stubs=150, batches=3, largest_batch=50, complete=True)


def test_oldest_rows_go_first(engine: Engine):
    add_stubs(engine, ids("older", 5), StubStatus.CONFIRMED, confirmed_at=OLD - DAY)
    add_stubs(engine, ids("old", 5), StubStatus.CONFIRMED, confirmed_at=OLD)

    report = run_cleanup(engine, CleanupPolicy(batch_size=5, max_batches=1), now=NOW)

    assert report.stubs == 5 and not report.complete
    assert stub_ids(engine) == set(ids("old", 5))


def test_a_row_changed_while_its_batch_runs_is_kept(engine: Engine):
    """A stub re-armed after the batch picked it stays. On PostgreSQL and MariaDB another
    transaction re-arms it and holds its row lock until the batch's DELETE waits on it; SQLite
    has one writer at a time, so there the change is made in the batch's own transaction,
    between its pick and its DELETE."""
    add_stubs(engine, ["rearmed", "gone"], StubStatus.CONFIRMED, confirmed_at=OLD)
    rearm = update(message_stub).where(message_stub.c.message_id == "rearmed").values(
        status=StubStatus.UNCONFIRMED.value, confirmed_at=None)

    if dialect_name(engine) == "sqlite":
        changed = False

        @event.listens_for(engine, "before_execute")
        def rearm_before_delete(connection: Any, statement: Any, *_: Any) -> None:
            nonlocal changed
            if not changed and getattr(statement, "is_delete", False):
                changed = True
                connection.execute(rearm)

        report = run_cleanup(engine, CleanupPolicy(), now=NOW)
        assert changed
    else:
        with engine.connect() as other:
            other.execute(rearm)  # not committed: the row stays locked
            with ThreadPoolExecutor(1) as pool:
                running = pool.submit(run_cleanup, engine, CleanupPolicy(), now=NOW)
                wait_until(lambda: waiting_on_a_lock(engine) or running.done(),
                           what="the batch's DELETE waiting on the re-armed row",
                           interval_s=0.25, detail=lambda: sessions(engine))
                assert not running.done(), running.result()
                other.commit()
                report = running.result(timeout=30)

    assert report == CleanupReport(stubs=1, batches=1, largest_batch=1)
    assert stub_ids(engine) == {"rearmed"}


# ---- void stubs ------------------------------------------------------------------------------


def test_void_stubs_are_kept_by_default_however_old(engine: Engine):
    add_stubs(engine, ["ancient-void"], StubStatus.VOID, updated_at=NOW - 3650 * DAY)

    assert run_cleanup(engine, CleanupPolicy(), now=NOW) == CleanupReport()
    assert stub_ids(engine) == {"ancient-void"}


def test_void_retention_deletes_void_stubs_left_alone_that_long(engine: Engine):
    add_stubs(engine, ids("stale-void", 3), StubStatus.VOID, updated_at=NOW - 31 * DAY)
    fresh = add_stubs(engine, ["fresh-void"], StubStatus.VOID, updated_at=NOW - 29 * DAY)
    unconfirmed = add_stubs(engine, ["old-unconfirmed"], StubStatus.UNCONFIRMED,
                            updated_at=NOW - 31 * DAY)
    add_stubs(engine, ["old-confirmed"], StubStatus.CONFIRMED, confirmed_at=OLD)

    report = run_cleanup(engine, CleanupPolicy(void_retention=30 * DAY), now=NOW)

    assert report == CleanupReport(stubs=1, void_stubs=3, batches=2, largest_batch=3)
    assert stub_ids(engine) == {*fresh, *unconfirmed}


# ---- message_log -----------------------------------------------------------------------------


def test_orphaned_log_rows_past_retention_are_deleted_in_flight_ones_kept(engine: Engine):
    add_stubs(engine, ["m-confirmed"], StubStatus.CONFIRMED, confirmed_at=YOUNG)
    add_stubs(engine, ["m-void"], StubStatus.VOID)
    add_stubs(engine, ["m-unconfirmed"], StubStatus.UNCONFIRMED, updated_at=OLD - 100 * DAY)
    orphaned = [("billing", "m-missing"), ("billing", "m-confirmed"), ("shipping", "m-confirmed"),
                ("billing", "m-void")]
    in_flight = [("billing", "m-unconfirmed"), ("shipping", "m-unconfirmed")]
    add_logs(engine, orphaned + in_flight, created_at=OLD - 100 * DAY)
    young = [("audit", "m-missing"), ("audit", "m-confirmed"), ("audit", "m-void")]
    add_logs(engine, young, created_at=YOUNG)

    report = run_cleanup(engine, CleanupPolicy(), now=NOW)

    assert report == CleanupReport(logs=len(orphaned), batches=1, largest_batch=len(orphaned))
    assert log_keys(engine) == {*in_flight, *young}
    assert stub_ids(engine) == {"m-confirmed", "m-void", "m-unconfirmed"}


def test_log_rows_of_stubs_cleaned_in_the_same_run_are_orphaned(engine: Engine):
    add_stubs(engine, ids("confirmed", 30), StubStatus.CONFIRMED, confirmed_at=OLD)
    add_logs(engine, [(group, message_id) for group in ("billing", "shipping")
                      for message_id in ids("confirmed", 30)], created_at=OLD)

    with recorded(engine) as statements:
        report = run_cleanup(engine, CleanupPolicy(batch_size=7), now=NOW)

    assert (report.stubs, report.logs) == (30, 60)
    assert report.batches == math.ceil(30 / 7) + math.ceil(60 / 7)
    assert report.largest_batch == 7
    assert stub_ids(engine) == set() and log_keys(engine) == set()
    if by_address(engine):  # a statement per batch, the last of each table picking fewer
        assert len(statements.batches_of("message_stub")) == math.ceil(30 / 7)
        assert len(statements.batches_of("message_log")) == math.ceil(60 / 7)
        return
    # stub DELETEs: status, cutoff + 1 per key; log DELETEs: cutoff, status + 2 per key
    stub_keys = [n - 2 for statement, n in statements.deletes if "message_stub" in
                 statement.split("WHERE", 1)[0]]
    log_keys_per_delete = [(n - 2) / 2 for statement, n in statements.deletes
                           if "message_log" in statement.split("WHERE", 1)[0]]
    assert sum(stub_keys) == 30 and sum(log_keys_per_delete) == 60
    assert max(stub_keys + log_keys_per_delete) <= 7


# ---- message_processed -----------------------------------------------------------------------


def test_processed_rows_past_retention_are_deleted_young_kept(engine: Engine):
    old = [("billing", message_id) for message_id in ids("m", 12)] + [("shipping", "m-00000")]
    young = [("audit", "m-00000"), ("audit", "m-00001")]
    add_processed(engine, old, processed_at=OLD)
    add_processed(engine, young, processed_at=YOUNG)

    report = run_cleanup(engine, CleanupPolicy(batch_size=5), now=NOW)

    assert report == CleanupReport(processed=13, batches=3, largest_batch=5)
    assert processed_keys(engine) == set(young)


def test_each_table_has_its_own_retention(engine: Engine):
    add_stubs(engine, ["stub"], StubStatus.CONFIRMED, confirmed_at=NOW - 3 * DAY)
    add_logs(engine, [("billing", "log")], created_at=NOW - 3 * DAY)
    add_processed(engine, [("billing", "processed")], processed_at=NOW - 3 * DAY)

    def policy(**retentions: timedelta) -> CleanupPolicy:
        return CleanupPolicy(**{"confirmed_retention": 5 * DAY, "log_retention": 5 * DAY,
                                "processed_retention": 5 * DAY, **retentions})

    assert run_cleanup(engine, policy(), now=NOW) == CleanupReport()
    assert run_cleanup(engine, policy(processed_retention=2 * DAY), now=NOW).processed == 1
    assert run_cleanup(engine, policy(log_retention=2 * DAY), now=NOW).logs == 1
    assert run_cleanup(engine, policy(confirmed_retention=2 * DAY), now=NOW).stubs == 1


def test_composite_keys_without_row_values_use_or_of_ands(engine: Engine,
                                                          monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(cleanup, "_supports_row_values", lambda _engine: False)
    monkeypatch.setattr(cleanup, "_deletes_by_address", lambda _engine: False)
    old = [(group, message_id) for group in ("billing", "shipping")
           for message_id in ids("m", 6)]
    add_processed(engine, old, processed_at=OLD)
    add_processed(engine, [("billing", "young")], processed_at=YOUNG)
    add_logs(engine, old, created_at=OLD)

    with recorded(engine) as statements:
        report = run_cleanup(engine, CleanupPolicy(batch_size=5), now=NOW)

    assert (report.logs, report.processed, report.batches) == (12, 12, 6)
    assert log_keys(engine) == set()
    assert processed_keys(engine) == {("billing", "young")}
    assert statements.deletes
    assert all(" OR " in statement for statement, _ in statements.deletes)


# ---- runs ------------------------------------------------------------------------------------


def test_empty_database_run_is_a_no_op(engine: Engine, caplog: pytest.LogCaptureFixture):
    policy = CleanupPolicy(void_retention=30 * DAY)
    with caplog.at_level(logging.INFO, logger="postbox.outbox.cleanup"), \
            recorded(engine) as statements:
        report = run_cleanup(engine, policy, now=NOW)

    assert report == CleanupReport()
    assert report.deleted == 0
    assert statements.deletes == [] and statements.others == []
    if by_address(engine):  # one batch statement per kind of row, finding nothing
        assert len(statements.batches) == 5 and statements.selects == 0
    else:
        assert statements.selects == 5  # one key lookup per kind of row
    [record] = [r for r in caplog.records if r.name == "postbox.outbox.cleanup"]
    assert record.levelno == logging.INFO
    assert "[cleanup]" in record.getMessage() and "batches=0" in record.getMessage()


def test_one_info_line_per_run_with_the_counts(engine: Engine, caplog: pytest.LogCaptureFixture):
    add_stubs(engine, ids("confirmed", 3), StubStatus.CONFIRMED, confirmed_at=OLD)
    add_processed(engine, [("billing", "m")], processed_at=OLD)

    with caplog.at_level(logging.INFO, logger="postbox.outbox.cleanup"):
        report = run_cleanup(engine, CleanupPolicy(batch_size=2, max_batches=1), now=NOW)

    assert report == CleanupReport(stubs=2, processed=1, batches=2, largest_batch=2,
                                   complete=False)
    [record] = [r for r in caplog.records if r.name == "postbox.outbox.cleanup"]
    message = record.getMessage()
    for part in ("stubs=2", "void_stubs=0", "logs=0", "processed=1", "batches=2",
                 "largest_batch=2", "complete=False", "max_batches=1"):
        assert part in message, (part, message)


def test_unreachable_database_raises_operational_error():
    """Nothing is caught here: the periodic task layer retries at its next run."""
    unreachable = create_database_engine("postgresql+psycopg://postgres@127.0.0.1:1/x",
                                         connect_args={"connect_timeout": 2})
    try:
        with pytest.raises(OperationalError):
            run_cleanup(unreachable, CleanupPolicy(), now=NOW)
    finally:
        unreachable.dispose()


# ---- policy ----------------------------------------------------------------------------------


def test_default_policy_validates_against_a_shorter_horizon():
    CleanupPolicy().validate(HORIZON)
    CleanupPolicy().validate(timedelta(0))
    CleanupPolicy(void_retention=2 * HORIZON).validate(HORIZON)
    CleanupPolicy(confirmed_retention=HORIZON + timedelta(seconds=1), log_retention=2 * HORIZON,
                  processed_retention=2 * HORIZON).validate(HORIZON)


@pytest.mark.parametrize("setting", ["confirmed_retention", "log_retention",
                                     "processed_retention", "void_retention"])
@pytest.mark.parametrize("retention", [HORIZON, HORIZON - timedelta(seconds=1)])
def test_retention_not_beyond_the_horizon_is_refused(setting: str, retention: timedelta):
    policy = CleanupPolicy(**{setting: retention})

    with pytest.raises(ConfigurationError, match=rf"CleanupPolicy\.{setting} .*redelivery "
                                                 rf"horizon"):
        policy.validate(HORIZON)


def test_negative_horizon_is_refused():
    with pytest.raises(ConfigurationError, match="redelivery horizon"):
        CleanupPolicy().validate(-DAY)


@pytest.mark.parametrize(("settings", "named"), [
    ({"batch_size": 0}, "batch_size"),
    ({"batch_size": -5}, "batch_size"),
    ({"batch_size": MAX_BATCH_SIZE + 1}, "batch_size"),
    ({"batch_size": 2.5}, "batch_size"),
    ({"max_batches": 0}, "max_batches"),
    ({"confirmed_retention": 7}, "confirmed_retention"),
    ({"void_retention": "30d"}, "void_retention"),
])
def test_invalid_limits_are_refused_on_creation(settings: dict[str, Any], named: str):
    with pytest.raises(ConfigurationError, match=rf"CleanupPolicy\.{named}"):
        CleanupPolicy(**settings)


def test_policy_is_frozen():
    policy = CleanupPolicy()
    with pytest.raises(AttributeError):
        policy.batch_size = 0  # type: ignore[misc]


# ---- workers ---------------------------------------------------------------------------------


def test_workers_delete_what_one_connection_deletes_each_its_own_slice(engine: Engine):
    for day in range(6):  # six days of confirmed stubs, the retention's edge inside the last
        add_stubs(engine, ids(f"day{day}-", 40), StubStatus.CONFIRMED,
                  confirmed_at=OLD - DAY * day)
    add_stubs(engine, ids("young", 7), StubStatus.CONFIRMED, confirmed_at=NOW)
    add_stubs(engine, ["in-flight"], StubStatus.UNCONFIRMED)
    add_processed(engine, [("billing", f"p{n}") for n in range(30)], processed_at=OLD)
    threads: set[str] = set()

    def seen(*_: Any) -> None:
        threads.add(threading.current_thread().name)

    event.listen(engine, "before_cursor_execute", seen)
    try:
        report = run_cleanup(engine, CleanupPolicy(batch_size=15, workers=3), now=NOW)
    finally:
        event.remove(engine, "before_cursor_execute", seen)

    assert report.stubs == 240 and report.processed == 30 and report.complete
    assert report.largest_batch == 15
    assert report.batches >= math.ceil(240 / 15) + math.ceil(30 / 15)
    assert stub_ids(engine) == set(ids("young", 7)) | {"in-flight"}
    assert len({name for name in threads if name.startswith("cleanup")}) == 3


def test_workers_share_max_batches_and_the_next_run_carries_on(engine: Engine):
    for day in range(4):
        add_stubs(engine, ids(f"day{day}-", 50), StubStatus.CONFIRMED,
                  confirmed_at=OLD - DAY * day)
    policy = CleanupPolicy(batch_size=10, max_batches=4, workers=2)

    first = run_cleanup(engine, policy, now=NOW)
    assert first.stubs == 40 and first.batches == 4 and not first.complete
    while not run_cleanup(engine, policy, now=NOW).complete:
        pass
    assert stub_ids(engine) == set()


@pytest.mark.parametrize("workers", [0, -1, True, 2.0, MAX_WORKERS + 1])
def test_invalid_workers_are_refused(workers: Any):
    with pytest.raises(ConfigurationError, match=r"CleanupPolicy\.workers"):
        CleanupPolicy(workers=workers)
