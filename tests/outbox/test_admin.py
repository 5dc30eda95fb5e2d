"""``outbox.admin``: listing, counting and repairing stubs on a real database.

Stubs are inserted directly into ``message_stub`` (the states an operator meets: unpublished,
published, void after failed attempts, confirmed), then read or changed through the admin
functions. Every refused change is checked to have changed nothing, and a re-armed or
rescheduled stub is checked to be one the relay's own claim condition picks up.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, event, insert, select

from postbox.framework import Producer
from postbox.outbox import (
    Relay,
    RelayOptions,
    ResendRules,
    StubStatus,
    admin,
    claim_stubs,
    message_stub,
)
from postbox.outbox.admin import (
    AdminError,
    get_stub,
    list_stubs,
    rearm,
    schedule_resend,
    stub_stats,
    void,
)
from postbox.outbox.claims import unpublished_due
from postbox.outbox.clock import utc_now
from postbox.outbox.tables import message_log, message_processed, outbox_task
from postbox.storage_engine import Broker
from tests.outbox.conftest import stored_records, stub_row, stub_rows

T0 = datetime(2025, 3, 4, 5, 6, 7, 123456)
NOW = T0 + timedelta(hours=1)
UNCONFIRMED, CONFIRMED, VOID = (status.value for status in StubStatus)


def add_stub(engine: Engine, message_id: str, *, status: str = UNCONFIRMED,
             created_at: datetime = T0, topic: str = "orders", **columns: Any) -> None:
    """One stub row as the relay or a consumer would have left it."""
    values = {"message_id": message_id, "topic": topic, "content": b"body", "status": status,
              "created_at": created_at, "updated_at": created_at, "next_resend_at": created_at,
              **columns}
    with engine.begin() as connection:
        connection.execute(insert(message_stub).values(**values))


def add_published(engine: Engine, message_id: str, **columns: Any) -> None:
    """A stub the relay stored in queue 1 (offset 7), with its resend check due at T0 + 1 min."""
    values = {"queue_id": 1, "queue_offset": 7, "log_position": 4096,
              "offset_msg_id": "0A0000010000000000001000", "published_at": T0,
              "next_resend_at": T0 + timedelta(minutes=1), "send_count": 1, **columns}
    add_stub(engine, message_id, **values)


def add_void(engine: Engine, message_id: str, **columns: Any) -> None:
    """A stub the relay gave up on after five failed attempts."""
    values = {"send_count": 5, "last_error": "StoreClosedError: store is closed", **columns}
    add_stub(engine, message_id, status=VOID, **values)


def add_many(engine: Engine, ids: list[str], **columns: Any) -> None:
    rows = [{"message_id": message_id, "topic": "orders", "content": b"x", "created_at": T0,
             "updated_at": T0, **columns} for message_id in ids]
    with engine.begin() as connection:
        connection.execute(insert(message_stub), rows)


def snapshot(engine: Engine) -> list[dict[str, Any]]:
    return [dict(row) for row in stub_rows(engine)]


def relay_would_claim(engine: Engine, now: datetime, max_send_count: int = 5) -> list[str]:
    """The ids the relay's poll would claim at ``now`` (claims them, under a short lease)."""
    claimed = claim_stubs(engine, unpublished_due(now, max_send_count), owner="test-relay",
                          now=now, lease=timedelta(seconds=30), limit=100)
    return sorted(item.message_id for item in claimed)


# ---- list_stubs / get_stub ----------------------------------------------------------------------

def test_list_is_newest_first_with_filters(engine: Engine) -> None:
    add_stub(engine, "a", created_at=T0, topic="orders")
    add_void(engine, "b", created_at=T0 + timedelta(seconds=1), topic="audit")
    add_stub(engine, "c", status=CONFIRMED, created_at=T0 + timedelta(seconds=2))
    add_published(engine, "d", created_at=T0 + timedelta(seconds=3))

    assert [row.message_id for row in list_stubs(engine)] == ["d", "c", "b", "a"]
    assert [row.message_id for row in list_stubs(engine, status=StubStatus.VOID)] == ["b"]
    assert [row.message_id for row in list_stubs(engine, topic="orders")] == ["d", "c", "a"]
    assert [row.message_id for row in list_stubs(
        engine, status=StubStatus.UNCONFIRMED, topic="orders")] == ["d", "a"]
    assert list_stubs(engine, topic="nowhere") == []


def test_list_pages_with_limit_and_before(engine: Engine) -> None:
    for number in range(7):
        add_stub(engine, f"m{number}", created_at=T0 + timedelta(seconds=number))

    first = list_stubs(engine, limit=3)
    assert [row.message_id for row in first] == ["m6", "m5", "m4"]
    second = list_stubs(engine, limit=3, before=first[-1].created_at)
    assert [row.message_id for row in second] == ["m3", "m2", "m1"]
    third = list_stubs(engine, limit=3, before=second[-1].created_at)
    assert [row.message_id for row in third] == ["m0"]


@pytest.mark.parametrize("limit", [0, -1, admin.LIST_LIMIT_MAX + 1])
def test_list_limit_is_bounded(engine: Engine, limit: int) -> None:
    with pytest.raises(AdminError, match="limit"):
        list_stubs(engine, limit=limit)


def test_get_stub_has_every_column_but_the_content(engine: Engine) -> None:
    add_published(engine, "p", tags="created", keys="order-1", delay_level=3,
                  lease_owner="relay:1", lease_until=T0 + timedelta(seconds=30),
                  overtaken_at=T0 + timedelta(seconds=5), last_error="old",
                  expected_groups="billing shipping")

    row = get_stub(engine, "p")

    assert row is not None
    assert (row.message_id, row.topic, row.tags, row.keys) == ("p", "orders", "created",
                                                               "order-1")
    assert row.status is StubStatus.UNCONFIRMED
    assert (row.send_count, row.queue_id, row.queue_offset, row.delay_level) == (1, 1, 7, 3)
    assert (row.created_at, row.published_at) == (T0, T0)
    assert row.next_resend_at == T0 + timedelta(minutes=1)
    assert (row.confirmed_at, row.last_error) == (None, "old")
    assert (row.log_position, row.offset_msg_id) == (4096, "0A0000010000000000001000")
    assert (row.lease_owner, row.lease_until) == ("relay:1", T0 + timedelta(seconds=30))
    assert row.overtaken_at == T0 + timedelta(seconds=5)
    assert row.expected_groups == "billing shipping"
    assert not hasattr(row, "content") and not hasattr(row, "properties")
    assert get_stub(engine, "missing") is None


# ---- stub_stats -------------------------------------------------------------------------------

def test_stats_of_an_empty_outbox(engine: Engine) -> None:
    stats = stub_stats(engine, now=NOW)
    assert stats.by_status == {UNCONFIRMED: 0, CONFIRMED: 0, VOID: 0}
    assert stats.by_topic == {}
    assert (stats.due_for_resend, stats.unpublished, stats.oldest_unconfirmed_at) == (0, 0, None)
    assert (stats.max_send_count_seen, stats.in_flight_logs, stats.processed) == (0, 0, 0)
    assert stats.tasks == []


def test_stats_counts_every_kind_of_stub(engine: Engine) -> None:
    add_stub(engine, "old-confirmed", status=CONFIRMED, created_at=T0 - timedelta(days=1),
             send_count=1, confirmed_at=T0)
    add_stub(engine, "unpublished", created_at=T0 + timedelta(seconds=1))
    add_published(engine, "due", created_at=T0 + timedelta(seconds=2))
    add_published(engine, "not-due", created_at=T0 + timedelta(seconds=3),
                  next_resend_at=NOW + timedelta(minutes=5))
    add_void(engine, "void", topic="audit", created_at=T0 - timedelta(hours=2), send_count=7)
    with engine.begin() as connection:
        connection.execute(insert(message_log).values(
            consumer_group="billing", message_id="due", topic="orders", queue_id=1,
            queue_offset=7, created_at=T0))
        connection.execute(insert(message_processed), [
            {"consumer_group": group, "message_id": "old-confirmed", "topic": "orders",
             "processed_at": T0} for group in ("billing", "audit")])
        connection.execute(insert(outbox_task).values(
            name="resend_due", runs=4, skipped=1, last_started_at=T0, last_finished_at=NOW,
            lease_owner="worker-1", lease_until=NOW + timedelta(seconds=30),
            last_scheduler="beat@host", state='{"cursor": 3}', updated_at=NOW))
        connection.execute(insert(outbox_task).values(name="cleanup", updated_at=NOW))

    stats = stub_stats(engine, now=NOW)

    assert stats.by_status == {UNCONFIRMED: 3, CONFIRMED: 1, VOID: 1}
    assert stats.by_topic == {"audit": {UNCONFIRMED: 0, CONFIRMED: 0, VOID: 1},
                              "orders": {UNCONFIRMED: 3, CONFIRMED: 1, VOID: 0}}
    assert stats.due_for_resend == 1  # published and due; not the unpublished or future one
    assert stats.unpublished == 1
    assert stats.oldest_unconfirmed_at == T0 + timedelta(seconds=1)  # void/confirmed ignored
    assert stats.max_send_count_seen == 7
    assert (stats.in_flight_logs, stats.processed) == (1, 2)
    assert [task.name for task in stats.tasks] == ["cleanup", "resend_due"]
    cleanup, resend = stats.tasks
    assert (cleanup.runs, cleanup.skipped, cleanup.last_started_at) == (0, 0, None)
    assert (resend.runs, resend.skipped) == (4, 1)
    assert (resend.last_started_at, resend.last_finished_at) == (T0, NOW)
    assert (resend.lease_owner, resend.lease_until) == ("worker-1", NOW + timedelta(seconds=30))
    assert resend.last_scheduler == "beat@host"


def test_stats_uses_aggregate_queries_only(engine: Engine) -> None:
    add_many(engine, [f"m{number:04d}" for number in range(300)])
    statements: list[str] = []

    def record(_connection, _cursor, statement, *_args) -> None:
        statements.append(statement.lower())

    event.listen(engine, "before_cursor_execute", record)
    try:
        stats = stub_stats(engine, now=NOW)
    finally:
        event.remove(engine, "before_cursor_execute", record)

    assert stats.by_status[UNCONFIRMED] == 300
    stub_queries = [statement for statement in statements if "message_stub" in statement]
    assert len(stub_queries) == 2
    aggregates = ("count(", "sum(", "min(", "max(")
    assert all(any(name in statement for name in aggregates) for statement in stub_queries)
    assert "group by" in stub_queries[0]
    assert not any("content" in statement for statement in statements)


# ---- rearm ------------------------------------------------------------------------------------

def test_rearm_gives_a_void_stub_a_fresh_start(engine: Engine) -> None:
    add_void(engine, "v", queue_id=2, queue_offset=9, published_at=T0, lease_owner="relay:x",
             lease_until=NOW, overtaken_at=T0)
    add_void(engine, "other")

    assert rearm(engine, ["v"], now=NOW) == ["v"]

    row = stub_row(engine, "v")
    assert row["status"] == UNCONFIRMED and row["send_count"] == 0
    assert (row["published_at"], row["next_resend_at"], row["updated_at"]) == (None, NOW, NOW)
    assert (row["lease_owner"], row["lease_until"], row["overtaken_at"]) == (None, None, None)
    assert row["last_error"] == "StoreClosedError: store is closed"  # kept for the record
    assert (row["queue_id"], row["queue_offset"]) == (2, 9)  # where it last went, until the next
    assert stub_row(engine, "other")["status"] == VOID
    assert relay_would_claim(engine, NOW) == ["v"]


def test_rearm_refuses_stubs_that_are_not_void_and_changes_nothing(engine: Engine) -> None:
    add_void(engine, "v")
    add_stub(engine, "u")
    add_stub(engine, "c", status=CONFIRMED)
    before = snapshot(engine)

    with pytest.raises(AdminError) as caught:
        rearm(engine, ["v", "u", "c", "ghost"], now=NOW)

    assert caught.value.message_ids == ("u", "c", "ghost")
    message = str(caught.value)
    assert "u (unconfirmed)" in message and "c (confirmed)" in message
    assert "ghost (missing)" in message and "nothing changed" in message
    assert "v" not in caught.value.message_ids
    assert snapshot(engine) == before


def test_rearm_error_lists_a_bounded_number_of_ids(engine: Engine) -> None:
    ids = [f"u{number:02d}" for number in range(25)]
    add_many(engine, ids)
    with pytest.raises(AdminError, match="and 15 more") as caught:
        rearm(engine, ids)
    assert len(caught.value.message_ids) == 25


def test_rearm_all_void_takes_every_void_stub_in_batches(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin, "BATCH_SIZE", 3)
    voids = [f"v{number:02d}" for number in range(7)]
    add_many(engine, voids, status=VOID, send_count=5)
    add_many(engine, ["u1", "u2"], send_count=2)
    add_many(engine, ["c1"], status=CONFIRMED)
    transactions: list[int] = []
    engine_begin = Engine.begin

    def counting_begin(self: Engine):
        transactions.append(1)
        return engine_begin(self)

    monkeypatch.setattr(Engine, "begin", counting_begin)

    assert rearm(engine, all_void=True, now=NOW) == voids

    assert len(transactions) == 3  # 3 + 3 + 1
    rows = {row["message_id"]: row for row in stub_rows(engine)}
    assert all(rows[message_id]["status"] == UNCONFIRMED for message_id in voids)
    assert all(rows[message_id]["send_count"] == 0 for message_id in voids)
    assert [rows[name]["send_count"] for name in ("u1", "u2")] == [2, 2]
    assert rows["c1"]["status"] == CONFIRMED
    assert rearm(engine, all_void=True, now=NOW) == []


def test_rearm_all_void_with_the_real_batch_size(engine: Engine) -> None:
    voids = [f"v{number:04d}" for number in range(admin.BATCH_SIZE * 2 + 1)]
    add_many(engine, voids, status=VOID, send_count=5)

    assert rearm(engine, all_void=True, now=NOW) == voids
    assert stub_stats(engine, now=NOW).by_status == {UNCONFIRMED: len(voids), CONFIRMED: 0,
                                                      VOID: 0}


@pytest.mark.parametrize(("ids", "all_void", "fragment"), [
    (["v"], True, "not both"), (None, False, "nothing to re-arm")])
def test_rearm_wants_ids_or_all_void(engine: Engine, ids: list[str] | None, all_void: bool,
                                     fragment: str) -> None:
    add_void(engine, "v")
    with pytest.raises(AdminError, match=fragment):
        rearm(engine, ids, all_void=all_void)
    assert stub_row(engine, "v")["status"] == VOID


def test_rearm_of_no_ids_and_repeated_ids(engine: Engine) -> None:
    add_void(engine, "v")
    assert rearm(engine, []) == []
    assert rearm(engine, ["v", "v"], now=NOW) == ["v"]


@pytest.mark.embedded_only("sets the store's maximum message size")
def test_rearmed_stub_is_published_by_the_relay(engine: Engine, broker: Broker,
                                                open_broker) -> None:
    add_stub(engine, "lost", created_at=T0, content=b"x" * 2_048)
    tight = open_broker("tight-store", max_message_size_bytes=1_024)  # refuses the stub
    failing = Relay(Producer(tight), engine, options=RelayOptions(
        rules=ResendRules(max_send_count=2), retry_delay_ms=0))
    failing.publish_due()
    failing.publish_due()
    assert stub_row(engine, "lost")["status"] == VOID

    assert rearm(engine, ["lost"]) == ["lost"]
    relay = Relay(Producer(broker), engine, options=RelayOptions(
        rules=ResendRules(max_send_count=2)))
    assert relay.publish_due() == 1

    row = stub_row(engine, "lost")
    assert row["status"] == UNCONFIRMED and row["send_count"] == 1
    assert row["published_at"] is not None and row["queue_offset"] is not None
    assert [view.unique_key for view in stored_records(broker, "orders")] == ["lost"]


# ---- void -------------------------------------------------------------------------------------

def test_void_gives_up_on_unconfirmed_stubs(engine: Engine) -> None:
    add_stub(engine, "u")
    add_published(engine, "p", lease_owner="relay:1", lease_until=NOW, last_error="old")

    assert void(engine, ["u", "p"], reason="  duplicate of order 7 ", now=NOW) == ["u", "p"]

    for message_id in ("u", "p"):
        row = stub_row(engine, message_id)
        assert row["status"] == VOID
        assert row["last_error"] == "voided by operator: duplicate of order 7"
        assert (row["lease_owner"], row["lease_until"], row["updated_at"]) == (None, None, NOW)
    assert stub_row(engine, "p")["queue_offset"] == 7
    assert relay_would_claim(engine, NOW + timedelta(days=1)) == []


@pytest.mark.parametrize(("status", "shown"), [(CONFIRMED, "confirmed"), (VOID, "void"),
                                               (None, "missing")])
def test_void_refuses_confirmed_void_and_missing_stubs(engine: Engine, status: str | None,
                                                       shown: str) -> None:
    add_stub(engine, "u")
    if status is not None:
        add_stub(engine, "x", status=status)
    before = snapshot(engine)

    with pytest.raises(AdminError, match=rf"x \({shown}\).*nothing changed"):
        void(engine, ["u", "x"], reason="test", now=NOW)

    assert snapshot(engine) == before


@pytest.mark.parametrize(("reason", "fragment"), [
    ("", "reason is required"), ("   ", "reason is required"),
    ("x" * (admin.REASON_MAX_CHARS + 1), "at most")])
def test_void_wants_a_short_reason(engine: Engine, reason: str, fragment: str) -> None:
    add_stub(engine, "u")
    with pytest.raises(AdminError, match=fragment):
        void(engine, ["u"], reason=reason)
    assert stub_row(engine, "u")["status"] == UNCONFIRMED


def test_void_in_chunks(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admin, "BATCH_SIZE", 3)
    ids = [f"u{number}" for number in range(8)]
    add_many(engine, ids)
    assert void(engine, ids, reason="bulk", now=NOW) == ids
    assert stub_stats(engine, now=NOW).by_status[VOID] == 8


# ---- schedule_resend --------------------------------------------------------------------------

def test_resend_makes_a_published_stub_due_and_keeps_its_send_count(engine: Engine) -> None:
    add_published(engine, "p", send_count=2, overtaken_at=T0, lease_owner="resend:1",
                  lease_until=NOW)

    assert schedule_resend(engine, ["p"], now=NOW) == ["p"]

    row = stub_row(engine, "p")
    assert (row["status"], row["send_count"]) == (UNCONFIRMED, 2)
    assert (row["published_at"], row["next_resend_at"], row["updated_at"]) == (None, NOW, NOW)
    assert (row["lease_owner"], row["lease_until"], row["overtaken_at"]) == (None, None, None)
    assert relay_would_claim(engine, NOW) == ["p"]


@pytest.mark.parametrize(("send_count", "expected"), [(0, 0), (3, 3), (4, 4), (5, 4), (9, 4)])
def test_resend_leaves_exactly_one_more_attempt(engine: Engine, send_count: int,
                                                expected: int) -> None:
    add_published(engine, "p", send_count=send_count)
    schedule_resend(engine, ["p"], max_send_count=5, now=NOW)
    assert stub_row(engine, "p")["send_count"] == expected
    assert relay_would_claim(engine, NOW, max_send_count=5) == ["p"]


def test_resend_of_a_void_stub_allows_one_attempt(engine: Engine) -> None:
    add_void(engine, "v", send_count=5)

    assert schedule_resend(engine, ["v"], max_send_count=5, now=NOW) == ["v"]

    row = stub_row(engine, "v")
    assert (row["status"], row["send_count"]) == (UNCONFIRMED, 4)
    assert relay_would_claim(engine, NOW, max_send_count=5) == ["v"]
    assert stub_row(engine, "v")["send_count"] == 5  # the claim counted the one attempt
    # that claim ended with no outcome (its relay stopped): the attempt is made again, still
    # the one attempt (a refusal of the message would void the stub)
    assert relay_would_claim(engine, NOW + timedelta(minutes=5), max_send_count=5) == ["v"]
    assert stub_row(engine, "v")["send_count"] == 5


def test_resend_refuses_confirmed_and_missing_stubs(engine: Engine) -> None:
    add_published(engine, "p")
    add_stub(engine, "c", status=CONFIRMED)
    before = snapshot(engine)

    with pytest.raises(AdminError) as caught:
        schedule_resend(engine, ["p", "c", "ghost"], now=NOW)

    assert caught.value.message_ids == ("c", "ghost")
    assert "unconfirmed or void" in str(caught.value)
    assert snapshot(engine) == before


def test_resend_wants_a_positive_max_send_count(engine: Engine) -> None:
    add_published(engine, "p")
    with pytest.raises(AdminError, match="max_send_count"):
        schedule_resend(engine, ["p"], max_send_count=0)


def test_changes_use_the_current_time_by_default(engine: Engine) -> None:
    add_void(engine, "v")
    before = utc_now() - timedelta(seconds=5)
    rearm(engine, ["v"])
    with engine.connect() as connection:
        updated = connection.execute(select(message_stub.c.updated_at)).scalar_one()
    assert before < updated < before + timedelta(minutes=1)
